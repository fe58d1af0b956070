"""A job run's start (its session and context) and its report (the run's counts, for XCom)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pyspark.sql import SparkSession

from airflow_cdc.storage import configure_object_storage
from spark_jobs.files import write_file
from spark_jobs.session import fit_to_size, get_session, set_commit_metadata
from spark_jobs.warehouse import JobContext, Warehouse


def start(job: str, version: str, args: argparse.Namespace) -> JobContext:
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
    if args.stats_file:  # the application, for the task's link, even if the run fails
        write_file(spark, args.stats_file, json.dumps(application(spark)))
    return JobContext(spark, Warehouse(args.warehouse), args.batch_id, args.run_id, job, version)


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
