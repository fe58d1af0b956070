from __future__ import annotations

import importlib
from importlib.metadata import entry_points

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
    assert out[-3] == str(
        sorted(
            [
                ("land", ["wait_for_resolved"]),
                ("wait_for_resolved", ["apply_changes"]),
                ("apply_changes", []),
            ]
        )
    )
    assert out[-1] == "[]"


def test_example_dags_declare_the_tables_their_demo_streams_write() -> None:
    from airflow.dag_processing.dagbag import DagBag

    from airflow_cdc.core.ddl import parse_tables
    from cdc_demo import dsql_stream

    bag = DagBag(str(REPO / "dags_examples"))
    expected = {
        ("dsql_to_delta", "apply_changes"): {("public", t) for t in dsql_stream.TABLES},
        ("kafka_to_delta", "apply_changes"): {("shop", "items")},
        ("cdc_maintenance", "maintain_dsql"): {("public", t) for t in dsql_stream.TABLES},
        ("cdc_maintenance", "maintain_kafka"): {("shop", "items")},
        ("cdc_replay_quarantine", "replay_dsql"): {("public", t) for t in dsql_stream.TABLES},
        ("cdc_replay_quarantine", "replay_kafka"): {("shop", "items")},
    }
    for (dag_id, task_id), tables in expected.items():
        ddl = bag.dags[dag_id].get_task(task_id).ddl
        assert {(s.table.schema, s.table.name) for s in parse_tables(ddl)} == tables
