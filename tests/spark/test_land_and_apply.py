"""The land_and_apply job: a landing, then the apply of its batch once the landing left the
source's resolved timestamp at or past the target, in one Spark application."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable

from cdc_demo.dsql_stream import DDL, TABLES, differences, generate, write_ndjson
from spark_jobs import land_and_apply
from tests.spark.pipeline import live_rows

pytestmark = pytest.mark.spark
ARRIVAL = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)


def run(warehouse: str, dumps: str, batch: str, target: dt.datetime) -> dict[str, Any]:
    return land_and_apply.main(
        [
            *("--warehouse", warehouse, "--batch-id", batch, "--source", "both"),
            *("--land-job", "land_files", "--resolved-target", target.isoformat()),
            "--land-args",
            json.dumps(["--path", dumps, "--lateness-seconds", "0"]),
            "--apply-args",
            json.dumps(["--format", "dsql", "--ddl", DDL]),
        ]
    )


def jobs_of_commits(spark: Any, path: str) -> list[str]:
    """The job each commit of a table names in its user metadata."""
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version")
    return [json.loads(r["userMetadata"] or "{}").get("job") for r in history.collect()]


def test_a_batch_lands_waits_for_its_resolved_timestamp_then_applies(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    stream = generate(300, seed=21)
    dumps = str(tmp_path / "dumps")
    start_us = int(ARRIVAL.timestamp() * 1_000_000)
    write_ndjson(stream.deliveries, dumps, files=3, arrival_start_us=start_us)
    # A dump file read to its end holds nothing back: the resolved timestamp is the newest
    # arrival, less no lateness (one delivery per millisecond).
    resolved = ARRIVAL + dt.timedelta(milliseconds=len(stream.deliveries) - 1)

    waiting = run(warehouse, dumps, "b1", resolved + dt.timedelta(microseconds=1))
    assert waiting["land"]["landed"] == len(stream.deliveries)
    assert dt.datetime.fromisoformat(waiting["resolved_ts"]) == resolved
    assert "not applied" in waiting["waiting"] and "accounting" not in waiting
    assert not DeltaTable.isDeltaTable(spark, f"{warehouse}/_cdc/ledger")
    for table in TABLES:
        assert not DeltaTable.isDeltaTable(spark, f"{warehouse}/public/{table}")

    # Landed again (nothing new), the resolved timestamp reaches the target: applied.
    applied = run(warehouse, dumps, "b1", resolved)
    assert applied["land"]["landed"] == 0 and "waiting" not in applied
    assert applied["job"] == "land_and_apply" and applied["source"] == "both"
    counts = applied["accounting"]
    assert counts["landed"] == len(stream.deliveries) and counts["unprocessed"] == 0
    outcomes = ("applied", "superseded", "duplicate", "pending", "quarantined", "control")
    assert sum(counts.get(k, 0) for k in outcomes) == counts["landed"]
    for table in TABLES:
        assert differences(stream, table, live_rows(spark, warehouse, table)) == []
    # Each step commits as the job it is.
    assert set(jobs_of_commits(spark, f"{warehouse}/_cdc/raw")) == {"land_files"}
    assert set(jobs_of_commits(spark, f"{warehouse}/public/{TABLES[0]}")) == {"apply_changes"}

    # The same interval again (a backfill): nothing lands, nothing changes.
    before = {t: sorted(map(str, live_rows(spark, warehouse, t))) for t in TABLES}
    again = run(warehouse, dumps, "b1", resolved)
    assert again["land"]["landed"] == 0 and again["accounting"] == counts
    assert {t: sorted(map(str, live_rows(spark, warehouse, t))) for t in TABLES} == before


def test_the_step_arguments_must_be_json_lists_of_strings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for bad in ("--path x", '{"path": "x"}', "[1]"):
        with pytest.raises(SystemExit):
            land_and_apply.main(
                [
                    *("--warehouse", "/wh", "--batch-id", "b", "--source", "s"),
                    *("--land-job", "land_files", "--resolved-target", "2026-01-01T00:00:00"),
                    *("--land-args", bad, "--apply-args", "[]"),
                ]
            )
        assert "--land-args: expected a JSON list of strings" in capsys.readouterr().err
