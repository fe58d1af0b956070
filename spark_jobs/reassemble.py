"""Parse landed records and reassemble oversized images from their fragments.

Per batch: every record landed in the batch is parsed; bad ones are quarantined, complete
changes go to the ``changes`` table, fragments and chunked main records are buffered. Then all
buffered sets are settled, whatever batch their pieces came in: a complete set whose CRC32C
matches becomes a change; a CRC mismatch, a conflicting redelivery or a set still incomplete
after ``--max-pending-age-seconds`` of stream time is quarantined with every raw payload;
the rest stays pending for the next run.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from airflow_cdc.core.events import ChunkRef, Control, Fragment, Message
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats import parser_for
from airflow_cdc.core.reassembly import COMPLETE, FAILED, assemble
from spark_jobs.common import (
    CONTROL,
    DUPLICATE,
    PENDING,
    RAW_SCHEMA,
    RECORD,
    JobContext,
    Outcomes,
    base_parser,
    ensure_table,
    finish,
    insert_new,
    landed_records,
    read_table,
    snapshot,
    start,
    table_exists,
    union_all,
)
from spark_jobs.schemas import struct

JOB_NAME = "reassemble"
JOB_VERSION = "1.1.0"

_CHANGE_FIELDS = (
    "schema STRING, table STRING, op STRING, sequence STRING, commit_ts TIMESTAMP,"
    " before_json STRING, after_json STRING, key_json STRING, partial BOOLEAN, types_json STRING"
)
_CHUNK_FIELDS = (
    "before_chunk_id STRING, before_total INT, before_crc BIGINT,"
    " after_chunk_id STRING, after_total INT, after_crc BIGINT"
)
PARSED_SCHEMA = struct(
    "record_id STRING, batch_id STRING, arrival_ts TIMESTAMP, rtype STRING, reason STRING,"
    " detail STRING, payload STRING, chunk_id STRING, frag_index INT, frag_data STRING, "
    + _CHANGE_FIELDS
    + ", "
    + _CHUNK_FIELDS
)
FRAGMENTS_SCHEMA = struct(
    "record_id STRING, batch_id STRING, arrival_ts TIMESTAMP, chunk_id STRING,"
    " frag_index INT, frag_data STRING, payload STRING, state STRING"
)
PENDING_SCHEMA = struct(
    "record_id STRING, batch_id STRING, arrival_ts TIMESTAMP, payload STRING, "
    + _CHANGE_FIELDS
    + ", "
    + _CHUNK_FIELDS
    + ", state STRING, closed_batch STRING"
)
CHANGES_SCHEMA = struct(
    "record_id STRING, batch_id STRING, members ARRAY<STRING>, " + _CHANGE_FIELDS
)
SETTLED_SCHEMA = struct(
    "record_id STRING, outcome STRING, reason STRING, detail STRING, before_json STRING,"
    " after_json STRING, used ARRAY<STRING>, redelivered ARRAY<STRING>, members ARRAY<STRING>"
)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def parse_partition(fmt: str) -> Any:
    """A function from raw rows to ``PARSED_SCHEMA`` tuples, for ``mapPartitions``."""
    parse = parser_for(fmt)
    width = len(PARSED_SCHEMA.fields) - 7

    def run(rows: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
        for row in rows:
            head = (row["record_id"], row["batch_id"], row["arrival_ts"])
            raw = None if row["data"] is None else bytes(row["data"])
            text = None if raw is None else raw.decode("utf-8", errors="replace")
            try:
                if row["envelope_error"]:
                    raise RecordFormatError("bad_envelope", row["envelope_error"])
                try:
                    strict = None if raw is None else raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise RecordFormatError("invalid_utf8", str(err)) from err
                message = Message(strict, row["partition_key"], row["seq_key"] or "", row["stream"])
                yield (*head, *_parsed(parse(message), text))
            except RecordFormatError as err:
                yield (*head, "error", err.reason, str(err), text, *([None] * width))

    return run


def _parsed(record: Any, text: str | None) -> tuple[Any, ...]:
    width = len(PARSED_SCHEMA.fields) - 7
    if isinstance(record, Control):
        return ("control", record.kind, record.detail, text, *([None] * width))
    if isinstance(record, Fragment):
        return (
            "fragment",
            None,
            None,
            text,
            record.chunk_id,
            record.index,
            record.data,
            *([None] * (width - 3)),
        )
    refs = [record.chunked.get(name) for name in ("before", "after")]
    chunk_cols: list[Any] = []
    for ref in refs:
        chunk_cols += [ref.chunk_id, ref.total_fragments, ref.crc32c] if ref else [None] * 3
    return (
        "chunked" if record.chunked else "change",
        None,
        None,
        text,
        None,
        None,
        None,
        record.table.schema,
        record.table.name,
        record.op,
        record.sequence,
        _EPOCH + dt.timedelta(microseconds=record.commit_ts_us),
        _dump(record.before),
        _dump(record.after),
        _dump(record.key),
        record.partial,
        _dump(record.types),
        *chunk_cols,
    )


def _dump(image: dict[str, Any] | list[Any] | None) -> str | None:
    return None if image is None else json.dumps(image, ensure_ascii=False)


def settle_partition(max_age: dt.timedelta) -> Any:
    """A function from buffered main records (with their fragments) to ``SETTLED_SCHEMA``."""

    def run(rows: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
        for row in rows:
            yield settle(row, max_age)

    return run


def settle(row: Any, max_age: dt.timedelta) -> tuple[Any, ...]:
    """Reassemble one buffered main record's images; ``row.expired`` says it waited too long."""
    fragments = [
        (f["record_id"], Fragment(f["chunk_id"], f["frag_index"], f["frag_data"]))
        for f in (row["fragments"] or [])
    ]
    members = [row["record_id"], *(rid for rid, _ in fragments)]
    images: dict[str, str | None] = {"before": row["before_json"], "after": row["after_json"]}
    used: list[str] = []
    redelivered: list[str] = []
    missing: list[str] = []
    for name in ("before", "after"):
        if row[f"{name}_chunk_id"] is None:
            continue
        ref = ChunkRef(row[f"{name}_chunk_id"], row[f"{name}_total"], row[f"{name}_crc"])
        mine = [(rid, f) for rid, f in fragments if f.chunk_id == ref.chunk_id]
        result = assemble(ref, [f for _, f in mine])
        if result.status == FAILED:
            return (
                row["record_id"],
                "failed",
                result.reason,
                f"{name}: {result.detail}",
                None,
                None,
                [],
                [],
                members,
            )
        if result.status != COMPLETE:
            missing.append(f"{name} lacks fragments {list(result.missing)}")
            continue
        images[name] = json.dumps(result.image, ensure_ascii=False)
        first: dict[int, str] = {}
        for rid, fragment in sorted(mine):
            if fragment.index in first:
                redelivered.append(rid)
            else:
                first[fragment.index] = rid
        used.extend(first.values())
    if missing:
        if row["expired"]:
            return (
                row["record_id"],
                "failed",
                "incomplete_fragment_set",
                f"{'; '.join(missing)}, still after {max_age}",
                None,
                None,
                [],
                [],
                members,
            )
        return (row["record_id"], "waiting", None, "; ".join(missing), None, None, [], [], members)
    return (
        row["record_id"],
        "complete",
        None,
        None,
        images["before"],
        images["after"],
        used,
        redelivered,
        members,
    )


