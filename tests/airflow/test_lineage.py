"""OpenLineage: the operators' datasets and facets, the events a real transport receives, and
the parent job information the spark-submit carries."""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.io.assets.file import convert_asset_to_openlineage

from airflow_cdc import lineage
from airflow_cdc.operators import base
from airflow_cdc.operators.apply import ApplyChangesOperator, ReplayQuarantineOperator
from airflow_cdc.operators.land import LandFilesOperator, LandKafkaOperator, LandKinesisOperator
from airflow_cdc.submit import SubmitSpec
from tests.airflow.submits import argument, fake_submit

DDL = (
    "CREATE TABLE orders (id bigint PRIMARY KEY, total numeric(12,2), note text);"
    " CREATE TABLE sales.items (sku text PRIMARY KEY, qty int)"
)
ORDERS_SCHEMA = [
    {"name": "id", "type": "BIGINT"},
    {"name": "total", "type": "DECIMAL(12,2)"},
    {"name": "note", "type": "STRING"},
]
PARENT_KEYS = {
    "spark.openlineage.parentJobNamespace",
    "spark.openlineage.parentJobName",
    "spark.openlineage.parentRunId",
    "spark.openlineage.rootParentRunId",
    "spark.openlineage.rootParentJobName",
    "spark.openlineage.rootParentJobNamespace",
}


def names(datasets: list[Any]) -> list[tuple[str, str]]:
    return [(d.namespace, d.name) for d in datasets]


@pytest.fixture
def kinesis_conn(monkeypatch: pytest.MonkeyPatch) -> str:
    conn = {"conn_type": "cdc_kinesis", "extra": {"region_name": "eu-west-1"}}
    monkeypatch.setenv("AIRFLOW_CONN_KIN", json.dumps(conn))
    return "kin"


@pytest.fixture
def events_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """OpenLineage on, with the client's file transport writing one event per line."""
    events = tmp_path / "openlineage.jsonl"
    transport = {"type": "file", "log_file_path": str(events), "append": True}
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps(transport))
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO", "True")
    # Emit in a thread of the task's process, not a fork of the test run.
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD", "True")
    return events


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[SubmitSpec]]:
    """spark-submit replaced: the specs the operators built, each run's stats file written
    as the job would (the apply run committed version 7 of ``public.orders``)."""

    def counts(operator: base.SparkJobOperator, spec: SubmitSpec) -> dict[str, Any]:
        args = spec.application_args
        stats: dict[str, Any] = {
            "job": operator.job,
            "batch_id": argument(args, "--batch-id"),
        }
        if operator.job == "apply_changes":
            stats["tables"] = {"public.orders": {"applied": 2, "version": 7}}
        else:  # a landing that reaches past any interval's end at once
            stats["resolved_ts"] = "2100-01-01T00:00:00+00:00"
        return stats

    specs = fake_submit(monkeypatch, counts)
    yield specs


def test_table_datasets_are_named_as_their_assets_are_converted(tmp_path: Path) -> None:
    op = ApplyChangesOperator(
        task_id="apply", warehouse=str(tmp_path / "wh"), source="s", ddl=DDL, history=["orders"]
    )
    converted = {
        (d.namespace, d.name)
        for d in (convert_asset_to_openlineage(a, None) for a in op.table_assets.values())
    }
    outputs = names(op.get_openlineage_facets_on_complete(None).outputs)
    assert set(outputs[:3]) == converted
    assert outputs[:3] == [
        ("file", f"{tmp_path}/wh/public/orders"),
        ("file", f"{tmp_path}/wh/sales/items"),
        ("file", f"{tmp_path}/wh/public/orders__history"),
    ]


