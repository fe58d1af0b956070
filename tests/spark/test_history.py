"""History tables (SCD type 2): beside a table named by ``--history``, one row per change.

The oracle replays the test's own changes (no pipeline code): per key, in commit order,
each change opens a version at its commit time that the key's next change closes. So a
redelivery adds nothing, and a late change takes its place and re-closes the version before
it. The records are written by hand as the Aurora DSQL document describes them, by
``record`` of ``tests/spark/test_cuts.py``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from airflow_cdc.cuts import published_cut, read_cut
from cdc_demo.dsql_stream import write_ndjson
from spark_jobs import apply_changes
from spark_jobs.faults import SimulatedCrash
from spark_jobs.ledger import STATUSES
from tests.spark.pipeline import land_dump
from tests.spark.test_cuts import record
from tests.zones import utc_times

pytestmark = pytest.mark.spark

DDL = """
CREATE TABLE public.accounts (id bigint PRIMARY KEY, balance numeric(12, 2));
CREATE TABLE public.transfers (id bigint PRIMARY KEY, account_id bigint, amount numeric(12, 2));
"""
DAY = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
Change = tuple[dt.datetime, str, str, dict[str, Any]]
# (id, balance, __start_at, __end_at, _cdc_deleted): a delete's row holds its key only.
Version = tuple[int, str | None, dt.datetime, dt.datetime | None, bool]
LIFE = ("c", "u", "d", "c")  # inserted, updated, deleted, inserted again


def at(hour: int, minute: int, second: int = 0) -> dt.datetime:
    return DAY + dt.timedelta(hours=hour, minutes=minute, seconds=second)


def lives(seed: int, keys: int, count: int, start: dt.datetime, span: int) -> list[Change]:
    """``count`` account changes over ``span`` seconds from ``start``, each at its own second:
    a key is inserted, updated, deleted and inserted again."""
    rng = random.Random(seed)
    balances: dict[int, int] = {}
    changes: list[Change] = []
    for second in sorted(rng.sample(range(span), count)):
        when = start + dt.timedelta(seconds=second)
        key = rng.randrange(1, keys + 1)
        if key not in balances:
            balances[key] = rng.randrange(10, 1000)
            changes.append((when, "accounts", "c", {"id": key, "balance": f"{balances[key]}.00"}))
        elif rng.random() < 0.3:
            row = {"id": key, "balance": f"{balances.pop(key)}.00"}
            changes.append((when, "accounts", "d", row))
        else:
            balances[key] += rng.randrange(-9, 10)
            changes.append((when, "accounts", "u", {"id": key, "balance": f"{balances[key]}.00"}))
    return changes


def transfers(seed: int, count: int, start: dt.datetime, span: int) -> list[Change]:
    """Changes of the table that keeps no history."""
    rng = random.Random(seed)
    return [
        (
            start + dt.timedelta(seconds=second),
            "transfers",
            "c",
            {"id": n, "account_id": rng.randrange(1, 9), "amount": f"{rng.randrange(1, 50)}.00"},
        )
        for n, second in enumerate(sorted(rng.sample(range(span), count)), start=1)
    ]


def history_of(changes: list[Change]) -> list[Version]:
    """Every account change as the version it opens, closed by its key's next change."""
    by_key: dict[int, list[Change]] = {}
    for change in sorted(changes, key=lambda c: c[0]):
        if change[1] == "accounts":
            by_key.setdefault(change[3]["id"], []).append(change)
    versions = []
    for key, own in by_key.items():
        ends = [c[0] for c in own[1:]] + [None]
        for (when, _, op, row), end in zip(own, ends, strict=True):
            versions.append(
                (
                    key,
                    None if op == "d" else row["balance"],
                    naive(when),
                    None if end is None else naive(end),
                    op == "d",
                )
            )
    return sorted(versions, key=lambda v: (v[0], v[2]))


def live_of(changes: list[Change], cut: dt.datetime | None = None) -> dict[int, str]:
    """The accounts' live balances after the changes (those before ``cut``), in commit order."""
    live: dict[int, str] = {}
    for when, table, op, row in sorted(changes, key=lambda c: c[0]):
        if table != "accounts" or (cut is not None and when >= cut):
            continue
        if op == "d":
            live.pop(row["id"], None)
        else:
            live[row["id"]] = row["balance"]
    return live


