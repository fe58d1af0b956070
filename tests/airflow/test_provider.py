from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

import airflow_cdc
from tests.conftest import REPO


def test_provider_entry_point_is_registered() -> None:
    (entry,) = [
        e
        for e in entry_points(group="apache_airflow_provider")
        if e.value.startswith("airflow_cdc")
    ]
    assert entry.load() is airflow_cdc.get_provider_info


def test_provider_info_names_importable_modules() -> None:
    info = airflow_cdc.get_provider_info()
    modules = [
        m
        for kind in ("operators", "sensors", "triggers", "hooks")
        for group in info[kind]
        for m in group["python-modules"]
    ]
    for module in modules:
        importlib.import_module(module)
    types = info["connection-types"]
    assert {c["connection-type"] for c in types} == {"cdc_kinesis", "cdc_kafka"}
    for conn in types:
        module, _, name = conn["hook-class-name"].rpartition(".")
        hook = getattr(importlib.import_module(module), name)
        assert hook.conn_type == conn["connection-type"]
        form = hook.get_ui_field_behaviour()
        assert form["placeholders"]["host"] and form["relabeling"]["host"]
    for link in info["extra-links"]:
        module, _, name = link.rpartition(".")
        assert getattr(importlib.import_module(module), name)().name


def test_example_dag_parses_without_spark_or_boto3() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from airflow.dag_processing.dagbag import DagBag;"
        "bag = DagBag('dags_examples');"
        "assert not bag.import_errors, bag.import_errors;"
        "dag = bag.dags['dsql_to_delta'];"
        "print(sorted((t.task_id, sorted(t.downstream_task_ids)) for t in dag.tasks));"
        "print(sorted((t.task_id, t.job) for t in bag.dags['cdc_maintenance'].tasks));"
        "print(sorted(m for m in ('pyspark', 'delta', 'boto3') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[-2] == str([("maintain_dsql", "maintain"), ("maintain_kafka", "maintain")])
    assert out[-3] == str([("land_and_apply", [])])
    assert out[-1] == "[]"


def test_example_dags_declare_the_tables_their_demo_streams_write() -> None:
    from airflow.dag_processing.dagbag import DagBag

    from airflow_cdc.core.ddl import parse_tables
    from cdc_demo import dsql_stream

    bag = DagBag(str(REPO / "dags_examples"))
    expected = {
        ("dsql_to_delta", "land_and_apply"): {("public", t) for t in dsql_stream.TABLES},
        ("kafka_to_delta", "apply_changes"): {("shop", "items")},
        ("cdc_maintenance", "maintain_dsql"): {("public", t) for t in dsql_stream.TABLES},
        ("cdc_maintenance", "maintain_kafka"): {("shop", "items")},
        ("cdc_replay_quarantine", "replay_dsql"): {("public", t) for t in dsql_stream.TABLES},
        ("cdc_replay_quarantine", "replay_kafka"): {("shop", "items")},
    }
    for (dag_id, task_id), tables in expected.items():
        ddl = bag.dags[dag_id].get_task(task_id).ddl
        assert {(s.table.schema, s.table.name) for s in parse_tables(ddl)} == tables


def test_extra_links_name_the_table_a_standalone_master_and_the_application(
    monkeypatch: Any,
) -> None:
    import json

    from airflow_cdc.links import DeltaTableLink, SparkApplicationLink, SparkMasterLink
    from airflow_cdc.operators.apply import ApplyChangesOperator

    ddl = "CREATE TABLE shop.orders (id bigint PRIMARY KEY); CREATE TABLE t (id int PRIMARY KEY)"
    op = ApplyChangesOperator(
        task_id="a", warehouse="s3a://lake/wh", source="s", ddl=ddl, spark_conn_id="cluster"
    )
    assert {type(link) for link in op.operator_extra_links} == {
        DeltaTableLink,
        SparkMasterLink,
        SparkApplicationLink,
    }
    assert DeltaTableLink().get_link(op, ti_key=None) == "s3://lake/wh/shop/orders"
    cluster = {"conn_type": "spark", "host": "spark://10.0.0.5", "port": 7077}
    monkeypatch.setenv("AIRFLOW_CONN_CLUSTER", json.dumps(cluster))
    assert SparkMasterLink().get_link(op, ti_key=None) == "http://10.0.0.5:8080"
    assert SparkApplicationLink().get_link(op, ti_key=None) == ""  # not run yet
    op.run_stats = {"application_id": "app-20260101010000-0007", "landed": 3}
    assert (
        SparkApplicationLink().get_link(op, ti_key=None)
        == "http://10.0.0.5:8080/app/?appId=app-20260101010000-0007"
    )
    # A master whose UI listens elsewhere is named by the connection.
    ui = {**cluster, "extra": {"master-ui": "https://spark.example.com/ui/"}}
    monkeypatch.setenv("AIRFLOW_CONN_CLUSTER", json.dumps(ui))
    assert SparkMasterLink().get_link(op, ti_key=None) == "https://spark.example.com/ui"
    assert (
        SparkApplicationLink()
        .get_link(op, ti_key=None)
        .startswith("https://spark.example.com/ui/app/?appId=app-")
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_CLUSTER", json.dumps({"conn_type": "spark", "host": "local[2]"})
    )
    assert SparkMasterLink().get_link(op, ti_key=None) == ""
    assert SparkApplicationLink().get_link(op, ti_key=None) == ""  # local-...: no UI of its own
    op.warehouse = "wh"  # a relative warehouse (refused at submission) shows none either
    assert DeltaTableLink().get_link(op, ti_key=None) == ""
    op.ddl = "CREATE TABLE"  # a broken DDL shows no link, not a failed task page
    assert DeltaTableLink().get_link(op, ti_key=None) == ""


def test_the_cdc_config_section_gives_the_operators_defaults(monkeypatch: Any) -> None:
    from airflow_cdc.operators.land import LandKafkaOperator, LandKinesisOperator
    from airflow_cdc.operators.maintain import CdcMaintenanceOperator
    from airflow_cdc.settings import OPTIONS

    options = airflow_cdc.get_provider_info()["config"]["cdc"]["options"]
    assert set(options) == set(OPTIONS)
    for name, option in options.items():
        assert option["type"] in ("float", "integer") and option["description"]
        assert float(option["default"]) == OPTIONS[name].default

    ddl = "CREATE TABLE t (id int PRIMARY KEY)"
    assert LandKinesisOperator(task_id="k", warehouse="/wh", stream="s").lateness_seconds == 300
    monkeypatch.setenv("AIRFLOW__CDC__LATENESS_SECONDS", "60")
    monkeypatch.setenv("AIRFLOW__CDC__MAX_RECORDS_PER_SHARD", "5000")
    monkeypatch.setenv("AIRFLOW__CDC__RAW_RETENTION_SECONDS", "3600")
    kinesis = LandKinesisOperator(task_id="k", warehouse="/wh", stream="s")
    assert (kinesis.lateness_seconds, kinesis.max_records_per_shard) == (60, 5000)
    kafka = LandKafkaOperator(task_id="f", warehouse="/wh", topics=["t"], lateness_seconds=5)
    assert (kafka.lateness_seconds, kafka.max_records_per_partition) == (5, 5000)  # given wins
    kept = CdcMaintenanceOperator(task_id="m", warehouse="/wh", source="s", ddl=ddl)
    assert "--raw-retention-seconds=3600.0" in kept.job_args({})
    assert kept.vacuum_retention_hours == 168
