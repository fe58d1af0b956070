"""Pure builders of spark-submit invocations, tested by exact equality.

An operator turns its (rendered) arguments into a :class:`SubmitSpec`; only
:meth:`airflow_cdc.operators.base.SparkJobOperator.submit` talks to a process.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

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
# The collector the jobs' JVM options choose (:data:`airflow_cdc.jobs.JAVA_OPTIONS`), left out
# where the cluster's or a user's options choose another.
JOBS_COLLECTOR = "-XX:+UseParallelGC"
# JVM options that a user's spark_conf adds to rather than replaces.
JVM_OPTIONS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")
# The options Spark puts before each of the JVM_OPTIONS (an administrator's, in
# spark-defaults.conf): a --conf of them replaces the file's, as for any key.
DEFAULT_JVM_OPTIONS = {key: key.replace(".extra", ".default") for key in JVM_OPTIONS}
# The Python files a cluster's spark-defaults.conf or a user's spark_conf ships. spark-submit's
# ``--py-files`` (the jobs' library) replaces this setting wherever it is made, so the jobs
# pass its files there, after the library.
PY_FILES = "spark.submit.pyFiles"
# The jobs' settings that a cluster's spark-defaults.conf does not replace: without them the
# jobs fail (another session catalog, a Kryo buffer too small for one large row) or read
# times in another zone. An operator's spark_conf still can.
NEEDED = (
    "spark.sql.catalog.spark_catalog",
    "spark.sql.session.timeZone",
    "spark.kryoserializer.buffer.max",
)


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


def check_versions(jobs: Sequence[str], pinned: str | Mapping[str, str] | None) -> dict[str, str]:
    """The installed version of each of ``jobs`` (the job a task submits, then the jobs it
    runs inside); raises if one is not the version ``pinned`` gives it: a string pins the
    first, a mapping any of them by name (naming a job the task does not run is an error)."""
    if pinned is None or isinstance(pinned, str):
        pins = {} if pinned is None else {jobs[0]: pinned}
    else:
        pins = dict(pinned)
        unknown = sorted(set(pins) - set(jobs))
        if unknown:
            raise ValueError(
                f"job_version pins {unknown}, which this task does not run (it runs {list(jobs)})"
            )
    return {job: check_version(job, pins.get(job)) for job in jobs}


def _joined(key: str, first: str, then: str) -> str:
    """Two settings of a :data:`JVM_OPTIONS` or :data:`LISTS` key as one, ``then`` after
    ``first`` (a later JVM option wins; a list keeps each entry once)."""
    if key in JVM_OPTIONS:
        return f"{first} {then}"
    given = [*first.split(","), *then.split(",")]
    return ",".join(dict.fromkeys(v.strip() for v in given if v.strip()))


# A JVM option that chooses a garbage collector: two of them stop the JVM.
_COLLECTOR = re.compile(r"-XX:\+Use\w+GC\b")


def _one_collector(options: str, before: str = "") -> str:
    """JVM options without the jobs' collector where another option chooses one, in them or
    in the options the JVM gets ``before`` them."""
    chosen = set(_COLLECTOR.findall(f"{before} {options}"))
    if chosen - {JOBS_COLLECTOR}:
        options = " ".join(o for o in options.split() if o != JOBS_COLLECTOR)
    return options


def _given(key: str, conf: Mapping[str, str], defaults: Mapping[str, str]) -> str:
    """The setting spark-submit takes for ``key``: a ``--conf`` replaces the file's."""
    return (conf[key] if key in conf else defaults.get(key)) or ""


def python_files(library: str, *lists: str | None) -> list[str]:
    """``--py-files``: the library, then the files of each comma-separated list in turn.
    Spark ships each file under its name, and refuses two paths of one name: the later
    list's path wins (the library's name is the library's)."""
    named: dict[str, str] = {}
    for files in lists:
        for path in (files or "").split(","):
            if path.strip():
                named[PurePosixPath(path.strip()).name] = path.strip()
    named.pop(PurePosixPath(library).name, None)
    return [library, *named.values()]


