"""A job run's start (its session and context) and its report (the run's counts, for XCom)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pyspark.sql import SparkSession

from airflow_cdc.core.exceptions import CdcError
from airflow_cdc.storage import configure_object_storage, scheme
from spark_jobs.delta_tables import partition_columns
from spark_jobs.files import exists, write_file
from spark_jobs.session import fit_to_size, get_session, set_commit_metadata
from spark_jobs.warehouse import JobContext, Warehouse


def start(job: str, version: str, args: argparse.Namespace) -> JobContext:
    """The run's context, once the warehouse is known not to be of jobs 1.x (every job
    fails there before any work, naming the migration step)."""
    spark = get_session(f"airflow-cdc-{job}")
    configure_object_storage(spark)
    fit_to_size(spark, None)  # Spark's defaults until the job knows its size
    source = getattr(args, "source", None)
    set_commit_metadata(
        spark,
        job=job,
        job_version=version,
        airflow_run_id=args.run_id,
        batch_id=args.batch_id,
        **({"source": source} if isinstance(source, str) else {}),
    )
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    check_file_system(args.warehouse, hadoop.get("fs.defaultFS"))
    if args.stats_file:  # the application, for the task's link, even if the run fails
        write_file(spark, args.stats_file, json.dumps(application(spark)))
    ctx = JobContext(spark, Warehouse(args.warehouse), args.batch_id, args.run_id, job, version)
    check_layout(ctx)
    return ctx


class WarehouseLocationError(CdcError):
    """The jobs would write the warehouse where the operators and sensors do not read it."""


def check_file_system(warehouse: str, default_fs: str | None) -> None:
    """Fail when ``warehouse`` is a plain path (``/wh``) and the cluster's default file system
    (``fs.defaultFS``) is not the local one: the jobs would write it there (``hdfs://nn/wh``)
    while the operators, sensors and triggers read ``/wh`` on their own machine."""
    # A warehouse passed check_location: a path from the root, or a URI naming its scheme.
    fs = (default_fs or "").rstrip("/")
    if not warehouse.startswith("/") or scheme(fs) in ("", "file"):
        return
    raise WarehouseLocationError(
        f"the warehouse {warehouse} is a plain path, and this cluster's default file system is"
        f" {default_fs}: the jobs would write {fs}{warehouse}, while the"
        f" operators and sensors read {warehouse} on their own machine. Name the file system"
        f" in the warehouse: {fs}{warehouse}, or file://{warehouse} on"
        " storage that every node and the Airflow workers mount."
    )


class WarehouseLayoutError(CdcError):
    """The warehouse was written by job versions before 2.0.0."""


def check_layout(ctx: JobContext) -> None:
    """Fail with the migration step when the warehouse has the 1.x layout."""
    wh = ctx.warehouse
    old = [
        p
        for p in (
            wh.path("_cdc", "changes"),
            wh.path("_cdc", "staged"),
            wh.path("_cdc", "fragments"),
        )
        if exists(ctx, p)
    ]
    raw_partitions = partition_columns(ctx.spark, wh.raw)
    if old or (raw_partitions and raw_partitions != ["source", "batch_id"]):
        found = ", ".join(old) or "a raw table partitioned by batch_id"
        raise WarehouseLayoutError(
            f"the warehouse {wh.root} was written by airflow-cdc jobs 1.x ({found}); jobs 2.0.0"
            " keep their bookkeeping per source"
            " and batch. Migration step: point the DAG at a new warehouse and land the sources"
            " again from their retention (the 1.x target tables stay readable where they are)."
        )


def application(spark: SparkSession) -> dict[str, str]:
    """The Spark application a run is (its page on a standalone master's web UI)."""
    return {"application_id": spark.sparkContext.applicationId}


def write_stats(path: str | None, stats: dict[str, Any]) -> None:
    """Print the run's counts and write them where the operator picks them up for XCom: a
    file in the warehouse (any Hadoop file system), so that it reaches the operator however
    far the driver runs from it."""
    spark = SparkSession.getActiveSession()
    if spark is not None:
        stats = {**application(spark), **stats}
    text = json.dumps(stats, sort_keys=True, default=str)
    print(f"airflow-cdc stats: {text}")
    if path:
        if spark is None:
            raise RuntimeError("the job's counts are written through its Spark session")
        write_file(spark, path, text)
