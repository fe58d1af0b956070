"""The maintenance job: tombstones past retention purged, files compacted, nothing else
changed (live rows, the ledger's accounting), and a second run finds nothing to do; records
past the bookkeeping retention leave the raw table, the quarantine and the ledger together,
each batch's accounting identity holding, the checkpoints kept."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest

from cdc_demo.dsql_stream import DDL, envelope, generate, write_ndjson
from spark_jobs import ledger, maintain, settled
from spark_jobs.warehouse import JobContext, Warehouse
from tests.spark.pipeline import land_dump, process

pytestmark = pytest.mark.spark

START_NS = 1_767_225_600_000_000_000
SPAN_S = 3000
TABLES = ("customers", "order_items")


def rows(spark: Any, warehouse: str, table: str) -> dict[str, list[dict[str, Any]]]:
    frame = spark.read.format("delta").load(f"{warehouse}/public/{table}")
    found: dict[str, list[dict[str, Any]]] = {"live": [], "tombstones": []}
    for row in frame.collect():
        found["tombstones" if row["_cdc_deleted"] else "live"].append(row.asDict())
    for kind in found:
        found[kind].sort(key=lambda r: r["_cdc_record_id"])
    return found


def same(left: list[dict[str, Any]], right: list[dict[str, Any]]) -> bool:
    """Rows equal value by value (NaN equals NaN)."""
    return [repr(r) for r in left] == [repr(r) for r in right]


def batch_accounting(spark: Any, warehouse: str, batch: str) -> dict[str, Any]:
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw")
    records = raw.where(f"kind = 'record' AND batch_id = '{batch}'")
    return ledger.accounting(spark, records, f"{warehouse}/_cdc/ledger", "dump", batch)


def maintain_run(warehouse: str, retention: float, *options: str) -> dict[str, Any]:
    return maintain.main(
        [
            *("--warehouse", warehouse, "--batch-id", "m1", "--source", "dump"),
            *("--ddl", DDL, "--tombstone-retention-seconds", str(retention), *options),
        ]
    )


def kept_rows(spark: Any, warehouse: str, table: str) -> list[Any]:
    frame = spark.read.format("delta").load(f"{warehouse}/_cdc/{table}")
    return sorted(frame.where("source = 'dump'").select("record_id").collect())


def test_maintenance_purges_old_tombstones_and_compacts_only(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    stream = generate(500, seed=5, start_ns=START_NS, span_ns=SPAN_S * 10**9)
    half = len(stream.deliveries) // 2
    for batch, part in (("b1", stream.deliveries[:half]), ("b2", stream.deliveries[half:])):
        write_ndjson(part, str(tmp_path / batch), files=2)
        land_dump(warehouse, str(tmp_path / batch), batch)
        process(warehouse, batch)
    before = {t: rows(spark, warehouse, t) for t in TABLES}
    accounting = batch_accounting(spark, warehouse, "b1")
    assert accounting["unprocessed"] == 0 and accounting["landed"] > 0
    state = json.loads(Path(warehouse, "_cdc", "resolved", "dump.json").read_text())
    resolved = dt.datetime.fromisoformat(state["resolved_ts"])
    # The purge horizon falls in the middle of the stream's commit times.
    horizon = dt.datetime.fromtimestamp(START_NS / 1e9 + SPAN_S / 2, dt.UTC)
    retention = (resolved - horizon).total_seconds()

    stats = maintain_run(warehouse, retention)

    for table in TABLES:
        after = rows(spark, warehouse, table)
        assert same(after["live"], before[table]["live"])
        # Collected timestamps are naive, in the local time zone.
        local = horizon.astimezone().replace(tzinfo=None)
        kept = [r for r in before[table]["tombstones"] if r["_cdc_commit_ts"] >= local]
        assert same(after["tombstones"], kept)
        report = stats["tables"][f"public.{table}"]
        assert report["tombstones_purged"] == len(before[table]["tombstones"]) - len(kept)
        assert report["files_before"] > 1 and report["files_after"] == 1
        assert report["files_vacuumed"] == 0  # every file is younger than 7 days
    assert any(stats["tables"][f"public.{t}"]["tombstones_purged"] > 0 for t in TABLES)
    raw = stats["tables"]["_cdc.raw"]
    assert raw["files_removed"] > 0 and raw["files_after"] < raw["files_before"]
    assert batch_accounting(spark, warehouse, "b1") == accounting

    assert stats["expired"]["records_expired"] == 0  # all decided just now

    # Every final outcome is past a retention of 0 s; the quarantined records are kept.
    batches = ("b1", "b2")
    before_expiry = {b: batch_accounting(spark, warehouse, b) for b in batches}
    final = [s for s in ledger.STATUSES if s not in (ledger.PENDING, ledger.QUARANTINED)]
    assert sum(before_expiry["b1"][s] for s in final) > 0
    assert sum(before_expiry[b]["quarantined"] for b in batches) > 0
    quarantine = kept_rows(spark, warehouse, "quarantine")
    tables_now = {t: rows(spark, warehouse, t) for t in TABLES}
    ctx = JobContext(spark, Warehouse(warehouse), "m1", "test", maintain.JOB_NAME, "test")
    held = dt.timedelta(seconds=maintain.QUARANTINE_RETENTION_SECONDS)
    # A run that dies after its first delete (the raw rows): no record is left unaccounted
    # for, and the next run finishes the rest.
    doomed = maintain.expired_records(ctx, "dump", dt.datetime.now(dt.UTC), dt.timedelta(0), held)
    assert doomed is not None
    maintain.delete_records(ctx, f"{warehouse}/_cdc/raw", "dump", doomed, list(batches))
    for batch in batches:
        interrupted = batch_accounting(spark, warehouse, batch)
        assert interrupted["unprocessed"] == 0
        assert interrupted["landed"] == sum(interrupted[s] for s in ledger.STATUSES)
    progress = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'progress'")
    older = progress.where("land_seq < 2").count()
    assert older > 0
    expired = maintain.expire_bookkeeping(
        ctx, "dump", dt.timedelta(0), held, settled.follow(ctx, "dump")
    )
    assert expired["raw_rows"] == older  # only the old checkpoints were left to delete
    assert expired["records_expired"] == sum(before_expiry[b][s] for b in batches for s in final)
    assert expired["ledger_rows"] >= expired["records_expired"]
    assert expired["quarantine_rows"] == 0
    assert kept_rows(spark, warehouse, "quarantine") == quarantine
    after_expiry = {b: batch_accounting(spark, warehouse, b) for b in batches}
    for batch in batches:
        assert after_expiry[batch] == {
            **{s: 0 for s in final},
            "pending": before_expiry[batch]["pending"],
            "quarantined": before_expiry[batch]["quarantined"],
            "unprocessed": 0,
            "landed": before_expiry[batch]["pending"] + before_expiry[batch]["quarantined"],
        }
    # The checkpoint (the newest landing run's progress rows) stays, and only it.
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'progress'")
    assert {r["land_seq"] for r in raw.select("land_seq").collect()} == {2}
    # Re-running an expired batch's apply re-applies nothing; landing again lands nothing.
    process(warehouse, "b1")
    assert batch_accounting(spark, warehouse, "b1") == after_expiry["b1"]
    assert land_dump(warehouse, str(tmp_path / "b2"), "b3")["landed"] == 0
    for table in TABLES:  # (NaN is a value here: rows compare by repr)
        assert repr(rows(spark, warehouse, table)) == repr(tables_now[table])

    # The whole job again, with a quarantine retention of 0 s: the quarantined records go
    # too, and nothing else is left to do.
    again = maintain_run(
        warehouse,
        retention,
        *("--raw-retention-seconds", "0", "--quarantine-retention-seconds", "0"),
    )
    for table in TABLES:
        report = again["tables"][f"public.{table}"]
        assert report["tombstones_purged"] == 0
        assert report["files_removed"] == 0 and report["bytes_rewritten"] == 0
    assert again["expired"]["quarantine_rows"] == len(quarantine)
    assert kept_rows(spark, warehouse, "quarantine") == []
    for batch in batches:
        pending = before_expiry[batch]["pending"]
        assert batch_accounting(spark, warehouse, batch)["landed"] == pending


def test_vacuum_below_deltas_safety_floor_is_refused(warehouse: str) -> None:
    with pytest.raises(SystemExit):
        maintain.main(
            [
                *("--warehouse", warehouse, "--batch-id", "m1", "--source", "dump"),
                *("--ddl", DDL, "--vacuum-retention-hours", "1"),
            ]
        )


def test_conflicts_are_retried_and_other_errors_are_not(monkeypatch: Any) -> None:
    from delta.exceptions import ConcurrentAppendException

    from spark_jobs import delta_tables

    pauses: list[float] = []
    monkeypatch.setattr(delta_tables.time, "sleep", pauses.append)
    calls: list[int] = []

    def flaky(failures: int, error: Exception) -> Any:
        def step() -> int:
            calls.append(1)
            if len(calls) <= failures:
                raise error
            return 7

        return step

    assert delta_tables.retry_on_conflict(flaky(2, ConcurrentAppendException("x")), "step") == 7
    assert len(calls) == 3 and len(pauses) == 2 and pauses[1] > 0
    calls.clear()
    with pytest.raises(ConcurrentAppendException):
        delta_tables.retry_on_conflict(flaky(9, ConcurrentAppendException("x")), "step", attempts=3)
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(ValueError):
        delta_tables.retry_on_conflict(flaky(9, ValueError("bad")), "step")
    assert len(calls) == 1


@pytest.mark.slow
def test_compaction_while_an_apply_runs(
    spark: Any, warehouse: str, tmp_path: Path, monkeypatch: Any
) -> None:
    """The apply job (its own process) and the maintenance job (this one) are held at a
    barrier, the apply just before its MERGEs and the maintenance just before compacting the
    same table, then released together: both finish, and the tables are exact."""
    import os
    import subprocess
    import sys

    from cdc_demo.dsql_stream import differences
    from spark_jobs.ledger import STATUSES
    from tests.conftest import REPO
    from tests.spark.pipeline import live_rows

    stream = generate(400, seed=21)
    half = len(stream.deliveries) // 2
    write_ndjson(stream.deliveries[:half], str(tmp_path / "b1"), files=2)
    land_dump(warehouse, str(tmp_path / "b1"), "b1")
    process(warehouse, "b1")
    write_ndjson(stream.deliveries[half:], str(tmp_path / "b2"), files=2)
    land_dump(warehouse, str(tmp_path / "b2"), "b2")
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    stats_file = tmp_path / "apply.json"
    apply_run = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "spark_jobs" / "apply_changes.py"),
            *("--warehouse", warehouse, "--batch-id", "b2", "--source", "dump"),
            *("--ddl", DDL, "--stats-file", str(stats_file)),
        ],
        env={
            **os.environ,
            "PYTHONPATH": str(REPO),
            "AIRFLOW_CDC_BARRIER": f"apply:before_merge:{barrier}:2",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    monkeypatch.setenv("AIRFLOW_CDC_BARRIER", f"maintain:before_compact:{barrier}:2")
    # A retention of ten years keeps every tombstone: no purge changes the expected state.
    maintained = maintain_run(warehouse, 10 * 365 * 86400.0)
    _, stderr = apply_run.communicate(timeout=900)
    assert apply_run.returncode == 0, stderr[-3000:]

    assert len(os.listdir(barrier)) == 2  # both reached the barrier: they did race
    assert maintained["tables"]["public.customers"]["files_after"] >= 1
    accounting = json.loads(stats_file.read_text())["accounting"]
    assert accounting["unprocessed"] == 0
    assert sum(accounting[s] for s in STATUSES) == accounting["landed"]
    for table in TABLES:
        assert differences(stream, table, live_rows(spark, warehouse, table)) == []


def test_records_the_open_state_still_holds_never_expire(spark: Any, warehouse: str) -> None:
    """An apply that died after its ledger append, before rewriting the open state, leaves
    records final in the ledger and still open (a fragment set), held (a change past a
    cut) or carried (a transaction's END event, control in the ledger); its re-run decides
    by the ledger, so expiry must keep their entries."""
    old = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    entries = [
        (rid, "applied", None, "apply_changes", "r", old, "src", "b1")
        for rid in ("fragment", "held", "end", "done")
    ]
    spark.createDataFrame(entries, ledger.LEDGER_SCHEMA).write.format("delta").save(
        f"{warehouse}/_cdc/ledger"
    )
    spark.createDataFrame(
        [("fragment", "open", "src"), ("done", "complete", "src")],  # a closed marker
        "record_id STRING, state STRING, source STRING",
    ).write.format("delta").save(f"{warehouse}/_cdc/pending")
    spark.createDataFrame(
        [("main", [("held", "b1")], "src")],
        "record_id STRING, members ARRAY<STRUCT<record_id: STRING, batch_id: STRING>>,"
        " source STRING",
    ).write.format("delta").save(f"{warehouse}/_cdc/held")
    spark.createDataFrame(  # a transaction's END event carried for its transaction
        [("end", "src")], "record_id STRING, source STRING"
    ).write.format("delta").save(f"{warehouse}/_cdc/transactions")
    ctx = JobContext(spark, Warehouse(warehouse), "m", "r", "maintain", maintain.JOB_VERSION)
    day = dt.timedelta(days=1)
    expired = maintain.expired_records(ctx, "src", old + 30 * day, day, day)
    assert expired is not None
    assert [r["record_id"] for r in expired.collect()] == ["done"]


def test_vacuum_takes_the_table_s_retention_and_skips_a_table_with_no_file_that_old(
    spark: Any, warehouse: str
) -> None:
    """VACUUM deletes a file no commit references once it is older than the table's
    retention (an overwritten file only that long after its removal); a table without a file
    that old is done without VACUUM's listing (its log's age aside); a retention other than
    Delta's default is set on the table, once."""
    import os
    import shutil
    import time

    path = f"{warehouse}/t"
    spark.range(3).write.format("delta").save(path)
    spark.range(4).write.format("delta").mode("overwrite").save(path)  # the first file unused
    ctx = JobContext(spark, Warehouse(warehouse), "m", "r", "maintain", maintain.JOB_VERSION)
    data = sorted(f for f in os.listdir(path) if f.endswith(".parquet"))
    eight_days_ago = time.time() - 8 * 86400
    for name in os.listdir(f"{path}/_delta_log"):
        os.utime(Path(path, "_delta_log", name), (eight_days_ago, eight_days_ago))
    assert maintain.may_vacuum(ctx, path, 168) is False
    assert maintain.vacuum(ctx, path, 168) == 0

    # A failed write's file (no commit added it), and every data file, written 8 days ago:
    # only the orphan goes; the overwritten file was removed just now.
    orphan = Path(path, "part-99999-orphan.c000.snappy.parquet")
    shutil.copy(Path(path, data[0]), orphan)
    for name in [*data, orphan.name]:
        os.utime(Path(path, name), (eight_days_ago, eight_days_ago))
    assert maintain.may_vacuum(ctx, path, 168) is True
    assert maintain.may_vacuum(ctx, path, 24 * 9) is False  # not before a 9-day horizon
    assert maintain.vacuum(ctx, path, 168) == 1
    assert sorted(f for f in os.listdir(path) if f.endswith(".parquet")) == data
    assert spark.read.format("delta").load(path).count() == 4

    def versions() -> int:
        return spark.sql(f"DESCRIBE HISTORY delta.`{path}`").count()

    before = versions()
    maintain.keep_removed_files(ctx, path, 168, maintain.detail(ctx, path)["properties"])
    assert versions() == before  # Delta's default: nothing to set
    shutil.copy(Path(path, data[0]), orphan)
    os.utime(orphan, (eight_days_ago, eight_days_ago))
    maintain.keep_removed_files(ctx, path, 1000, maintain.detail(ctx, path)["properties"])
    properties = maintain.detail(ctx, path)["properties"]
    assert properties[maintain.FILE_RETENTION] == "interval 1000 hours"
    assert properties[maintain.LOG_RETENTION] == "interval 1000 hours"  # over 30 days
    assert versions() == before + 1
    maintain.keep_removed_files(ctx, path, 1000, properties)
    assert versions() == before + 1
    assert maintain.vacuum(ctx, path, 1000) == 0 and orphan.exists()  # younger than 1000 h
    # A bookkeeping table every source keeps: a source asking for less keeps the longest
    # (no commit, no VACUUM cutting another source's retention short).
    kept = maintain.maintain_table(ctx, path, 168, shared=True)
    assert kept["vacuum_retention_hours"] == 1000 and orphan.exists()
    assert maintain.detail(ctx, path)["properties"][maintain.FILE_RETENTION] == (
        "interval 1000 hours"
    )