def test_s3a_warehouses_are_named_by_bucket_and_key() -> None:
    assert lineage.location_name("s3a://lake/wh/public/orders") == ("s3://lake", "wh/public/orders")
    op = LandFilesOperator(
        task_id="l", warehouse="s3a://lake/wh", path="s3a://in/d/*.ndjson", source="s"
    )
    facets = op.get_openlineage_facets_on_complete(None)
    assert names(facets.inputs) == [("s3://in", "d")]
    assert names(facets.outputs) == [("s3://lake", "wh/_cdc/raw")]


def test_a_relative_landing_path_is_refused_and_names_no_dataset() -> None:
    """The driver would read a relative path under its own working directory."""
    from airflow_cdc.operators.land import FilesLanding

    op = LandFilesOperator(task_id="l", warehouse="/wh", path="in/*.ndjson", source="s")
    assert op.get_openlineage_facets_on_complete(None).inputs == []
    with pytest.raises(ValueError, match="path must be an absolute path or a URI"):
        FilesLanding(path="in/*.ndjson").job_args()


def test_apply_lineage_reads_the_bookkeeping_and_writes_tables_with_their_schema() -> None:
    op = ApplyChangesOperator(task_id="apply", warehouse="/wh", source="s", ddl=DDL)
    facets = op.get_openlineage_facets_on_complete(None)
    assert names(facets.inputs) == [
        ("file", "/wh/_cdc/raw"),
        ("file", "/wh/_cdc/ledger"),
        ("file", "/wh/_cdc/pending"),
    ]
    assert names(facets.outputs) == [
        ("file", "/wh/public/orders"),
        ("file", "/wh/sales/items"),
        ("file", "/wh/_cdc/ledger"),
        ("file", "/wh/_cdc/quarantine"),
        ("file", "/wh/_cdc/pending"),
    ]
    orders = facets.outputs[0].facets
    assert [{"name": f.name, "type": f.type} for f in orders["schema"].fields] == ORDERS_SCHEMA
    assert "version" not in orders  # known only after a run
    assert not facets.outputs[2].facets


def test_cut_transactions_and_replay_read_their_state() -> None:
    cut = ApplyChangesOperator(
        task_id="a", warehouse="/wh", source="s", ddl=DDL, consistent_cut=True, transactions=True
    ).get_openlineage_facets_on_complete(None)
    assert [n for _, n in names(cut.inputs)] == [
        f"/wh/_cdc/{t}" for t in ("raw", "ledger", "pending", "held", "cuts", "transactions")
    ]
    assert [n for _, n in names(cut.outputs)][2:] == [
        f"/wh/_cdc/{t}" for t in ("ledger", "quarantine", "pending", "held", "cuts", "transactions")
    ]
    replay = ReplayQuarantineOperator(task_id="r", warehouse="/wh", source="s", ddl=DDL)
    assert ("file", "/wh/_cdc/quarantine") in names(
        replay.get_openlineage_facets_on_complete(None).inputs
    )


def test_sources_are_named_by_openlineage_conventions(kinesis_conn: str, monkeypatch) -> None:
    kinesis = LandKinesisOperator(
        task_id="k", warehouse="/wh", stream="orders", kinesis_conn_id=kinesis_conn
    )
    assert names(kinesis.get_openlineage_facets_on_start().inputs) == [
        ("kinesis://eu-west-1", "orders")
    ]
    monkeypatch.setenv(
        "AIRFLOW_CONN_LOCAL_KIN",
        json.dumps({"conn_type": "cdc_kinesis", "host": "http://127.0.0.1:4568"}),
    )
    kinesis.kinesis_conn_id = "local_kin"
    assert names(kinesis.get_openlineage_facets_on_complete(None).inputs) == [
        ("kinesis://127.0.0.1:4568", "orders")
    ]
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_TEST",
        json.dumps({"conn_type": "cdc_kafka", "host": "b1:9092,b2:9092"}),
    )
    kafka = LandKafkaOperator(
        task_id="f", warehouse="/wh", topics=["a", "b"], kafka_conn_id="kafka_test"
    )
    facets = kafka.get_openlineage_facets_on_complete(None)
    assert names(facets.inputs) == [("kafka://b1:9092", "a"), ("kafka://b1:9092", "b")]
    assert names(facets.outputs) == [("file", "/wh/_cdc/raw")]


