"""What the jobs share: the warehouse layout, bookkeeping tables, arguments and run stats."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from airflow_cdc.core.events import TableRef
from airflow_cdc.jobs import resolved_state_path
from spark_jobs.schemas import struct
from spark_jobs.session import get_session, set_commit_metadata

log = logging.getLogger("airflow_cdc.jobs")

# Every landed record ends in exactly one of these.
APPLIED = "applied"
SUPERSEDED = "superseded"
DUPLICATE = "duplicate"
PENDING = "pending"
QUARANTINED = "quarantined"
# A message that changes no row (a resolved-timestamp marker, a heartbeat, a tombstone).
CONTROL = "control"
STATUSES = (APPLIED, SUPERSEDED, DUPLICATE, PENDING, QUARANTINED, CONTROL)

RAW_SCHEMA = struct(
    "record_id STRING, source STRING, stream STRING, shard_id STRING, sequence_number STRING,"
    " seq_key STRING, partition_key STRING, arrival_ts TIMESTAMP, data BINARY,"
    " envelope_error STRING, kind STRING, shard_closed BOOLEAN, horizon_ts TIMESTAMP,"
    " land_seq BIGINT, batch_id STRING, land_run STRING"
)
LEDGER_SCHEMA = struct(
    "record_id STRING, status STRING, reason STRING, stage STRING, run_id STRING"
)
QUARANTINE_SCHEMA = struct(
    "record_id STRING, batch_id STRING, stage STRING, reason STRING, detail STRING,"
    " payload STRING, run_id STRING"
)
RECORD = "record"
BATCH_ID = re.compile(r"[A-Za-z0-9_.:+\-]{1,64}")
PROGRESS = "progress"


@dataclass(frozen=True)
class Warehouse:
    """The layout of one warehouse directory (a local path or any Hadoop file system URI).

    Target tables live at ``<root>/<schema>/<table>``; bookkeeping tables under ``_cdc``.
    """

    root: str

    def _path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    @property
    def raw(self) -> str:
        return self._path("_cdc", "raw")

    @property
    def fragments(self) -> str:
        return self._path("_cdc", "fragments")

    @property
    def pending(self) -> str:
        return self._path("_cdc", "pending")

    @property
    def changes(self) -> str:
        return self._path("_cdc", "changes")

    @property
    def ledger(self) -> str:
        return self._path("_cdc", "ledger")

    @property
    def quarantine(self) -> str:
        return self._path("_cdc", "quarantine")

    def staging(self, source: str, run: str | None = None) -> str:
        """Scratch space of a landing run; ``run=None`` is the source's whole staging area."""
        return self._path("_cdc", "_staging", source, *([run] if run else []))

    def staged(self, table: TableRef) -> str:
        return self._path("_cdc", "staged", table.qualified)

    def target(self, table: TableRef) -> str:
        return self._path(table.schema, table.name)

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


def batch_id(value: str) -> str:
    """A batch id names an interval (``2026-01-01T01:00:00+00:00``); it is quoted into
    predicates, so only the characters of such names are allowed."""
    if not value or not BATCH_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(f"batch id must match {BATCH_ID.pattern}, got {value!r}")
    return value


def start(job: str, version: str, args: argparse.Namespace) -> JobContext:
    spark = get_session(f"airflow-cdc-{job}")
    set_commit_metadata(
        spark, job=job, job_version=version, airflow_run_id=args.run_id, batch_id=args.batch_id
    )
    return JobContext(spark, Warehouse(args.warehouse), args.batch_id, args.run_id, job, version)


def finish(
    ctx: JobContext, outcomes: Outcomes, stats: dict[str, Any], stats_file: str | None
) -> dict[str, Any]:
    """Write the job's outcomes, add the batch's accounting to its stats and report them."""
    outcomes.flush()
    stats["accounting"] = accounting(ctx)
    write_stats(stats_file, stats)
    return stats


def write_stats(path: str | None, stats: dict[str, Any]) -> None:
    """Print the run's counts and write them where the operator picks them up for XCom."""
    text = json.dumps(stats, sort_keys=True, default=str)
    print(f"airflow-cdc stats: {text}")
    if path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".tmp")
        partial.write_text(text, encoding="utf-8")
        partial.replace(target)


