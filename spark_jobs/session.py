"""The Spark session every job (and the test suite) runs on, with Delta Lake enabled."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from urllib.parse import unquote, urlparse

from pyspark.sql import SparkSession

from airflow_cdc.jobs import delta_spark_conf, resolved_jars, write_jars_manifest
from spark_jobs.lookups import remember_lookups

COMMIT_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"


def get_session(
    app_name: str = "airflow-cdc",
    master: str | None = None,
    resolve: bool = False,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """The active session, or a new one with Delta configured (and ``conf`` over it: a
    developer's tool turns the UI on).

    Under ``spark-submit`` the submitted conf wins (a user's ``spark.jars`` beside Delta's,
    their ``spark.driver.memory``...): Delta's conf only fills what it leaves unset. Locally,
    ``master`` defaults to ``local[*]``. Delta's jars come from the cache's resolved files, or
    through Ivy when they are not there yet (or ``resolve``).
    """
    remember_lookups()
    active = SparkSession.getActiveSession()
    if active is not None:
        return with_reading_rules(active)
    # Python workers run the interpreter that has this project's dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    submitted = submitted_conf()
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings = {**delta_spark_conf(None if resolve else resolved_jars()), **(conf or {})}
    for key, value in settings.items():
        if key not in submitted:
            builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return with_reading_rules(session)


# How the jobs read their input is part of what they compute, so no submitted conf changes
# it: an object's duplicate key takes its last value, as Python's ``json.loads`` reads it
# (the core parsers and the landing rules), and PostgreSQL's ``json`` type keeps such text
# (Spark's default refuses the whole document); a time without an offset (a ``timestamp``
# value, a dump's arrival time) is UTC, as the core parsers read it.
READING_RULES = {
    "spark.sql.variant.allowDuplicateKeys": "true",
    "spark.sql.session.timeZone": "UTC",
}


def with_reading_rules(spark: SparkSession) -> SparkSession:
    for key, value in READING_RULES.items():
        spark.conf.set(key, value)
    return spark


def submitted_conf() -> frozenset[str]:
    """The conf keys spark-submit was given, when this process runs under it (its JVM is up
    and holds them); none otherwise."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return frozenset()
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return frozenset(key for key, _ in SparkConf().getAll())


# Spark compiles every plan's expressions to Java before running it: about a second of one
# core per plan, and an apply runs dozens of plans. Interpreted, a small batch runs faster
# (measured on 2 cores, warm, apply_changes of one DSQL batch: 370 records 33 s -> 21 s,
# 25,000 records 36 s -> 31 s; at 125,000 records the two were even), so a job on fewer
# records than this turns code generation off; a larger one keeps Spark's defaults. A job
# may not run faster so: set spark.sql.codegen.wholeStage (true) in its spark_conf, and it
# keeps Spark's defaults whatever its size.
INTERPRETED_BELOW = 100_000
_CODEGEN = (  # (conf, interpreted, Spark's default)
    ("spark.sql.codegen.wholeStage", "false", "true"),
    # Spark's own switch between compiled and interpreted projections and predicates (an
    # internal setting; its FALLBACK default compiles and interprets what fails to).
    ("spark.sql.codegen.factoryMode", "NO_CODEGEN", "FALLBACK"),
)


def fit_codegen(spark: SparkSession, records: int | None) -> bool:
    """Run the session's next plans interpreted when the job works on fewer than
    :data:`INTERPRETED_BELOW` records, compiled otherwise (``None``: Spark's defaults);
    whether they run interpreted. When the submitted conf names either setting, both stay
    as given."""
    if not _codegen_submitted():
        interpreted = records is not None and records < INTERPRETED_BELOW
        for key, small, default in _CODEGEN:
            spark.conf.set(key, small if interpreted else default)
    return spark.conf.get(_CODEGEN[0][0], "true") == _CODEGEN[0][1]


# An apply of at least this many landed rows keeps its large materialized stages as
# serialized blocks (:data:`spark_jobs.frames.SERIALIZED`), a smaller one as a Java object
# per row (Spark's default). Measured on 2 cores, warm, applies of 998,092 DSQL records
# alternated in one JVM: 137.3 and 129.9 s kept as objects (20.0 and 21.0 s of collector
# pauses), 111.5 and 119.9 s serialized by Kryo (8.2 and 9.6 s). At 201,604 records, where
# the heap holds them easily, ``make bench`` took 42.2 s serialized against 37.1 s as
# objects (a run of the day before). Between the two sizes it was not measured.
SERIALIZED_FROM = 500_000
# The session's setting for the job's materialized stages (set per job: a session may run
# several jobs in turn).
_SERIALIZED = "spark.airflow_cdc.materialize.serialized"


def fit_storage(spark: SparkSession, records: int | None) -> bool:
    """Keep the job's materialized stages serialized when it works on at least
    :data:`SERIALIZED_FROM` records (``None``: as objects); whether they are."""
    serialized = records is not None and records >= SERIALIZED_FROM
    spark.conf.set(_SERIALIZED, str(serialized).lower())
    return serialized


def fit_to_size(spark: SparkSession, records: int | None) -> dict[str, bool]:
    """:func:`fit_codegen` and :func:`fit_storage` for a job on ``records`` records (``None``:
    Spark's defaults); what they chose, as the job's stats say it."""
    return {
        "interpreted": fit_codegen(spark, records),
        "serialized": fit_storage(spark, records),
    }


def stores_serialized(spark: SparkSession) -> bool:
    """Whether the job keeps its materialized stages serialized (:func:`fit_storage`)."""
    return spark.conf.get(_SERIALIZED, "false") == "true"


# One block at a time sets the session's conf (tables are applied in parallel threads), so
# that each restores what was set before it.
_SESSION_CONF = threading.RLock()


@contextmanager
def session_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """``conf`` set on the session for the block, then restored. The session is shared: plans
    of other threads that run meanwhile run with it too."""
    with _SESSION_CONF:
        before: dict[str, str | None] = {key: spark.conf.get(key, None) for key in conf}
        for key, value in conf.items():
            spark.conf.set(key, value)
        try:
            yield
        finally:
            for key, old in before.items():
                if old is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, old)


