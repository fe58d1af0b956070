"""Two landing runs of one source at once, in two real processes: the one that commits first
lands the batch; the other changes nothing (no records, no state file, no other run's files).

A barrier (``AIRFLOW_CDC_BARRIER``) holds both processes just before their commit, so that
they race with the same checkpoints: on a warehouse that does not exist yet, and on one whose
tables hold an earlier batch (through the staged landing path, beside a live run's staging
directory that neither may delete).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cdc_demo import change_stream
from cdc_demo.dsql_stream import generate, write_ndjson
from tests.conftest import REPO
from tests.spark.pipeline import land_dump

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def start_landing(
    warehouse: str, dump: str, barrier: Path, stats: Path, *layout: str
) -> subprocess.Popen[str]:
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
            *("--path", dump, "--lateness-seconds", "0"),
            *(layout or ("--layout", "kinesis")),
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
    winner = race(warehouse, dump, tmp_path, ())
    assert winner["landed"] == len(deliveries)
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'record'")
    assert raw.count() == len(deliveries)
    assert raw.select("record_id").distinct().count() == len(deliveries)
    # The state file is the winner's: it names the run whose rows landed.
    state = json.loads(Path(warehouse, "_cdc", "resolved", "dump.json").read_text())
    assert {r["land_run"] for r in raw.select("land_run").distinct().collect()} == {state["run"]}
    assert state["land_seq"] == winner["land_seq"]


def race(warehouse: str, dump: str, tmp_path: Path, layout: tuple[str, ...]) -> dict[str, Any]:
    """Two landing runs at once; the winner's stats, once the loser is shown a no-op."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    stats_files = [tmp_path / "a.json", tmp_path / "b.json"]
    runs = [start_landing(warehouse, dump, barrier, stats, *layout) for stats in stats_files]
    for run in runs:
        _, stderr = run.communicate(timeout=600)
        assert run.returncode == 0, stderr[-3000:]
    assert len(os.listdir(barrier)) == 2  # both runs reached the barrier: they did race
    stats = [json.loads(path.read_text()) for path in stats_files]
    winners = [s for s in stats if "skipped" not in s]
    losers = [s for s in stats if "skipped" in s]
    assert len(winners) == 1 and len(losers) == 1
    assert losers[0]["landed"] == 0
    return winners[0]


def test_on_an_existing_table_the_loser_leaves_every_run_s_files(
    spark: Any, tmp_path: Path
) -> None:
    stream = change_stream.generate("debezium", changes=200, partitions=2, seed=3)
    dump = tmp_path / "dump"
    dump.mkdir()
    half = len(stream.lines) // 2
    (dump / "part-0.ndjson").write_text("\n".join(stream.lines[:half]) + "\n", "utf-8")
    warehouse = str(tmp_path / "warehouse")
    layout = ("--layout", "kafka", "--format", "debezium")
    first = land_dump(warehouse, str(dump), "b0", layout="kafka", fmt="debezium")
    assert first["landed"] == half
    # A live run's staging directory (named by its start time, as landing names them).
    live = Path(warehouse, "_cdc", "_staging", "dump", f"{int(time.time())}-{'0' * 32}")
    live.mkdir(parents=True)
    (live / "part-00000.parquet").write_bytes(b"staged by another run")
    state_before = Path(warehouse, "_cdc", "resolved", "dump.json").read_text()
    (dump / "part-1.ndjson").write_text("\n".join(stream.lines[half:]) + "\n", "utf-8")

    winner = race(warehouse, str(dump), tmp_path, layout)

    assert winner["landed"] == len(stream.lines) - half
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'record'")
    assert raw.count() == len(stream.lines)
    assert raw.select("record_id").distinct().count() == len(stream.lines)
    assert (live / "part-00000.parquet").read_bytes() == b"staged by another run"
    staging = Path(warehouse, "_cdc", "_staging", "dump")
    assert sorted(os.listdir(staging)) == [live.name]  # and no run left its own behind
    state = json.loads(Path(warehouse, "_cdc", "resolved", "dump.json").read_text())
    assert state["land_seq"] == winner["land_seq"] != json.loads(state_before)["land_seq"]
    runs = {
        r["land_run"] for r in raw.where("batch_id = 'b1'").select("land_run").distinct().collect()
    }
    assert runs == {state["run"]}