def naive(when: dt.datetime) -> dt.datetime:
    """A UTC time as :func:`utc_times` returns a TIMESTAMP."""
    return when.astimezone(dt.UTC).replace(tzinfo=None)


def text(value: Any) -> Any:
    return str(value) if isinstance(value, Decimal) else value


def versions(frame: Any) -> list[Version]:
    rows = utc_times(
        frame.select("id", "balance", "__start_at", "__end_at", "_cdc_deleted")
    ).collect()
    found = [
        (r["id"], None if r["_cdc_deleted"] else text(r["balance"]), *r[2:4], r["_cdc_deleted"])
        for r in rows
    ]
    return sorted(found, key=lambda v: (v[0], v[2]))


def history(spark: Any, warehouse: str) -> Any:
    return spark.read.format("delta").load(f"{warehouse}/public/accounts__history")


def live(spark: Any, warehouse: str) -> dict[int, str]:
    frame = spark.read.format("delta").load(f"{warehouse}/public/accounts")
    return {r["id"]: text(r["balance"]) for r in frame.where("NOT _cdc_deleted").collect()}


def open_versions(found: list[Version]) -> dict[int, str | None]:
    return {v[0]: v[1] for v in found if v[3] is None and not v[4]}


def balanced(stats: dict[str, Any]) -> bool:
    counts = stats["accounting"]
    return counts["landed"] == sum(counts[s] for s in STATUSES) + counts["unprocessed"]


def deliver(warehouse: str, tmp_path: Path, batch: str, changes: list[Change]) -> None:
    write_ndjson([record(c) for c in changes], str(tmp_path / batch), files=2)
    land_dump(warehouse, str(tmp_path / batch), batch, source="cdc")


def apply(warehouse: str, batch: str, *options: str) -> dict[str, Any]:
    return apply_changes.main(
        [
            *("--warehouse", warehouse, "--batch-id", batch, "--source", "cdc"),
            *("--format", "dsql", "--ddl", DDL, "--history", "public.accounts"),
            *options,
        ]
    )


def cut_at(cut: dt.datetime) -> tuple[str, ...]:
    return (
        "--cut-at",
        cut.isoformat(),
        "--interval-start",
        (cut - dt.timedelta(hours=1)).isoformat(),
    )


def held_back(source: list[Change], rng: random.Random) -> list[int]:
    """Changes that are not their key's newest: a first insert, a delete and two more."""
    newest = {c[3]["id"]: i for i, c in enumerate(source) if c[1] == "accounts"}
    first = {c[3]["id"]: i for i, c in reversed(list(enumerate(source))) if c[1] == "accounts"}
    older = [i for i, c in enumerate(source) if c[1] == "accounts" and newest[c[3]["id"]] != i]
    inserts = [i for i in older if i in first.values()]
    deletes = [i for i in older if source[i][2] == "d"]
    chosen = {rng.choice(inserts), rng.choice(deletes)}
    chosen.update(rng.sample([i for i in older if i not in chosen], 2))
    return sorted(chosen)


