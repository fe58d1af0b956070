"""Two landing runs of one source at once, in two real processes: the one that commits first
lands the batch; the other changes nothing (no records, no state file, no other run's files).

A barrier (``AIRFLOW_CDC_BARRIER``) holds both processes just before their commit, so that
they race with the same checkpoints, on a warehouse that does not exist yet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_cdc.demo.dsql_stream import generate, write_ndjson
from tests.conftest import REPO

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def start_landing(warehouse: str, dump: str, barrier: Path, stats: Path) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "AIRFLOW_CDC_BARRIER": f"land:before_commit:{barrier}:2",
    }
    return subprocess.Popen(
        [
            sys.executable,
            str(REPO / "spark_jobs" / "land_files.py"),
            *("--warehouse", warehouse, "--batch-id", "b1", "--source", "dump"),
            *("--path", dump, "--layout", "kinesis", "--lateness-seconds", "0"),
            *("--stats-file", str(stats)),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_losing_run_is_a_clean_no_op(spark: Any, tmp_path: Path) -> None:
    deliveries = generate(120, seed=4).deliveries
    dump = str(tmp_path / "dump")
    write_ndjson(deliveries, dump, files=2)
    warehouse = str(tmp_path / "warehouse")
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    stats_files = [tmp_path / "a.json", tmp_path / "b.json"]

    runs = [start_landing(warehouse, dump, barrier, stats) for stats in stats_files]
    for run in runs:
        _, stderr = run.communicate(timeout=600)
        assert run.returncode == 0, stderr[-3000:]

    assert len(os.listdir(barrier)) == 2  # both runs reached the barrier: they did race
    stats = [json.loads(path.read_text()) for path in stats_files]
    winners = [s for s in stats if "skipped" not in s]
    losers = [s for s in stats if "skipped" in s]
    assert len(winners) == 1 and len(losers) == 1
    assert winners[0]["landed"] == len(deliveries) and losers[0]["landed"] == 0
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'record'")
    assert raw.count() == len(deliveries)
    assert raw.select("record_id").distinct().count() == len(deliveries)
    # The state file is the winner's: it names the run whose rows landed.
    state = json.loads(Path(warehouse, "_cdc", "resolved", "dump.json").read_text())
    assert {r["land_run"] for r in raw.select("land_run").distinct().collect()} == {state["run"]}
    assert state["land_seq"] == winners[0]["land_seq"]
