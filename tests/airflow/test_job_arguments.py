"""The arguments an operator submits are the ones its job's parser reads back: each job's
own ``main`` parses them, stopped where it would start Spark.

Names that are data may start with ``-`` (a Kafka topic or Kinesis stream ``-orders``, an
Airflow run id ``-backfill``, a DDL opening with a ``--`` comment); as an argument of its own
such a value would be taken for an option."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from types import ModuleType
from typing import Any

import pytest

from airflow_cdc.operators.apply import LandAndApplyOperator, ReplayQuarantineOperator
from airflow_cdc.operators.base import SparkJobOperator
from airflow_cdc.operators.land import (
    KafkaLanding,
    LandFilesOperator,
    LandKafkaOperator,
    LandKinesisOperator,
)
from airflow_cdc.operators.maintain import CdcMaintenanceOperator
from airflow_cdc.submit import job_spec

DDL = "-- the shop's orders\nCREATE TABLE orders (id int PRIMARY KEY)"
RUN_ID = "-backfill"
BATCH_ID = "-b1"


class Parsed(Exception):
    """A job's parsed arguments, where its run would start Spark."""

    def __init__(self, namespace: argparse.Namespace) -> None:
        super().__init__(namespace)
        self.namespace = namespace


def stop_at_start(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> None:
    def start(job: str, version: str, args: argparse.Namespace) -> Any:
        raise Parsed(args)

    monkeypatch.setattr(module, "start", start)


def submitted(op: SparkJobOperator, batch_id: str = "b1", run_id: str = "manual") -> list[str]:
    """The arguments spark-submit hands the operator's job."""
    return job_spec(
        op.job,
        warehouse="/wh",
        batch_id=batch_id,
        run_id=run_id,
        stats_file="/wh/_cdc/stats/x/stats.json",
        job_args=op.job_args({}),
        library="/lib.zip",
    ).application_args


def parsed(monkeypatch: pytest.MonkeyPatch, module: ModuleType, argv: list[str]) -> Any:
    """What ``module``'s main reads from ``argv``."""
    stop_at_start(monkeypatch, module)
    return parsed_by(module.main, argv)


def parsed_by(main: Any, argv: list[str]) -> Any:
    """What a job whose Spark start is stopped (:func:`stop_at_start`) reads, run by ``main``
    with ``argv``."""
    with pytest.raises(Parsed) as stopped:
        main(argv)
    return stopped.value.namespace


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAF", json.dumps({"conn_type": "cdc_kafka", "host": "b:9"}))
    monkeypatch.setenv("AIRFLOW_CONN_KIN", json.dumps({"conn_type": "cdc_kinesis"}))


def test_a_kafka_topic_starting_with_a_dash_reaches_the_landing_job(
    monkeypatch: pytest.MonkeyPatch, connections: None
) -> None:
    from spark_jobs import land_kafka

    op = LandKafkaOperator(
        task_id="l",
        warehouse="/wh",
        topics=["-orders", "--items"],
        source="orders",
        kafka_conn_id="kaf",
    )
    args = parsed(monkeypatch, land_kafka, submitted(op))
    assert (args.topic, args.source, args.warehouse) == (["-orders", "--items"], "orders", "/wh")


def test_a_kinesis_stream_starting_with_a_dash_reaches_the_landing_job(
    monkeypatch: pytest.MonkeyPatch, connections: None
) -> None:
    from spark_jobs import land_kinesis

    op = LandKinesisOperator(
        task_id="l", warehouse="/wh", stream="-orders", source="orders", kinesis_conn_id="kin"
    )
    args = parsed(monkeypatch, land_kinesis, submitted(op))
    assert (args.stream, args.source) == ("-orders", "orders")


def test_a_path_reaches_the_files_landing_and_one_starting_with_a_dash_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A path is absolute (a relative one is refused at submission, ``-in`` among them), and
    reaches the job whatever its characters."""
    from spark_jobs import land_files

    op = LandFilesOperator(task_id="l", warehouse="/wh", path="/in/-a b/*.ndjson", source="s")
    args = parsed(monkeypatch, land_files, submitted(op))
    assert (args.path, args.source) == ("/in/-a b/*.ndjson", "s")
    op = LandFilesOperator(task_id="l", warehouse="/wh", path="-in/*.ndjson", source="s")
    with pytest.raises(ValueError, match="path must be an absolute path or a URI"):
        submitted(op)


def test_the_apply_and_maintenance_jobs_read_their_arguments_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spark_jobs import apply_changes, maintain

    replay = ReplayQuarantineOperator(
        task_id="r", warehouse="/wh", source="s", ddl=DDL, batches=["-b0", "b1"]
    )
    args = parsed(monkeypatch, apply_changes, submitted(replay))
    assert (args.ddl, args.replay_batches) == (DDL, ["-b0", "b1"])
    op = CdcMaintenanceOperator(task_id="m", warehouse="/wh", source="s", ddl=DDL)
    args = parsed(monkeypatch, maintain, submitted(op, BATCH_ID, RUN_ID))
    assert (args.ddl, args.source, args.batch_id, args.run_id) == (DDL, "s", BATCH_ID, RUN_ID)


def test_land_and_apply_hands_its_steps_their_arguments_unchanged(
    monkeypatch: pytest.MonkeyPatch, connections: None
) -> None:
    """The job passes its run's warehouse, batch and run id on to each step."""
    from spark_jobs import apply_changes, land_and_apply, land_kafka

    op = LandAndApplyOperator(
        task_id="t",
        warehouse="/wh",
        source="src",
        ddl=DDL,
        land=KafkaLanding(topics=["-orders"], kafka_conn_id="kaf"),
        resolved_target="2026-01-01T01:00:00+00:00",
    )
    argv = submitted(op, BATCH_ID, RUN_ID)
    monkeypatch.setattr(land_and_apply, "start", lambda *args: None)
    stop_at_start(monkeypatch, land_kafka)
    landing = parsed_by(land_and_apply.main, argv)
    assert (landing.topic, landing.source) == (["-orders"], "src")
    assert (landing.run_id, landing.batch_id, landing.warehouse) == (RUN_ID, BATCH_ID, "/wh")
    # A landing whose resolved timestamp reaches the target: the batch is applied.
    monkeypatch.setitem(land_and_apply.LANDINGS, "land_kafka", lambda argv: {})
    reached = dt.datetime(2026, 1, 1, 1, tzinfo=dt.UTC)
    monkeypatch.setattr(land_and_apply, "batch_resolved", lambda ctx, source: reached)
    stop_at_start(monkeypatch, apply_changes)
    applying = parsed_by(land_and_apply.main, argv)
    assert (applying.ddl, applying.source, applying.run_id) == (DDL, "src", RUN_ID)