def compiled(spark: SparkSession) -> AbstractContextManager[None]:
    """Spark's compiled defaults for the plans inside (work that scales with something
    larger than the batch, such as rewriting a large table's files), then the job's setting
    again; the submitted conf's own setting, when it names one, throughout."""
    if _codegen_submitted():
        return nullcontext()
    return session_conf(spark, {key: default for key, _, default in _CODEGEN})


def _codegen_submitted() -> bool:
    """Whether the submitted conf names a codegen setting (then it holds throughout)."""
    given = submitted_conf()
    return any(key in given for key, _, _ in _CODEGEN)


def set_commit_metadata(spark: SparkSession, **fields: str) -> None:
    """Record ``fields`` (job, job version, Airflow run id...) in every following Delta commit."""
    with _SESSION_CONF:
        spark.conf.set(COMMIT_METADATA_CONF, json.dumps(fields, sort_keys=True))


@contextmanager
def commit_metadata(spark: SparkSession, **fields: str) -> Iterator[str]:
    """The commits of the block carry ``fields`` beside the metadata the session gives them
    (:func:`set_commit_metadata`); the block is given the text they carry (which
    :func:`spark_jobs.delta_tables.commit_with` finds)."""
    with _SESSION_CONF:  # read and set as one step (re-entered by session_conf)
        current = json.loads(spark.conf.get(COMMIT_METADATA_CONF, None) or "{}")
        text = json.dumps({**current, **fields}, sort_keys=True)
        with session_conf(spark, {COMMIT_METADATA_CONF: text}):
            yield text


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