def parse_batch(ctx: JobContext, fmt: str) -> DataFrame:
    records = landed_records(ctx).select(
        "record_id",
        "batch_id",
        "arrival_ts",
        "data",
        "envelope_error",
        "partition_key",
        "seq_key",
        "stream",
    )
    parsed = records.rdd.mapPartitions(parse_partition(fmt))
    return ctx.spark.createDataFrame(parsed, PARSED_SCHEMA)


def buffer_batch(ctx: JobContext, parsed: DataFrame, outcomes: Outcomes) -> None:
    """Quarantine bad records, emit complete changes, buffer fragments and chunked mains."""
    wh = ctx.warehouse
    errors = parsed.where(F.col("rtype") == "error")
    outcomes.quarantine(errors.select("record_id", "batch_id", "reason", "detail", "payload"))
    controls = parsed.where(F.col("rtype") == "control")
    outcomes.status(
        controls.select(
            "record_id",
            F.lit(CONTROL).alias("status"),
            F.concat_ws(": ", "reason", "detail").alias("reason"),
        )
    )
    fragments = parsed.where(F.col("rtype") == "fragment").select(
        *(f.name for f in FRAGMENTS_SCHEMA.fields if f.name != "state"),
        F.lit("open").alias("state"),
    )
    insert_new(ctx.spark, wh.fragments, fragments, "record_id")
    mains = parsed.where(F.col("rtype") == "chunked").select(
        *(f.name for f in PENDING_SCHEMA.fields if f.name not in ("state", "closed_batch")),
        F.lit("open").alias("state"),
        F.lit(None).cast("string").alias("closed_batch"),
    )
    insert_new(ctx.spark, wh.pending, mains, "record_id")
    changes = parsed.where(F.col("rtype") == "change").select(
        "record_id",
        F.lit(ctx.batch_id).alias("batch_id"),
        F.array("record_id").alias("members"),
        *(f.name for f in CHANGES_SCHEMA.fields[3:]),
    )
    insert_new(ctx.spark, wh.changes, changes, "record_id")


