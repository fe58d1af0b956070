"""Consistent cuts: with a cut at T, the tables hold exactly the changes committed before T.

The oracle replays the test's own changes in commit order (no pipeline code): the state of
each table as of T is every change committed before T, applied in that order. The records
are written here by hand as the Aurora DSQL document describes them (``type``, ``op``,
``source.ts_ns``, ``source.schema`` / ``table``, ``before`` / ``after``).
"""

from __future__ import annotations

import datetime as dt
import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from airflow_cdc.cuts import PublishedCut, cut_reaching, published_cut, read_cut
from cdc_demo.dsql_stream import write_ndjson
from spark_jobs import apply_changes, maintain
from spark_jobs.ledger import STATUSES
from tests.spark.pipeline import land_dump

pytestmark = pytest.mark.spark

DDL = """
CREATE TABLE public.accounts (id bigint PRIMARY KEY, balance numeric(12, 2));
CREATE TABLE public.transfers (id bigint PRIMARY KEY, account_id bigint, amount numeric(12, 2));
"""
DAY = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def at(hour: int, minute: int) -> dt.datetime:
    return DAY + dt.timedelta(hours=hour, minutes=minute)


# (commit time, table, op, row): transactions write several tables at one commit time.
CHANGES: list[tuple[dt.datetime, str, str, dict[str, Any]]] = [
    (at(0, 10), "accounts", "c", {"id": 1, "balance": "100.00"}),
    (at(0, 10), "accounts", "c", {"id": 2, "balance": "50.00"}),
    (at(0, 40), "transfers", "c", {"id": 1, "account_id": 1, "amount": "30.00"}),
    (at(0, 40), "accounts", "u", {"id": 1, "balance": "70.00"}),
    (at(0, 50), "accounts", "u", {"id": 2, "balance": "45.00"}),
    (at(1, 5), "transfers", "c", {"id": 2, "account_id": 2, "amount": "10.00"}),
    (at(1, 5), "accounts", "u", {"id": 2, "balance": "35.00"}),
    (at(1, 20), "accounts", "d", {"id": 1, "balance": "70.00"}),
]
# Delivered in the second batch: one change of the next hour, one late change of the first.
LATER = [
    (at(1, 30), "accounts", "c", {"id": 3, "balance": "5.00"}),
    (at(0, 55), "transfers", "c", {"id": 3, "account_id": 2, "amount": "5.00"}),
]


def record(change: tuple[dt.datetime, str, str, dict[str, Any]]) -> str:
    when, table, op, row = change
    ts_ns = int(when.timestamp()) * 1_000_000_000
    return json.dumps(
        {
            "type": "full",
            "op": op,
            "before": row if op == "d" else None,
            "after": None if op == "d" else row,
            "source": {"ts_ns": ts_ns, "schema": "public", "table": table},
        }
    )


def state_as_of(changes: list[Any], cut: dt.datetime) -> dict[str, dict[int, dict[str, Any]]]:
    """Each table's live rows after the changes committed before ``cut``, in commit order."""
    tables: dict[str, dict[int, dict[str, Any]]] = {"accounts": {}, "transfers": {}}
    for when, table, op, row in sorted(changes, key=lambda c: c[0]):
        if when >= cut:
            continue
        if op == "d":
            tables[table].pop(row["id"], None)
        else:
            tables[table][row["id"]] = row
    return tables


def effects_between(
    changes: list[Any], start: dt.datetime, end: dt.datetime
) -> dict[str, tuple[int, int, int]]:
    """Each table's (inserted, updated, deleted) live rows when the changes committed in
    [start, end) are applied to the state at ``start``: only each key's newest one counts."""
    before = state_as_of(changes, start)
    newest: dict[tuple[str, int], str] = {}
    for when, table, op, row in sorted(changes, key=lambda c: c[0]):
        if start <= when < end:
            newest[(table, row["id"])] = op
    counts = {table: [0, 0, 0] for table in before}
    for (table, key), op in newest.items():
        live = key in before[table]
        if op == "d":
            counts[table][2] += live
        else:
            counts[table][1 if live else 0] += 1
    return {table: (i, u, d) for table, (i, u, d) in counts.items()}