DAG_FILE = """
import datetime as dt

from airflow.sdk import DAG

from airflow_cdc.operators.apply import ApplyChangesOperator
from airflow_cdc.operators.land import LandKinesisOperator

with DAG("cdc_lineage", schedule="@hourly", start_date=dt.datetime(2026, 1, 1)) as dag:
    land = LandKinesisOperator(
        task_id="land", warehouse=WAREHOUSE, stream="orders", kinesis_conn_id="kin"
    )
    apply = ApplyChangesOperator(task_id="apply", warehouse=WAREHOUSE, source="orders", ddl=DDL)
    land >> apply
"""


def run_dag_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warehouse: str) -> None:
    """Run the DAG of :data:`DAG_FILE` with ``dag.test()`` (in this process: the task runner
    calls the listeners), the OpenLineage provider's listener registered."""
    from airflow.providers.openlineage.plugins.listener import OpenLineageListener
    from airflow.sdk.listener import get_listener_manager

    folder = tmp_path / "dags"
    folder.mkdir()
    source = f"WAREHOUSE = {warehouse!r}\nDDL = {DDL!r}\n{DAG_FILE}"
    (folder / "cdc_lineage.py").write_text(source)
    bundle = {
        "name": "lineage-tests",
        "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
        "kwargs": {"path": str(folder), "refresh_interval": 0},
    }
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps([bundle]))
    namespace: dict[str, Any] = {}
    exec(compile(source, str(folder / "cdc_lineage.py"), "exec"), namespace)
    listener = OpenLineageListener()
    manager = get_listener_manager()
    manager.add_listener(listener)
    try:
        namespace["dag"].test(logical_date=dt.datetime(2026, 1, 1, 1, tzinfo=dt.UTC))
    finally:
        manager.pm.unregister(listener)


