"""The ledger: where every landed record ends, appended once per job and batch.

``_cdc/ledger`` is partitioned by ``source`` and ``batch_id`` (the batch the record was
*landed* in), so a job reads and accounts for one batch without touching the rest of the
history. It is append-only: a record's outcome is its newest entry, and a final status
(anything but ``pending``) decided earlier is never replaced by ``pending``. Quarantined
records get a row in ``_cdc/quarantine`` (same partitioning) with the reason and the raw
payload.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from spark_jobs.schemas import struct

APPLIED = "applied"
SUPERSEDED = "superseded"
DUPLICATE = "duplicate"
PENDING = "pending"
QUARANTINED = "quarantined"
# A message that changes no row (a resolved-timestamp marker, a heartbeat, a tombstone).
CONTROL = "control"
STATUSES = (APPLIED, SUPERSEDED, DUPLICATE, PENDING, QUARANTINED, CONTROL)

# Quarantine reasons that a change of configuration can fix (the DDL, the limits, column
# mapping): what a replay takes by default.
REPLAYABLE = (
    "undeclared_table",
    "type_conflict",
    "decode_error",
    "missing_key",
    "key_mismatch",
    "special_key",
    "column_limit",
    "too_many_columns",
    "invalid_column_name",
)
# Of those, the reasons for which maintenance keeps tombstones a replay could still be applied
# against (:mod:`spark_jobs.settled`). Not ``undeclared_table``: a table has no tombstones
# until it is declared, and a source that captures tables it does not declare would hold
# every purge back for the quarantine retention. Replay a table's records when you declare it.
HOLDS_TOMBSTONES = tuple(r for r in REPLAYABLE if r != "undeclared_table")


LEDGER_SCHEMA = struct(
    "record_id STRING, status STRING, reason STRING, stage STRING, run_id STRING,"
    " decided_at TIMESTAMP, source STRING, batch_id STRING"
)
QUARANTINE_SCHEMA = struct(
    "record_id STRING, stage STRING, reason STRING, detail STRING, payload STRING,"
    " run_id STRING, quarantined_at TIMESTAMP, source STRING, batch_id STRING"
)
PARTITIONS = ("source", "batch_id")


class Outcomes:
    """What one job run decided, written at its end: one ledger append, one quarantine append.

    Frames given to :meth:`status` have ``record_id``, ``batch_id`` (the landed batch),
    ``status`` and ``reason``; frames given to :meth:`quarantine` have ``record_id``,
    ``batch_id``, ``reason``, ``detail`` and, where the frame carries it, ``payload``.
    """

    def __init__(self, source: str, stage: str, run_id: str) -> None:
        self.source = source
        self.stage = stage
        self.run_id = run_id
        self.decided_at = dt.datetime.now(dt.UTC)
        self._statuses: list[DataFrame] = []
        self._quarantined: list[DataFrame] = []
        self._unpaid: list[DataFrame] = []

    def status(self, rows: DataFrame) -> None:
        self._statuses.append(
            rows.select(
                "record_id",
                "batch_id",
                F.col("status").cast("string").alias("status"),
                F.col("reason").cast("string").alias("reason"),
            )
        )

    def quarantine(self, rows: DataFrame) -> None:
        """Quarantine ``rows``; those without a ``payload`` column have their payloads looked
        up once, for all such rows, in :meth:`quarantine_rows`' ``payloads``."""
        paid = "payload" in rows.columns
        entries = rows.select(
            "record_id",
            "batch_id",
            F.col("reason").cast("string").alias("reason"),
            F.col("detail").cast("string").alias("detail"),
            *([F.col("payload").cast("string").alias("payload")] if paid else []),
        )
        (self._quarantined if paid else self._unpaid).append(entries)
        self.status(
            entries.select("record_id", "batch_id", F.lit(QUARANTINED).alias("status"), "reason")
        )

    def ledger_rows(self) -> DataFrame | None:
        """One entry per record: a final status wins over ``pending`` within the run."""
        if not self._statuses:
            return None
        final_first = F.when(F.col("status") == PENDING, 0).otherwise(1)
        return (
            union_all(self._statuses)
            .groupBy("record_id", "batch_id")
            .agg(F.max_by(F.struct("status", "reason"), final_first).alias("s"))
            .select(
                "record_id",
                "s.status",
                "s.reason",
                F.lit(self.stage).alias("stage"),
                F.lit(self.run_id).alias("run_id"),
                F.lit(self.decided_at).alias("decided_at"),
                F.lit(self.source).alias("source"),
                "batch_id",
            )
        )

    def quarantine_rows(self, payloads: list[DataFrame]) -> DataFrame | None:
        """The quarantine's rows, one per record; ``payloads`` (frames of ``record_id``,
        ``payload``) hold the payloads of the records quarantined without theirs."""
        frames = list(self._quarantined)
        if self._unpaid:
            frames.append(with_payloads(union_all(self._unpaid).localCheckpoint(), payloads))
        if not frames:
            return None
        return (
            union_all(frames)
            .select(
                "record_id",
                F.lit(self.stage).alias("stage"),
                "reason",
                "detail",
                "payload",
                F.lit(self.run_id).alias("run_id"),
                F.lit(self.decided_at).alias("quarantined_at"),
                F.lit(self.source).alias("source"),
                "batch_id",
            )
            .dropDuplicates(["record_id"])
        )