def test_history_is_the_replay_of_every_change_whatever_order_they_arrive_in(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """Three batches in shuffled order, with redeliveries and, last, changes older than
    versions already written: after each run the history is the replay of every change
    delivered so far, its open versions are the live table, and a re-run adds nothing."""
    rng = random.Random(7)
    source = lives(seed=5, keys=8, count=40, start=at(0, 0), span=3600)
    source += transfers(seed=6, count=6, start=at(0, 0), span=3600)
    ops = [(c[3]["id"], c[2]) for c in sorted(source, key=lambda c: c[0]) if c[1] == "accounts"]
    assert any((key, "c") in ops[n:] for n, (key, op) in enumerate(ops) if op == "d")

    late = held_back(source, rng)
    rest = [i for i in range(len(source)) if i not in late]
    rng.shuffle(rest)
    first, second = rest[: len(rest) // 2], rest[len(rest) // 2 :]
    batches = {
        "b1": first,
        "b2": second + rng.sample(first, 3),  # redelivered from b1
        "b3": late + rng.sample(second, 2) + late[:1],  # redelivered from b2 and within b3
    }
    delivered: dict[int, str] = {}
    for batch, picks in batches.items():
        rng.shuffle(picks)
        deliver(warehouse, tmp_path, batch, [source[i] for i in picks])
        stats = apply(warehouse, batch)
        for i in picks:
            delivered.setdefault(i, batch)
        assert balanced(stats) and stats["accounting"]["unprocessed"] == 0
        so_far = [source[i] for i in delivered]
        found = versions(history(spark, warehouse))
        assert found == history_of(so_far)
        assert live(spark, warehouse) == open_versions(found) == live_of(so_far)

    # Each row is its change: the batch that first delivered it, one op per kind of change,
    # sequences in commit order within a key, and one landed record per row.
    rows = utc_times(history(spark, warehouse)).collect()
    origin = {
        (c[3]["id"], naive(c[0])): delivered[i] for i, c in enumerate(source) if c[1] == "accounts"
    }
    assert {(r["id"], r["__start_at"]): r["_cdc_batch"] for r in rows} == origin
    kinds = {(c[3]["id"], naive(c[0])): c[2] for c in source if c[1] == "accounts"}
    named = {(kinds[(r["id"], r["__start_at"])], r["_cdc_op"]) for r in rows}
    assert len(named) == 3 and len({op for _, op in named}) == 3
    assert all(r["_cdc_deleted"] == (kinds[(r["id"], r["__start_at"])] == "d") for r in rows)
    for key in {r["id"] for r in rows}:
        own = sorted((r for r in rows if r["id"] == key), key=lambda r: r["__start_at"])
        sequences = [r["_cdc_sequence"] for r in own]
        assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)
    assert len({r["_cdc_record_id"] for r in rows}) == len(rows)
    assert not (Path(warehouse) / "public" / "transfers__history").exists()

    # The last batch again: its changes are all in the history already.
    before = {(r["id"], r["__start_at"]): r.asDict() for r in rows}
    again = apply(warehouse, "b3")
    assert balanced(again)
    after = {
        (r["id"], r["__start_at"]): r.asDict()
        for r in utc_times(history(spark, warehouse)).collect()
    }
    assert after == before and len(after) == len(rows)


def test_with_a_cut_the_history_holds_the_changes_below_it_and_the_cut_names_it(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """A batch with changes on both sides of T: the history holds those before T, and the
    published cut names its version; the next cut brings the held ones in, and a late change
    below the first cut (DSQL's cut is heuristic) takes its place."""
    rng = random.Random(13)
    source = lives(seed=21, keys=5, count=24, start=at(0, 0), span=2 * 3600)
    source += transfers(seed=22, count=4, start=at(0, 0), span=2 * 3600)
    early = [i for i, c in enumerate(source) if c[0] >= at(1, 0)]
    first = [i for i, c in enumerate(source) if c[0] < at(1, 0)] + early[: len(early) // 2]
    rng.shuffle(first)
    deliver(warehouse, tmp_path, "h0", [source[i] for i in first])
    one = apply(warehouse, "h0", *cut_at(at(1, 0)))
    assert balanced(one)
    assert versions(history(spark, warehouse)) == history_of(
        [source[i] for i in first if source[i][0] < at(1, 0)]
    )
    held = spark.read.format("delta").load(f"{warehouse}/_cdc/held").count()
    assert held == sum(1 for i in first if source[i][0] >= at(1, 0))
    cut = published_cut(warehouse, "cdc")
    assert cut is not None and cut.at == at(1, 0)
    assert "public.accounts__history" in cut.tables
    assert "public.transfers__history" not in cut.tables
    assert live(spark, warehouse) == live_of(source, at(1, 0))

    # A change of a key alive at 00:30:01, delivered after the cut at 01:00 was published.
    when = at(0, 30, 1)
    assert all(c[0] != when for c in source)
    alive = live_of(source, when)
    key = min(alive)
    update = (when, "accounts", "u", {"id": key, "balance": "1.50"})
    rest = [source[i] for i in range(len(source)) if i not in first] + [update]
    rng.shuffle(rest)
    deliver(warehouse, tmp_path, "h1", rest)
    two = apply(warehouse, "h1", *cut_at(at(2, 0)))
    assert balanced(two) and two["cut"]["published"]["cut_at"] == at(2, 0).isoformat()
    found = versions(history(spark, warehouse))
    assert found == history_of([*source, update])
    assert live(spark, warehouse) == open_versions(found) == live_of([*source, update])
    assert spark.read.format("delta").load(f"{warehouse}/_cdc/held").count() == 0

    # The first cut still reads the history as it was at 01:00.
    frames = read_cut(spark, warehouse, "cdc", at=at(1, 0))
    assert versions(frames["public.accounts__history"]) == history_of(
        [c for c in source if c[0] < at(1, 0)]
    )


def test_every_arrival_order_of_a_keys_changes_across_batches(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """Each of 24 keys has the same life (inserted, updated, deleted, inserted again, a
    second apart) and receives its four changes in its own one of the 24 orders, one change
    per batch: after every batch the history is the replay of what has arrived, for every
    arrival order at once."""
    orders = list(itertools.permutations(range(len(LIFE))))
    lives = [
        [
            (at(0, key, step), "accounts", op, {"id": key, "balance": f"{key}.{step}0"})
            for step, op in enumerate(LIFE)
        ]
        for key in range(len(orders))
    ]
    arrived: list[Change] = []
    for n in range(len(LIFE)):
        batch = [life[order[n]] for life, order in zip(lives, orders, strict=True)]
        arrived += batch
        deliver(warehouse, tmp_path, f"p{n}", batch)
        assert balanced(apply(warehouse, f"p{n}"))
        found = versions(history(spark, warehouse))
        assert found == history_of(arrived)
        assert live(spark, warehouse) == open_versions(found) == live_of(arrived)


def test_a_change_without_a_commit_time_starts_when_the_version_before_it_did(
    spark: Any,
) -> None:
    """The rule in the README, on the chaining transform alone: a change known only by its
    place in its partition (commit time unknown: the epoch) starts with the version before
    it, which then lasts no time; a first version without one has no start."""
    from spark_jobs.history import rechain

    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    t1, t2 = naive(at(0, 10)), naive(at(0, 20))
    rows = spark.createDataFrame(
        [
            (1, "a", None, None, "0001", at(0, 10), "r1", None),
            (1, None, None, None, "0001~7", epoch, "r2", None),  # a delete, placed after r1
            (1, "b", None, None, "0002", at(0, 20), "r3", None),
            (2, "c", None, None, "0000~3", epoch, "r4", None),
        ],
        "id BIGINT, balance STRING, __start_at TIMESTAMP, __end_at TIMESTAMP,"
        " _cdc_sequence STRING, _cdc_commit_ts TIMESTAMP, _cdc_record_id STRING,"
        " _cdc_set_columns ARRAY<STRING>",
    )
    chained = {
        r["_cdc_record_id"]: (r["__start_at"], r["__end_at"])
        for r in utc_times(rechain(rows, ["id"])).collect()
    }
    assert chained == {"r1": (t1, t1), "r2": (t1, t2), "r3": (t2, None), "r4": (None, None)}


def test_crashed_runs_and_their_re_run_write_each_version_once(
    spark: Any, warehouse: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run dies after the table's MERGE (before the history's), its re-run after both
    (before the ledger); the next re-run leaves the history of every change, each once."""
    source = lives(seed=31, keys=4, count=16, start=at(0, 0), span=3600)
    first, second = source[::2], source[1::2]  # the second batch interleaves late changes
    deliver(warehouse, tmp_path, "c1", first)
    apply(warehouse, "c1")
    deliver(warehouse, tmp_path, "c2", second)
    for fault in ("apply:after_merge", "apply_changes:before_ledger"):
        with monkeypatch.context() as patched:
            patched.setenv("AIRFLOW_CDC_FAULT", fault)
            patched.setenv("AIRFLOW_CDC_FAULT_MODE", "raise")
            with pytest.raises(SimulatedCrash):
                apply(warehouse, "c2")
    assert balanced(apply(warehouse, "c2"))
    found = versions(history(spark, warehouse))
    assert found == history_of(source)
    assert live(spark, warehouse) == open_versions(found) == live_of(source)
