"""The open batches a maintenance run follows: each run reads the batches landed since the
last one and those still open, never the settled rest, and finds the same open batches and
earliest undecided arrival as a run that reads every batch."""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path
from typing import Any

import pytest

from cdc_demo.dsql_stream import envelope, write_ndjson
from spark_jobs import settled
from spark_jobs.warehouse import JobContext, Warehouse
from tests.spark.pipeline import land_dump, process

pytestmark = pytest.mark.spark

DDL = "CREATE TABLE public.accounts (id BIGINT PRIMARY KEY, name TEXT);"
AT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def land(warehouse: str, tmp_path: Path, batch: str, table: str, seconds: int) -> dt.datetime:
    """Land one upsert of ``table`` committed ``seconds`` after :data:`AT`, arriving a second
    later, as ``batch``; its arrival."""
    ts_ns = int((AT + dt.timedelta(seconds=seconds)).timestamp()) * 10**9
    change = envelope("c", table, ts_ns, {"id": seconds, "name": "x"}, random.Random(seconds))
    arrival = AT + dt.timedelta(seconds=seconds + 1)
    directory = tmp_path / f"{batch}-{seconds}"
    write_ndjson([json.dumps(change)], str(directory), 1, int(arrival.timestamp()) * 10**6)
    assert land_dump(warehouse, str(directory), batch)["landed"] == 1
    return arrival


def test_a_run_reads_the_batches_landed_since_and_the_open_ones(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    ctx = JobContext(spark, Warehouse(warehouse), "m", "r", "maintain", "test")

    def follow() -> tuple[list[str], dict[str, dt.datetime | None], dt.datetime | None]:
        found = settled.follow(ctx, "dump")
        settled.save(ctx, "dump", found)
        opened = {
            b: None if us is None else dt.datetime.fromtimestamp(us / 1e6, dt.UTC)
            for b, us in found.open.items()
        }
        return found.read, opened, found.since()

    b1 = land(warehouse, tmp_path, "b1", "accounts", 0)
    assert follow() == (["b1"], {"b1": b1}, b1)  # landed, not applied
    process(warehouse, "b1", ddl=DDL)
    assert follow() == (["b1"], {}, None)  # applied: settled
    b2 = land(warehouse, tmp_path, "b2", "ledgers", 10)
    wrong = DDL + " CREATE TABLE public.ledgers (id BIGINT PRIMARY KEY, name BIGINT);"
    assert process(warehouse, "b2", ddl=wrong)["apply"]["accounting"]["quarantined"] == 1
    assert follow() == (["b2"], {"b2": b2}, b2)  # quarantined for a replay: open
    assert follow() == (["b2"], {"b2": b2}, b2)  # b1 is not read again
    # A landing run that adds records to a settled batch opens it again.
    again = land(warehouse, tmp_path, "b1", "accounts", 20)
    assert follow() == (["b1", "b2"], {"b1": again, "b2": b2}, b2)
    process(warehouse, "b1", ddl=DDL)
    assert follow() == (["b1", "b2"], {"b2": b2}, b2)
    # Without the state (lost, or of another raw table) every batch is read, to the same end.
    Path(settled.state_path(ctx, "dump")).unlink()
    assert follow() == (["b1", "b2"], {"b2": b2}, b2)
    # Replayed after the fix, the quarantined record is final: nothing is open.
    fixed = DDL + " CREATE TABLE public.ledgers (id BIGINT PRIMARY KEY, name TEXT);"
    process(warehouse, "replay", ddl=fixed, options=("--replay",))
    assert follow() == (["b2"], {}, None)
    assert follow() == ([], {}, None)
    # A table the DDL does not declare has no tombstones: its quarantined records keep
    # their batch open, and hold no purge back.
    land(warehouse, tmp_path, "b3", "other", 30)
    process(warehouse, "b3", ddl=DDL)
    assert follow() == (["b3"], {"b3": None}, None)


def test_an_open_batch_keeps_the_earliest_arrival_found_when_its_files_are_rewritten(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """A ``lines`` file's records land without an arrival time: the time their raw file was
    written stands in for it, and compaction rewrites the file later. The batch, open all
    along, keeps the time first found, which bounds its records' commit times."""
    from delta.tables import DeltaTable

    ctx = JobContext(spark, Warehouse(warehouse), "m", "r", "maintain", "test")
    lines = tmp_path / "sink"
    lines.mkdir()
    (lines / "part-0.ndjson").write_text('{"after": {"id": 1}, "key": [1]}\n')
    land_dump(warehouse, str(lines), "b1", source="sink", layout="lines", fmt="cockroachdb")
    first = settled.follow(ctx, "sink")
    settled.save(ctx, "sink", first)
    landed = first.since()
    assert landed is not None
    (lines / "part-1.ndjson").write_text('{"after": {"id": 2}, "key": [2]}\n')
    land_dump(warehouse, str(lines), "b1", source="sink", layout="lines", fmt="cockroachdb")
    DeltaTable.forPath(spark, f"{warehouse}/_cdc/raw").optimize().executeCompaction()
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw")
    written = raw.select("_metadata.file_modification_time").distinct().collect()
    assert len(written) == 1 and written[0][0].astimezone(dt.UTC) > landed  # rewritten
    again = settled.follow(ctx, "sink")
    assert again.read == ["b1"] and again.since() == landed
