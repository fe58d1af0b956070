"""Hourly Kafka change stream (YDB, CockroachDB, Arcion, Huawei CDL or Debezium) to Delta Lake.

land -> wait_for_resolved -> apply_changes, one batch per data interval, as
in ``dsql_to_delta``; only the landing source and the record format differ. The landing lands
its batch again until its resolved timestamp passes the interval's end (for formats with
in-band resolved markers, ``ydb``, ``cockroachdb`` and ``cdl``, the changefeed's own), so that
the batch holds every change committed before it; the sensor then passes at once.

Settings are Airflow Variables (or ``AIRFLOW_VAR_*`` environment variables):
``cdc_warehouse`` (warehouse root), ``cdc_topic`` (Kafka topic), ``cdc_format`` (record
format). The tables are the example's ``shop.items``, declared in ``ddl/kafka_items.sql``.
Connections: ``kafka_default`` (type ``cdc_kafka``) and ``spark_default`` (type ``spark``).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from airflow.sdk import DAG, CronDataIntervalTimetable

from airflow_cdc.operators.apply import ApplyChangesOperator
from airflow_cdc.operators.land import LandKafkaOperator
from airflow_cdc.sensors.resolved import ResolvedTimestampSensor

# The target tables: CREATE TABLE statements in a file beside the DAG.
DDL = (Path(__file__).parent / "ddl" / "kafka_items.sql").read_text(encoding="utf-8")
WAREHOUSE = "{{ var.value.get('cdc_warehouse', '/tmp/airflow-cdc/warehouse') }}"
TOPIC = "{{ var.value.get('cdc_topic', 'items') }}"
FORMAT = "{{ var.value.get('cdc_format', 'cockroachdb') }}"

with DAG(
    dag_id="kafka_to_delta",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=4,
    default_args={"retries": 2, "retry_delay": dt.timedelta(minutes=1)},
    tags=["cdc", "kafka", "delta"],
    doc_md=__doc__,
) as dag:
    land = LandKafkaOperator(
        task_id="land",
        topics=[TOPIC],
        source=TOPIC,
        record_format=FORMAT,
        warehouse=WAREHOUSE,
        lateness_seconds=300,
    )
    wait_for_resolved = ResolvedTimestampSensor(
        task_id="wait_for_resolved",
        warehouse=WAREHOUSE,
        source=TOPIC,
        poke_interval=60,
        timeout=6 * 3600,
    )
    # One batch at a time per source: runs of one source share its open fragment sets.
    apply_changes = ApplyChangesOperator(
        task_id="apply_changes",
        warehouse=WAREHOUSE,
        source=TOPIC,
        ddl=DDL,
        record_format=FORMAT,
        max_pending_age_seconds=3600,
        # Apply exactly the changes committed before the interval's end and publish that
        # cut (each table's Delta version): every table as of the same point.
        consistent_cut=True,
        max_active_tis_per_dag=1,
    )

    land >> wait_for_resolved >> apply_changes
