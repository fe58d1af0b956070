"""The Spark session every job (and the test suite) runs on, with Delta Lake enabled."""

from __future__ import annotations

import argparse
import json
import os
import sys
from urllib.parse import unquote, urlparse

from pyspark.sql import SparkSession

from airflow_cdc.jobs import delta_spark_conf, resolved_jars, write_jars_manifest

COMMIT_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"


def get_session(
    app_name: str = "airflow-cdc", master: str | None = None, resolve: bool = False
) -> SparkSession:
    """The active session, or a new one with Delta configured.

    Under ``spark-submit`` the submitted conf wins; locally, ``master`` defaults to
    ``local[*]``. Delta's jars come from the cache's resolved files, or through Ivy when they
    are not there yet (or ``resolve``).
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # Python workers run the interpreter that has this project's dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for key, value in delta_spark_conf(None if resolve else resolved_jars()).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def set_commit_metadata(spark: SparkSession, **fields: str) -> None:
    """Record ``fields`` (job, job version, Airflow run id...) in every following Delta commit."""
    spark.conf.set(COMMIT_METADATA_CONF, json.dumps(fields, sort_keys=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--resolve-jars",
        action="store_true",
        help="resolve Delta's jars through Ivy once, into the cache, and record their files"
        " (every later session and spark-submit passes those files)",
    )
    args = parser.parse_args()
    if args.resolve_jars:
        spark = get_session("airflow-cdc-setup", master="local[1]", resolve=True)
        jars = spark.sparkContext.getConf().get("spark.jars") or ""
        files = [
            unquote(urlparse(j).path) if j.startswith("file:") else j for j in jars.split(",") if j
        ]
        manifest = write_jars_manifest(files)
        print(f"Delta's {len(files)} jars resolved ({manifest}); Spark", spark.version)
        spark.stop()


if __name__ == "__main__":
    main()
