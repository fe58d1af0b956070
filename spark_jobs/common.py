"""What the jobs share: the warehouse layout, bookkeeping tables, arguments and run stats."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import math
import os
import random
import re
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from delta.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    ConcurrentWriteException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)
from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.util import inheritable_thread_target

from airflow_cdc.core.events import TableRef
from airflow_cdc.jobs import (
    bookkeeping_location,
    check_source,
    resolved_state_path,
    table_location,
)
from airflow_cdc.storage import configure_object_storage
from spark_jobs.schemas import struct
from spark_jobs.session import (
    COMMIT_METADATA_CONF,
    fit_codegen,
    get_session,
    set_commit_metadata,
)

log = logging.getLogger("airflow_cdc.jobs")

RAW_SCHEMA = struct(
    "record_id STRING, source STRING, stream STRING, shard_id STRING, sequence_number STRING,"
    " seq_key STRING, partition_key STRING, arrival_ts TIMESTAMP, data BINARY,"
    " envelope_error STRING, kind STRING, shard_closed BOOLEAN, horizon_ts TIMESTAMP,"
    " land_seq BIGINT, batch_id STRING, land_run STRING"
)
RECORD = "record"
# What a Delta commit raises when a concurrent writer committed first (delta-spark's Python
# classes do not share a base).
COMMIT_CONFLICTS = (
    DeltaConcurrentModificationException,
    ConcurrentWriteException,
    MetadataChangedException,
    ProtocolChangedException,
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    ConcurrentDeleteDeleteException,
    ConcurrentTransactionException,
)
BATCH_ID = re.compile(r"[A-Za-z0-9_.:+\-]{1,64}")

PROGRESS = "progress"
CONFLICT_ATTEMPTS = 4
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Warehouse:
    """The layout of one warehouse directory (a local path or any Hadoop file system URI).

    Target tables live at ``<root>/<schema>/<table>``; bookkeeping tables under ``_cdc``.
    """

    root: str

    def path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    @property
    def raw(self) -> str:
        """Landed records and shard checkpoints, partitioned by source and batch."""
        return bookkeeping_location(self.root, "raw")

    @property
    def pending(self) -> str:
        """Open fragment sets, partitioned by source: the only state carried across batches."""
        return bookkeeping_location(self.root, "pending")

    @property
    def held(self) -> str:
        """Changes committed at or after a run's cut, partitioned by source: open state."""
        return bookkeeping_location(self.root, "held")

    @property
    def transactions(self) -> str:
        """The END events of transactions not yet applied whole, partitioned by source: open
        state (Debezium transaction metadata, :mod:`spark_jobs.transactions`)."""
        return bookkeeping_location(self.root, "transactions")

    @property
    def cuts(self) -> str:
        """The published cuts, partitioned by source: one row per cut."""
        return bookkeeping_location(self.root, "cuts")

    @property
    def ledger(self) -> str:
        return bookkeeping_location(self.root, "ledger")

    @property
    def quarantine(self) -> str:
        return bookkeeping_location(self.root, "quarantine")

    def staging(self, source: str, run: str | None = None) -> str:
        """Scratch space of a landing run; ``run=None`` is the source's whole staging area."""
        return bookkeeping_location(self.root, "_staging", source, *([run] if run else []))

    def target(self, table: TableRef) -> str:
        return table_location(self.root, table)

    def resolved_file(self, source: str) -> str:
        return resolved_state_path(self.root, source)


@dataclass(frozen=True)
class JobContext:
    """One run of one job over one batch (an Airflow data interval)."""

    spark: SparkSession
    warehouse: Warehouse
    batch_id: str
    run_id: str
    job: str
    version: str


