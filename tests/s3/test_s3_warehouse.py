"""A warehouse on object storage: the jobs write ``s3a://`` through hadoop-aws to a real
S3-compatible server (S3Proxy), and the Airflow side reads it through fsspec (s3fs).

One spark-submit (the operators' conf from :func:`airflow_cdc.submit.job_spec`, plus
:func:`airflow_cdc.storage.s3a_spark_conf`) lands a generated DSQL dump into the bucket and
applies it with a consistent cut; the tests then check the target tables (read by delta-rs
from the bucket) against the generator's expected state, the sensor and its trigger on the
state files in the bucket, and that the secret key is nowhere it must not be: the command
line, the job's output, its counts (what the operator pushes to XCom), its Spark conf and
the Spark UI's environment page.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_cdc.jobs import library_archive, resolved_jars
from airflow_cdc.storage import (
    S3Settings,
    delta_rs_storage_options,
    fsspec_storage_options,
    fsspec_uri,
    s3a_spark_conf,
    spark_uri,
)
from airflow_cdc.submit import SubmitSpec, job_spec
from cdc_demo import free_port
from cdc_demo.dsql_stream import DDL, TABLES, Stream, differences, generate, write_ndjson
from cdc_demo.s3 import S3Server, create_bucket

SOURCE = "orders-dump"
BATCH = "2026-01-01T01:00:00+00:00"
COMMIT_START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
# The dump's records arrive from 00:55 on: the landing's resolved timestamp is just past it.
ARRIVAL_START = COMMIT_START + dt.timedelta(minutes=55)

# The Spark application: the two jobs' main() in one session (one JVM start instead of two),
# the session started as the jobs' own start() will (configure_object_storage), and what the
# Spark UI shows of its environment, read from its REST API while the session lives.
DRIVER = """\
import json, logging, sys, urllib.request
from pyspark.sql import SparkSession
from airflow_cdc.storage import configure_object_storage
from spark_jobs import apply_changes, land_files

logging.basicConfig(level=logging.INFO, stream=sys.stderr)
plan = json.loads(open(sys.argv[1], encoding="utf-8").read())
spark = SparkSession.builder.getOrCreate()
configured = configure_object_storage(spark)
land = land_files.main(plan["land"])
apply = apply_changes.main(plan["apply"])
sc = spark.sparkContext
sc._jsc.sc().postEnvironmentUpdate()  # the Hadoop configuration as the jobs left it
api = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/environment"
with urllib.request.urlopen(api, timeout=30) as response:
    environment = json.load(response)
report = {
    "configured": configured,
    "conf": sc.getConf().getAll(),
    "environment": environment,
    "land": land,
    "apply": apply,
}
open(plan["report"], "w", encoding="utf-8").write(json.dumps(report))
spark.stop()
"""


def spark_submit_command(spec: SubmitSpec, master: str) -> list[str]:
    """The spark-submit command of ``spec``, as the Spark provider's hook builds it."""
    command = [str(Path(sys.executable).parent / "spark-submit"), "--master", master]
    for key, value in spec.conf.items():
        command += ["--conf", f"{key}={value}"]
    command += ["--py-files", ",".join(spec.py_files), "--name", spec.name]
    return [*command, spec.application, *spec.application_args]


def _stream() -> Stream:
    return generate(
        400,
        seed=31,
        start_ns=int(COMMIT_START.timestamp()) * 10**9,
        span_ns=50 * 60 * 10**9,
        customers=60,
        orders=80,
    )


class Run:
    """One submitted run: what went in and what came out."""

    def __init__(
        self, server: S3Server, warehouse: str, stream: Stream, command: list[str]
    ) -> None:
        self.server = server
        self.warehouse = warehouse
        self.stream = stream
        self.command = command
        self.output = ""
        self.seconds = 0.0
        self.report: dict[str, Any] = {}