def effects_of(stats: dict[str, Any]) -> dict[str, tuple[int, int, int]]:
    tables = {name: stats["tables"].get(f"public.{name}", {}) for name in COLUMNS}
    return {
        name: (c.get("inserted", 0), c.get("updated", 0), c.get("deleted", 0))
        for name, c in tables.items()
    }


def rows_of(frame: Any, columns: tuple[str, ...]) -> dict[int, dict[str, Any]]:
    live = frame.where("NOT _cdc_deleted").select(*columns).collect()
    return {
        r["id"]: {c: str(r[c]) if isinstance(r[c], Decimal) else r[c] for c in columns}
        for r in live
    }


COLUMNS = {"accounts": ("id", "balance"), "transfers": ("id", "account_id", "amount")}


def delta_rs_state(cut: PublishedCut) -> dict[str, dict[int, dict[str, Any]]]:
    """Each table's live rows at the cut's versions, as delta-rs reads them (no Spark)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    state = {}
    for name, where in cut.tables.items():
        table = DeltaTable(where["location"], version=where["version"])
        rows = pa.RecordBatchReader.from_stream(table.scan()).read_all().to_pylist()
        columns = COLUMNS[name.split(".")[1]]
        state[name.split(".")[1]] = {
            r["id"]: {c: str(r[c]) if isinstance(r[c], Decimal) else r[c] for c in columns}
            for r in rows
            if not r["_cdc_deleted"]
        }
    return state


def tables_at(spark: Any, warehouse: str) -> dict[str, dict[int, dict[str, Any]]]:
    """Each table's rows (none for a table no change has created yet)."""
    from delta.tables import DeltaTable

    found = {}
    for name, columns in COLUMNS.items():
        path = f"{warehouse}/public/{name}"
        exists = DeltaTable.isDeltaTable(spark, path)
        found[name] = rows_of(spark.read.format("delta").load(path), columns) if exists else {}
    return found


def apply(warehouse: str, batch: str, cut: dt.datetime) -> dict[str, Any]:
    return apply_changes.main(
        [
            *("--warehouse", warehouse, "--batch-id", batch, "--source", "cdc"),
            *("--format", "dsql", "--ddl", DDL, "--cut-at", cut.isoformat()),
            *("--interval-start", (cut - dt.timedelta(hours=1)).isoformat()),
        ]
    )


def current(spark: Any, warehouse: str, batch: str) -> dict[str, tuple[str, str | None]]:
    """Each record of ``batch``: its newest ledger status and reason."""
    rows = (
        spark.read.format("delta")
        .load(f"{warehouse}/_cdc/ledger")
        .where(f"batch_id = '{batch}'")
        .orderBy("decided_at")
        .collect()
    )
    return {r["record_id"]: (r["status"], r["reason"]) for r in rows}


def balanced(stats: dict[str, Any]) -> bool:
    counts = stats["accounting"]
    return counts["landed"] == sum(counts[s] for s in STATUSES) + counts["unprocessed"]


def transactions(seed: int, hours: int) -> list[tuple[dt.datetime, str, str, dict[str, Any]]]:
    """A bank's transactions over ``hours``: accounts opened and closed, and transfers that
    write both tables at one commit time (each transaction at its own second)."""
    rng = random.Random(seed)
    seconds = sorted(rng.sample(range(hours * 3600), 15 * hours))
    balances: dict[int, int] = {}
    changes = []
    transfer = 0
    for second in seconds:
        when = DAY + dt.timedelta(seconds=second)
        closed = [a for a in range(1, 6) if a not in balances]
        roll = rng.random()
        if closed and (roll < 0.3 or not balances):
            account = rng.choice(closed)
            balances[account] = rng.randrange(50, 500)
            changes.append(
                (when, "accounts", "c", {"id": account, "balance": f"{balances[account]}.00"})
            )
        elif roll < 0.4 and len(balances) > 1:
            account = rng.choice(sorted(balances))
            row = {"id": account, "balance": f"{balances.pop(account)}.00"}
            changes.append((when, "accounts", "d", row))
        else:
            account = rng.choice(sorted(balances))
            amount = rng.randrange(1, 20)
            balances[account] -= amount
            transfer += 1
            moved = {"id": transfer, "account_id": account, "amount": f"{amount}.00"}
            changes.append((when, "transfers", "c", moved))
            changes.append(
                (when, "accounts", "u", {"id": account, "balance": f"{balances[account]}.00"})
            )
    return changes


