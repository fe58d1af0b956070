"""A downstream DAG that runs for each hour of the source's commit time once every table is
complete up to it: an ``AssetWatcher`` whose ``ResolvedBoundaryTrigger`` fires once each
time the consistent cut that ``dsql_to_delta`` publishes passes an hour boundary.

Unlike ``customers_report`` (one run per apply task), a run here stands for an hour of the
*source's* time, and each hour is announced once, even across triggerer restarts. The
trigger's asset event carries ``source``, ``boundary`` (the hour's end), ``interval_start``,
``resolved_ts`` and the ``cut``; a run that the scheduler starts for several events at once
(the trigger catching up) sees them all, oldest first. ``AIRFLOW_VAR_CDC_WAREHOUSE`` and
``AIRFLOW_VAR_CDC_STREAM`` must name the warehouse and the source of ``dsql_to_delta``.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_cdc.assets import location_uri
from airflow_cdc.cuts import read_cut
from airflow_cdc.jobs import published_cut_path
from airflow_cdc.triggers.boundary import ResolvedBoundaryTrigger

WAREHOUSE = os.environ.get("AIRFLOW_VAR_CDC_WAREHOUSE", "/tmp/airflow-cdc/warehouse")
SOURCE = os.environ.get("AIRFLOW_VAR_CDC_STREAM", "dsql-cdc")
HOURS = Asset(
    name=f"cdc/{SOURCE}/hours",
    uri=location_uri(published_cut_path(WAREHOUSE, SOURCE)),
    watchers=[
        AssetWatcher(
            name=f"{SOURCE}_hours",
            trigger=ResolvedBoundaryTrigger(
                warehouse=WAREHOUSE, source=SOURCE, published_cut=True, poll_interval=60
            ),
        )
    ],
)

with DAG(
    dag_id="customers_on_boundary",
    schedule=[HOURS],
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["cdc", "delta", "downstream"],
    doc_md=__doc__,
) as dag:

    @task
    def customers_per_hour(*, triggering_asset_events: Any = None) -> dict[str, int]:
        """Count the live customers as of each hour boundary the watcher announced: at the
        cut published at the boundary, else the oldest past it (the event's own cut)."""
        from spark_jobs.session import get_session

        spark = get_session("customers-on-boundary")
        counts = {}
        for event in triggering_asset_events[HOURS]:
            boundary = event.extra["payload"]["boundary"]
            # Every table as of one point: the cut the event carries, which holds every
            # change committed before the boundary (and, when no cut was published at it,
            # some of the next hour's).
            customers = read_cut(spark, WAREHOUSE, SOURCE, at=boundary)["public.customers"]
            counts[boundary] = customers.where("NOT _cdc_deleted").count()
            print(f"public.customers at {boundary}: {counts[boundary]} live rows")
        return counts

    customers_per_hour()
