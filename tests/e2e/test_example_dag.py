"""The example DAG, run with dag.test() against kinesis-local and a temporary warehouse."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from airflow_cdc.assets import location_uri
from airflow_cdc.cuts import published_cut
from cdc_demo import kinesis
from cdc_demo.dsql_stream import TABLES, differences, generate
from cdc_demo.environment import airflow_env
from tests.conftest import REPO
from tests.spark.pipeline import live_rows

pytestmark = [pytest.mark.slow, pytest.mark.spark]
INTERVAL_START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
# The run for the hour the stream was committed in: its data interval ends here.
INTERVAL_END = INTERVAL_START + dt.timedelta(hours=1)


def _table_state(spark: Any, warehouse: str, table: str) -> list[tuple[Any, ...]]:
    frame = spark.read.format("delta").load(f"{warehouse}/public/{table}")
    return sorted(tuple(str(v) for v in row) for row in frame.collect())


def _ledger(spark: Any, warehouse: str) -> dict[str | None, int]:
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'record'")
    from spark_jobs.ledger import current_status

    entries = spark.read.format("delta").load(f"{warehouse}/_cdc/ledger")
    ledger = current_status(entries).select("record_id", "status")
    return {
        r["status"]: r["count"]
        for r in raw.join(ledger, "record_id", "left").groupBy("status").count().collect()
    }


def _asset_extras(uri: str) -> list[dict[str, Any]]:
    """The extras of the asset events that Airflow recorded for ``uri``, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = (
            select(AssetEvent.extra)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.uri == uri)
            .order_by(AssetEvent.id)
        )
        return [dict(extra) for extra in session.scalars(query)]


def test_example_dag_lands_and_applies_the_stream_idempotently(
    airflow_db: str,
    kinesis_endpoint: str,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    stream = generate(
        500, seed=5, start_ns=int(INTERVAL_START.timestamp()) * 10**9, span_ns=50 * 60 * 10**9
    )
    client = kinesis.client(kinesis_endpoint)
    kinesis.create_stream(client, "e2e-dsql", shards=3)
    kinesis.put(client, "e2e-dsql", stream.deliveries)
    warehouse = str(tmp_path / "warehouse")
    env = airflow_env(Path(airflow_db), Path(warehouse), kinesis_endpoint, stream="e2e-dsql")
    for key in (
        "AIRFLOW_CONN_SPARK_DEFAULT",
        "AIRFLOW_CONN_KINESIS_DEFAULT",
        "AIRFLOW_VAR_CDC_WAREHOUSE",
        "AIRFLOW_VAR_CDC_STREAM",
    ):
        monkeypatch.setenv(key, env[key])

    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(str(REPO / "dags_examples")).dags["dsql_to_delta"]
    caplog.set_level("INFO")
    first = dag.test(logical_date=INTERVAL_END)
    assert first.state == "success"
    # A healthy run's logs (the tasks' and the jobs' own, through spark-submit) carry no
    # stack trace and no Ivy resolution report.
    out, err = capfd.readouterr()
    logged = "\n".join([caplog.text, out, err])
    assert "public.customers: " in logged and " inserted, " in logged  # the per-table lines
    for noise in ("Traceback", "Exception", ":: resolving dependencies", ":: retrieving ::"):
        assert noise not in logged, [line for line in logged.splitlines() if noise in line][:5]
    for table in TABLES:
        assert differences(stream, table, live_rows(spark, warehouse, table)) == []
    ledger = _ledger(spark, warehouse)
    assert None not in ledger  # every landed record has a final state
    assert sum(ledger.values()) == len(stream.deliveries)
    before = {t: _table_state(spark, warehouse, t) for t in TABLES}

    # The run published its cut at the interval's end, naming the tables' versions.
    cut = published_cut(warehouse, "e2e-dsql")
    assert cut is not None and cut.at == INTERVAL_END
    assert cut.heuristic is True
    for table in TABLES:
        where = cut.tables[f"public.{table}"]
        history = spark.sql(f"DESCRIBE HISTORY delta.`{where['location']}`")
        assert where["version"] == history.agg({"version": "max"}).first()[0]

    # The customers' history: one version per change, and its open versions are the table.
    versions = spark.read.format("delta").load(f"{warehouse}/public/customers__history")
    current = versions.where("__end_at IS NULL AND NOT _cdc_deleted").drop(
        "__start_at", "__end_at", "_cdc_set_columns"
    )
    assert differences(stream, "customers", [r.asDict() for r in current.collect()]) == []
    assert "public.customers__history" in cut.tables
    versions_before = _table_state(spark, warehouse, "customers__history")

    # The apply task's asset events: one per table, naming the table's version in the cut.
    events = {
        t: _asset_extras(location_uri(f"{warehouse}/public/{t}"))
        for t in [*TABLES, "customers__history"]
    }
    for table, extras in events.items():
        assert len(extras) == 1
        assert extras[0]["source"] == "e2e-dsql" and extras[0]["cut_at"] == cut.at.isoformat()
        assert extras[0]["version"] == cut.tables[f"public.{table}"]["version"]
    assert events["customers"][0]["counts"]["applied"] > 0
    assert events["customers__history"][0]["history"]["versions"] > 0

    second = dag.test(logical_date=INTERVAL_END)
    assert second.state == "success"
    assert {t: _table_state(spark, warehouse, t) for t in TABLES} == before
    assert _table_state(spark, warehouse, "customers__history") == versions_before
    assert _ledger(spark, warehouse) == ledger
    assert published_cut(warehouse, "e2e-dsql") == cut  # the backfill published nothing new
    again = _asset_extras(location_uri(f"{warehouse}/public/customers"))
    assert [e["version"] for e in again] == [events["customers"][0]["version"]] * 2
