"""Transactions across tables with Debezium's transaction metadata: a cut takes every
transaction committed before it, whole, and waits for one whose END or events are late.

The oracle replays the test's own transactions in commit order (no pipeline code): the state
of each table as of T is every transaction committed before T, all its changes applied. The
messages are written here by hand as Debezium's documentation describes them: Postgres change
events (``op``, ``before`` / ``after``, ``source.lsn``, ``source.ts_ms``) with a
``transaction`` block (``id``, ``total_order``, ``data_collection_order``), and ``BEGIN`` /
``END`` events on the transaction topic, the ``END`` counting the events per data
collection.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_cdc.cuts import read_cut
from spark_jobs import apply_changes
from spark_jobs.ledger import STATUSES
from tests.spark.pipeline import land_dump
from tests.spark.test_cuts import COLUMNS, rows_of, tables_at

pytestmark = pytest.mark.spark

DDL = """
CREATE TABLE public.accounts (id bigint PRIMARY KEY, balance numeric(12, 2));
CREATE TABLE public.transfers (id bigint PRIMARY KEY, account_id bigint, amount numeric(12, 2));
"""
DAY = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@dataclass
class Txn:
    """One source transaction: its id, commit time and changes (table, op, row) in order."""

    id: str
    at: dt.datetime
    lsn: int
    changes: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def events(self) -> list[dict[str, Any]]:
        """The transaction's change events, as the Postgres connector writes them."""
        per_table: dict[str, int] = {}
        out = []
        for order, (table, op, row) in enumerate(self.changes, start=1):
            per_table[table] = per_table.get(table, 0) + 1
            ms = int(self.at.timestamp() * 1000)
            out.append(
                {
                    "topic": f"db.public.{table}",
                    "key": {"id": row["id"]},
                    "ts": ms,
                    "value": {
                        "before": row if op == "d" else None,
                        "after": None if op == "d" else row,
                        "source": {
                            "connector": "postgresql",
                            "schema": "public",
                            "table": table,
                            "lsn": self.lsn + order,
                            "txId": int(self.id.split(":")[0]),
                            "ts_ms": ms,
                        },
                        "op": op,
                        "ts_ms": ms + 5,
                        "transaction": {
                            "id": self.id,
                            "total_order": order,
                            "data_collection_order": per_table[table],
                        },
                    },
                }
            )
        return out

    def boundary(self, status: str) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for table, _, _ in self.changes:
            counts[f"public.{table}"] = counts.get(f"public.{table}", 0) + 1
        ms = int(self.at.timestamp() * 1000)
        end = status == "END"
        return {
            "topic": "db.transaction",
            "key": {"id": self.id},
            "ts": ms,
            "value": {
                "status": status,
                "id": self.id,
                "ts_ms": ms,
                "event_count": len(self.changes) if end else None,
                "data_collections": [
                    {"data_collection": name, "event_count": n} for name, n in counts.items()
                ]
                if end
                else None,
            },
        }


def bank(seed: int, hours: int) -> list[Txn]:
    """Transactions over ``hours``: accounts opened and closed, and transfers that insert a
    transfer and update an account in one transaction, some of them two transfers at once."""
    rng = random.Random(seed)
    seconds = sorted(rng.sample(range(60, hours * 3600), 12 * hours))
    balances: dict[int, int] = {}
    txns = []
    transfer = 0
    for number, second in enumerate(seconds):
        txn = Txn(
            f"{700 + number}:{(number + 1) * 1000}",
            DAY + dt.timedelta(seconds=second),
            (number + 1) * 1000,
        )
        closed = [a for a in range(1, 6) if a not in balances]
        roll = rng.random()
        if closed and (roll < 0.3 or not balances):
            account = rng.choice(closed)
            balances[account] = rng.randrange(50, 500)
            txn.changes.append(
                ("accounts", "c", {"id": account, "balance": f"{balances[account]}.00"})
            )
        elif roll < 0.4 and len(balances) > 1:
            account = rng.choice(sorted(balances))
            txn.changes.append(
                ("accounts", "d", {"id": account, "balance": f"{balances.pop(account)}.00"})
            )
        else:
            for _ in range(rng.choice((1, 1, 2))):
                account = rng.choice(sorted(balances))
                amount = rng.randrange(1, 20)
                balances[account] -= amount
                transfer += 1
                row = {"id": transfer, "account_id": account, "amount": f"{amount}.00"}
                txn.changes.append(("transfers", "c", row))
                txn.changes.append(
                    ("accounts", "u", {"id": account, "balance": f"{balances[account]}.00"})
                )
        txns.append(txn)
    return txns