def over_cluster_defaults(conf: Mapping[str, str], defaults: Mapping[str, str]) -> dict[str, str]:
    """The jobs' ``conf`` as spark-submit should get it on a cluster whose
    ``spark-defaults.conf`` holds ``defaults`` (a ``--conf`` replaces the file's setting):
    lists and JVM options extend the cluster's, the :data:`NEEDED` settings are the jobs',
    and the cluster's own setting of any other key (its driver's memory, its partition
    counts, its UI) stays, the jobs' dropped."""
    out: dict[str, str] = {}
    for key, value in conf.items():
        theirs = defaults.get(key, "")
        if not theirs or key in NEEDED:
            out[key] = value
        elif key in LISTS or key in JVM_OPTIONS:
            out[key] = _joined(key, theirs, value)
    return out


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
    spark_defaults: Mapping[str, str] | None = None,
) -> SubmitSpec:
    """The submission of ``spark_jobs/<job>.py`` over one batch.

    Each option with a value is one argument, ``--name=value`` (as ``job_args`` must give
    theirs): the job's parser would take a value of its own that starts with ``-`` (a run id
    ``-backfill``, a topic ``-orders``) for an option.

    :param library: The archive of ``airflow_cdc`` and ``spark_jobs`` shipped with --py-files,
        first, then the files of the cluster's and ``spark_conf``'s ``spark.submit.pyFiles``.
    :param jars: Delta's jars as local files (resolved once, at install); without them the
        submit resolves the package through Ivy.
    :param class_archive: The class archive the driver's JVM maps, if any
        (:func:`airflow_cdc.jobs.class_archive`), unless the driver options of ``spark_conf``
        or of the cluster (extra or :data:`DEFAULT_JVM_OPTIONS`) set class data sharing
        themselves.
    :param local_python: Run Python workers with this interpreter (local masters); a cluster
        configures ``spark.pyspark.python`` itself.
    :param spark_defaults: The settings spark-submit reads from the cluster's
        ``spark-defaults.conf`` (:func:`airflow_cdc.jobs.spark_defaults`): the jobs' conf
        goes over them as :func:`over_cluster_defaults` says, ``spark_conf`` over both.
    """
    check_location(warehouse, "warehouse")
    if not batch_id:
        raise ValueError(f"batch_id must be set (the data interval end), got {batch_id!r}")
    extra = dict(spark_conf or {})
    defaults = dict(spark_defaults or {})
    py_files = python_files(library, defaults.get(PY_FILES), extra.pop(PY_FILES, None))
    # The driver's options: its default ones as spark-submit takes them, its extra ones
    # from both (they are joined).
    driver = JVM_OPTIONS[0]
    given = (
        _given(DEFAULT_JVM_OPTIONS[driver], extra, defaults),
        *(c.get(driver) for c in (extra, defaults)),
    )
    if any(owns_class_sharing(options or "") for options in given):
        class_archive = None
    conf = over_cluster_defaults(delta_spark_conf(jars, class_archive), defaults)
    if local_python:
        for key in ("spark.pyspark.python", "spark.pyspark.driver.python"):
            if key not in defaults:  # a cluster's own interpreter stays
                conf[key] = sys.executable
    for key in (*LISTS, *JVM_OPTIONS):
        base = conf.get(key) or defaults.get(key)
        if base and extra.get(key):
            # The user's (hadoop-aws's jars, Sedona's extension, a log4j file) beside the
            # jobs' and the cluster's, after them: an -Xss of theirs wins, yet none drops
            # the stack the jobs need (-Xss8m).
            extra[key] = _joined(key, base, extra[key])
    conf.update(extra)
    for key in JVM_OPTIONS:
        if key in conf:
            before = _given(DEFAULT_JVM_OPTIONS[key], conf, defaults)
            conf[key] = _one_collector(conf[key], before)
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
        py_files=py_files,
        name=f"airflow-cdc-{job}",
        env_vars=dict(env_vars or {}),
    )