def fault_point(name: str) -> None:
    """Kill the process here when ``AIRFLOW_CDC_FAULT`` names this point (crash tests only)."""
    if os.environ.get("AIRFLOW_CDC_FAULT") == name:
        log.error("fault injection: dying at %s", name)
        os._exit(137)


def table_exists(spark: SparkSession, path: str) -> bool:
    return DeltaTable.isDeltaTable(spark, path)


def ensure_table(
    spark: SparkSession, path: str, schema: StructType, partition_by: Iterable[str] = ()
) -> DeltaTable:
    """The Delta table at ``path``, created empty with ``schema`` if it does not exist yet."""
    if not table_exists(spark, path):
        builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
        partitions = list(partition_by)
        if partitions:
            builder = builder.partitionedBy(*partitions)
        builder.execute()
    return DeltaTable.forPath(spark, path)


def conform(spark: SparkSession, path: str, schema: StructType) -> None:
    """Give an existing table every column of ``schema``: add the missing ones, widen the ones
    whose type ``schema`` widens (Delta's type widening, for example INT to BIGINT)."""
    if not table_exists(spark, path):
        return
    current = {f.name: f.dataType for f in DeltaTable.forPath(spark, path).toDF().schema.fields}
    added = [f for f in schema.fields if f.name not in current]
    widened = [f for f in schema.fields if f.name in current and f.dataType != current[f.name]]
    if added:
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in added)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({columns})")
        log.info("added columns %s to %s", [f.name for f in added], path)
    if widened:
        spark.sql(
            f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')"
        )
        for field in widened:
            spark.sql(
                f"ALTER TABLE delta.`{path}` ALTER COLUMN `{field.name}`"
                f" TYPE {field.dataType.simpleString()}"
            )
        log.info("widened columns %s of %s", [f.name for f in widened], path)


def read_table(spark: SparkSession, path: str, schema: StructType) -> DataFrame:
    """The table at ``path``, or an empty frame of ``schema`` when nothing was written yet."""
    if table_exists(spark, path):
        return spark.read.format("delta").load(path)
    return spark.createDataFrame([], schema)


def insert_new(
    spark: SparkSession, path: str, rows: DataFrame, key: str, partition_by: Iterable[str] = ()
) -> None:
    """Insert the rows whose ``key`` is not in the table yet (idempotent under re-runs)."""
    if rows.isEmpty():
        return
    table = ensure_table(spark, path, rows.schema, partition_by)
    (
        table.alias("t")
        .merge(rows.alias("s"), f"t.{key} = s.{key}")
        .withSchemaEvolution()
        .whenNotMatchedInsertAll()
        .execute()
    )


class Outcomes:
    """What a job decided about records, written at the end in one ledger MERGE and one
    quarantine insert (each Delta commit costs seconds; a job makes a handful, not dozens).

    ``pending`` never overwrites a final status, so a re-run of an earlier stage cannot undo
    a later one; within one job a final status wins over ``pending``.
    """

    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx
        self._statuses: list[DataFrame] = []
        self._quarantined: list[DataFrame] = []

    def status(self, rows: DataFrame) -> None:
        """Record ``status`` (and ``reason``) for each ``record_id`` of ``rows``."""
        self._statuses.append(
            rows.select("record_id", "status", F.col("reason").cast("string").alias("reason"))
        )

    def quarantine(self, rows: DataFrame) -> None:
        """Quarantine rows (``record_id``, ``batch_id``, ``reason``, ``detail``, ``payload``)."""
        entries = rows.select(
            "record_id",
            "batch_id",
            F.lit(self.ctx.job).alias("stage"),
            "reason",
            F.col("detail").cast("string").alias("detail"),
            F.col("payload").cast("string"),
            F.lit(self.ctx.run_id).alias("run_id"),
        )
        self._quarantined.append(entries)
        self.status(entries.select("record_id", F.lit(QUARANTINED).alias("status"), "reason"))

    def flush(self) -> None:
        ctx = self.ctx
        if self._quarantined:
            insert_new(
                ctx.spark, ctx.warehouse.quarantine, union_all(self._quarantined), "record_id"
            )
        if self._statuses:
            _merge_statuses(ctx, union_all(self._statuses))
        self._statuses, self._quarantined = [], []


