"""Pure builders of spark-submit invocations, tested by exact equality.

An operator turns its (rendered) arguments into a :class:`SubmitSpec`; only
:meth:`airflow_cdc.operators.base.SparkJobOperator.submit` talks to a process.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from airflow_cdc.core.exceptions import JobVersionError
from airflow_cdc.jobs import (
    check_location,
    delta_spark_conf,
    installed_job_version,
    job_file,
    owns_class_sharing,
)

# Comma-separated conf values that a user's spark_conf extends rather than replaces.
LISTS = ("spark.jars", "spark.jars.packages", "spark.sql.extensions")
# JVM options that a user's spark_conf adds to rather than replaces.
JVM_OPTIONS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")


@dataclass(frozen=True)
class SubmitSpec:
    """Everything spark-submit needs for one job run."""

    application: str
    application_args: list[str]
    conf: dict[str, str]
    py_files: list[str]
    name: str
    env_vars: dict[str, str] = field(default_factory=dict)


def check_version(job: str, pinned: str | None) -> str:
    """The installed version of ``job``; raises if it is not the ``pinned`` one."""
    installed = installed_job_version(job)
    if pinned is not None and pinned != installed:
        raise JobVersionError(
            f"job {job!r} is pinned to version {pinned!r} but version {installed!r} is installed"
        )
    return installed


def job_spec(
    job: str,
    *,
    warehouse: str,
    batch_id: str,
    run_id: str,
    stats_file: str,
    job_args: Sequence[str] = (),
    library: str,
    jars: Sequence[str] | None = None,
    class_archive: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    env_vars: Mapping[str, str] | None = None,
    local_python: bool = True,
) -> SubmitSpec:
    """The submission of ``spark_jobs/<job>.py`` over one batch.

    Each option with a value is one argument, ``--name=value`` (as ``job_args`` must give
    theirs): the job's parser would take a value of its own that starts with ``-`` (a run id
    ``-backfill``, a topic ``-orders``) for an option.

    :param library: The archive of ``airflow_cdc`` and ``spark_jobs`` shipped with --py-files.
    :param jars: Delta's jars as local files (resolved once, at install); without them the
        submit resolves the package through Ivy.
    :param class_archive: The class archive the driver's JVM maps, if any
        (:func:`airflow_cdc.jobs.class_archive`), unless ``spark_conf``'s driver options set
        class data sharing themselves.
    :param local_python: Run Python workers with this interpreter (local masters); a cluster
        configures ``spark.pyspark.python`` itself.
    """
    check_location(warehouse, "warehouse")
    if not batch_id:
        raise ValueError(f"batch_id must be set (the data interval end), got {batch_id!r}")
    extra = dict(spark_conf or {})
    if owns_class_sharing(extra.get("spark.driver.extraJavaOptions", "")):
        class_archive = None
    conf = delta_spark_conf(jars, class_archive)
    if local_python:
        conf["spark.pyspark.python"] = sys.executable
        conf["spark.pyspark.driver.python"] = sys.executable
    for key in LISTS:
        if conf.get(key) and extra.get(key):
            # The user's (hadoop-aws's jars, Sedona's extension) beside Delta's, not instead.
            given = [*conf[key].split(","), *extra[key].split(",")]
            extra[key] = ",".join(dict.fromkeys(v.strip() for v in given if v.strip()))
    for key in JVM_OPTIONS:
        if conf.get(key) and extra.get(key):
            # The user's options after the jobs' (the later of two settings wins): a log4j
            # file or an OOM hook must not drop the stack the jobs need (-Xss8m).
            extra[key] = f"{conf[key]} {extra[key]}"
    conf.update(extra)
    args = [
        f"--warehouse={warehouse}",
        f"--batch-id={batch_id}",
        f"--run-id={run_id}",
        f"--stats-file={stats_file}",
        *job_args,
    ]
    return SubmitSpec(
        application=str(job_file(job)),
        application_args=args,
        conf=conf,
        py_files=[library],
        name=f"airflow-cdc-{job}",
        env_vars=dict(env_vars or {}),
    )