def base_parser(description: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--warehouse", required=True, help="warehouse root path or URI")
    parser.add_argument(
        "--batch-id",
        required=True,
        type=batch_id,
        help="the batch (Airflow data interval end, ISO 8601) being processed",
    )
    parser.add_argument("--run-id", default="manual", help="Airflow run id, kept in commits")
    parser.add_argument("--stats-file", help="where to write the run's counts as JSON")
    return parser


def add_table_arguments(parser: argparse.ArgumentParser) -> None:
    """The target tables of a source: ``--ddl`` and ``--default-schema``."""
    parser.add_argument("--ddl", required=True, help="CREATE TABLE statements of the targets")
    parser.add_argument("--default-schema", default="public")


def at_least(minimum: float, unit: str, most: float | None = None) -> Callable[[str], float]:
    """An argument type: a finite number of ``unit`` no smaller than ``minimum`` (and no
    larger than ``most``)."""

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        if not number >= minimum or not math.isfinite(number):
            raise argparse.ArgumentTypeError(f"must be >= {minimum} {unit}, got {value!r}")
        if most is not None and number > most:
            raise argparse.ArgumentTypeError(f"must be <= {most} {unit}, got {value!r}")
        return number

    return parse


def quoted(name: str) -> str:
    """A name as a Spark SQL identifier (backticks doubled)."""
    return "`" + name.replace("`", "``") + "`"


def table_properties(properties: dict[str, str]) -> str:
    """``properties`` (the jobs' own keys and values, never data) as the list that SQL's
    ``TBLPROPERTIES (...)`` takes."""
    return ", ".join(f"'{key}' = '{value}'" for key, value in properties.items())


def arrow_batch(rows: list[dict[str, Any]], schema: Any) -> Any:
    """``rows`` (dicts; a field a row lacks is null) as an Arrow record batch of ``schema``,
    built column by column: ``RecordBatch.from_pylist`` converts row by row, about five times
    slower (15 against 3 µs a row of 28 fields)."""
    import pyarrow as pa

    columns = {name: [row.get(name) for row in rows] for name in schema.names}
    return pa.RecordBatch.from_pydict(columns, schema=schema)


def positive_count(unit: str, most: int | None = None) -> Callable[[str], int]:
    """An argument type: a whole number of ``unit``, at least 1 (and at most ``most``)."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = 0
        if number < 1:
            raise argparse.ArgumentTypeError(f"must be a whole number >= 1 of {unit}: {value!r}")
        if most is not None and number > most:
            raise argparse.ArgumentTypeError(f"must be at most {most:,} {unit}: {value!r}")
        return number

    return parse


def batch_id(value: str) -> str:
    """A batch id names an interval (``2026-01-01T01:00:00+00:00``); it is quoted into
    predicates, so only the characters of such names are allowed."""
    if not value or not BATCH_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(f"batch id must match {BATCH_ID.pattern}, got {value!r}")
    return value


def instant(value: str) -> dt.datetime:
    """An ISO 8601 time; one without an offset is UTC."""
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 time, got {value!r}") from err
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def source_name(value: str) -> str:
    """A source names a partition and a file under the warehouse: a plain name only."""
    try:
        return check_source(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def start(job: str, version: str, args: argparse.Namespace) -> JobContext:
    spark = get_session(f"airflow-cdc-{job}")
    configure_object_storage(spark)
    fit_codegen(spark, None)  # Spark's defaults until the job knows its size
    set_commit_metadata(
        spark, job=job, job_version=version, airflow_run_id=args.run_id, batch_id=args.batch_id
    )
    if args.stats_file:  # the application, for the task's link, even if the run fails
        _write_text(spark, args.stats_file, json.dumps(application(spark)))
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
        _write_text(spark, path, text)


class SimulatedCrash(BaseException):
    """A job 'dying' at a fault point inside the test process (``AIRFLOW_CDC_FAULT_MODE=raise``):
    no handler catches it, and no job writes on its way out, so the durable state it leaves is
    what a killed process leaves."""


def fault_point(name: str) -> None:
    """Kill the process here when ``AIRFLOW_CDC_FAULT`` names this point (crash tests only;
    with ``AIRFLOW_CDC_FAULT_MODE=raise``, raise :class:`SimulatedCrash` instead).

    ``AIRFLOW_CDC_BARRIER=<point>:<directory>:<parties>`` instead holds the process here until
    ``parties`` processes have reached the point (concurrency tests only: it makes two runs
    race through the same step).
    """
    if os.environ.get("AIRFLOW_CDC_FAULT") == name:
        log.error("fault injection: dying at %s", name)
        if os.environ.get("AIRFLOW_CDC_FAULT_MODE") == "raise":
            raise SimulatedCrash(name)
        os._exit(137)
    barrier = os.environ.get("AIRFLOW_CDC_BARRIER", "")
    # Point names contain colons themselves: match the name, then split the rest.
    if barrier.startswith(f"{name}:"):
        directory, _, parties = barrier[len(name) + 1 :].rpartition(":")
        Path(directory, str(os.getpid())).touch()
        deadline = time.monotonic() + 300
        while len(os.listdir(directory)) < int(parties) and time.monotonic() < deadline:
            time.sleep(0.1)


# Tables an apply (or maintenance) works on at once. Each table's steps are many small Spark
# jobs, and most of a small job's time is the driver planning it: with two at once, one
# table's planning overlaps the other's tasks (measured on 2 cores, warm, DSQL batches of
# about 460 records into two tables: see the README's Benchmark section).
PARALLEL_TABLES = 2


def in_parallel(
    spark: SparkSession, work: Callable[[T], R], items: Sequence[T], workers: int | None = None
) -> list[R]:
    """``work(item)`` for every item, up to ``workers`` (default :data:`PARALLEL_TABLES`) at
    once, in threads of ``spark``'s session, each with a copy of the caller's job properties
    and tags; the results in the items' order. Every item runs to its end; then the first
    failure, in the items' order, is raised."""
    workers = PARALLEL_TABLES if workers is None else workers
    if len(items) <= 1 or workers <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(min(workers, len(items)), thread_name_prefix="airflow-cdc") as pool:
        # Each item its own copy of the job properties: Spark sets them per query in place.
        futures = [pool.submit(inheritable_thread_target(spark)(work), item) for item in items]
        wait(futures)
    return [future.result() for future in futures]


def retry_on_conflict(step: Callable[[], T], what: str, attempts: int = CONFLICT_ATTEMPTS) -> T:
    """Run the Delta transaction ``step``; when a concurrent writer committed first (Delta's
    conflict exceptions only), run it again on the new snapshot after a growing, jittered
    pause, up to ``attempts`` times in all. Only for steps that are safe to repeat (guarded
    MERGE, OPTIMIZE, DELETE)."""
    for attempt in range(1, attempts + 1):
        try:
            return step()
        except COMMIT_CONFLICTS as err:
            if attempt == attempts:
                raise
            pause = min(30.0, 2.0**attempt) * random.uniform(0.5, 1.5)
            log.warning(
                "%s met a concurrent commit (%s), attempt %d of %d: retrying in %.1fs",
                what,
                type(err).__name__,
                attempt,
                attempts,
                pause,
            )
            time.sleep(pause)
    raise AssertionError("unreachable")


def table_exists(spark: SparkSession, path: str) -> bool:
    return DeltaTable.isDeltaTable(spark, path)


def table_version(spark: SparkSession, path: str) -> int | None:
    """The Delta table's newest version (None when it has no commit)."""
    row = DeltaTable.forPath(spark, path).history(1).select("version").first()
    return None if row is None else int(row[0])


# How far back :func:`committed_version` looks for this run's commit.
RECENT_COMMITS = 20


def committed_version(spark: SparkSession, path: str, operation: str) -> int | None:
    """The version of this run's newest ``operation`` commit to the table (a commit carries
    the run's metadata, :func:`spark_jobs.session.set_commit_metadata`), among its last few;
    else its newest version. A commit another writer makes after it (a compaction) is not
    taken for it."""
    mine = spark.conf.get(COMMIT_METADATA_CONF, None)
    # A few rows of the log's commit infos, collected as they are (no Spark job runs).
    recent = (
        DeltaTable.forPath(spark, path)
        .history(RECENT_COMMITS)
        .select("version", "operation", "userMetadata")
        .collect()
    )
    ours = [r[0] for r in recent if mine is not None and (r[1], r[2]) == (operation, mine)]
    newest = max(ours or [r[0] for r in recent], default=None)
    return None if newest is None else int(newest)


def hadoop_path(ctx: JobContext, path: str) -> Any:
    """``path`` as a Hadoop path, and the file system it is on."""
    return hadoop_path_in(ctx.spark, path)


def hadoop_path_in(spark: SparkSession, path: str) -> Any:
    """``path`` as a Hadoop path, and the file system it is on, from ``spark``'s conf."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    return hpath, hpath.getFileSystem(conf)


def write_text(ctx: JobContext, path: str, text: str) -> None:
    """Write a small file atomically (aside, then rename) on any Hadoop file system."""
    _write_text(ctx.spark, path, text)


def _write_text(spark: SparkSession, path: str, text: str) -> None:
    target, fs = hadoop_path_in(spark, path)
    partial, _ = hadoop_path_in(spark, f"{path}.{uuid.uuid4().hex}.tmp")
    stream = fs.create(partial, True)
    stream.write(bytearray(text.encode("utf-8")))
    stream.close()
    fs.delete(target, False)
    fs.rename(partial, target)


def read_text(ctx: JobContext, path: str) -> str | None:
    """A small file's text, or ``None`` if it does not exist."""
    target, fs = hadoop_path(ctx, path)
    if not fs.exists(target):
        return None
    return "\n".join(r[0] for r in ctx.spark.read.text(path).collect())


def delete_path(ctx: JobContext, path: str) -> None:
    target, fs = hadoop_path(ctx, path)
    fs.delete(target, True)


def dated_name() -> str:
    """A unique directory name that carries its creation time: ``<epoch seconds>-<hex>``
    (object stores report no modification time for directories)."""
    return f"{int(time.time())}-{uuid.uuid4().hex}"


def delete_stale(ctx: JobContext, path: str, older_than: float) -> list[str]:
    """Delete the entries of directory ``path`` whose :func:`dated_name` is over
    ``older_than`` seconds old (or that carry no date); the paths deleted."""
    target, fs = hadoop_path(ctx, path)
    if not fs.exists(target):
        return []
    cutoff = time.time() - older_than
    deleted = []
    for status in fs.listStatus(target):
        created, _, _ = status.getPath().getName().partition("-")
        if not created.isdigit() or int(created) < cutoff:
            fs.delete(status.getPath(), True)
            deleted.append(str(status.getPath()))
    return deleted


def is_base64(text: Column) -> Column:
    """Whether ``text`` is padded standard Base64: alphabet characters, at most two ``=`` at
    the end, a length that is a multiple of four (the same strings as groups of four with an
    optional padded last group, without a regex that backtracks over long values). The
    length is counted in bytes, which the text keeps (characters are counted by a scan):
    Base64 text is ASCII, so where the regex holds the two counts agree."""
    return (F.octet_length(text) % 4 == 0) & text.rlike(r"^[A-Za-z0-9+/]*={0,2}\z")


def checkpoint_counting(frame: DataFrame, **metrics: Column) -> tuple[DataFrame, dict[str, Any]]:
    """``frame`` materialized (``localCheckpoint``), and ``metrics`` (aggregates, by name)
    over its rows, computed as the checkpoint is written: no query of their own."""
    seen = Observation()
    named = [metric.alias(name) for name, metric in metrics.items()]
    materialized = frame.observe(seen, *named).localCheckpoint()
    return materialized, seen.get


def is_object(value: Column) -> Column:
    """Whether a VARIANT is a JSON object (false where absent). The test is a cast to the
    struct of no fields, which copies none of the object's values (a cast to a map of them,
    or spelling out its schema, would read them all)."""
    return F.try_variant_get(value, "$", _NO_FIELDS).isNotNull()


_NO_FIELDS = "struct<>"


class WholeJson:
    """JSON text parsed as a VARIANT only when it is one whole JSON value, as Python's
    ``json.loads`` takes it: Spark's parser reads a document's first value and ignores what
    follows it (a second record, say).

    The text is parsed as the first element of an array whose second is a text no input
    holds (new for each instance): the second element is that text only when the input is
    one whole value. Stage :meth:`wrapped` as a column, then read the value's fields
    from it with :meth:`at` where :meth:`whole` holds, so that the text is parsed once and
    the value is never copied whole."""

    def __init__(self) -> None:
        self.end = uuid.uuid4().hex

    def wrapped(self, text: Column) -> Column:
        return F.try_parse_json(F.concat(F.lit("["), text, F.lit(f',"{self.end}"]')))

    def whole(self, wrapped: Column) -> Column:
        """Whether the input is one whole JSON value: true, or null where it is not (SQL
        NULL, text that does not parse) or false where it parses as more than one value."""
        return F.try_variant_get(wrapped, "$[1]", "string") == self.end

    @staticmethod
    def at(wrapped: Column, path: str, kind: str) -> Column:
        """The input's value at ``path`` (``$``, ``$.a.b``) as ``kind``, where it is one
        whole JSON value (test :meth:`whole` for that)."""
        if not path.startswith("$"):
            raise ValueError(f"a path starts with $: {path!r}")
        return F.try_variant_get(wrapped, "$[0]" + path[1:], kind)

    @classmethod
    def is_object_at(cls, wrapped: Column, path: str = "$") -> Column:
        """:func:`is_object` of the input's value at ``path``, without taking it out."""
        return cls.at(wrapped, path, _NO_FIELDS).isNotNull()


def from_micros(micros: int | None) -> dt.datetime | None:
    """A time in microseconds since the epoch as an aware datetime (how a time leaves Spark:
    a collected TIMESTAMP is naive in the driver's local zone, not the session's)."""
    if micros is None:
        return None
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)


def to_micros(value: dt.datetime) -> int:
    """An aware datetime in microseconds since the epoch (a naive one raises TypeError: a
    TIMESTAMP collected from Spark is naive in the driver's local zone)."""
    return (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def horizon_us() -> Column:
    """A checkpoint's horizon as it leaves Spark: microseconds since the epoch. A collected
    TIMESTAMP arrives naive in the driver's local zone, not the session's, so none is."""
    return F.unix_micros("horizon_ts").alias("horizon_us")
