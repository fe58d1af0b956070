"""A downstream DAG scheduled on a CDC table: it runs each time ``dsql_to_delta`` commits
``public.customers`` and reads the table at the Delta version the asset event names.

The apply task's asset event for each table carries the source, the batch, the table's
counts (changes, applied, superseded, quarantined) and, with a consistent cut, the cut's
time and the table's version in it. Reading at that version sees the table as of the cut,
whatever ran since. ``AIRFLOW_VAR_CDC_WAREHOUSE`` must name the same warehouse as for
``dsql_to_delta`` (both read it when the DAG is parsed).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_cdc.assets import table_assets
from airflow_cdc.core.events import TableRef
from airflow_cdc.jobs import table_location

DDL = (Path(__file__).parent / "ddl" / "dsql_shop.sql").read_text(encoding="utf-8")
WAREHOUSE = os.environ.get("AIRFLOW_VAR_CDC_WAREHOUSE", "/tmp/airflow-cdc/warehouse")
CUSTOMERS = table_assets(WAREHOUSE, DDL)["public.customers"]

with DAG(
    dag_id="customers_report",
    schedule=[CUSTOMERS],
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["cdc", "delta", "downstream"],
    doc_md=__doc__,
) as dag:

    @task
    def report(*, triggering_asset_events: Any = None) -> dict[str, Any]:
        """Count the live customers at the version of the newest event."""
        event = triggering_asset_events[CUSTOMERS][-1]
        version = event.extra.get("version")
        from spark_jobs.session import get_session

        reader = get_session("customers-report").read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        location = table_location(WAREHOUSE, TableRef("public", "customers"))
        live = reader.load(location).where("NOT _cdc_deleted").count()
        print(f"public.customers at version {version} (cut {event.extra.get('cut_at')}): {live}")
        return {"version": version, "live": live, "counts": event.extra.get("counts")}

    report()
