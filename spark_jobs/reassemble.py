"""Reassembly of oversized images from their fragments, as DataFrame transforms.

Fragments and chunked main records wait in the open state (``_cdc/pending``, partitioned by
source) until their sets settle: a complete set whose CRC32C matches becomes a change; a CRC
mismatch, conflicting fragments or a set still incomplete after ``max_age`` of stream time (or
``max_wall_age`` of wall-clock time in the open state, see :class:`Clock`) is quarantined with
every raw payload; the rest stays open for the next run. A settled set leaves
a small closed marker for ``max_age`` (its chunk ids and, for a reassembled set, the xxhash64
of each fragment's data) so that a redelivery of its main record or of a fragment is
recognized as a duplicate, and a fragment that contradicts the reassembled set (other data at
an index, an index past its total) is quarantined. The open state is the only state carried between
batches; it is read whole (it is small) and rewritten once per run.

Everything is Spark expressions, the reassembly of each chunked set included (the rules of
the core's :func:`~airflow_cdc.core.reassembly.assemble`, which stays their specification),
except the CRC32C of a complete image's text, which runs through Arrow, for those texts only.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from airflow_cdc.core.formats.common import MAX_SET_BYTES
from airflow_cdc.core.reassembly import OVERSIZED, checksum
from spark_jobs.frames import materialize
from spark_jobs.json_columns import WholeJson
from spark_jobs.ledger import DUPLICATE, PENDING, QUARANTINED, per_record, union_all
from spark_jobs.parse import (
    CHUNK_REFS,
    IMAGE,
    PARSED_COLUMNS,
    TEXT_FIELDS,
    TXN,
    failure,
    from_text,
)
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
    " members ARRAY<STRUCT<record_id: STRING, batch_id: STRING>>, digests STRING"
)
_IMAGES = ("before", "after")
# What a closed marker no longer keeps of its record.
_MARKER_DROPS = ("payload", "before_json", "after_json", "key_json", "types_json")
# The quarantine reasons of a set that failed (its marker's state is ``failed``).
SET_FAILURES = (
    "fragment_out_of_range",
    "conflicting_fragments",
    "crc_mismatch",
    "malformed_image",
    "incomplete_fragment_set",
    OVERSIZED,
)
CHUNK_ID_CONFLICT = "chunk_id_conflict"
REDELIVERED_RECORD = "redelivered chunked record"
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


def settle_sets(
    buffered: DataFrame, clock: Clock, max_set_bytes: int = MAX_SET_BYTES
) -> Settlement:
    """Settle every buffered chunked record (``STATE_SCHEMA`` rows) against its fragments
    (a chunk id whose distinct fragments hold more than ``max_set_bytes`` fails its set unread:
    :func:`airflow_cdc.core.reassembly.assemble`).

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
    settled = _assemble_sets(candidates, fragments, clock, max_set_bytes)
    complete = settled.where(F.col("outcome") == "complete")
    failed = settled.where(F.col("outcome") == "failed")
    waiting = settled.where(F.col("outcome") == "waiting")
    payloads = buffered.select("record_id", "payload")

    statuses = [
        duplicates.select(
            "record_id",
            "batch_id",
            F.lit(DUPLICATE).alias("status"),
            F.lit(REDELIVERED_RECORD).alias("reason"),
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
            F.lit(CHUNK_ID_CONFLICT).alias("reason"),
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
    # Against the set it was reassembled from: past its end, or other data at its index.
    index = F.col("frag_index")
    past = F.coalesce(index >= F.col("total"), F.lit(False))
    other = F.coalesce(F.get("digest", index.cast("int")) != F.xxhash64("frag_data"), F.lit(False))
    mismatched = after_complete.where(past | other)
    after_complete = after_complete.where(~past & ~other)
    quarantined.append(
        mismatched.select(
            "record_id",
            "batch_id",
            F.when(past, F.lit("fragment_out_of_range"))
            .otherwise(F.lit("conflicting_fragments"))
            .alias("reason"),
            F.concat(
                F.lit("chunk_id "),
                F.col("chunk_id"),
                F.lit(" index "),
                index,
                F.when(
                    past, F.concat(F.lit(" >= total_fragments "), F.col("total"), F.lit(" of"))
                ).otherwise(F.lit(" holds other data than the fragment of that index in")),
                F.lit(" its set, reassembled before it arrived"),
            ).alias("detail"),
            "payload",
        )
    )
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
            mismatched.select("record_id"),
            doomed.select("record_id"),
        ]
    )
    state = _next_state(ranked, candidates, settled, fragments, leaving, clock)
    return Settlement(changes, statuses, quarantined, state)