def settle_buffers(ctx: JobContext, max_age: dt.timedelta, outcomes: Outcomes) -> dict[str, int]:
    """Settle every buffered chunked record against the fragments that have arrived.

    Writes, in an order that a re-run after a crash at any point repeats safely: the changes
    of complete sets, then the ledger and quarantine (by the caller), then the buffers' new
    states, which is what retires a set.
    """
    spark, wh = ctx.spark, ctx.warehouse
    if not table_exists(spark, wh.pending) and not table_exists(spark, wh.fragments):
        return {}
    now = _stream_time(ctx)
    same_chunks = Window.partitionBy(
        F.coalesce("before_chunk_id", F.lit("")), F.coalesce("after_chunk_id", F.lit(""))
    ).orderBy(F.when(F.col("state") == "open", 1).otherwise(0), "record_id")
    ranked = (
        read_table(spark, wh.pending, PENDING_SCHEMA)
        .withColumn("rank", F.row_number().over(same_chunks))
        .transform(snapshot)
    )
    open_fragments = (
        read_table(spark, wh.fragments, FRAGMENTS_SCHEMA)
        .where(F.col("state") == "open")
        .transform(snapshot)
    )
    duplicates = ranked.where((F.col("rank") > 1) & (F.col("state") == "open"))
    candidates = ranked.where((F.col("rank") == 1) & (F.col("state") == "open")).drop("rank")
    settled = _settle(spark, candidates, open_fragments, now, max_age)
    counts = {
        r["outcome"]: r["n"]
        for r in settled.groupBy("outcome").agg(F.count(F.lit(1)).alias("n")).collect()
    }
    complete = settled.where(F.col("outcome") == "complete")
    failed = settled.where(F.col("outcome") == "failed")
    _emit_complete(ctx, candidates, complete)

    outcomes.status(
        duplicates.select(
            "record_id",
            F.lit(DUPLICATE).alias("status"),
            F.lit("redelivered chunked record").alias("reason"),
        )
    )
    redelivered = complete.select(F.explode("redelivered").alias("record_id"))
    outcomes.status(
        redelivered.select(
            "record_id",
            F.lit(DUPLICATE).alias("status"),
            F.lit("redelivered fragment").alias("reason"),
        )
    )
    failed_members = failed.select(F.explode("members").alias("record_id"), "reason", "detail")
    payloads = ranked.select("record_id", "batch_id", "payload").unionByName(
        open_fragments.select("record_id", "batch_id", "payload")
    )
    outcomes.quarantine(failed_members.join(payloads, "record_id"))
    outcomes.status(
        settled.where(F.col("outcome") == "waiting").select(
            F.explode("members").alias("record_id"),
            F.lit(PENDING).alias("status"),
            F.col("detail").alias("reason"),
        )
    )

    settled_members = complete.select(F.explode("members").alias("record_id")).unionByName(
        failed_members.select("record_id")
    )
    strays = _strays(
        ranked,
        settled,
        open_fragments.join(settled_members, "record_id", "left_anti"),
        now,
        max_age,
    )
    after_complete = strays.where(F.array_contains("states", "complete"))
    outcomes.status(
        after_complete.select(
            "record_id",
            F.lit(DUPLICATE).alias("status"),
            F.lit("fragment redelivered after its set was reassembled").alias("reason"),
        )
    )
    expired = _older_than(now, max_age)
    doomed = strays.where(
        F.array_contains("states", "failed") | (F.col("states").isNull() & expired)
    )
    outcomes.quarantine(
        doomed.select(
            "record_id",
            "batch_id",
            "payload",
            F.when(F.col("states").isNull(), F.lit("orphan_fragment"))
            .otherwise(F.lit("fragment_of_failed_set"))
            .alias("reason"),
            F.concat(F.lit("chunk_id "), F.col("chunk_id")).alias("detail"),
        )
    )
    outcomes.status(
        strays.where(F.col("states").isNull() & ~expired).select(
            "record_id",
            F.lit(PENDING).alias("status"),
            F.lit("no chunked record has claimed this fragment yet").alias("reason"),
        )
    )
    outcomes.flush()

    _set_states(
        ctx,
        wh.pending,
        PENDING_SCHEMA,
        [
            (duplicates.select("record_id"), "duplicate"),
            (complete.select("record_id"), "complete"),
            (failed.select("record_id"), "failed"),
        ],
    )
    _set_states(
        ctx,
        wh.fragments,
        FRAGMENTS_SCHEMA,
        [
            (complete.select(F.explode("used").alias("record_id")), "used"),
            (redelivered, "redelivered"),
            (after_complete.select("record_id"), "redelivered"),
            (failed_members.select("record_id"), "failed"),
            (doomed.select("record_id"), "failed"),
        ],
    )
    return {f"sets_{k}": int(v) for k, v in counts.items()}


