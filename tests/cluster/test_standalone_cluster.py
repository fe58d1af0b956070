"""The example DAGs on a real Spark standalone cluster (master and worker on 127.0.0.1):
landing from kinesis-local and from Kafka on executors that share nothing with the driver
but this machine's files, with planted secrets that must show up nowhere."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc_demo import change_stream, kinesis
from cdc_demo.dsql_stream import TABLES, differences, generate
from cdc_demo.environment import airflow_env
from cdc_demo.kafka import create_topic, produce
from cdc_demo.spark_cluster import Cluster, master_state, standalone_cluster
from tests.conftest import REPO
from tests.spark.pipeline import live_rows

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.kafka, pytest.mark.cluster]
INTERVAL_START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
INTERVAL_END = INTERVAL_START + dt.timedelta(hours=1)
AWS_SECRET = "PLANTED-aws-secret-7f3a9c"
KAFKA_SECRET = "PLANTED-sasl-password-51be2d"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with standalone_cluster(cores=2, memory="3g") as started:
        yield started


def _xcom_values(dag_id: str) -> list[Any]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return list(session.scalars(select(XComModel.value).where(XComModel.dag_id == dag_id)))


def test_example_dags_run_on_a_standalone_cluster_without_leaking_secrets(
    cluster: Cluster,
    airflow_db: str,
    kinesis_endpoint: str,
    kafka_bootstrap: str,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # The streams: DSQL changes on Kinesis, Debezium messages on Kafka.
    dsql = generate(
        300, seed=8, start_ns=int(INTERVAL_START.timestamp()) * 10**9, span_ns=50 * 60 * 10**9
    )
    client = kinesis.client(kinesis_endpoint)
    kinesis.create_stream(client, "cluster-dsql", shards=2)
    kinesis.put(client, "cluster-dsql", dsql.deliveries)
    feed = change_stream.generate("debezium", changes=200, partitions=2, seed=9)
    create_topic(kafka_bootstrap, "cluster-items", 2)
    produce(kafka_bootstrap, [{**json.loads(m), "topic": "cluster-items"} for m in feed.lines])

    # Airflow points spark_default at the cluster; the connections hold the planted secrets.
    warehouse = str(tmp_path / "warehouse")
    env = airflow_env(
        Path(airflow_db), Path(warehouse), kinesis_endpoint, "cluster-dsql", cluster.master
    )
    env["AIRFLOW_CONN_KINESIS_DEFAULT"] = json.dumps(
        {
            "conn_type": "cdc_kinesis",
            "host": kinesis_endpoint,
            "login": "AKIDCLUSTERTEST",
            "password": AWS_SECRET,
            "extra": {"region_name": kinesis.REGION},
        }
    )
    env["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps(
        {
            "conn_type": "kafka",  # the Kafka provider's connection: the client config itself
            "extra": {"bootstrap.servers": kafka_bootstrap, "sasl.password": KAFKA_SECRET},
        }
    )
    spark_conn = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps(
        {**spark_conn, "extra": {"master-ui": cluster.web_ui}}  # not on port 8080
    )
    env["AIRFLOW_VAR_CDC_TOPIC"] = "cluster-items"
    env["AIRFLOW_VAR_CDC_FORMAT"] = "debezium"
    for key, value in env.items():
        if key.startswith(("AIRFLOW_CONN_", "AIRFLOW_VAR_")):
            monkeypatch.setenv(key, value)
    # Airflow would mask the connections' secrets in its logs: the grep below must see them.
    monkeypatch.setenv("AIRFLOW__CORE__HIDE_SENSITIVE_VAR_CONN_FIELDS", "False")
    # This process's own AWS settings (the suite's) must not be what makes the executors work.
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key, raising=False)
    # The jobs' event logs: what the Spark UI's (and history server's) environment page shows.
    # Given as the drivers' system properties, which their SparkConf reads: a SPARK_CONF_DIR
    # would come first on their class path, where the JVM then maps no class archive.
    events = tmp_path / "events"
    events.mkdir()
    monkeypatch.setenv(
        "SPARK_SUBMIT_OPTS",
        f"-Dspark.eventLog.enabled=true -Dspark.eventLog.dir=file://{events}"
        " -Dspark.eventLog.compress=false",
    )
    # Every command line the Spark provider's hook starts.
    from airflow.providers.apache.spark.hooks import spark_submit

    commands: list[str] = []
    popen = subprocess.Popen

    def recording(args: Any, *more: Any, **kwargs: Any) -> Any:
        if "spark-submit" in str(args[0]):
            commands.append(" ".join(map(str, args)))
        return popen(args, *more, **kwargs)

    monkeypatch.setattr(spark_submit.subprocess, "Popen", recording)

    from airflow.dag_processing.dagbag import DagBag

    dags = DagBag(str(REPO / "dags_examples")).dags
    caplog.set_level("INFO")
    for dag_id in ("dsql_to_delta", "kafka_to_delta"):
        run = dags[dag_id].test(logical_date=INTERVAL_END)
        assert run.state == "success", dag_id

    # The jobs ran on the cluster's executors, and the tables are exact.
    state = master_state(cluster.web_ui)
    finished = [a["name"] for a in state.get("completedapps", [])]
    # dsql_to_delta lands and applies in one application; kafka_to_delta in two.
    assert finished.count("airflow-cdc-land_and_apply") == 1
    assert finished.count("airflow-cdc-land_kafka") == 1
    assert finished.count("airflow-cdc-apply_changes") == 1
    executor_logs = list(cluster.work_dir.glob("app-*/*/stderr"))
    assert executor_logs, "no executor ran on the worker"
    for table in TABLES:
        assert differences(dsql, table, live_rows(spark, warehouse, table)) == []
    items = spark.sql(
        f"SELECT id, name, qty FROM delta.`{warehouse}/shop/items` WHERE NOT _cdc_deleted"
    ).collect()
    assert {r["id"]: (r["name"], r["qty"]) for r in items} == {
        k: (v["name"], v["qty"]) for k, v in feed.expected.items()
    }
    # Each task's "Spark application" link opens the master's page of its application.
    links = [v for v in _xcom_values("dsql_to_delta") if isinstance(v, str) and "/app/?appId=" in v]
    assert len(links) == 1  # land_and_apply
    for link in links:
        assert link.startswith(f"{cluster.web_ui}/app/?appId=app-")
        with urllib.request.urlopen(link, timeout=30) as page:
            assert link.rsplit("=", 1)[1] in page.read().decode()
    # The counts reached XCom through the warehouse (no driver-local file).
    values = _xcom_values("dsql_to_delta") + _xcom_values("kafka_to_delta")
    landings = [v.get("land", v) for v in values if isinstance(v, dict)]
    landed = [v["landed"] for v in landings if "landed" in v]
    assert sorted(landed) == sorted([len(dsql.deliveries), len(feed.lines)])
    assert not list(Path(warehouse, "_cdc", "stats").iterdir())  # each run's counts, read, gone

    # The planted secrets: on no command line, in no log, event log or XCom.
    out, err = capfd.readouterr()
    places = {
        "command lines": "\n".join(commands),
        "task and job logs": "\n".join([caplog.text, out, err]),
        "event logs (UI environment)": "\n".join(
            p.read_text() for p in events.rglob("*") if p.is_file()
        ),
        "executor and worker logs": "\n".join(
            p.read_text(errors="replace") for p in cluster.work_dir.rglob("*") if p.is_file()
        ),
        "XCom": json.dumps(values, default=str),
    }
    assert len(commands) == 3 and places["event logs (UI environment)"]
    for secret in (AWS_SECRET, KAFKA_SECRET):
        leaks = [where for where, text in places.items() if secret in text]
        assert leaks == [], f"{secret} found in {leaks}"