def read_events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_events_of_a_run_carry_datasets_and_link_the_spark_job(
    airflow_db: str,
    events_file: Path,
    submitted: list[SubmitSpec],
    kinesis_conn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    warehouse = str(tmp_path / "wh")
    run_dag_file(tmp_path, monkeypatch, warehouse)

    events = read_events(events_file)
    complete = {
        e["job"]["name"]: e
        for e in events
        if e["eventType"] == "COMPLETE" and e["job"]["name"].startswith("cdc_lineage.")
    }
    assert set(complete) == {"cdc_lineage.land", "cdc_lineage.apply"}
    landed = complete["cdc_lineage.land"]
    assert [(d["namespace"], d["name"]) for d in landed["inputs"]] == [
        ("kinesis://eu-west-1", "orders")
    ]
    assert [(d["namespace"], d["name"]) for d in landed["outputs"]] == [
        ("file", f"{warehouse}/_cdc/raw")
    ]
    applied = complete["cdc_lineage.apply"]
    orders = applied["outputs"][0]
    assert (orders["namespace"], orders["name"]) == ("file", f"{warehouse}/public/orders")
    assert [{k: f[k] for k in ("name", "type")} for f in orders["facets"]["schema"]["fields"]] == (
        ORDERS_SCHEMA
    )
    assert orders["facets"]["version"]["datasetVersion"] == "7"
    assert "version" not in applied["outputs"][1]["facets"]  # the run committed no items

    for event, spec in zip((landed, applied), submitted, strict=True):
        parent = event["run"]["facets"]["parent"]
        assert parent["job"]["name"] == "cdc_lineage"
        assert set(spec.conf) >= PARENT_KEYS
        assert spec.conf["spark.openlineage.parentJobNamespace"] == event["job"]["namespace"]
        assert spec.conf["spark.openlineage.parentJobName"] == event["job"]["name"]
        assert spec.conf["spark.openlineage.parentRunId"] == event["run"]["runId"]
        assert spec.conf["spark.openlineage.rootParentRunId"] == parent["run"]["runId"]
        assert spec.conf["spark.openlineage.rootParentJobName"] == "cdc_lineage"


def files_landing(**kwargs: Any) -> LandFilesOperator:
    """A landing of batch ``b1`` whose resolved timestamp needs to reach no later time."""
    return LandFilesOperator(
        task_id="l",
        warehouse="/wh",
        path="/in",
        source="s",
        batch_id="b1",
        resolved_target="2026-01-01T01:00:00+00:00",
        **kwargs,
    )


def test_the_users_own_parent_job_properties_are_kept(
    events_file: Path, submitted: list[SubmitSpec]
) -> None:
    mine = {"spark.openlineage.parentJobName": "mine", "spark.openlineage.parentRunId": "r1"}
    op = files_landing(spark_conf=mine)
    op.execute({"run_id": "r"})  # type: ignore[arg-type]
    lineage_conf = {k: v for k, v in submitted[0].conf.items() if "openlineage" in k}
    assert lineage_conf == mine


@pytest.mark.parametrize("case", ["no transport", "disabled", "operator opts out", "no provider"])
def test_nothing_is_injected_without_openlineage(
    case: str, events_file: Path, submitted: list[SubmitSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spark-submit conf is the operator's own unless OpenLineage is installed, enabled,
    has a transport and is asked to inject (the context has no task instance: nothing may
    read it)."""
    opt_in: bool | None = None
    if case == "no transport":
        monkeypatch.delenv("AIRFLOW__OPENLINEAGE__TRANSPORT")
    elif case == "disabled":
        monkeypatch.setenv("AIRFLOW__OPENLINEAGE__DISABLED", "True")
    elif case == "operator opts out":
        opt_in = False
    else:
        monkeypatch.setitem(sys.modules, "airflow.providers.openlineage.utils.spark", None)
    op = files_landing(
        spark_conf={"spark.executor.cores": "2"},
        openlineage_inject_parent_job_info=opt_in,
        openlineage_inject_transport_info=opt_in,
    )
    op.execute({"run_id": "r"})  # type: ignore[arg-type]
    (spec,) = submitted
    assert spec.conf["spark.executor.cores"] == "2"
    assert not [k for k in spec.conf if k.startswith("spark.openlineage")]


def test_maintenance_reads_and_writes_the_tables_it_keeps() -> None:
    from airflow_cdc.operators.maintain import CdcMaintenanceOperator

    op = CdcMaintenanceOperator(
        task_id="m", warehouse="/wh", source="s", ddl="CREATE TABLE t (id int PRIMARY KEY)"
    )
    lineage = op.get_openlineage_facets_on_complete(None)
    names = [(d.namespace, d.name) for d in lineage.outputs]
    assert names[0] == ("file", "/wh/public/t")
    assert ("file", "/wh/_cdc/raw") in names and ("file", "/wh/_cdc/ledger") in names
    assert [(d.namespace, d.name) for d in lineage.inputs] == names


def test_maintenance_lineage_names_the_history_tables_it_compacted() -> None:
    """The job keeps a table's history table when one exists; its counts say which did."""
    from airflow_cdc.operators.maintain import CdcMaintenanceOperator

    ddl = "CREATE TABLE t (id int PRIMARY KEY); CREATE TABLE u (id int PRIMARY KEY)"
    op = CdcMaintenanceOperator(task_id="m", warehouse="/wh", source="s", ddl=ddl)
    before = [d.name for d in op.get_openlineage_facets_on_complete(None).outputs]
    assert not [n for n in before if n.endswith("__history")]
    op.run_stats = {"tables": {"public.t": {}, "public.t__history": {}, "public.u": {}}}
    after = [d.name for d in op.get_openlineage_facets_on_complete(None).outputs]
    assert after[:3] == ["/wh/public/t", "/wh/public/t__history", "/wh/public/u"]