def with_markers(state: DataFrame, finished: DataFrame) -> DataFrame:
    """``state`` with the open row of each chunked record in ``finished`` (``record_id``,
    ``status``, ``reason``: its outcome) that settled its set turned into the set's closed
    marker, as the run that settled it leaves it: a run that died after the ledger's commit,
    before the open state's, left the open rows, and its re-run must not drop the markers
    with them (a later redelivery of the set would wait, not be a duplicate). ``failed`` for
    a set that failed; none for a redelivered record or a chunk id conflict, which leave
    none; ``complete`` for the rest, whose sets became changes (whatever then became of the
    change: applied, superseded, or quarantined by the apply). Its ``closed_at`` is left
    null, for the next settlement to stamp with its stream time (:func:`_next_state`), as
    the dead run did with its own; it keeps no digests (:func:`_strays`)."""
    status, reason = F.col("status"), F.col("reason")
    marker = (
        F.when((status == QUARANTINED) & reason.isin(*SET_FAILURES), F.lit("failed"))
        .when((status == QUARANTINED) & (reason == CHUNK_ID_CONFLICT), F.lit(None))
        .when((status == DUPLICATE) & (reason == REDELIVERED_RECORD), F.lit(None))
        .otherwise(F.lit("complete"))
    )
    markers = (
        finished.select("record_id", marker.alias("_marker"))
        .where(F.col("_marker").isNotNull())
        .dropDuplicates(["record_id"])
    )
    joined = state.join(markers, "record_id", "left")
    closes = (F.col("state") == OPEN) & (F.col("rtype") == "chunked") & F.col("_marker").isNotNull()
    replaced = _marker_values(F.col("_marker"), F.lit(None), F.lit(None))
    return joined.select(
        *[
            F.when(closes, replaced[f.name].cast(f.dataType)).otherwise(F.col(f.name)).alias(f.name)
            if f.name in replaced
            else F.col(f.name)
            for f in state.schema.fields
        ]
    )


def _marker_values(state: Column, closed_at: Column, digests: Column) -> dict[str, Column]:
    """What a closed marker holds in place of its main record's values: its ``state`` (the
    set's outcome), when it closed, the digests of a reassembled set's fragments (in
    ``frag_data``, unused by a main record) and none of the record's payload or images."""
    return {
        **{name: F.lit(None) for name in _MARKER_DROPS},
        "state": state,
        "closed_at": closed_at,
        "frag_data": digests,
    }


def _as_markers(mains: DataFrame, state: Column, closed_at: Column, digests: Column) -> DataFrame:
    """``mains`` (main records' state rows) as closed markers (:func:`_marker_values`), in
    ``STATE_SCHEMA``."""
    values = _marker_values(state, closed_at, digests)
    return mains.select(
        *[
            values[f.name].cast(f.dataType).alias(f.name) if f.name in values else F.col(f.name)
            for f in STATE_SCHEMA.fields
        ]
    )


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
    stream = F.lit(clock.stream).cast("timestamp")
    closed_now = _as_markers(
        candidates.join(
            settled.where(outcome != "waiting").select("record_id", "outcome", "digests"),
            "record_id",
        ),
        F.col("outcome"),
        stream,
        F.col("digests"),
    )
    recent = (
        F.lit(True)
        if clock.stream is None
        else F.coalesce(F.col("closed_at") >= F.lit(clock.stream - clock.max_age), F.lit(True))
    )
    # A marker rebuilt after a crash (with_markers) takes this run's stream time.
    closed_before = _as_markers(
        ranked.where((F.col("state") != OPEN) & recent),
        F.col("state"),
        F.coalesce("closed_at", stream),
        F.col("frag_data"),
    )
    markers = closed_now.unionByName(closed_before)
    still_open = fragments.join(leaving, "record_id", "left_anti")
    return union_all([waiting.select(*columns), markers, still_open.select(*columns)])