@pytest.fixture(scope="module")
def run(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """Land a generated DSQL dump into ``s3a://lake/warehouse`` and apply it, in one
    spark-submit whose environment alone carries the credentials."""
    work = tmp_path_factory.mktemp("s3-run")
    stream = _stream()
    arrival_us = int(ARRIVAL_START.timestamp() * 1_000_000)
    write_ndjson(stream.deliveries, str(work / "dump"), files=2, arrival_start_us=arrival_us)
    warehouse = f"{create_bucket(s3, 'lake')}/warehouse"

    conf = {
        **s3a_spark_conf(S3Settings(s3.endpoint_url, s3.region)),
        # Only the Hadoop configuration's keys: S3A may not read the environment itself, so
        # the run proves that the keys reached it as executors elsewhere would get them.
        "spark.hadoop.fs.s3a.aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        ),
        "spark.ui.enabled": "true",
        "spark.ui.port": str(free_port()),
        "spark.sql.shuffle.partitions": "4",
    }
    spec = job_spec(
        "apply_changes",
        warehouse=warehouse,
        batch_id=BATCH,
        run_id="s3-test",
        stats_file=str(work / "apply.json"),
        job_args=["--source", SOURCE, "--format", "dsql", "--ddl", DDL, "--cut-at", BATCH],
        library=str(library_archive()),
        jars=resolved_jars(),
        spark_conf=conf,
    )
    plan = {
        "land": [
            *("--warehouse", warehouse, "--batch-id", BATCH, "--run-id", "s3-test"),
            *("--stats-file", str(work / "land.json"), "--path", str(work / "dump")),
            *("--source", SOURCE, "--lateness-seconds", "0"),
        ],
        "apply": spec.application_args,
        "report": str(work / "report.json"),
    }
    (work / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    driver = work / "driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    spec = SubmitSpec(
        application=str(driver),
        application_args=[str(work / "plan.json")],
        conf=spec.conf,
        py_files=spec.py_files,
        name=spec.name,
    )
    command = spark_submit_command(spec, "local[2]")
    env = {
        **os.environ,
        **s3.environment(),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        # The UI on the loopback, where the test reads it.
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    env.pop("AWS_ENDPOINT_URL", None)
    started = time.perf_counter()
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    done = Run(s3, warehouse, stream, command)
    done.seconds = time.perf_counter() - started
    done.output = result.stdout + result.stderr
    (work / "spark-submit.log").write_text(done.output, encoding="utf-8")
    assert result.returncode == 0, done.output[-6000:]
    done.report = json.loads((work / "report.json").read_text(encoding="utf-8"))
    yield done


def _rows(location: str, options: dict[str, str], version: int | None = None) -> list[dict]:
    """The live rows of a target table, read by delta-rs (deletion vectors applied)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    table = DeltaTable(location, version=version, storage_options=options)
    rows = pa.RecordBatchReader.from_stream(table.scan()).read_all().to_pylist()
    for row in rows:
        # Arrow hands a map over as its (key, value) pairs.
        row["_cdc_special_values"] = dict(row["_cdc_special_values"] or [])
    return [row for row in rows if not row["_cdc_deleted"]]


@pytest.mark.slow
@pytest.mark.spark
def test_jobs_land_and_apply_into_an_s3a_warehouse(run: Run) -> None:
    land, apply = run.report["land"], run.report["apply"]
    assert land["landed"] == len(run.stream.deliveries)
    assert apply["accounting"]["landed"] == land["landed"]
    assert apply["accounting"]["unprocessed"] == 0
    # The job's start handed S3A the key and the secret (there is no session token here).
    assert run.report["configured"] == ["fs.s3a.access.key", "fs.s3a.secret.key"]
    options = delta_rs_storage_options(S3Settings(run.server.endpoint_url, run.server.region))
    options |= {
        "AWS_ACCESS_KEY_ID": run.server.access_key,
        "AWS_SECRET_ACCESS_KEY": run.server.secret_key,
    }
    for table in TABLES:
        live = _rows(f"{run.warehouse}/public/{table}", options)
        assert differences(run.stream, table, live) == []
        assert len(live) == len(run.stream.expected[table])
    print(f"spark-submit of land_files + apply_changes on S3: {run.seconds:.0f} s")


@pytest.mark.slow
@pytest.mark.spark
def test_the_sensor_reads_the_resolved_timestamp_and_the_cut_from_the_bucket(
    run: Run, s3_env: S3Server
) -> None:
    from airflow_cdc.core.resolved_state import read_state
    from airflow_cdc.cuts import published_cut
    from airflow_cdc.jobs import resolved_state_path
    from airflow_cdc.sensors.resolved import ResolvedTimestampSensor
    from airflow_cdc.triggers.resolved import ResolvedTimestampTrigger

    state = resolved_state_path(run.warehouse, SOURCE)
    assert state.startswith("s3a://lake/")
    resolved = read_state(state)
    assert resolved == dt.datetime.fromisoformat(run.report["land"]["resolved_ts"])
    assert resolved >= ARRIVAL_START

    def sensor(target: dt.datetime, wait_for: str = "resolved") -> ResolvedTimestampSensor:
        return ResolvedTimestampSensor(
            task_id=f"gate_{wait_for}",
            warehouse=run.warehouse,
            source=SOURCE,
            target=target.isoformat(),
            wait_for=wait_for,
        )

    landed = sensor(ARRIVAL_START).poke({})
    assert landed.is_done and landed.xcom_value == resolved.isoformat()  # type: ignore[union-attr]
    assert sensor(resolved + dt.timedelta(hours=1)).poke({}) is False
    assert read_state_missing(run.warehouse)

    cut = published_cut(run.warehouse, SOURCE)
    assert cut is not None and cut.at == resolved
    gate = sensor(ARRIVAL_START, "cut").poke({})
    assert gate.is_done and gate.xcom_value == cut.as_dict()  # type: ignore[union-attr]
    options = delta_rs_storage_options()
    for table, where in cut.tables.items():
        assert where["location"].startswith(f"{run.warehouse}/")
        live = _rows(where["location"], options, version=where["version"])
        assert differences(run.stream, table.split(".")[1], live) == []

    # The deferrable path: the trigger reads the same file off its event loop.
    trigger = ResolvedTimestampTrigger(
        state_path=state, target=ARRIVAL_START.isoformat(), poll_interval=1.0
    )
    event = asyncio.run(asyncio.wait_for(_first(trigger.run()), timeout=60))
    assert dt.datetime.fromisoformat(event.payload["resolved_ts"]) == resolved


def read_state_missing(warehouse: str) -> bool:
    """A source no run has landed has no resolved timestamp in the bucket (not an error)."""
    from airflow_cdc.core.exceptions import ResolvedTimestampUnavailable
    from airflow_cdc.core.resolved_state import read_state
    from airflow_cdc.jobs import resolved_state_path

    try:
        read_state(resolved_state_path(warehouse, "never-landed"))
    except ResolvedTimestampUnavailable:
        return True
    return False


async def _first(events: Any) -> Any:
    async for event in events:
        return event
    raise AssertionError("the trigger ended without an event")


@pytest.mark.slow
@pytest.mark.spark
def test_the_secret_key_is_nowhere_but_the_jobs_environment(run: Run) -> None:
    secret = run.server.secret_key
    assert secret not in " ".join(run.command)
    assert run.server.access_key not in " ".join(run.command)
    assert secret not in run.output
    # What the operators log and push to XCom.
    assert secret not in json.dumps(run.report["land"])
    assert secret not in json.dumps(run.report["apply"])
    # The Spark conf the job ran with, and the Spark UI's environment page (Spark conf,
    # Hadoop properties, system properties, class path) as its REST API serves it.
    assert secret not in json.dumps(run.report["conf"])
    environment = run.report["environment"]
    assert secret not in json.dumps(environment)
    hadoop = dict(environment["hadoopProperties"])
    assert hadoop["fs.s3a.secret.key"] == "*********(redacted)"
    assert hadoop["fs.s3a.access.key"] == "*********(redacted)"
    assert hadoop["fs.s3a.endpoint"] == run.server.endpoint_url


def test_s3_uris_map_between_hadoop_and_fsspec() -> None:
    assert fsspec_uri("s3a://lake/wh/_cdc/cut/orders.json") == "s3://lake/wh/_cdc/cut/orders.json"
    assert fsspec_uri("s3n://lake/wh") == "s3://lake/wh"
    assert fsspec_uri("/tmp/wh") == "/tmp/wh"
    assert fsspec_uri("gs://lake/wh") == "gs://lake/wh"
    assert spark_uri("s3://lake/wh") == "s3a://lake/wh"
    assert spark_uri("s3a://lake/wh") == "s3a://lake/wh"
    assert spark_uri("/tmp/wh") == "/tmp/wh"


def test_settings_come_from_the_aws_sdks_environment_names() -> None:
    env = {
        "AWS_ENDPOINT_URL": "http://general:1",
        "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_REGION": "eu-central-1",
    }
    assert S3Settings.from_env(env) == S3Settings("http://127.0.0.1:9000", "eu-central-1")
    assert S3Settings.from_env({"AWS_ENDPOINT_URL": "https://s3.example"}).endpoint_url == (
        "https://s3.example"
    )
    assert S3Settings.from_env({}) == S3Settings(None, "us-east-1")
    with pytest.raises(ValueError, match="endpoint_url must be an http"):
        S3Settings("127.0.0.1:9000")


def test_the_spark_conf_holds_the_endpoint_and_no_credentials() -> None:
    local = S3Settings("http://127.0.0.1:9000", "eu-west-1")
    assert s3a_spark_conf(local, jars=["/jars/hadoop-aws-3.5.0.jar", "/jars/s3-2.35.4.jar"]) == {
        "spark.jars": "/jars/hadoop-aws-3.5.0.jar,/jars/s3-2.35.4.jar",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    }
    # AWS itself: virtual-hosted buckets over TLS, S3A's defaults.
    assert s3a_spark_conf(S3Settings(region="eu-west-1"), jars=[]) == {
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1"
    }
    spec = job_spec(
        "land_files",
        warehouse="s3a://lake/wh",
        batch_id=BATCH,
        run_id="r",
        stats_file="/tmp/stats.json",
        library="/tmp/lib.zip",
        jars=["/jars/delta.jar"],
        spark_conf=s3a_spark_conf(local, jars=["/jars/hadoop-aws-3.5.0.jar"]),
    )
    # Delta's jars and hadoop-aws side by side.
    assert spec.conf["spark.jars"] == "/jars/delta.jar,/jars/hadoop-aws-3.5.0.jar"


def test_storage_options_for_fsspec_and_delta_rs() -> None:
    local = S3Settings("http://127.0.0.1:9000")
    assert fsspec_storage_options("/tmp/wh", local) == {}
    assert fsspec_storage_options("s3a://lake/wh", local) == {
        "endpoint_url": "http://127.0.0.1:9000",
        "client_kwargs": {"region_name": "us-east-1"},
    }
    env = {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "key"}
    assert delta_rs_storage_options(local, env) == {
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ALLOW_HTTP": "true",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_ACCESS_KEY_ID": "id",
        "AWS_SECRET_ACCESS_KEY": "key",
    }
    assert delta_rs_storage_options(S3Settings(region="eu-west-1"), {}) == {
        "AWS_REGION": "eu-west-1"
    }