def test_vacuum_keeps_every_file_an_old_newest_cut_reads() -> None:
    """The newest cut is kept whatever its age: VACUUM then keeps every file removed since it
    was published, in whole days (the table's retention property changes once a day)."""
    now = dt.datetime(2026, 1, 20, 12, tzinfo=dt.UTC)
    assert maintain.kept_since_hours(None, now) == 0
    assert maintain.kept_since_hours(now - dt.timedelta(days=10), now) == 24 * 11
    assert maintain.kept_since_hours(now - dt.timedelta(minutes=5), now) == 24


def test_a_table_past_the_threshold_is_clustered_by_its_key(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """With a threshold of 0 bytes, maintenance clusters each target table by its primary key
    once: OPTIMIZE then lays the customers out in disjoint key ranges (files small enough to
    make several), the rows stay as they were, and the next batch applies exactly."""
    from cdc_demo.dsql_stream import differences
    from tests.spark.pipeline import live_rows

    stream = generate(600, seed=8)
    half = len(stream.deliveries) // 2
    write_ndjson(stream.deliveries[:half], str(tmp_path / "b1"), files=2)
    land_dump(warehouse, str(tmp_path / "b1"), "b1")
    process(warehouse, "b1")
    before = {t: rows(spark, warehouse, t) for t in TABLES}
    small_files = "spark.databricks.delta.optimize.maxFileSize"
    spark.conf.set(small_files, str(4 * 1024))
    try:
        first = maintain_run(warehouse, 10 * 365 * 86400.0, "--cluster-above-bytes", "0")
    finally:
        spark.conf.unset(small_files)
    keys = {"customers": ["id"], "order_items": ["order_id", "item_id"]}
    for table in TABLES:
        path = f"{warehouse}/public/{table}"
        assert first["tables"][f"public.{table}"]["clustered_by"] == keys[table]
        clustering = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["clusteringColumns"]
        assert list(clustering) == keys[table]
        assert repr(rows(spark, warehouse, table)) == repr(before[table])
    from pyspark.sql import functions as F

    customers = spark.read.format("delta").load(f"{warehouse}/public/customers")
    by_file = customers.groupBy("_metadata.file_path").agg(F.min("id"), F.max("id"))
    ranges = sorted((low, high) for _, low, high in by_file.collect())
    assert len(ranges) > 2
    assert all(left[1] < right[0] for left, right in itertools.pairwise(ranges))

    again = maintain_run(warehouse, 10 * 365 * 86400.0, "--cluster-above-bytes", "0")
    assert "clustered_by" not in again["tables"]["public.customers"]  # once
    write_ndjson(stream.deliveries[half:], str(tmp_path / "b2"), files=2)
    land_dump(warehouse, str(tmp_path / "b2"), "b2")
    process(warehouse, "b2")
    for table in TABLES:
        assert differences(stream, table, live_rows(spark, warehouse, table)) == []


ACCOUNTS_DDL = "CREATE TABLE public.accounts (id BIGINT PRIMARY KEY, name TEXT);"


def land_upsert_then_delete(warehouse: str, tmp_path: Path) -> None:
    """Batch b1: an upsert of account 1; batch b2: its delete, ten seconds later. Each record
    arrives a second after its commit."""
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for batch, op, seconds in (("b1", "c", 0), ("b2", "d", 10)):
        ts_ns = int((at + dt.timedelta(seconds=seconds)).timestamp()) * 10**9
        row = {"id": 1, "name": "one"}
        change = json.dumps(envelope(op, "accounts", ts_ns, row, random.Random(seconds)))
        arrival_us = int((at + dt.timedelta(seconds=seconds + 1)).timestamp()) * 10**6
        write_ndjson([change], str(tmp_path / batch), 1, arrival_us)
        land_dump(warehouse, str(tmp_path / batch), batch)


def accounts(spark: Any, warehouse: str) -> list[tuple[int, bool]]:
    table = spark.read.format("delta").load(f"{warehouse}/public/accounts")
    return [(r["id"], r["_cdc_deleted"]) for r in table.collect()]


def test_a_tombstone_stays_while_an_older_change_landed_before_it_is_undecided(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """Batch b1 (an upsert of row 1) lands and its apply fails; b2 (the row's delete, ten
    seconds later) lands and is applied. The resolved timestamp passes the tombstone by more
    than the retention, but b1's change can still be applied: the tombstone stays until it
    is, so that it keeps the row deleted (a purge let it live again)."""
    land_upsert_then_delete(warehouse, tmp_path)
    process(warehouse, "b2", ddl=ACCOUNTS_DDL)  # b1's apply has not run (it failed)
    stats = maintain_run(warehouse, 0.5, "--ddl", ACCOUNTS_DDL)
    assert stats["tables"]["public.accounts"]["tombstones_purged"] == 0
    one = process(warehouse, "b1", ddl=ACCOUNTS_DDL)["apply"]["accounting"]
    assert (one["applied"], one["superseded"]) == (0, 1)
    assert accounts(spark, warehouse) == [(1, True)]


def test_a_tombstone_stays_while_an_older_change_waits_in_the_quarantine_for_a_replay(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """b1's upsert is quarantined (``name`` declared a number by mistake), b2's delete is
    applied once the DDL is fixed. A replay can still apply b1's change, so the tombstone
    stays through maintenance; the replay then finds the row deleted and supersedes the
    upsert (a purged tombstone let it bring the row back)."""
    land_upsert_then_delete(warehouse, tmp_path)
    wrong = "CREATE TABLE public.accounts (id BIGINT PRIMARY KEY, name BIGINT);"
    first = process(warehouse, "b1", ddl=wrong)["apply"]["accounting"]
    assert first["quarantined"] == 1
    process(warehouse, "b2", ddl=ACCOUNTS_DDL)
    stats = maintain_run(warehouse, 0.5, "--ddl", ACCOUNTS_DDL)
    assert stats["tables"]["public.accounts"]["tombstones_purged"] == 0
    replay = process(warehouse, "replay", ddl=ACCOUNTS_DDL, options=("--replay",))["apply"]
    assert replay["replay"]["records"] == 1
    one = replay["accounting"]
    assert (one["applied"], one["superseded"], one["quarantined"]) == (0, 1, 0)
    assert accounts(spark, warehouse) == [(1, True)]
    # Replayed, the upsert is final: the tombstone may go now.
    again = maintain_run(warehouse, 0.5, "--ddl", ACCOUNTS_DDL)
    assert again["tables"]["public.accounts"]["tombstones_purged"] == 1


def test_an_undecided_record_without_an_arrival_time_bounds_the_purge_by_its_landing(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """A ``lines`` file's records land without an arrival time: the time their raw file was
    written bounds their commit time instead, so that tombstones older than it still go."""
    lines = tmp_path / "sink"
    lines.mkdir()
    (lines / "part-0.ndjson").write_text('{"after": {"id": 1}, "key": [1]}\n')
    before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    land_dump(warehouse, str(lines), "b1", source="sink", layout="lines", fmt="cockroachdb")
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'record'")
    assert [r["arrival_ts"] for r in raw.collect()] == [None]
    ctx = JobContext(spark, Warehouse(warehouse), "m", "r", "maintain", maintain.JOB_VERSION)
    since = settled.follow(ctx, "sink").since()
    assert since is not None and before <= since <= dt.datetime.now(dt.UTC)
    assert settled.follow(ctx, "other").since() is None


def test_the_checkpoints_of_quiet_batches_expire_too(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """Every landing run writes a progress row per shard; batches b2 and b3 land nothing new.
    Once past the bookkeeping retention, the progress rows of every run but the newest go,
    the quiet b2's with those of b1, whose records expire; before it, b2's stay."""
    stream = generate(60, seed=7, start_ns=START_NS, span_ns=SPAN_S * 10**9)
    write_ndjson(stream.deliveries, str(tmp_path / "dump"), files=2)
    for batch in ("b1", "b2", "b3"):
        land_dump(warehouse, str(tmp_path / "dump"), batch)
        process(warehouse, batch)

    def runs() -> dict[str, set[int]]:
        raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'progress'")
        found: dict[str, set[int]] = {}
        for row in raw.select("batch_id", "land_seq").collect():
            found.setdefault(row["batch_id"], set()).add(row["land_seq"])
        return found

    def looked_at() -> tuple[int, list[str]]:
        """Through which landing run the progress rows were looked at; the batches kept."""
        state = json.loads(Path(warehouse, "_cdc", "settled", "dump.json").read_text())
        return state["quiet_through"], state["quiet"]

    assert runs() == {"b1": {1}, "b2": {2}, "b3": {3}}
    kept = maintain_run(warehouse, 86400.0)
    assert kept["expired"]["raw_rows"] == 0 and runs() == {"b1": {1}, "b2": {2}, "b3": {3}}
    assert looked_at() == (2, ["b2"])  # the next run reads b2's rows again, not b1's
    expired = maintain_run(warehouse, 86400.0, "--raw-retention-seconds", "0")["expired"]
    assert expired["records_expired"] > 0
    assert runs() == {"b3": {3}}
    assert looked_at() == (2, [])
    # Each landing run wrote one progress row per shard (two): b1's and b2's went.
    assert expired["raw_rows"] == expired["records_expired"] + 2 * 2