def _assemble_sets(
    candidates: DataFrame, fragments: DataFrame, clock: Clock, max_bytes: int
) -> DataFrame:
    """``SETTLED_SCHEMA`` for each candidate main record: each image it names reassembled
    from the fragments of its chunk id by the rules of :func:`airflow_cdc.core.reassembly.
    assemble`, as expressions; the CRC32C of a complete image through Arrow. A complete
    image is read as an inline one is (:class:`~spark_jobs.json_columns.WholeJson`), and kept
    as the JSON text of its map. Where the core's ``malformed_image`` names its parser's
    complaint, this names the text's size: Spark reads the whole image as one VARIANT, which
    holds at most 128 MiB (an image that large fails its set, where the core takes it)."""
    images = candidates.select(
        "record_id",
        F.inline(
            F.array(
                *(
                    F.struct(
                        F.lit(number).alias("image_no"),
                        F.lit(name).alias("image"),
                        F.col(f"{name}_chunk_id").alias("chunk_id"),
                        F.col(f"{name}_total").alias("total"),
                        F.col(f"{name}_crc").alias("crc"),
                    )
                    for number, name in enumerate(_IMAGES)
                )
            )
        ),
    ).where(F.col("chunk_id").isNotNull())
    # Each chunk id's deliveries in one row, in order: by index, then data (two different
    # data at one index: a conflict), then record id (the first delivery of an index is the
    # one used). Grouped once by chunk id, the fragments' data moves in one shuffle, and the
    # images (few, small) join it where it is.
    sort_key = F.struct(
        F.col("frag_index").alias("i"), F.col("frag_data").alias("data"), "record_id", "batch_id"
    )
    deliveries = F.col("_deliveries")

    def follows_same_index(d: Column, k: Column) -> Column:
        """Whether delivery ``d`` at position ``k`` has the index of the one before it."""
        return F.get(deliveries, k - 1)["i"] == d["i"]

    def differs(d: Column, k: Column) -> Column:
        return follows_same_index(d, k) & (F.get(deliveries, k - 1)["data"] != d["data"])

    # Each distinct fragment once: a delivery of the data at an index that an earlier one
    # (by record id) brought is a copy, which the row names by its record id only. A chunk
    # id whose distinct fragments hold more than ``max_bytes`` is never gathered into one row
    # (it could outgrow what a row holds, and fail every retry): its set fails, with its
    # deliveries as members. Both windows cluster by chunk id, as the grouping does: one
    # shuffle of the fragments.
    in_order = Window.partitionBy("chunk_id").orderBy("frag_index", "frag_data", "record_id")
    copy = F.coalesce(
        (F.lag("frag_index").over(in_order) == F.col("frag_index"))
        & (F.lag("frag_data").over(in_order) == F.col("frag_data")),
        F.lit(False),
    )
    marked = fragments.select("*", copy.alias("_copy")).withColumn(
        "_bytes",
        F.sum(F.when(~F.col("_copy"), F.octet_length("frag_data"))).over(
            Window.partitionBy("chunk_id")
        ),
    )
    gathered_here = ~F.col("_copy") & (F.col("_bytes") <= max_bytes)
    per_chunk = (
        marked.groupBy("chunk_id")
        .agg(
            F.array_sort(F.collect_list(F.when(gathered_here, sort_key))).alias("_deliveries"),
            F.collect_list(F.struct("record_id", "batch_id")).alias("copies"),
            F.max("_bytes").alias("_bytes"),
        )
        .select(
            "chunk_id",
            F.filter(
                deliveries, lambda d, k: ~F.coalesce(follows_same_index(d, k), F.lit(False))
            ).alias("_firsts"),
            # Indexes only: a row carries each fragment's data as few times as it can.
            F.transform(F.filter(deliveries, differs), lambda d: d["i"]).alias("_clashes"),
            "copies",
            F.when(F.col("_bytes") > max_bytes, F.col("_bytes")).alias("_bytes"),
        )
    )
    total = F.col("total")

    inside = F.coalesce(F.filter("_firsts", lambda d: d["i"] < total), F.array().cast(_PIECES))
    gathered = (
        images.join(per_chunk, "chunk_id", "left")
        .select(
            "record_id",
            "chunk_id",
            "image_no",
            "image",
            "total",
            "crc",
            F.array_min(
                F.transform(F.filter("_firsts", lambda d: d["i"] >= total), lambda d: d["i"])
            ).alias("past"),
            F.array_min(F.filter("_clashes", lambda i: i < total)).alias("conflict"),
            inside.alias("_inside"),
            F.coalesce("copies", F.array().cast(_IDS)).alias("copies"),
            "_bytes",
        )
        .select(
            "*",
            # One per index inside the set, in order.
            F.transform(
                "_inside", lambda d: F.struct(d["i"].alias("i"), d["data"].alias("data"))
            ).alias("pieces"),
            F.transform(
                "_inside",
                lambda d: F.struct(
                    d["record_id"].alias("record_id"), d["batch_id"].alias("batch_id")
                ),
            ).alias("used"),
        )
        .drop("_inside")
    )
    present = F.col("pieces")
    complete = F.col("past").isNull() & F.col("conflict").isNull() & (F.size(present) == total)
    text = F.when(complete, F.array_join(F.transform(present, lambda p: p["data"]), ""))
    whole = WholeJson()
    texts = gathered.select("*", text.alias("_text"))
    read = texts.select(
        "*",
        _crc32c(F.col("_text")).alias("_actual"),
        whole.wrapped(F.col("_text")).alias("_wrapped"),
    )
    wrapped = F.col("_wrapped")
    missing = F.array_except(
        F.sequence(F.lit(0).cast("bigint"), total - 1), F.transform(present, lambda p: p["i"])
    )
    shown = F.concat(
        F.lit("["), F.array_join(F.slice(missing, 1, 20).cast("array<string>"), ", "), F.lit("]")
    )
    more = F.when(
        F.size(missing) > 20, F.concat(F.lit(" and "), F.size(missing) - 20, F.lit(" more"))
    )
    image = F.col("image")
    refused = (
        F.when(
            F.col("_bytes").isNotNull(),
            failure(
                OVERSIZED,
                F.concat(
                    F.lit("the distinct fragments of its chunk_id hold "),
                    F.col("_bytes"),
                    F.lit(f" bytes of data, more than the {max_bytes} one set may gather"),
                ),
            ),
        )
        .when(
            F.col("past").isNotNull(),
            failure(
                "fragment_out_of_range",
                F.concat(F.lit("index "), F.col("past"), F.lit(" >= total_fragments "), total),
            ),
        )
        .when(
            F.col("conflict").isNotNull(),
            failure(
                "conflicting_fragments",
                F.concat(F.lit("two different fragments with index "), F.col("conflict")),
            ),
        )
        .when(~complete, F.lit(None))
        .when(
            F.col("_actual") != F.col("crc"),
            failure(
                "crc_mismatch",
                F.concat(
                    F.lit("crc32c "),
                    F.col("_actual"),
                    F.lit(" of the reassembled text != declared "),
                    F.col("crc"),
                ),
            ),
        )
        .when(
            ~F.coalesce(whole.whole(wrapped), F.lit(False)),
            failure(
                "malformed_image",
                F.concat(
                    F.lit("the reassembled text ("),
                    F.octet_length("_text"),
                    F.lit(
                        " bytes) is not one JSON value of at most 128 MiB (what a VARIANT holds)"
                    ),
                ),
            ),
        )
        .when(
            ~whole.is_object_at(wrapped),
            failure("malformed_image", F.lit("image is not a JSON object")),
        )
    )
    judged = read.select(
        "record_id",
        "image_no",
        F.struct("image_no", "image", refused.alias("failure")).alias("failed"),
        F.when(
            ~complete & refused.isNull(),
            F.struct(
                "image_no",
                F.concat(
                    image, F.lit(" lacks fragments "), shown, F.coalesce(more, F.lit(""))
                ).alias("text"),
            ),
        ).alias("missing"),
        F.when(complete, F.to_json(whole.at(wrapped, "$", IMAGE))).alias("json"),
        F.when(
            complete,
            F.struct(
                F.col("chunk_id").alias("key"),
                F.transform(present, lambda p: F.xxhash64(p["data"])).alias("value"),
            ),
        ).alias("digest"),
        "used",
        "copies",
    )
    failed = F.col("failed.failure")
    by_record = judged.groupBy("record_id").agg(
        F.min(F.when(failed.isNotNull(), F.col("failed"))).alias("failed"),
        F.array_sort(F.collect_list("missing")).alias("missing"),
        *(
            F.max(F.when(F.col("image_no") == number, F.col("json"))).alias(f"_{name}_json")
            for number, name in enumerate(_IMAGES)
        ),
        # Distinct: both images of a record may name one chunk id (its pieces twice).
        F.array_distinct(F.flatten(F.collect_list("used"))).alias("used"),
        F.array_distinct(F.flatten(F.collect_list("copies"))).alias("copies"),
        F.array_distinct(F.collect_list("digest")).alias("_digests"),
    )
    main = F.struct("record_id", "batch_id")
    used = F.coalesce(F.col("used"), F.array().cast(_IDS))
    copies = F.coalesce(F.col("copies"), F.array().cast(_IDS))
    waited = F.array_join(F.transform("missing", lambda m: m["text"]), "; ")
    expired = clock.expired()
    outcome = (
        F.when(F.col("failed").isNotNull(), F.lit("failed"))
        .when(F.size("missing") == 0, F.lit("complete"))
        .when(expired.isNotNull(), F.lit("failed"))
        .otherwise(F.lit("waiting"))
    )
    reason = (
        F.when(F.col("failed").isNotNull(), F.col("failed.failure.reason"))
        .when(F.size("missing") == 0, F.lit(None))
        .when(expired.isNotNull(), F.lit("incomplete_fragment_set"))
    )
    detail = (
        F.when(
            F.col("failed").isNotNull(),
            F.concat(F.col("failed.image"), F.lit(": "), F.col("failed.failure.detail")),
        )
        .when(F.size("missing") == 0, F.lit(None))
        .when(expired.isNotNull(), F.concat(waited, F.lit(", still after "), expired))
        .otherwise(waited)
    )
    is_complete = outcome == "complete"
    settled = (
        candidates.join(by_record, "record_id", "left")
        .withColumn("missing", F.coalesce("missing", F.array().cast(_MISSING)))
        .select(
            "record_id",
            outcome.alias("outcome"),
            reason.alias("reason"),
            detail.alias("detail"),
            *(
                F.when(
                    is_complete,
                    F.when(F.col(f"{name}_chunk_id").isNotNull(), F.col(f"_{name}_json")).otherwise(
                        F.col(f"{name}_json")
                    ),
                ).alias(f"{name}_json")
                for name in _IMAGES
            ),
            F.when(is_complete, used).otherwise(F.array().cast(_IDS)).alias("used"),
            F.when(is_complete, F.filter(copies, lambda c: ~F.array_contains(used, c)))
            .otherwise(F.array().cast(_IDS))
            .alias("redelivered"),
            F.array_distinct(F.concat(F.array(main), copies)).alias("members"),
            F.when(
                is_complete & (F.size("_digests") > 0), F.to_json(F.map_from_entries("_digests"))
            ).alias("digests"),
        )
    )
    return materialize(settled)


