"""Hourly Aurora DSQL (Kinesis) to Delta Lake.

One task per data interval, ``land_and_apply``: it lands the stream's new records, waits
until the stream's resolved timestamp passes the interval's end (landing again once the
landing's lateness has passed, and every minute after), then applies the batch: a
spark-submit or two per batch. (``kafka_to_delta`` shows the same work as three tasks:
land -> wait_for_resolved -> apply_changes.) The task processes the batch named by its
interval's end, so re-running an interval (a backfill from the UI or ``airflow backfill
create``) reprocesses the same batch and leaves the tables as they are: MERGE only moves a
row forward in commit order.

Settings: the ``AIRFLOW_VAR_CDC_WAREHOUSE`` environment variable (warehouse root, read when
the DAG is parsed: each table is an Airflow asset named by its location, which a downstream
DAG can be scheduled on, see ``customers_report.py``) and the Airflow Variable (or
``AIRFLOW_VAR_*`` environment variable) ``cdc_stream`` (Kinesis stream). Connections:
``kinesis_default`` (type ``cdc_kinesis``) and ``spark_default`` (type ``spark``).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from airflow.sdk import DAG, CronDataIntervalTimetable

from airflow_cdc.operators.apply import LandAndApplyOperator
from airflow_cdc.operators.land import KinesisLanding

# The target tables: CREATE TABLE statements in a file beside the DAG.
DDL = (Path(__file__).parent / "ddl" / "dsql_shop.sql").read_text(encoding="utf-8")
WAREHOUSE = os.environ.get("AIRFLOW_VAR_CDC_WAREHOUSE", "/tmp/airflow-cdc/warehouse")
STREAM = "{{ var.value.get('cdc_stream', 'dsql-cdc') }}"

with DAG(
    dag_id="dsql_to_delta",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=4,
    default_args={"retries": 2, "retry_delay": dt.timedelta(minutes=1)},
    tags=["cdc", "dsql", "delta"],
    doc_md=__doc__,
) as dag:
    # One batch at a time per source: runs of one source share its open fragment sets.
    LandAndApplyOperator(
        task_id="land_and_apply",
        land=KinesisLanding(stream=STREAM, lateness_seconds=300),
        poke_interval=60,
        timeout=6 * 3600,
        warehouse=WAREHOUSE,
        source=STREAM,
        ddl=DDL,
        max_pending_age_seconds=3600,
        # Apply exactly the changes committed before the interval's end and publish that
        # cut (each table's Delta version): every table as of the same point.
        consistent_cut=True,
        # Every version of each customer, open from its commit time until the next
        # (public/customers__history, SCD type 2).
        history=["public.customers"],
        max_active_tis_per_dag=1,
    )