def state_as_of(txns: list[Txn], cut: dt.datetime) -> dict[str, dict[int, dict[str, Any]]]:
    """Each table's live rows after the transactions committed before ``cut``, in order."""
    tables: dict[str, dict[int, dict[str, Any]]] = {"accounts": {}, "transfers": {}}
    for txn in sorted(txns, key=lambda t: t.at):
        if txn.at >= cut:
            continue
        for table, op, row in txn.changes:
            if op == "d":
                tables[table].pop(row["id"], None)
            else:
                tables[table][row["id"]] = row
    return tables


def write_dump(messages: list[dict[str, Any]], path: Path, offsets: dict[str, int]) -> None:
    """Kafka messages, one file per topic (partition 0), offsets going on from ``offsets``."""
    path.mkdir(parents=True)
    by_topic: dict[str, list[str]] = {}
    for m in messages:
        offset = offsets.get(m["topic"], 0)
        offsets[m["topic"]] = offset + 1
        line = {
            "topic": m["topic"],
            "partition": 0,
            "offset": offset,
            "timestamp": m["ts"],
            "key": json.dumps(m["key"]),
            "value": json.dumps(m["value"]),
        }
        by_topic.setdefault(m["topic"], []).append(json.dumps(line))
    for topic, lines in by_topic.items():
        (path / f"{topic}.ndjson").write_text("\n".join(lines) + "\n", encoding="utf-8")


def apply(warehouse: str, batch: str, cut: dt.datetime, *options: str) -> dict[str, Any]:
    return apply_changes.main(
        [
            *("--warehouse", warehouse, "--batch-id", batch, "--source", "pg"),
            *("--format", "debezium", "--ddl", DDL, "--cut-at", cut.isoformat()),
            *("--interval-start", (cut - dt.timedelta(hours=1)).isoformat()),
            "--transactions",
            *options,
        ]
    )


def land_hour(
    warehouse: str,
    tmp_path: Path,
    hour: int,
    messages: list[dict[str, Any]],
    offsets: dict[str, int],
) -> dt.datetime:
    """Land ``messages`` as batch ``h<hour>``; the resolved timestamp the dump gives (its
    newest message, at most the hour's end)."""
    write_dump(messages, tmp_path / f"h{hour}", offsets)
    land_dump(
        warehouse,
        str(tmp_path / f"h{hour}"),
        f"h{hour}",
        source="pg",
        layout="kafka",
        fmt="debezium",
    )
    newest = max(m["ts"] for m in messages)
    end = DAY + dt.timedelta(hours=hour + 1)
    return min(end, dt.datetime.fromtimestamp(newest / 1000, dt.UTC))


def whole(txns: list[Txn]) -> list[dict[str, Any]]:
    return [m for t in txns for m in (*t.events(), t.boundary("BEGIN"), t.boundary("END"))]


def published_at(stats: dict[str, Any]) -> dt.datetime:
    return dt.datetime.fromisoformat(stats["cut"]["published"]["cut_at"])


def statuses(spark: Any, warehouse: str, record_ids: list[str]) -> list[list[str]]:
    """Each record's ledger statuses in the order they were decided."""
    rows = (
        spark.read.format("delta")
        .load(f"{warehouse}/_cdc/ledger")
        .orderBy("decided_at")
        .select("record_id", "status")
        .collect()
    )
    return [[r["status"] for r in rows if r["record_id"] == rid] for rid in record_ids]


def balanced(stats: dict[str, Any]) -> bool:
    counts = stats["accounting"]
    return counts["landed"] == sum(counts[s] for s in STATUSES) and counts["unprocessed"] == 0


