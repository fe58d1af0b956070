"""Reassembly of oversized images from their fragments, as DataFrame transforms.

Fragments and chunked main records wait in the open state (``_cdc/pending``, partitioned by
source) until their sets settle: a complete set whose CRC32C matches becomes a change; a CRC
mismatch, conflicting fragments or a set still incomplete after ``max_age`` of stream time (or
``max_wall_age`` of wall-clock time in the open state, see :class:`Clock`) is quarantined with
every raw payload; the rest stays open for the next run. A settled set leaves
a small closed marker for ``max_age`` so that a redelivery of its main record or of a
fragment is recognized as a duplicate. The open state is the only state carried between
batches; it is read whole (it is small) and rewritten once per run.

Everything is Spark expressions except the reassembly of each chunked set (ordering the
fragments, concatenating and checking the CRC32C), which runs the core's
:func:`~airflow_cdc.core.reassembly.assemble` through Arrow, for chunked sets only.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from airflow_cdc.core.events import ChunkRef, Fragment
from airflow_cdc.core.reassembly import COMPLETE, FAILED, assemble
from spark_jobs.frames import arrow_batch
from spark_jobs.ledger import DUPLICATE, PENDING, per_record, union_all
from spark_jobs.parse import CHUNK_REFS, PARSED_COLUMNS, TEXT_FIELDS, TXN, from_text
from spark_jobs.schemas import struct

OPEN = "open"
STATE_SCHEMA = struct(
    "record_id STRING, batch_id STRING, arrival_ts TIMESTAMP, payload STRING, rtype STRING,"
    " state STRING, closed_at TIMESTAMP, chunk_id STRING, frag_index BIGINT, frag_data STRING,"
    " schema STRING, table STRING, op STRING, sequence STRING, commit_ts TIMESTAMP,"
    " before_json STRING, after_json STRING, key_json STRING, partial BOOLEAN,"
    " types_json STRING, before_chunk_id STRING, before_total BIGINT, before_crc BIGINT,"
    " after_chunk_id STRING, after_total BIGINT, after_crc BIGINT, buffered_at TIMESTAMP,"
    " source STRING"
)
SETTLED_SCHEMA = struct(
    "record_id STRING, outcome STRING, reason STRING, detail STRING, before_json STRING,"
    " after_json STRING, used ARRAY<STRUCT<record_id: STRING, batch_id: STRING>>,"
    " redelivered ARRAY<STRUCT<record_id: STRING, batch_id: STRING>>,"
    " members ARRAY<STRUCT<record_id: STRING, batch_id: STRING>>"
)
_IMAGES = ("before", "after")
# What makes two chunked records one record delivered twice rather than two records.
_IDENTITY = ("sequence", "schema", "table", "op", *CHUNK_REFS)


@dataclass(frozen=True)
class Clock:
    """When a fragment set has waited too long: ``max_age`` of stream time (the newest
    arrival, ``stream``) past its record's arrival, or ``max_wall_age`` of wall-clock time
    (``wall``) since a run first buffered it, so that a stalled stream does not hold its
    incomplete sets forever."""

    stream: dt.datetime | None
    max_age: dt.timedelta
    wall: dt.datetime
    max_wall_age: dt.timedelta

    def expired(self) -> Column:
        """Why a state row has waited too long (STRING), or null while it may wait."""
        by_stream = (
            F.lit(False)
            if self.stream is None
            else F.coalesce(F.col("arrival_ts") < F.lit(self.stream - self.max_age), F.lit(False))
        )
        by_wall = F.coalesce(
            F.col("buffered_at") < F.lit(self.wall - self.max_wall_age), F.lit(False)
        )
        return F.when(by_stream, F.lit(f"{self.max_age} of stream time")).when(
            by_wall, F.lit(f"{self.max_wall_age} of wall-clock time in the open state")
        )


@dataclass
class Settlement:
    """What settling the buffered sets decided."""

    changes: DataFrame  # PARSED_COLUMNS + members: the changes of complete sets
    statuses: list[DataFrame]  # record_id, batch_id, status, reason
    quarantined: list[DataFrame]  # record_id, batch_id, reason, detail, payload
    state: DataFrame  # STATE_SCHEMA rows to carry: open records and recent closed markers


def to_state(parsed: DataFrame, source: str, now: dt.datetime) -> DataFrame:
    """Parsed fragments and chunked records as open-state rows (images kept as JSON text),
    buffered at ``now``."""
    return parsed.select(
        *[
            F.lit(OPEN).alias("state")
            if name == "state"
            else F.lit(None).cast("timestamp").alias("closed_at")
            if name == "closed_at"
            else F.lit(now).cast("timestamp").alias("buffered_at")
            if name == "buffered_at"
            else F.lit(source).alias("source")
            if name == "source"
            else F.to_json(F.col(name[: -len("_json")])).alias(name)
            if name in ("before_json", "after_json", "key_json")
            else F.col(name)
            for name in STATE_SCHEMA.fieldNames()
        ]
    )


def from_state(state: DataFrame) -> DataFrame:
    """Open-state rows in the parsed shape (``PARSED_COLUMNS``)."""
    return state.select(
        *[
            from_text(c)
            if c in TEXT_FIELDS
            else F.lit(None).cast("string").alias(c)
            if c in ("reason", "detail", "partition", "position")
            else F.lit(None).cast(TXN).alias(c)
            if c == "txn"
            else F.col(c)
            for c in PARSED_COLUMNS
        ]
    )


def stream_time(batch: dt.datetime | None, buffered: dt.datetime | None) -> dt.datetime | None:
    """The newest arrival among the batch's records and the buffered sets (each ``None``
    where it has none): the clock that ages sets."""
    return max((t for t in (batch, buffered) if t is not None), default=None)


def nothing_to_settle(buffered: DataFrame) -> Settlement:
    """The settlement of an empty buffer (no open set, no fragment or chunked record in the
    batch): no change, no status, an empty state."""
    changes = from_state(buffered).withColumn("members", F.array(F.struct("record_id", "batch_id")))
    return Settlement(changes, [], [], buffered)


def settle_sets(buffered: DataFrame, clock: Clock) -> Settlement:
    """Settle every buffered chunked record (``STATE_SCHEMA`` rows) against its fragments.

    A chunk id names one record: the same record again (same commit, table, op and chunk
    references) is a redelivery; a different record under the same chunk ids is a conflict,
    and every open record and fragment of those chunk ids is quarantined (an earlier set that
    was applied stays applied)."""
    chunk_ids = (F.coalesce("before_chunk_id", F.lit("")), F.coalesce("after_chunk_id", F.lit("")))
    same_chunks = Window.partitionBy(*chunk_ids).orderBy(
        F.when(F.col("state") == OPEN, 1).otherwise(0), "record_id"
    )
    identity = F.concat_ws(
        "|", *[F.coalesce(F.col(c).cast("string"), F.lit("")) for c in _IDENTITY]
    )
    mains = buffered.where(F.col("rtype") == "chunked")
    # Each chunk id on its own: records that share either of their chunk ids conflict.
    by_chunk = mains.select(
        "record_id",
        identity.alias("_identity"),
        F.explode(F.array("before_chunk_id", "after_chunk_id")).alias("_chunk"),
    ).where(F.col("_chunk").isNotNull())
    shared = (
        by_chunk.groupBy("_chunk")
        .agg(F.count_distinct("_identity").alias("_versions"))
        .where(F.col("_versions") > 1)
    )
    in_conflict = (
        by_chunk.join(shared, "_chunk", "left_semi")
        .select("record_id")
        .distinct()
        .withColumn("_conflict", F.lit(True))
    )
    ranked = (
        mains.withColumn("rank", F.row_number().over(same_chunks))
        .join(in_conflict, "record_id", "left")
        .localCheckpoint()
    )
    is_open = F.col("state") == OPEN
    conflict = F.coalesce(F.col("_conflict"), F.lit(False))
    conflicted = ranked.where(is_open & conflict)
    ranked = ranked.where(~is_open | ~conflict).drop("_conflict")
    fragments = buffered.where((F.col("rtype") == "fragment") & (F.col("state") == OPEN))
    conflicted_ids = conflicted.select(
        F.explode(F.array("before_chunk_id", "after_chunk_id")).alias("chunk_id")
    ).where(F.col("chunk_id").isNotNull())
    conflicted_fragments = fragments.join(conflicted_ids, "chunk_id", "left_semi")
    fragments = fragments.join(conflicted_ids, "chunk_id", "left_anti")
    duplicates = ranked.where((F.col("rank") > 1) & is_open)
    candidates = ranked.where((F.col("rank") == 1) & is_open).drop("rank")
    settled = _assemble_sets(candidates, fragments, clock)
    complete = settled.where(F.col("outcome") == "complete")
    failed = settled.where(F.col("outcome") == "failed")
    waiting = settled.where(F.col("outcome") == "waiting")
    payloads = buffered.select("record_id", "payload")

    statuses = [
        duplicates.select(
            "record_id",
            "batch_id",
            F.lit(DUPLICATE).alias("status"),
            F.lit("redelivered chunked record").alias("reason"),
        ),
        _members(complete, "redelivered").select(
            "record_id",
            "batch_id",
            F.lit(DUPLICATE).alias("status"),
            F.lit("redelivered fragment").alias("reason"),
        ),
        _members(waiting, "members").select(
            "record_id", "batch_id", F.lit(PENDING).alias("status"), F.col("detail").alias("reason")
        ),
    ]
    failed_members = _members(failed, "members").join(payloads, "record_id")
    quarantined = [
        failed_members.select("record_id", "batch_id", "reason", "detail", "payload"),
        union_all(
            [
                conflicted.select(
                    "record_id",
                    "batch_id",
                    "payload",
                    F.concat_ws(", ", "before_chunk_id", "after_chunk_id").alias("ids"),
                ),
                conflicted_fragments.select(
                    "record_id", "batch_id", "payload", F.col("chunk_id").alias("ids")
                ),
            ]
        ).select(
            "record_id",
            "batch_id",
            F.lit("chunk_id_conflict").alias("reason"),
            F.concat(
                F.lit("chunk_id "),
                F.col("ids"),
                F.lit(" is shared by different chunked records (a redelivery is the same record)"),
            ).alias("detail"),
            "payload",
        ),
    ]

    settled_ids = union_all(
        [
            _members(complete, "members").select("record_id"),
            _members(failed, "members").select("record_id"),
        ]
    )
    strays = _strays(ranked, settled, fragments.join(settled_ids, "record_id", "left_anti"))
    after_complete = strays.where(F.array_contains("states", "complete"))
    expired = clock.expired().isNotNull()
    doomed = strays.where(
        F.array_contains("states", "failed") | (F.col("states").isNull() & expired)
    )
    statuses += [
        after_complete.select(
            "record_id",
            "batch_id",
            F.lit(DUPLICATE).alias("status"),
            F.lit("fragment redelivered after its set was reassembled").alias("reason"),
        ),
        strays.where(F.col("states").isNull() & ~expired).select(
            "record_id",
            "batch_id",
            F.lit(PENDING).alias("status"),
            F.lit("no chunked record has claimed this fragment yet").alias("reason"),
        ),
    ]
    quarantined.append(
        doomed.select(
            "record_id",
            "batch_id",
            F.when(F.col("states").isNull(), F.lit("orphan_fragment"))
            .otherwise(F.lit("fragment_of_failed_set"))
            .alias("reason"),
            F.concat(F.lit("chunk_id "), F.col("chunk_id")).alias("detail"),
            "payload",
        )
    )
    changes = (
        from_state(
            candidates.drop("before_json", "after_json").join(
                complete.select("record_id", "before_json", "after_json"), "record_id"
            )
        )
        .join(complete.select("record_id", "used"), "record_id")
        .withColumn("members", F.concat(F.array(F.struct("record_id", "batch_id")), F.col("used")))
        .drop("used")
    )
    leaving = union_all(
        [
            settled_ids,
            _members(complete, "used").select("record_id"),
            _members(complete, "redelivered").select("record_id"),
            after_complete.select("record_id"),
            doomed.select("record_id"),
        ]
    )
    state = _next_state(ranked, candidates, settled, fragments, leaving, clock)
    return Settlement(changes, statuses, quarantined, state)


def _members(settled: DataFrame, column: str) -> DataFrame:
    """One row (``record_id``, ``batch_id``, ``reason``, ``detail``) per record named in
    ``column`` of settled sets."""
    return per_record(settled, "reason", "detail", members=column)


def _next_state(
    ranked: DataFrame,
    candidates: DataFrame,
    settled: DataFrame,
    fragments: DataFrame,
    leaving: DataFrame,
    clock: Clock,
) -> DataFrame:
    """Open mains still waiting, their open fragments, and closed markers younger than
    ``max_age`` (chunk ids only, without payloads)."""
    columns = STATE_SCHEMA.fieldNames()
    outcome = F.col("outcome")
    waiting = candidates.join(
        settled.where(outcome == "waiting").select("record_id"), "record_id", "left_semi"
    )
    closed_now = (
        candidates.join(
            settled.where(outcome != "waiting").select("record_id", "outcome"), "record_id"
        )
        .withColumn("state", F.col("outcome"))
        .withColumn("closed_at", F.lit(clock.stream).cast("timestamp"))
    )
    recent = (
        F.lit(True)
        if clock.stream is None
        else F.coalesce(F.col("closed_at") >= F.lit(clock.stream - clock.max_age), F.lit(True))
    )
    closed_before = ranked.where((F.col("state") != OPEN) & recent)
    markers = union_all(
        [
            closed_now.select(*columns),
            closed_before.select(*columns),
        ]
    ).select(
        *[
            F.lit(None).cast(field.dataType).alias(field.name)
            if field.name in ("payload", "before_json", "after_json", "key_json", "types_json")
            else F.col(field.name)
            for field in STATE_SCHEMA.fields
        ]
    )
    still_open = fragments.join(leaving, "record_id", "left_anti")
    return union_all([waiting.select(*columns), markers, still_open.select(*columns)])


def _assemble_sets(candidates: DataFrame, fragments: DataFrame, clock: Clock) -> DataFrame:
    """``SETTLED_SCHEMA`` for each candidate main record, reassembled through Arrow."""
    from pyspark.sql.pandas.types import to_arrow_schema

    refs = candidates.select(
        "record_id",
        F.explode(F.array_compact(F.array("before_chunk_id", "after_chunk_id"))).alias("chunk_id"),
    )
    attached = refs.join(
        fragments.select(
            "chunk_id",
            F.struct("record_id", "batch_id", "chunk_id", "frag_index", "frag_data").alias(
                "fragment"
            ),
        ),
        "chunk_id",
    )
    grouped = attached.groupBy("record_id").agg(F.collect_list("fragment").alias("fragments"))
    buffered = candidates.join(grouped, "record_id", "left").select(
        "record_id",
        "batch_id",
        "before_json",
        "after_json",
        *(f"{image}_{field}" for image in _IMAGES for field in ("chunk_id", "total", "crc")),
        "fragments",
        clock.expired().alias("expired"),
    )
    schema = to_arrow_schema(SETTLED_SCHEMA, timezone="UTC")

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            yield arrow_batch([settle(row) for row in batch.to_pylist()], schema)

    return buffered.mapInArrow(run, SETTLED_SCHEMA).localCheckpoint()


def settle(row: dict[str, Any]) -> dict[str, Any]:
    """Reassemble one buffered main record's images; ``row["expired"]``: how long it waited,
    when that is too long."""
    landed = {row["record_id"]: row["batch_id"]}
    fragments = []
    for f in row["fragments"] or []:
        landed[f["record_id"]] = f["batch_id"]
        fragments.append((f["record_id"], Fragment(f["chunk_id"], f["frag_index"], f["frag_data"])))

    def named(ids: list[str]) -> list[dict[str, str]]:
        return [{"record_id": rid, "batch_id": landed[rid]} for rid in ids]

    members = named([row["record_id"], *(rid for rid, _ in fragments)])
    result: dict[str, Any] = {
        "record_id": row["record_id"],
        "outcome": "complete",
        "reason": None,
        "detail": None,
        "before_json": row["before_json"],
        "after_json": row["after_json"],
        "used": [],
        "redelivered": [],
        "members": members,
    }
    missing: list[str] = []
    for name in _IMAGES:
        if row[f"{name}_chunk_id"] is None:
            continue
        ref = ChunkRef(row[f"{name}_chunk_id"], row[f"{name}_total"], row[f"{name}_crc"])
        mine = [(rid, f) for rid, f in fragments if f.chunk_id == ref.chunk_id]
        assembly = assemble(ref, [f for _, f in mine])
        if assembly.status == FAILED:
            return {
                **result,
                "outcome": "failed",
                "reason": assembly.reason,
                "detail": f"{name}: {assembly.detail}",
                "before_json": None,
                "after_json": None,
            }
        if assembly.status != COMPLETE:
            missing.append(f"{name} lacks fragments {_abbreviated(assembly.missing)}")
            continue
        result[f"{name}_json"] = json.dumps(assembly.image, ensure_ascii=False)
        first: dict[int, str] = {}
        for rid, fragment in sorted(mine, key=lambda pair: pair[0]):
            if fragment.index in first:
                result["redelivered"].extend(named([rid]))
            else:
                first[fragment.index] = rid
        result["used"].extend(named(list(first.values())))
    if missing:
        detail = "; ".join(missing)
        if row["expired"]:
            return {
                **result,
                "outcome": "failed",
                "reason": "incomplete_fragment_set",
                "detail": f"{detail}, still after {row['expired']}",
                "before_json": None,
                "after_json": None,
                "used": [],
                "redelivered": [],
            }
        return {
            **result,
            "outcome": "waiting",
            "detail": detail,
            "before_json": None,
            "after_json": None,
            "used": [],
            "redelivered": [],
        }
    return result


def _abbreviated(indexes: tuple[int, ...]) -> str:
    shown = list(indexes[:20])
    return f"{shown}" if len(indexes) <= 20 else f"{shown} and {len(indexes) - 20} more"


def _strays(ranked: DataFrame, settled: DataFrame, fragments: DataFrame) -> DataFrame:
    """Open fragments that no open main record claims, with the states of their chunk's mains
    after this run (``states`` is null when no main record names the chunk)."""
    outcome_state = F.when(F.col("outcome") == "waiting", F.lit(OPEN)).otherwise(F.col("outcome"))
    after = ranked.join(
        settled.select("record_id", outcome_state.alias("new_state")), "record_id", "left"
    ).select(
        F.explode(F.array_compact(F.array("before_chunk_id", "after_chunk_id"))).alias("chunk_id"),
        F.when(F.col("rank") > 1, F.lit("duplicate"))
        .otherwise(F.coalesce("new_state", "state"))
        .alias("state"),
    )
    chunk_states = after.groupBy("chunk_id").agg(F.collect_set("state").alias("states"))
    return (
        fragments.join(chunk_states, "chunk_id", "left")
        .where(~F.coalesce(F.array_contains("states", OPEN), F.lit(False)))
        .localCheckpoint()
    )