def _settle(
    spark: SparkSession,
    candidates: DataFrame,
    open_fragments: DataFrame,
    now: dt.datetime | None,
    max_age: dt.timedelta,
) -> DataFrame:
    refs = candidates.select(
        "record_id",
        F.explode(F.array_compact(F.array("before_chunk_id", "after_chunk_id"))).alias("chunk_id"),
    )
    attached = refs.join(
        open_fragments.select(
            "chunk_id",
            F.struct("record_id", "chunk_id", "frag_index", "frag_data").alias("fragment"),
        ),
        "chunk_id",
    )
    grouped = attached.groupBy("record_id").agg(F.collect_list("fragment").alias("fragments"))
    buffered = candidates.join(grouped, "record_id", "left").withColumn(
        "expired", _older_than(now, max_age)
    )
    return spark.createDataFrame(
        buffered.rdd.mapPartitions(settle_partition(max_age)), SETTLED_SCHEMA
    ).transform(snapshot)


def _strays(
    ranked: DataFrame,
    settled: DataFrame,
    fragments: DataFrame,
    now: dt.datetime | None,
    max_age: dt.timedelta,
) -> DataFrame:
    """Open fragments that no open main record claims, with the states of their chunk's mains
    after this run (``states`` is null when no main record names the chunk)."""
    outcome_state = F.when(F.col("outcome") == "waiting", F.lit("open")).otherwise(F.col("outcome"))
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
        .where(~F.coalesce(F.array_contains("states", "open"), F.lit(False)))
        .transform(snapshot)
    )


def _stream_time(ctx: JobContext) -> dt.datetime | None:
    """The newest arrival time landed so far: the clock that ages incomplete sets."""
    raw = read_table(ctx.spark, ctx.warehouse.raw, RAW_SCHEMA)
    value = raw.where(F.col("kind") == RECORD).agg(F.max("arrival_ts")).first()
    newest = value[0] if value else None
    if newest is not None and newest.tzinfo is None:
        newest = newest.replace(tzinfo=dt.UTC)
    return newest


def _older_than(now: dt.datetime | None, max_age: dt.timedelta) -> Column:
    if now is None:
        return F.lit(False)
    return F.coalesce(F.col("arrival_ts") < F.lit(now - max_age), F.lit(False))


def _emit_complete(ctx: JobContext, candidates: DataFrame, complete: DataFrame) -> None:
    changes = (
        candidates.drop("before_json", "after_json")
        .join(complete.select("record_id", "before_json", "after_json", "used"), "record_id")
        .select(
            "record_id",
            F.lit(ctx.batch_id).alias("batch_id"),
            F.concat(F.array("record_id"), F.col("used")).alias("members"),
            *(f.name for f in CHANGES_SCHEMA.fields[3:]),
        )
    )
    insert_new(ctx.spark, ctx.warehouse.changes, changes, "record_id")


def _set_states(
    ctx: JobContext, path: str, schema: StructType, updates: list[tuple[DataFrame, str]]
) -> None:
    """Move buffered records to new states, in one MERGE."""
    rows = union_all(
        [ids.select("record_id", F.lit(state).alias("state")) for ids, state in updates]
    )
    rows = rows.dropDuplicates(["record_id"]).transform(snapshot)
    if rows.isEmpty():
        return
    update: dict[str, Any] = {"state": F.col("s.state")}
    if path == ctx.warehouse.pending:
        update["closed_batch"] = F.lit(ctx.batch_id)
    (
        ensure_table(ctx.spark, path, schema)
        .alias("t")
        .merge(rows.alias("s"), "t.record_id = s.record_id")
        .whenMatchedUpdate(set=update)
        .execute()
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = base_parser(__doc__)
    parser.add_argument("--format", default="dsql")
    parser.add_argument(
        "--max-pending-age-seconds",
        type=float,
        default=3600.0,
        help="stream time after which an incomplete fragment set is quarantined",
    )
    args = parser.parse_args(argv)
    ctx = start(JOB_NAME, JOB_VERSION, args)
    outcomes = Outcomes(ctx)
    parsed = parse_batch(ctx, args.format).transform(snapshot)
    counts = {
        r["rtype"]: r["n"]
        for r in parsed.groupBy("rtype").agg(F.count(F.lit(1)).alias("n")).collect()
    }
    buffer_batch(ctx, parsed, outcomes)
    stats: dict[str, Any] = {"job": JOB_NAME, "batch_id": ctx.batch_id}
    stats.update({f"parsed_{k}": int(v) for k, v in counts.items()})
    stats.update(settle_buffers(ctx, dt.timedelta(seconds=args.max_pending_age_seconds), outcomes))
    return finish(ctx, outcomes, stats, args.stats_file)


if __name__ == "__main__":
    main()