def test_a_cut_takes_transactions_whole_and_waits_for_a_late_end(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """Two hourly batches. In the first, one transaction's END is not yet delivered and
    another's END came before one of its events: the cut stops below the earlier of the two,
    and what it publishes is the source's state there. The next batch brings both: its cut
    reaches the interval's end. Every published cut, read at its versions, is the source's
    state at its time; the changes of the next hour that arrive early wait."""
    rng = random.Random(5)
    txns = bank(seed=7, hours=3)
    first_hour = [t for t in txns if t.at < DAY + dt.timedelta(hours=1)]
    two_tables = [t for t in first_hour if len({c[0] for c in t.changes}) == 2]
    late_end, late_event = two_tables[len(two_tables) // 2], two_tables[1]
    offsets: dict[str, int] = {}
    published = []
    newest = 0
    delivered: set[str] = set()
    held_back: list[dict[str, Any]] = []
    for hour in range(2):
        end = DAY + dt.timedelta(hours=hour + 1)
        batch: list[dict[str, Any]] = held_back
        held_back = []
        for txn in txns:
            if txn.id in delivered or txn.at >= end + dt.timedelta(minutes=30):
                continue
            if txn.at >= end:  # the next hour's: some of its events come early, no END
                batch.extend(e for e in txn.events() if rng.random() < 0.5)
                continue
            delivered.add(txn.id)
            events = txn.events()
            if txn is late_event:  # its END and all but its last event now
                held_back.append(events.pop())
            ends = [txn.boundary("BEGIN"), txn.boundary("END")]
            if txn is late_end:
                held_back.append(ends.pop())
            batch.extend([*events, *ends])
        newest = max(newest, *(e["ts"] for e in batch))  # a dump is complete up to it
        resolved = min(end, dt.datetime.fromtimestamp(newest / 1000, dt.UTC))
        batch.extend(rng.sample(batch, 4))  # redeliveries
        rng.shuffle(batch)
        land_hour(warehouse, tmp_path, hour, batch, offsets)
        stats = apply(warehouse, f"h{hour}", end)
        assert balanced(stats)
        cut = dt.datetime.fromisoformat(stats["cut"]["published"]["cut_at"])
        published.append(cut)
        if hour == 0:
            assert resolved == end
            assert cut == min(late_end.at, late_event.at)
            assert set(stats["cut"]["waiting_for"]) == {late_end.id, late_event.id}
        else:
            assert cut == resolved and stats["cut"]["waiting_for"] == []
        assert tables_at(spark, warehouse) == state_as_of(txns, cut)

    for cut in published:
        frames = read_cut(spark, warehouse, "pg", at=cut)
        assert {
            t.split(".")[1]: rows_of(f, COLUMNS[t.split(".")[1]]) for t, f in frames.items()
        } == state_as_of(txns, cut)

    # The late END's record waited as pending, then ended as control with its transaction.
    ledger = spark.read.format("delta").load(f"{warehouse}/_cdc/ledger")
    ends = (
        ledger.where("reason LIKE 'transaction END %'")
        .orderBy("decided_at")
        .select("reason", "status")
        .collect()
    )
    waited = [
        r["status"] for r in ends if r["reason"].startswith(f"transaction END {late_event.id}:")
    ]
    assert waited == ["pending", "control"]
    carried = spark.read.format("delta").load(f"{warehouse}/_cdc/transactions")
    assert carried.where(carried.txn_id.isin(late_end.id, late_event.id)).count() == 0


def test_a_transaction_is_complete_when_its_declared_tables_have_every_event(
    spark: Any,
) -> None:
    """Counted per declared table and distinct by ``total_order`` (a redelivery counts once);
    a collection of an undeclared table is not waited for; a database-qualified collection
    name counts for its table; an END without per-collection counts counts every event."""
    from airflow_cdc.core.ddl import parse_tables
    from spark_jobs.transactions import OPEN_SCHEMA, assess

    at, later = DAY, DAY + dt.timedelta(minutes=5)
    changes = spark.createDataFrame(
        [
            ("public", "accounts", "c", "s1", at, ("t1", 1, None)),
            ("public", "transfers", "c", "s2", at, ("t1", 2, None)),
            ("public", "transfers", "c", "s2", at, ("t1", 2, None)),  # redelivered
            ("public", "accounts", "u", "s3", at, ("t2", 1, None)),  # one of two
            ("public", "accounts", "u", "s4", later, ("t3", 1, None)),  # no END yet
            ("public", "accounts", "u", "s5", at, ("t4", 1, None)),
            ("public", "accounts", "u", "s6", at, ("t5", 1, None)),  # one of two, uncounted END
            ("public", "accounts", "u", "s7", at, None),  # outside any transaction
        ],
        "schema STRING, table STRING, op STRING, sequence STRING, commit_ts TIMESTAMP,"
        " txn STRUCT<id: STRING, order: BIGINT, end_json: STRING>",
    )

    def end(txn: str, total: int, collections: dict[str, int]) -> tuple[Any, ...]:
        return (txn, total, collections, f"r-{txn}", "b", at, "pg")

    ends = spark.createDataFrame(
        [
            end("t1", 2, {"public.accounts": 1, "public.transfers": 1}),
            end("t2", 2, {"public.accounts": 2}),
            end("t1", 2, {"public.accounts": 1, "public.transfers": 1}),  # redelivered
            end("t4", 3, {"inventory.public.accounts": 1, "public.audit": 2}),
            end("t5", 2, {}),
            end("t6", 1, {"public.transfers": 1}),  # its event has not arrived
            end("t7", 1, {"public.audit": 1}),  # nothing declared
        ],
        OPEN_SCHEMA,
    )
    summary = {
        r["txn_id"]: (r["complete"], r["commit_ts"])
        for r in assess(changes, ends, parse_tables(DDL)).collect()
    }
    assert {t: c for t, (c, _) in summary.items()} == {
        "t1": True,
        "t2": False,
        "t3": False,
        "t4": True,
        "t5": False,
        "t6": False,
        "t7": True,
    }
    assert summary["t1"][1] is not None and summary["t6"][1] is None
    assert summary["t1"][1] == summary["t2"][1] != summary["t3"][1]


def test_a_redelivered_event_of_a_transaction_applied_whole_does_not_hold_the_cut(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """Hour 0 brings its transactions whole; hour 1 its own and, again, one event of an hour-0
    transaction (a connector restart). The published cut is past that transaction, which no
    cut can take whole any more: the cut goes on, and the event is a duplicate."""
    txns = bank(seed=11, hours=2)
    hour = DAY + dt.timedelta(hours=1)
    first = [t for t in txns if t.at < hour]
    offsets: dict[str, int] = {}
    resolved = land_hour(warehouse, tmp_path, 0, whole(first), offsets)
    stats = apply(warehouse, "h0", hour)
    assert published_at(stats) == resolved
    again = next(t for t in first if len(t.changes) > 1).events()[0]
    second = [t for t in txns if hour <= t.at < hour + dt.timedelta(hours=1)]
    resolved = land_hour(warehouse, tmp_path, 1, [*whole(second), again], offsets)
    stats = apply(warehouse, "h1", hour + dt.timedelta(hours=1))
    assert balanced(stats)
    assert published_at(stats) == resolved and stats["cut"]["waiting_for"] == []
    assert stats["accounting"]["duplicate"] == 1
    assert tables_at(spark, warehouse) == state_as_of(txns, resolved)


def wait_then_give_up(
    spark: Any,
    warehouse: str,
    tmp_path: Path,
    messages: list[dict[str, Any]],
    broken: Txn,
    arrived: list[Txn],
) -> None:
    """Land ``messages`` (the first hour of a two-hour bank, one message of ``broken`` spoilt)
    and apply: the cut waits at ``broken``, the tables are ``arrived`` as of it. Then land the
    second hour whole and apply with ``--max-pending-wall-seconds`` at 1: ``broken`` is given
    up, the cut reaches the dump's newest message, the tables are ``arrived`` as of it."""
    hour = DAY + dt.timedelta(hours=1)
    offsets: dict[str, int] = {}
    land_hour(warehouse, tmp_path, 0, messages, offsets)
    stats = apply(warehouse, "h0", hour)
    assert balanced(stats)
    assert published_at(stats) == broken.at and stats["cut"]["waiting_for"] == [broken.id]
    assert tables_at(spark, warehouse) == state_as_of(arrived, broken.at)
    second = [t for t in arrived if hour <= t.at]
    resolved = land_hour(warehouse, tmp_path, 1, whole(second), offsets)
    stats = apply(warehouse, "h1", hour + dt.timedelta(hours=1), "--max-pending-wall-seconds", "1")
    assert balanced(stats)
    assert published_at(stats) == resolved and stats["cut"]["waiting_for"] == []
    assert tables_at(spark, warehouse) == state_as_of(arrived, resolved)


def test_a_transaction_with_an_event_quarantined_at_landing_is_given_up_after_the_wall_time(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """One event of a two-table transaction T is not a JSON object: quarantined when parsed,
    it never counts for T's END. The cut waits at T, then, once T's END has waited for
    ``--max-pending-wall-seconds``, goes on: T is applied without the event."""
    txns = bank(seed=13, hours=2)
    hour = DAY + dt.timedelta(hours=1)
    first = [t for t in txns if t.at < hour]
    broken = next(t for t in first if len({c[0] for c in t.changes}) == 2)
    messages = whole(first)
    lost = next(m for m in messages if m["value"].get("transaction", {}).get("id") == broken.id)
    lost["value"] = "not an event"
    # What arrived: T without the lost event (its first: events come in T's order).
    arrived = [Txn(t.id, t.at, t.lsn, t.changes[1:] if t is broken else t.changes) for t in txns]
    wait_then_give_up(spark, warehouse, tmp_path, messages, broken, arrived)
    ledger = spark.read.format("delta").load(f"{warehouse}/_cdc/ledger")
    end = ledger.where(ledger.reason.startswith(f"transaction END {broken.id}:"))
    assert sorted(r["status"] for r in end.collect()) == ["control", "pending"]
    carried = spark.read.format("delta").load(f"{warehouse}/_cdc/transactions")
    assert broken.id not in {r["txn_id"] for r in carried.collect()}


def test_a_transaction_whose_end_never_comes_is_given_up_after_its_changes_waited(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """The END of a two-table transaction T is not a JSON object: quarantined when parsed, it
    never arrives. The cut waits at T while T's changes are held for less than
    ``--max-pending-wall-seconds``; once they have waited that long, it goes on, and T is
    applied as far as it arrived (whole, here)."""
    txns = bank(seed=17, hours=2)
    hour = DAY + dt.timedelta(hours=1)
    first = [t for t in txns if t.at < hour]
    broken = next(t for t in first if len({c[0] for c in t.changes}) == 2)
    messages = whole(first)
    end = next(
        m
        for m in messages
        if m["topic"] == "db.transaction"
        and m["value"]["id"] == broken.id
        and m["value"]["status"] == "END"
    )
    end["value"] = "not an event"
    wait_then_give_up(spark, warehouse, tmp_path, messages, broken, txns)
    quarantine = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine")
    assert [r["payload"] for r in quarantine.collect()] == [json.dumps("not an event")]


def test_held_changes_keep_the_time_they_were_first_held_across_runs(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """T's END never arrives. The first run holds T's changes; the second, an hour later and
    under the wall time, holds them again with the next hour's changes: they keep the time
    the first run held them (the wall time counts from there), the new ones the second's."""
    txns = bank(seed=17, hours=2)
    hour = DAY + dt.timedelta(hours=1)
    first = [t for t in txns if t.at < hour]
    broken = next(t for t in first if len({c[0] for c in t.changes}) == 2)
    messages = [
        m
        for m in whole(first)
        if not (m["topic"] == "db.transaction" and m["value"] == broken.boundary("END")["value"])
    ]
    offsets: dict[str, int] = {}

    def held_since() -> dict[str, dt.datetime]:
        held = spark.read.format("delta").load(f"{warehouse}/_cdc/held")
        return {r["record_id"]: r["held_at"] for r in held.collect()}

    land_hour(warehouse, tmp_path, 0, messages, offsets)
    stats = apply(warehouse, "h0", hour)
    assert balanced(stats) and stats["cut"]["waiting_for"] == [broken.id]
    once = held_since()
    assert once and len(set(once.values())) == 1
    land_hour(warehouse, tmp_path, 1, whole([t for t in txns if hour <= t.at]), offsets)
    stats = apply(warehouse, "h1", hour + dt.timedelta(hours=1))
    assert balanced(stats) and stats["cut"]["waiting_for"] == [broken.id]
    twice = held_since()
    assert {rid: twice[rid] for rid in once} == once
    later = {at for rid, at in twice.items() if rid not in once}
    assert len(later) == 1 and later.pop() > next(iter(once.values()))