def test_every_published_cut_is_the_source_state_at_its_time(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """Hourly batches, each landing its hour's changes out of commit order with some of the
    next hour's (landing reads to the tip) and redeliveries: every cut, read at the versions
    it published, is the source's state at T across both tables, whatever came early."""
    rng = random.Random(11)
    source = transactions(seed=5, hours=3)  # opens, updates and closes accounts each hour
    delivered: set[int] = set()
    for hour in range(3):
        end = at(hour + 1, 0)
        due = [i for i, c in enumerate(source) if c[0] < end and i not in delivered]
        early = [i for i, c in enumerate(source) if end <= c[0] < end + dt.timedelta(hours=1)]
        batch = due + [i for i in early if i not in delivered and rng.random() < 0.4]
        delivered.update(batch)
        picks = batch + rng.sample(batch, 3)  # three redelivered
        rng.shuffle(picks)
        texts = [record(source[i]) for i in picks]
        write_ndjson(texts, str(tmp_path / f"h{hour}"), files=2)
        land_dump(warehouse, str(tmp_path / f"h{hour}"), f"h{hour}", source="cdc")
        stats = apply(warehouse, f"h{hour}", end)
        assert stats["cut"]["published"]["cut_at"] == end.isoformat()
        assert effects_of(stats) == effects_between(source, end - dt.timedelta(hours=1), end)
        assert balanced(stats) and stats["accounting"]["unprocessed"] == 0
        assert tables_at(spark, warehouse) == state_as_of(source, end)
        held = spark.read.format("delta").load(f"{warehouse}/_cdc/held").count()
        assert held == sum(1 for i in picks if source[i][0] >= end)  # the early ones wait
    for hour in range(3):
        end = at(hour + 1, 0)
        frames = read_cut(spark, warehouse, "cdc", at=end)
        assert {
            t.split(".")[1]: rows_of(f, COLUMNS[t.split(".")[1]]) for t, f in frames.items()
        } == (state_as_of(source, end))
    newest = published_cut(warehouse, "cdc")
    assert newest is not None and newest.at == at(3, 0)
    # What a sensor for each hour hands over, read without Spark: that hour's own cut, and
    # delta-rs reads the source's state at its end from the versions it names.
    for hour in range(3):
        end = at(hour + 1, 0)
        cut = cut_reaching(warehouse, "cdc", end)
        assert cut is not None and cut.at == end and cut.interval_end == end
        assert delta_rs_state(cut) == state_as_of(source, end)
    early = cut_reaching(warehouse, "cdc", at(0, 30))  # none at 00:30: the oldest past it
    assert early is not None and early.at == at(1, 0)
    assert cut_reaching(warehouse, "cdc", at(3, 0) + dt.timedelta(microseconds=1)) is None

    # A late change of the first hour: the cut is heuristic (DSQL), so the next cut applies
    # it and the ledger says it came late.
    late = (at(0, 55), "transfers", "c", {"id": 999, "account_id": 1, "amount": "5.00"})
    write_ndjson([record(late)], str(tmp_path / "late"), files=1)
    land_dump(warehouse, str(tmp_path / "late"), "late", source="cdc")
    after = apply(warehouse, "late", at(4, 0))
    assert tables_at(spark, warehouse) == state_as_of([*source, late], at(4, 0))
    reasons = [reason for _, reason in current(spark, warehouse, "late").values()]
    assert reasons == ["late: committed 2026-01-01T00:55:00.000000Z below a published cut"]
    assert balanced(after) and after["accounting"]["applied"] == 1
    assert effects_of(after) == {"accounts": (0, 0, 0), "transfers": (1, 0, 0)}

    # A backfill of the first hour: below the published cut, it changes no table and
    # publishes nothing.
    newest = published_cut(warehouse, "cdc")
    again = apply(warehouse, "h0", at(1, 0))
    assert again["cut"]["forward"] is False and "published" not in again["cut"]
    assert spark.read.format("delta").load(f"{warehouse}/_cdc/cuts").count() == 4
    assert published_cut(warehouse, "cdc") == newest
    assert tables_at(spark, warehouse) == state_as_of([*source, late], at(4, 0))
    assert balanced(again)

    # Maintenance keeps what the cuts reference: tombstones go only below the oldest kept
    # cut (01:00), though the resolved timestamp passed them all long ago.
    newest_change: dict[tuple[str, int], tuple[dt.datetime, str]] = {}
    for when, table, op, row in sorted([*source, late], key=lambda c: c[0]):
        newest_change[(table, row["id"])] = (when, op)
    below = sum(1 for when, op in newest_change.values() if op == "d" and when < at(1, 0))
    kept = maintain.main(
        [
            *("--warehouse", warehouse, "--batch-id", "m1", "--source", "cdc", "--ddl", DDL),
            *("--tombstone-retention-seconds", "0"),
        ]
    )
    assert kept["tables"]["public.accounts"]["tombstones_purged"] == below
    assert kept["tables"]["_cdc.cuts"]["files_after"] == 1
    frames = read_cut(spark, warehouse, "cdc", at=at(1, 0))
    assert (
        rows_of(frames["public.accounts"], COLUMNS["accounts"])
        == (state_as_of(source, at(1, 0))["accounts"])
    )
    assert kept["cuts_expired"] == 0

    # Past the cut retention, the cuts but the newest leave the history, whose versions'
    # files VACUUM no longer keeps: a backfill of the first hour gets the newest cut.
    newest = published_cut(warehouse, "cdc")
    assert newest is not None
    gone = maintain.main(
        [
            *("--warehouse", warehouse, "--batch-id", "m2", "--source", "cdc", "--ddl", DDL),
            *("--cut-retention-seconds", "0"),
        ]
    )
    assert gone["cuts_expired"] == 3
    history = spark.read.format("delta").load(f"{warehouse}/_cdc/cuts")
    kept_at = [r[0] for r in history.selectExpr("unix_micros(cut_at)").collect()]
    assert kept_at == [int(newest.at.timestamp()) * 1_000_000]
    backfill = cut_reaching(warehouse, "cdc", at(1, 0))
    assert backfill is not None and backfill.at == newest.at
    # read_cut reads the same cut as the sensor hands over: the newest, the oldest kept
    # past 01:00; past the newest there is none yet.
    frames = read_cut(spark, warehouse, "cdc", at=at(1, 0))
    assert {
        t.split(".")[1]: rows_of(f, COLUMNS[t.split(".")[1]]) for t, f in frames.items()
    } == state_as_of([*source, late], newest.at)
    with pytest.raises(LookupError, match="at or past"):
        read_cut(spark, warehouse, "cdc", at=newest.at + dt.timedelta(microseconds=1))


def test_a_quiet_table_s_cut_is_read_past_delta_s_time_travel_limit(
    spark: Any, warehouse: str
) -> None:
    """A cut names the version a quiet table has had since long before it: Delta refuses to
    travel to a version older than the table's deleted-file retention once a newer one
    exists, but the files a kept cut reads are kept (every removal came after the cut), so
    read_cut reads it, and leaves the session's setting as it was."""
    import time

    from airflow_cdc.cuts import TIME_TRAVEL_CHECK
    from spark_jobs.cut import CUTS_SCHEMA
    from spark_jobs.maintain import FILE_RETENTION

    path = f"{warehouse}/public/quiet"
    # A retention of a second stands for a week: version 0 is soon older than it.
    spark.range(3).write.format("delta").option(FILE_RETENTION, "interval 1 seconds").save(path)
    published = dt.datetime.now(dt.UTC)
    cut = (at(1, 0), at(0, 0), at(1, 0), True, {"public.quiet": 0}, {"public.quiet": path})
    spark.createDataFrame([(*cut, "b1", "r1", published, "cdc")], CUTS_SCHEMA).write.format(
        "delta"
    ).save(f"{warehouse}/_cdc/cuts")
    time.sleep(2)
    spark.range(5).write.format("delta").mode("overwrite").save(path)
    with pytest.raises(Exception, match="TIME_TRAVEL_BEYOND_DELETED_FILE_RETENTION"):
        spark.read.format("delta").option("versionAsOf", 0).load(path).count()
    frames = read_cut(spark, warehouse, "cdc", at=at(1, 0))
    assert sorted(r[0] for r in frames["public.quiet"].collect()) == [0, 1, 2]
    assert spark.conf.get(TIME_TRAVEL_CHECK, None) is None


def test_a_change_below_a_true_cut_is_quarantined_only_where_it_would_move_a_row(
    spark: Any,
) -> None:
    from pyspark.sql import functions as F

    from spark_jobs.apply import classify

    early, later = at(0, 30), at(1, 30)
    members = "ARRAY<STRUCT<record_id: STRING, batch_id: STRING>>"
    winners = (
        spark.createDataFrame(
            [
                (1, "s5", "r1", early),  # late, newer than the row: would move it
                (2, "s5", "r2", early),  # late, the row's own sequence again: a duplicate
                (3, "s1", "r3", early),  # late, older than the row
                (4, "s9", "r4", later),  # not late
                (5, "s5", "r5", early),  # late, but it produced the row (a re-run)
            ],
            "id BIGINT, _cdc_sequence STRING, _cdc_record_id STRING, _cdc_commit_ts TIMESTAMP",
        )
        .withColumn("_cdc_is_delete", F.lit(False))
        .withColumn(
            "_cdc_members",
            F.array(
                F.struct(F.col("_cdc_record_id").alias("record_id"), F.lit("b").alias("batch_id"))
            ).cast(members),
        )
    )
    target = spark.createDataFrame(
        [(1, "s3", "t1"), (2, "s5", "t2"), (3, "s3", "t3"), (4, "s3", "t4"), (5, "s3", "r5")],
        "id BIGINT, _cdc_sequence STRING, _cdc_record_id STRING",
    ).withColumn("_cdc_deleted", F.lit(False))
    late = F.col("_cdc_commit_ts") < F.lit(at(1, 0)).cast("timestamp")
    refused = {
        r["record_id"]: r["status"] for r in classify(winners, target, ["id"], late, True).collect()
    }
    assert refused == {
        "r1": "quarantined",
        "r2": "duplicate",
        "r3": "superseded",
        "r4": "applied",
        "r5": "applied",
    }
    marked = classify(winners, target, ["id"], late, False).collect()
    reasons = {r["record_id"]: (r["status"], r["reason"]) for r in marked}
    assert reasons["r1"][0] == "applied" and reasons["r1"][1].startswith("late: committed")
    assert reasons["r4"] == ("applied", None) and reasons["r5"] == ("applied", None)


def test_a_change_without_a_commit_time_waits_behind_the_held_changes_of_its_partition(
    spark: Any,
) -> None:
    from pyspark.sql import functions as F

    from airflow_cdc.core.formats.common import UNORDERED
    from spark_jobs.cut import Cut, split

    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    unordered = UNORDERED + "00"
    changes = spark.createDataFrame(
        [
            ("a", "s1", at(0, 10), "p0", "03", "[1]"),  # before the cut
            ("b", "s2", at(1, 10), "p0", "05", "[2]"),  # after it: held
            ("c", unordered, epoch, "p0", "04", "[3]"),  # unordered, before b: ready
            ("d", unordered, epoch, "p0", "07", "[4]"),  # unordered, after b: waits with it
            ("e", unordered, epoch, "p1", "02", "[5]"),  # nothing held in p1: ready
            ("f", "s3", at(0, 20), None, None, "[6]"),  # a format without partitions
            # Unordered after b, then a new version of its key before the cut: ready.
            ("g", unordered, epoch, "p0", "08", "[1]"),
            ("h", "s4", at(0, 30), "p0", "09", "[1]"),
            # Unordered after b, then a redelivery of the version before it: it waits.
            ("i", "s5", at(0, 40), "p0", "01", "[7]"),
            ("j", unordered, epoch, "p0", "10", "[7]"),
            ("k", "s5", at(0, 40), "p0", "11", "[7]"),
            # Unordered after b, then a new version of its key past the cut: it waits.
            ("l", unordered, epoch, "p0", "12", "[8]"),
            ("m", "s6", at(1, 20), "p0", "13", "[8]"),
        ],
        "record_id STRING, sequence STRING, commit_ts TIMESTAMP, partition STRING,"
        " position STRING, key_json STRING",
    ).select(
        "*",
        F.lit("public").alias("schema"),
        F.lit("items").alias("table"),
        F.parse_json("key_json").alias("key"),
    )
    cut = Cut(at(1, 0), at(0, 0), at(1, 0), heuristic=True, published=None, fresh=True)
    ready, held = split(changes, cut)
    assert sorted(r[0] for r in ready.select("record_id").collect()) == [
        *("a", "c", "e", "f", "g", "h", "i", "k"),
    ]
    assert sorted(r[0] for r in held.select("record_id").collect()) == ["b", "d", "j", "l", "m"]
    # A version below the published cut is no new one (earlier batches' versions lie below).
    later = Cut(at(1, 0), at(0, 0), at(1, 0), heuristic=True, published=at(0, 35))
    ready, _ = split(changes, later)
    assert "g" not in {r[0] for r in ready.select("record_id").collect()}
    # Nor is any version new before the first cut, after batches applied without one.
    first = Cut(at(1, 0), at(0, 0), at(1, 0), heuristic=True, published=None)
    ready, _ = split(changes, first)
    assert "g" not in {r[0] for r in ready.select("record_id").collect()}
    behind = Cut(at(1, 0), at(0, 0), at(1, 0), heuristic=True, published=at(2, 0))
    nothing, everything = split(changes, behind)
    assert nothing.count() == 0 and everything.count() == 13


def test_a_batch_landed_again_after_a_later_one_cuts_where_its_records_end(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """Runs of two intervals at once: h0's landing stops short, h1's lands the next records
    (committed in hour 0), then h0's lands the rest. The resolved timestamp h0's last run
    left counts h1's records, which h0's apply does not take: its cut goes no further than
    the landing run before h1's records left it, and every cut published is the source's
    state at its time (a cut at 01:00 would lack h1's records)."""
    dump = str(tmp_path / "dump")
    texts = [record(c) for c in CHANGES]  # five in hour 0, then three in hour 1
    for batch, since, upto in (("h0", 0, 2), ("h1", 2, 5), ("h0", 5, 8)):  # one file, growing
        # The new lines arrive a second after the newest of their commits (1 ms a line).
        first_us = int(CHANGES[upto - 1][0].timestamp() + 1) * 1_000_000 - since * 1000
        write_ndjson(texts[:upto], dump, 1, first_us)
        land_dump(warehouse, dump, batch, source="cdc")
    first = apply(warehouse, "h0", at(1, 0))
    assert first["cut"]["overtaken_by"] == ["h1"]
    cut_at = dt.datetime.fromisoformat(first["cut"]["published"]["cut_at"])
    assert at(0, 10) < cut_at < at(0, 40)  # where run 1's records end
    assert tables_at(spark, warehouse) == state_as_of(CHANGES, cut_at)
    assert balanced(first)
    second = apply(warehouse, "h1", at(2, 0))
    cut_at = dt.datetime.fromisoformat(second["cut"]["published"]["cut_at"])
    assert at(0, 50) < cut_at < at(1, 5)  # where h1's landing run left the source
    assert tables_at(spark, warehouse) == state_as_of(CHANGES, cut_at)
    assert balanced(second) and second["accounting"]["unprocessed"] == 0


@pytest.mark.slow
def test_runs_killed_before_holding_and_before_publishing_are_finished_by_their_reruns(
    spark: Any, warehouse: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.spark.test_crash_recovery import crash_in_process

    write_ndjson([record(c) for c in CHANGES], str(tmp_path / "b1"), files=2)
    land_dump(warehouse, str(tmp_path / "b1"), "b1", source="cdc")
    write_ndjson([record(c) for c in LATER], str(tmp_path / "b2"), files=1)
    land_dump(warehouse, str(tmp_path / "b2"), "b2", source="cdc")

    def killed(batch: str, cut: dt.datetime, fault: str) -> None:
        # In this process: the durable state a kill leaves (see test_crash_recovery).
        crash_in_process(
            monkeypatch,
            fault,
            apply_changes.main,
            *("--warehouse", warehouse, "--batch-id", batch, "--source", "cdc"),
            *("--ddl", DDL, "--cut-at", cut.isoformat()),
        )

    # The second batch first: the first has records no run has decided, so no cut may pass
    # them: nothing is applied or published, and the batch's changes are held.
    blocked = apply(warehouse, "b2", at(2, 0))
    assert blocked["cut"]["blocked_by"] == ["b1"] and "published" not in blocked["cut"]
    assert blocked["accounting"]["pending"] == 2 and balanced(blocked)

    # Dead between the two tables' commits: nothing is published. Its re-run cuts at 01:00
    # by the first batch's own landing (a later one has landed since), and applies the
    # held change of the second batch committed before it.
    killed("b1", at(1, 0), "apply:after_merge")
    assert published_cut(warehouse, "cdc") is None
    one = apply(warehouse, "b1", at(1, 0))
    assert one["cut"]["published"]["cut_at"] == at(1, 0).isoformat()
    assert tables_at(spark, warehouse) == state_as_of(CHANGES + LATER, at(1, 0))
    assert one["accounting"]["pending"] == 3 and balanced(one)
    assert spark.read.format("delta").load(f"{warehouse}/_cdc/held").count() == 4

    # Dead after the ledger, before the held changes; then, on its retry, after every table
    # and the bookkeeping committed, before the publish: the next re-run publishes the cut
    # once.
    killed("b2", at(2, 0), "apply_changes:before_held")
    killed("b2", at(2, 0), "apply_changes:before_publish")
    assert published_cut(warehouse, "cdc").at == at(1, 0)  # type: ignore[union-attr]
    two = apply(warehouse, "b2", at(2, 0))
    assert two["cut"]["published"]["cut_at"] == at(2, 0).isoformat()
    assert tables_at(spark, warehouse) == state_as_of(CHANGES + LATER, at(2, 0))
    cuts = spark.read.format("delta").load(f"{warehouse}/_cdc/cuts")
    # As text in the session's zone (UTC): a collected TIMESTAMP is in the driver's local one.
    assert sorted(r[0] for r in cuts.selectExpr("string(cut_at)").collect()) == [
        "2026-01-01 01:00:00",
        "2026-01-01 02:00:00",
    ]
    assert balanced(two) and two["accounting"]["pending"] == 0
    # Another run whose cut has not moved, for another interval (a two-hour run of the
    # batch): it points at the cut as it was published, with the interval it was taken for.
    again = apply_changes.main(
        [
            *("--warehouse", warehouse, "--batch-id", "b2", "--source", "cdc", "--ddl", DDL),
            *("--cut-at", at(2, 0).isoformat(), "--interval-start", at(0, 0).isoformat()),
        ]
    )
    assert again["cut"]["at"] == at(2, 0).isoformat() and not again["cut"]["forward"]
    assert again["cut"]["published"]["interval_start"] == at(1, 0).isoformat()
    pointer = published_cut(warehouse, "cdc")
    assert pointer is not None and pointer.interval_start == at(1, 0)
    assert pointer == cut_reaching(warehouse, "cdc", at(2, 0))
    assert {status for status, _ in current(spark, warehouse, "b1").values()} <= {
        "applied",
        "superseded",
        "duplicate",
    }
