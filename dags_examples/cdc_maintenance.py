"""Hourly maintenance of what ``dsql_to_delta`` and ``kafka_to_delta`` write.

One task per source: expire bookkeeping (raw records, quarantine and ledger rows of records
whose outcome has been final for seven days; quarantined records never replayed after thirty),
purge tombstones the resolved timestamp has passed by a day, compact small files (OPTIMIZE)
and VACUUM files older than seven days, in the source's target tables and its partitions of
the bookkeeping tables. Safe to run while the CDC DAGs run (a Delta
conflict is retried on both sides, never lost) and safe to backfill (each step is
idempotent: a second run finds nothing to do). What each run did (files before and after,
bytes rewritten, rows expired, tombstones purged, files vacuumed) is in the task log and its
XCom.

``cdc_replay_quarantine`` (no schedule: trigger it from the UI) runs the records quarantined
for a cause that the DDL or a limit fixes through the pipeline again, once the fix is
deployed in ``dags_examples/ddl`` (a table declared, a column type changed).

Settings are the CDC DAGs' Airflow Variables: ``cdc_warehouse``, ``cdc_stream``,
``cdc_topic``. Connection: ``spark_default`` (type ``spark``).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from airflow.sdk import DAG, CronDataIntervalTimetable, chain

from airflow_cdc.operators.apply import ReplayQuarantineOperator
from airflow_cdc.operators.maintain import CdcMaintenanceOperator

WAREHOUSE = "{{ var.value.get('cdc_warehouse', '/tmp/airflow-cdc/warehouse') }}"
DDL = Path(__file__).parent / "ddl"  # the CDC DAGs' table definitions
SOURCES = {
    "maintain_dsql": ("{{ var.value.get('cdc_stream', 'dsql-cdc') }}", DDL / "dsql_shop.sql"),
    "maintain_kafka": ("{{ var.value.get('cdc_topic', 'items') }}", DDL / "kafka_items.sql"),
}
FORMATS = {
    "maintain_dsql": "dsql",
    "maintain_kafka": "{{ var.value.get('cdc_format', 'cockroachdb') }}",
}
# The history tables the CDC DAGs keep (dsql_to_delta's customers): replayed changes enter
# them too.
HISTORY = {"maintain_dsql": ["public.customers"]}

with DAG(
    dag_id="cdc_maintenance",
    # Half past: away from the CDC DAGs' runs on the hour.
    schedule=CronDataIntervalTimetable("30 * * * *", timezone="UTC"),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": dt.timedelta(minutes=5)},
    tags=["cdc", "delta", "maintenance"],
    doc_md=__doc__,
) as dag:
    tasks = [
        CdcMaintenanceOperator(
            task_id=task_id,
            warehouse=WAREHOUSE,
            source=source,
            ddl=ddl.read_text(encoding="utf-8"),
            tombstone_retention_seconds=86400,
            vacuum_retention_hours=168,
            raw_retention_seconds=7 * 86400,
            quarantine_retention_seconds=30 * 86400,
        )
        for task_id, (source, ddl) in SOURCES.items()
    ]
    # One at a time: both VACUUM the warehouse's shared bookkeeping tables.
    chain(*tasks)


with DAG(
    dag_id="cdc_replay_quarantine",
    schedule=None,  # triggered from the UI once a fix is deployed
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    tags=["cdc", "delta", "quarantine"],
    doc_md=__doc__,
) as replay_dag:
    for task_id, (source, ddl) in SOURCES.items():
        ReplayQuarantineOperator(
            task_id=task_id.replace("maintain", "replay"),
            warehouse=WAREHOUSE,
            source=source,
            ddl=ddl.read_text(encoding="utf-8"),
            record_format=FORMATS[task_id],
            history=HISTORY.get(task_id, False),
        )
