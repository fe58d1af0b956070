"""Jobs killed at their most delicate points; the re-run loses and duplicates nothing.

A killed job runs in its own process (its own Spark) with ``AIRFLOW_CDC_FAULT`` naming the
point where it dies with exit code 137, as a killed container would. Most apply crashes are
simulated in the test process instead (``AIRFLOW_CDC_FAULT_MODE=raise``: the job raises
:class:`~spark_jobs.faults.SimulatedCrash` there, which no handler catches and on whose way
out nothing is written, so the tables and bookkeeping are left as a kill leaves them), at a
fraction of a new JVM's cost; one apply crash stays a real kill.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable

from cdc_demo import kinesis
from cdc_demo.dsql_stream import DDL, TABLES, differences, generate, write_ndjson
from spark_jobs import apply_changes, frames
from spark_jobs.faults import SimulatedCrash
from spark_jobs.ledger import STATUSES
from tests.conftest import REPO
from tests.spark.pipeline import land_dump, live_rows, process
from tests.spark.test_kinesis_landing import land, raw_records

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def run_killed(job: str, fault: str, *args: str) -> None:
    env = {**os.environ, "AIRFLOW_CDC_FAULT": fault, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, str(REPO / "spark_jobs" / f"{job}.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 137, result.stderr[-3000:]


def crash_in_process(monkeypatch: pytest.MonkeyPatch, fault: str, job: Any, *args: str) -> None:
    """Run ``job`` (a job's ``main``) in this process until it dies at ``fault``. One table at
    a time: a raised crash would let the other table's thread run on to its end, where a kill
    leaves the tables after the one that died as they were."""
    with monkeypatch.context() as patched:
        patched.setenv("AIRFLOW_CDC_FAULT", fault)
        patched.setenv("AIRFLOW_CDC_FAULT_MODE", "raise")
        patched.setattr(frames, "PARALLEL_TABLES", 1)
        with pytest.raises(SimulatedCrash):
            job(list(args))


@pytest.mark.parametrize("fault", ["land:before_commit", "land:after_commit"])
def test_landing_killed_around_its_commit(
    fault: str, spark: Any, warehouse: str, kinesis_endpoint: str
) -> None:
    name = f"crash-{fault.split(':')[1].replace('_', '-')}"
    client = kinesis.client(kinesis_endpoint)
    kinesis.create_stream(client, name, shards=2)
    deliveries = generate(150, seed=9).deliveries
    kinesis.put(client, name, deliveries)
    run_killed(
        "land_kinesis",
        fault,
        "--warehouse",
        warehouse,
        "--batch-id",
        "b1",
        "--stream",
        name,
        "--endpoint-url",
        kinesis_endpoint,
    )
    committed = DeltaTable.isDeltaTable(spark, f"{warehouse}/_cdc/raw")
    landed_before = raw_records(spark, warehouse).count() if committed else 0
    assert landed_before == (0 if fault == "land:before_commit" else len(deliveries))

    # Taken for a dead run's at once (by default only after a day: it may be a live run's).
    rerun = land(warehouse, kinesis_endpoint, name, "b1", "--stale-staging-seconds", "0")
    assert rerun["landed"] == len(deliveries) - landed_before
    records = raw_records(spark, warehouse)
    assert records.count() == len(deliveries)
    staging = Path(warehouse) / "_cdc" / "_staging" / name
    assert not staging.exists() or not any(staging.iterdir())  # the crashed run's leftovers
    assert records.select("record_id").distinct().count() == len(deliveries)


@pytest.mark.parametrize(
    ("fault", "kill"),
    [
        ("apply:before_merge", False),
        ("apply:after_merge", False),
        ("apply_changes:before_ledger", True),
        ("apply_changes:before_state", False),
    ],
)
def test_apply_changes_killed_between_its_commits(
    fault: str,
    kill: bool,
    spark: Any,
    warehouse: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = generate(300, seed=13)
    write_ndjson(stream.deliveries, str(tmp_path / "dump"), files=2)
    land_dump(warehouse, str(tmp_path / "dump"), "b1")
    common = ["--warehouse", warehouse, "--batch-id", "b1", "--source", "dump", "--ddl", DDL]
    if kill:
        run_killed("apply_changes", fault, *common)
    else:
        crash_in_process(monkeypatch, fault, apply_changes.main, *common)

    stats = process(warehouse, "b1")  # the retry finishes what the killed run left
    accounting = stats["apply"]["accounting"]
    assert accounting["unprocessed"] == 0
    assert accounting["landed"] == len(stream.deliveries)
    assert sum(accounting[s] for s in STATUSES) == accounting["landed"]
    for table in TABLES:
        assert differences(stream, table, live_rows(spark, warehouse, table)) == []