def union_all(frames: list[DataFrame]) -> DataFrame:
    """The rows of all ``frames`` (same columns, matched by name)."""
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def _merge_statuses(ctx: JobContext, rows: DataFrame) -> None:
    final_first = F.when(F.col("status") == PENDING, 0).otherwise(1)
    entries = (
        rows.groupBy("record_id")
        .agg(F.max_by(F.struct("status", "reason"), final_first).alias("s"))
        .select(
            "record_id",
            "s.status",
            "s.reason",
            F.lit(ctx.job).alias("stage"),
            F.lit(ctx.run_id).alias("run_id"),
        )
    ).transform(snapshot)
    if entries.isEmpty():
        return
    table = ensure_table(ctx.spark, ctx.warehouse.ledger, LEDGER_SCHEMA)
    (
        table.alias("t")
        .merge(entries.alias("s"), "t.record_id = s.record_id")
        .whenMatchedUpdateAll(
            condition=(F.col("s.status") != F.lit(PENDING)) | (F.col("t.status") == F.lit(PENDING))
        )
        .whenNotMatchedInsertAll()
        .execute()
    )


def landed_records(ctx: JobContext, batch_id: str | None = None) -> DataFrame:
    raw = read_table(ctx.spark, ctx.warehouse.raw, RAW_SCHEMA)
    raw = raw.where(F.col("kind") == RECORD)
    return raw.where(F.col("batch_id") == (batch_id or ctx.batch_id))


def accounting(ctx: JobContext) -> dict[str, int]:
    """Where the records landed in this batch stand now.

    ``landed`` always equals the sum of the statuses plus ``unprocessed`` (records no
    stage has looked at yet, zero once apply has run for the batch).
    """
    records = landed_records(ctx).select("record_id")
    ledger = read_table(ctx.spark, ctx.warehouse.ledger, LEDGER_SCHEMA)
    joined = records.join(ledger, "record_id", "left")
    counts = {
        row["status"]: row["n"]
        for row in joined.groupBy("status").agg(F.count(F.lit(1)).alias("n")).collect()
    }
    result = {status: int(counts.get(status, 0)) for status in STATUSES}
    result["unprocessed"] = int(counts.get(None, 0))
    result["landed"] = sum(int(n) for n in counts.values())
    return result


def with_payloads(ctx: JobContext, rows: DataFrame) -> DataFrame:
    """Add each record's landed batch and raw payload (as text) to rows keyed by record_id."""
    raw = read_table(ctx.spark, ctx.warehouse.raw, RAW_SCHEMA).where(F.col("kind") == RECORD)
    return rows.join(
        raw.select("record_id", "batch_id", F.col("data").cast("string").alias("payload")),
        "record_id",
    )


def _hadoop_path(ctx: JobContext, path: str) -> Any:
    jvm = ctx.spark.sparkContext._jvm
    assert jvm is not None
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    conf = ctx.spark.sparkContext._jsc.hadoopConfiguration()
    return hpath, hpath.getFileSystem(conf)


def write_text(ctx: JobContext, path: str, text: str) -> None:
    """Write a small file atomically (aside, then rename) on any Hadoop file system."""
    target, fs = _hadoop_path(ctx, path)
    partial, _ = _hadoop_path(ctx, f"{path}.{uuid.uuid4().hex}.tmp")
    stream = fs.create(partial, True)
    stream.write(bytearray(text.encode("utf-8")))
    stream.close()
    fs.delete(target, False)
    fs.rename(partial, target)


def read_text(ctx: JobContext, path: str) -> str | None:
    """A small file's text, or ``None`` if it does not exist."""
    target, fs = _hadoop_path(ctx, path)
    if not fs.exists(target):
        return None
    return "\n".join(r[0] for r in ctx.spark.read.text(path).collect())


def delete_path(ctx: JobContext, path: str) -> None:
    target, fs = _hadoop_path(ctx, path)
    fs.delete(target, True)


def snapshot(frame: DataFrame) -> DataFrame:
    """Materialize ``frame`` now.

    Frames are lazy: one that reads a table this job later MERGEs into would, if evaluated
    after the MERGE, see the new state. Every frame used across a write is snapshotted first.
    """
    return frame.localCheckpoint(eager=True)