# Up to this many quarantined records are looked up by broadcasting them to the payloads
# (no shuffle of the batch); more take a shuffled join.
BROADCAST_QUARANTINE = 100_000


def with_payloads(rows: DataFrame, payloads: list[DataFrame]) -> DataFrame:
    """``rows`` (``record_id`` ..., materialized) with each record's ``payload`` from
    ``payloads`` (frames of ``record_id``, ``payload``); only the payloads of ``rows`` move.
    A record found in several frames (a buffered record of this batch) comes once per frame,
    with the same payload (no frame may hold a NULL one): :meth:`Outcomes.quarantine_rows`
    keeps one entry per record."""
    count = rows.count()
    if count == 0:  # nothing to look up: no scan of the payloads
        return rows.withColumn("payload", F.lit(None).cast("string"))
    small = count <= BROADCAST_QUARANTINE
    return union_all(
        [(F.broadcast(rows) if small else rows).join(frame, "record_id") for frame in payloads]
    )


def union_all(frames: list[DataFrame]) -> DataFrame:
    """The rows of all ``frames`` (same columns, matched by name)."""
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def per_record(
    changes: DataFrame, *columns: Column | str, members: str = "_cdc_members"
) -> DataFrame:
    """One row per record of each change in ``changes``: the ``record_id`` and ``batch_id`` of
    each of its ``members``, beside ``columns`` (computed once per change)."""
    exploded = changes.select(F.explode(members).alias("_member"), *columns)
    kept = [F.col(f"`{name}`") for name in exploded.columns if name != "_member"]
    return exploded.select("_member.record_id", "_member.batch_id", *kept)


def append(frame: DataFrame, path: str) -> None:
    """Append to a bookkeeping table, partitioned by source and landed batch."""
    frame.write.format("delta").mode("append").partitionBy(*PARTITIONS).save(path)


def read_partitions(
    spark: SparkSession, path: str, source: str, batches: list[str]
) -> DataFrame | None:
    """The rows of ``source`` landed in ``batches`` (partition pruned); ``None`` if no table."""
    from delta.tables import DeltaTable

    if not batches or not DeltaTable.isDeltaTable(spark, path):
        return None
    return (
        spark.read.format("delta")
        .load(path)
        .where((F.col("source") == source) & F.col("batch_id").isin(batches))
    )


def current_status(entries: DataFrame) -> DataFrame:
    """Each record's outcome now: its newest entry, a final one before a later ``pending``."""
    final = F.when(F.col("status") == PENDING, 0).otherwise(1)
    newest = Window.partitionBy("record_id", "batch_id").orderBy(
        final.desc(), F.col("decided_at").desc()
    )
    return entries.withColumn("_n", F.row_number().over(newest)).where(F.col("_n") == 1).drop("_n")


def final_ids(spark: SparkSession, path: str, source: str, batches: list[str]) -> DataFrame | None:
    """``record_id`` of the records of ``batches`` whose outcome is final (anything but
    ``pending``); ``None`` if there is no ledger or no batch."""
    entries = final_entries(spark, path, source, batches)
    return None if entries is None else entries.select("record_id")


def final_entries(
    spark: SparkSession, path: str, source: str, batches: list[str]
) -> DataFrame | None:
    """``record_id``, ``status``, ``reason`` of the records of ``batches`` whose outcome is
    final (anything but ``pending``); ``None`` if there is no ledger or no batch."""
    entries = read_partitions(spark, path, source, batches)
    if entries is None:
        return None
    final = current_status(entries).where(F.col("status") != PENDING)
    return final.select("record_id", "status", "reason")


def accounting(
    spark: SparkSession, raw: DataFrame, ledger_path: str, source: str, batch_id: str
) -> dict[str, Any]:
    """Where the records of ``source`` landed in ``batch_id`` stand now.

    ``landed`` always equals the sum of the statuses plus ``unprocessed`` (records no job has
    decided yet). Reads one partition of the raw table and of the ledger.
    """
    return accounting_of(spark, raw, ledger_path, source, [batch_id])


def accounting_of(
    spark: SparkSession, raw: DataFrame, ledger_path: str, source: str, batches: list[str]
) -> dict[str, Any]:
    """:func:`accounting` of the records of ``raw`` (``record_id``, ``batch_id``) landed in
    ``batches``, summed: one query, those partitions of the ledger only."""
    records = raw.select("record_id", "batch_id")
    entries = read_partitions(spark, ledger_path, source, batches)
    if entries is None:
        joined = records.withColumn("status", F.lit(None).cast("string"))
    else:
        joined = records.join(
            current_status(entries).select("record_id", "batch_id", "status"),
            ["record_id", "batch_id"],
            "left",
        )
    counts = {
        row["status"]: int(row["n"])
        for row in joined.groupBy("status").agg(F.count(F.lit(1)).alias("n")).collect()
    }
    result: dict[str, Any] = {status: counts.get(status, 0) for status in STATUSES}
    result["unprocessed"] = counts.get(None, 0)
    result["landed"] = sum(counts.values())
    return result