_IDS = "ARRAY<STRUCT<record_id: STRING, batch_id: STRING>>"
_PIECES = "ARRAY<STRUCT<i: BIGINT, data: STRING, record_id: STRING, batch_id: STRING>>"
_MISSING = "ARRAY<STRUCT<image_no: INT, text: STRING>>"
# A marker's digests: per chunk id, the xxhash64 of each fragment's data, by index.
_DIGESTS = "MAP<STRING, ARRAY<BIGINT>>"


def _crc32c_of(texts: pa.Array) -> pa.Array:
    """CRC32C of each text's UTF-8 bytes (null for null): what no Spark expression computes."""
    return pa.array(
        [None if t is None else checksum(t) for t in texts.to_pylist()],
        pa.int64(),
    )


def _crc32c(text: Column) -> Column:
    """:func:`_crc32c_of` of a STRING column, through Arrow."""
    # pyspark's stubs know no Arrow UDF of arrays: the type hints above make it one.
    return F.arrow_udf(_crc32c_of, "bigint")(text)  # type: ignore[call-overload]


def _strays(ranked: DataFrame, settled: DataFrame, fragments: DataFrame) -> DataFrame:
    """Open fragments that no open main record claims, with the states of their chunk's mains
    after this run (``states`` is null when no main record names the chunk), and, where a
    marker of a reassembled set names the chunk, the set's ``total`` and the ``digest`` of
    each fragment it was reassembled from (by index; null for a marker left before
    apply_changes 2.8.17, or rebuilt after a crash)."""
    outcome_state = F.when(F.col("outcome") == "waiting", F.lit(OPEN)).otherwise(F.col("outcome"))
    marked = F.from_json(F.col("frag_data"), _DIGESTS)
    after = (
        ranked.join(
            settled.select("record_id", outcome_state.alias("new_state")), "record_id", "left"
        )
        .select(
            F.explode(
                F.filter(
                    F.array(
                        *(
                            F.struct(
                                F.col(f"{name}_chunk_id").alias("chunk_id"),
                                F.col(f"{name}_total").alias("total"),
                            )
                            for name in _IMAGES
                        )
                    ),
                    lambda c: c["chunk_id"].isNotNull(),
                )
            ).alias("c"),
            F.when(F.col("rank") > 1, F.lit("duplicate"))
            .otherwise(F.coalesce("new_state", "state"))
            .alias("state"),
            F.when(F.col("state") == "complete", marked).alias("_digests"),
        )
        .select(
            "c.chunk_id",
            "state",
            F.when(F.col("state") == "complete", F.col("c.total")).alias("total"),
            F.col("_digests")[F.col("c.chunk_id")].alias("digest"),
        )
    )
    chunk_states = after.groupBy("chunk_id").agg(
        F.collect_set("state").alias("states"),
        F.max("total").alias("total"),
        F.first("digest", ignorenulls=True).alias("digest"),
    )
    return (
        fragments.join(chunk_states, "chunk_id", "left")
        .where(~F.coalesce(F.array_contains("states", OPEN), F.lit(False)))
        .localCheckpoint()
    )
