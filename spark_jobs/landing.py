"""Landing, shared by every source: checkpoints, waves of parallel reads, the atomic commit.

A *shard* is any independently ordered unit of a source: a Kinesis shard, a Kafka partition,
a dump file. Each landing run reads every eligible shard from its checkpoint, in Spark tasks,
and appends the records together with one ``progress`` row per shard to the raw table in a
single Delta commit. The progress rows *are* the checkpoints, so data and checkpoints commit
atomically: a run that dies before its commit lands nothing, and the re-run lands exactly
what is missing. The commit carries Delta's idempotent-write options (``txnAppId`` =
``land:<source>``, ``txnVersion`` = the run's landing sequence), so two runs racing from the
same checkpoint cannot both land the same records.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_cdc.core.formats import IN_BAND_RESOLVED
from airflow_cdc.core.resolved import ShardProgress, resolved_timestamp
from airflow_cdc.jobs import TIP_UNITS, describe_shard
from spark_jobs.delta_tables import COMMIT_CONFLICTS, commit_with, table_exists
from spark_jobs.faults import fault_point
from spark_jobs.files import dated_name, delete_path, delete_stale, read_text, write_text
from spark_jobs.session import commit_metadata, fit_codegen
from spark_jobs.times import from_micros, horizon_us, to_micros
from spark_jobs.warehouse import PROGRESS, RAW_SCHEMA, RECORD, JobContext

log = logging.getLogger("airflow_cdc.jobs")

MAX_WAVES = 32
# A landing run's staging directory older than this belongs to a run that died.
STALE_STAGING_SECONDS = 24 * 3600.0


@dataclass(frozen=True)
class Checkpoint:
    """Where a shard's landing stands: last landed position, and whether it ended.
    ``log_id``: which log the positions are of, where the source names it (a Kafka topic's
    id): a log of the same name with another id (a topic deleted and created again) reuses
    the positions."""

    shard_id: str
    sequence_number: str | None
    closed: bool
    horizon_us: int | None
    log_id: str | None = None


# The key of a progress row's report (its ``data``, JSON) that names the shard's log.
LOG_ID = "log_id"


@dataclass(frozen=True)
class ShardTask:
    """One shard to read in one Spark task, from after ``after_sequence`` (None: the start)."""

    shard_id: str
    after_sequence: str | None
    parents: tuple[str, ...] = ()
    reopen: bool = False


# A reader turns a task into raw rows (records, then exactly one progress row last).
ShardReader = Callable[[ShardTask], Iterator[tuple[Any, ...]]]


def load_checkpoints(ctx: JobContext, source: str) -> tuple[dict[str, Checkpoint], int]:
    """Per-shard checkpoints of ``source`` and the next landing sequence number.

    Every landing run writes a progress row for every shard it knows (carrying forward the
    ones it did not read), so the newest run's rows are the whole checkpoint. The resolved
    state file names that run; reading from its ``land_seq`` on lets Delta skip the files of
    older runs by their statistics (a run that committed but died before writing the file is
    newer, so it is read too).
    """
    if not table_exists(ctx.spark, ctx.warehouse.raw):
        return {}, 1
    progress = (
        ctx.spark.read.format("delta")
        .load(ctx.warehouse.raw)
        .where((F.col("source") == source) & (F.col("kind") == PROGRESS))
    )
    state = read_text(ctx, ctx.warehouse.resolved_file(source))
    hint = json.loads(state).get("land_seq") if state else None
    if isinstance(hint, int):
        progress = progress.where(F.col("land_seq") >= hint)
    rows = progress.select(
        "shard_id", "sequence_number", "shard_closed", horizon_us(), "land_seq", "data"
    ).collect()
    newest = max((r["land_seq"] for r in rows), default=0)
    checkpoints = {
        r["shard_id"]: Checkpoint(
            r["shard_id"],
            r["sequence_number"],
            bool(r["shard_closed"]),
            r["horizon_us"],
            _report(r["data"]).get(LOG_ID),
        )
        for r in rows
        if r["land_seq"] == newest
    }
    return checkpoints, newest + 1


def land(
    ctx: JobContext,
    source: str,
    tasks: list[ShardTask],
    reader: ShardReader,
    checkpoints: dict[str, Checkpoint],
    land_seq: int,
    lateness_us: int,
    stale_after: float = STALE_STAGING_SECONDS,
) -> dict[str, Any]:
    """Read ``tasks`` (parents before children), then commit records and progress at once.

    ``stale_after``: seconds after which another run's staging directory is taken for the
    leftovers of a run that died, and deleted."""
    run = run_name(ctx)
    # What a crashed run of this source left behind was never committed: drop it (a run
    # under way at the same time keeps its own).
    delete_stale(ctx, ctx.warehouse.staging(source), stale_after)
    staging = ctx.warehouse.staging(source, dated_name())
    finished = {s for s, c in checkpoints.items() if c.closed}
    progress = dict(checkpoints)
    tips: dict[str, dict[str, int]] = {}
    waiting = [t for t in tasks if t.reopen or t.shard_id not in finished]
    waves = 0
    while waiting and waves < MAX_WAVES:
        ready = [t for t in waiting if all(p in finished for p in t.parents)]
        if not ready:
            break
        waves += 1
        _read_wave(ctx, ready, reader, f"{staging}/wave={waves}", source, land_seq, run)
        for row, tip in _wave_progress(ctx, f"{staging}/wave={waves}"):
            tips[row.shard_id] = tip
            before = progress.get(row.shard_id)
            if before is not None:
                row = replace(row, horizon_us=newest_of(before.horizon_us, row.horizon_us))
            if row.sequence_number is None and before is not None:
                row = replace(row, sequence_number=before.sequence_number)
            if row.log_id is None and before is not None:
                row = replace(row, log_id=before.log_id)
            progress[row.shard_id] = row
            if row.closed:
                finished.add(row.shard_id)
        done = {t.shard_id for t in ready}
        waiting = [t for t in waiting if t.shard_id not in done]
    # The waves by name: a glob makes Spark probe the pattern as a path, which logs a
    # FileNotFoundException's stack trace in every healthy run.
    read = [f"{staging}/wave={wave}" for wave in range(1, waves + 1)]
    staged = ctx.spark.read.schema(RAW_SCHEMA).parquet(*read) if read else None
    stats = commit(ctx, source, tasks, staged, progress, land_seq, lateness_us, run, tips)
    if waves:
        delete_path(ctx, staging)
    stats.update(waves=waves, shards_pending=sorted(t.shard_id for t in waiting))
    return stats


def newest_of(horizon_us: int | None, found_us: int | None) -> int | None:
    """The later of two horizons (or markers), either unknown: a shard's horizon only moves
    forward, to its newest marker or arrival ever landed."""
    if horizon_us is None or found_us is None:
        return found_us if horizon_us is None else horizon_us
    return max(horizon_us, found_us)


def commit(
    ctx: JobContext,
    source: str,
    tasks: list[ShardTask],
    staged: DataFrame | None,
    progress: dict[str, Checkpoint],
    land_seq: int,
    lateness_us: int,
    run: str,
    tips: dict[str, dict[str, int]] | None = None,
    counted: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Append what a run read (records, then one progress row per shard read) with the
    carried progress of the other shards, in one idempotent Delta commit; then record the
    source's resolved timestamp. ``counted``: the records per shard in ``staged``, where the
    caller counted them already (counted here otherwise)."""
    resolved = resolved_timestamp(
        [ShardProgress(c.shard_id, c.horizon_us, c.closed) for c in progress.values()],
        lateness_us,
    )
    landed = 0
    per_shard: dict[str, int] = {}
    if staged is not None:
        records = staged.where(F.col("kind") == RECORD)
        if counted is None:
            found = records.groupBy("shard_id").agg(F.count(F.lit(1)).alias("n")).collect()
            counted = {r["shard_id"]: int(r["n"]) for r in found}
        per_shard = {shard: n for shard, n in counted.items() if n}
        landed = sum(per_shard.values())
        fit_codegen(ctx.spark, landed)
        # One progress row per known shard, as this run leaves it: the newest run's rows are
        # the whole checkpoint (a shard read without a new marker keeps its horizon).
        checkpoint = _progress_rows(ctx, source, progress, land_seq, run)
        fault_point("land:before_commit")
        rows = records.unionByName(checkpoint).select(*RAW_SCHEMA.fieldNames())
        with commit_metadata(ctx.spark, land_run=run) as mine:
            try:
                _append_raw(ctx, rows, source, land_seq)
            except COMMIT_CONFLICTS:
                # Another run committed first: of this source (found below), or of another
                # source while both created the table (then once more).
                if not _landed_by_another(ctx, source, land_seq, run):
                    _append_raw(ctx, rows, source, land_seq)
        fault_point("land:after_commit")
        # This run's commit, found in the log, is the common answer (no Spark job); where
        # the log's last few commits do not hold it, the raw table's progress rows say.
        appended = commit_with(ctx.spark, ctx.warehouse.raw, "WRITE", mine) is not None
        if not appended and _landed_by_another(ctx, source, land_seq, run):
            # A concurrent run of the source committed this landing sequence first (Delta
            # skipped or refused this run's append): it owns the batch and the state file.
            log.warning("landing run %s of %s lost to a concurrent run: no-op", run, source)
            return {
                "job": ctx.job,
                "source": source,
                "batch_id": ctx.batch_id,
                "landed": 0,
                "land_seq": land_seq,
                "skipped": f"a concurrent landing run of {source} committed land_seq"
                f" {land_seq} first; this run changed nothing",
            }
    state = {
        "source": source,
        "resolved_ts": _iso(resolved),
        "batch_id": ctx.batch_id,
        # The newest committed landing run: where the next run's checkpoints are.
        "land_seq": land_seq if staged is not None else land_seq - 1,
        "run": run,
        "shards": {
            s: {
                "sequence_number": c.sequence_number,
                "closed": c.closed,
                "horizon_ts": _iso(c.horizon_us),
            }
            for s, c in sorted(progress.items())
        },
    }
    write_text(ctx, ctx.warehouse.resolved_file(source), json.dumps(state, indent=2))
    shards = shard_report(tasks, progress, per_shard, time.time(), tips)
    for shard, done in shards.items():
        log.info("shard %s", describe_shard(shard, done))
    return {
        "job": ctx.job,
        "source": source,
        "batch_id": ctx.batch_id,
        "landed": landed,
        "shards_read": sum(1 for t in tasks if t.shard_id in progress),
        "shards": shards,
        "resolved_ts": _iso(resolved),
        "land_seq": land_seq,
    }


def shard_report(
    tasks: list[ShardTask],
    progress: dict[str, Checkpoint],
    landed: dict[str, int],
    now: float,
    tips: dict[str, dict[str, int]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per shard (or partition) read this run: the records it landed, the newest change
    time read from it (its horizon) and how far that lies behind ``now`` (whole seconds;
    ``None`` before any marker), whether the shard is closed, and, where its reader knows,
    how far the run stopped behind the shard's tip (``tips``: a Kafka partition's offsets
    to its end, a Kinesis shard's ``MillisBehindLatest``)."""
    report: dict[str, dict[str, Any]] = {}
    for task in tasks:
        checkpoint = progress.get(task.shard_id)
        if checkpoint is None:
            continue
        horizon = checkpoint.horizon_us
        behind = None if horizon is None else max(0, round(now - horizon / 1e6))
        report[task.shard_id] = {
            "landed": landed.get(task.shard_id, 0),
            "horizon_ts": _iso(horizon),
            "behind_seconds": behind,
            "closed": checkpoint.closed,
            **(tips or {}).get(task.shard_id, {}),
        }
    return report


def _append_raw(ctx: JobContext, rows: DataFrame, source: str, land_seq: int) -> None:
    """One idempotent append to the raw table; the first creates it (there is no separate
    CREATE for two runs to race on)."""
    (
        rows.write.format("delta")
        .mode("append")
        .partitionBy("source", "batch_id")
        .option("txnAppId", f"land:{source}")
        .option("txnVersion", land_seq)
        .save(ctx.warehouse.raw)
    )


def _landed_by_another(ctx: JobContext, source: str, land_seq: int, run: str) -> bool:
    """Whether the raw table holds ``land_seq`` of ``source`` from a run other than ``run``,
    found by the progress rows that every landing commit has (of any batch: the files of
    other landing sequences, and files of records alone, are skipped by their statistics)."""
    try:
        # Read, not isDeltaTable(): that may answer from a snapshot taken before the commit
        # of a concurrent run that created the table.
        raw = ctx.spark.read.format("delta").load(ctx.warehouse.raw)
    except AnalysisException:
        return False
    rows = (
        raw.where(
            (F.col("source") == source)
            & (F.col("land_seq") == land_seq)
            & (F.col("kind") == PROGRESS)  # every landing commit has them; files skipped
        )
        .select((F.col("land_run") == run).alias("mine"))
        .distinct()
        .collect()
    )
    return bool(rows) and not any(r["mine"] for r in rows)


def add_landing_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every landing job takes."""
    parser.add_argument(
        "--lateness-seconds",
        type=float,
        default=300.0,
        help="how late a change may still arrive after the newest one seen on its shard",
    )
    parser.add_argument(
        "--stale-staging-seconds",
        type=float,
        default=STALE_STAGING_SECONDS,
        help="age after which another run's staging directory is deleted as a dead run's",
    )


def run_name(ctx: JobContext) -> str:
    """A landing run's name, kept in each row it lands (``land_run``)."""
    return f"{ctx.run_id}:{uuid.uuid4().hex[:8]}"


def _progress_rows(
    ctx: JobContext, source: str, progress: dict[str, Checkpoint], land_seq: int, run: str
) -> Any:
    """The checkpoint rows of a landing run: one per shard the source has."""
    rows = []
    for c in progress.values():
        report = None if c.log_id is None else {LOG_ID: c.log_id}
        row = progress_row(
            source,
            c.shard_id,
            c.sequence_number,
            None,
            c.closed,
            from_micros(c.horizon_us),
            report,
        )
        rows.append((*row[:1], source, *row[1:], land_seq, ctx.batch_id, run))
    return ctx.spark.createDataFrame(rows, RAW_SCHEMA)


# A wave's reader hands its rows to Spark as Arrow batches of at most this many rows, or
# about this many bytes of record data (a Kafka message or Kinesis record may be 1 MiB).
WAVE_BATCH_ROWS = 10_000
WAVE_BATCH_BYTES = 64 * 1024 * 1024
_DATA = RAW_SCHEMA.fieldNames().index("data")


def _read_wave(
    ctx: JobContext,
    tasks: list[ShardTask],
    reader: ShardReader,
    path: str,
    source: str,
    land_seq: int,
    run: str,
) -> None:
    """Each task's rows, read in a Spark task of its own, staged as Parquet at ``path``.

    The rows reach the JVM as Arrow batches: as pickled rows (``createDataFrame`` over an
    RDD), unpickling and converting them in the JVM took twice the reader's own time."""
    from pyspark.sql.pandas.types import to_arrow_schema

    batch_id = ctx.batch_id
    schema = to_arrow_schema(RAW_SCHEMA, timezone="UTC")

    def read(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                rows: list[tuple[Any, ...]] = []
                size = 0
                for row in reader(tasks[index]):
                    # Reader rows stop before land_seq, batch_id and land_run.
                    rows.append((*row[:1], source, *row[1:], land_seq, batch_id, run))
                    size += len(rows[-1][_DATA] or b"")
                    if len(rows) == WAVE_BATCH_ROWS or size >= WAVE_BATCH_BYTES:
                        yield _raw_batch(rows, schema)
                        rows, size = [], 0
                if rows:
                    yield _raw_batch(rows, schema)

    tasks_frame = ctx.spark.range(len(tasks), numPartitions=len(tasks))
    tasks_frame.mapInArrow(read, RAW_SCHEMA).write.mode("overwrite").parquet(path)
    log.info("landed wave of %d shards into staging", len(tasks))


def _raw_batch(rows: list[tuple[Any, ...]], schema: Any) -> Any:
    """Raw rows (tuples in ``RAW_SCHEMA``'s order) as an Arrow batch. Times are aware
    datetimes and go as microseconds since the epoch (a naive one raises). A string that
    holds a lone UTF-16 surrogate (text from a JSON escape of half a pair) is not UTF-8: it
    goes with each such surrogate replaced by U+FFFD, and the record lands, as when rows went
    to the JVM as pickles (Java's decoding of their UTF-8 did the same)."""
    import pyarrow as pa

    columns = []
    for field, values in zip(schema, zip(*rows, strict=True), strict=True):
        if pa.types.is_timestamp(field.type):
            values = tuple(None if v is None else to_micros(v) for v in values)
        try:
            columns.append(pa.array(values, type=field.type))
        except UnicodeEncodeError:
            columns.append(pa.array([_utf8(v) for v in values], type=field.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _utf8(text: str | None) -> str | None:
    return None if text is None else _SURROGATE.sub("\ufffd", text)


def _wave_progress(ctx: JobContext, path: str) -> list[tuple[Checkpoint, dict[str, int]]]:
    """Each shard's checkpoint as a wave's reader left it, with the reader's report of how
    far it stopped behind the shard's tip (see :func:`progress_row`)."""
    rows = (
        ctx.spark.read.schema(RAW_SCHEMA)
        .parquet(path)
        .where(F.col("kind") == PROGRESS)
        .select("shard_id", "sequence_number", "shard_closed", horizon_us(), "data")
        .collect()
    )
    reports = [_report(r["data"]) for r in rows]
    return [
        (
            Checkpoint(
                r["shard_id"],
                r["sequence_number"],
                bool(r["shard_closed"]),
                r["horizon_us"],
                report.get(LOG_ID),
            ),
            {k: int(v) for k, v in report.items() if k in TIP_UNITS and v is not None},
        )
        for r, report in zip(rows, reports, strict=True)
    ]


def _report(data: bytes | None) -> dict[str, Any]:
    """A progress row's report (its ``data``): see :func:`progress_row`."""
    return json.loads(bytes(data)) if data else {}


def progress_row(
    stream: str,
    shard_id: str,
    sequence_number: str | None,
    seq_key: str | None,
    closed: bool,
    horizon: dt.datetime | None,
    report: dict[str, Any] | None = None,
) -> tuple[Any, ...]:
    """The checkpoint row a reader yields last (record_id, stream ... horizon_ts). ``report``
    rides in the row's ``data`` (JSON) to the driver: how far the reader stopped behind the
    shard's tip (:data:`OFFSETS_BEHIND`, :data:`MILLIS_BEHIND` or :data:`LINES_BEHIND`; a
    wave's progress rows stay in staging, and the committed checkpoint rows are written
    afresh without it), and the shard's :data:`LOG_ID`, which the committed rows keep."""
    return (
        f"progress:{stream}/{shard_id}/{uuid.uuid4().hex}",
        stream,
        shard_id,
        sequence_number,
        seq_key,
        None,
        None,
        json.dumps(report).encode() if report else None,
        None,
        PROGRESS,
        closed,
        horizon,
    )


def record_row(
    record_id: str,
    stream: str | None,
    shard_id: str,
    sequence_number: str,
    seq_key: str,
    partition_key: str | None,
    arrival: dt.datetime | None,
    data: bytes | None,
    envelope_error: str | None = None,
) -> tuple[Any, ...]:
    return (
        record_id,
        stream,
        shard_id,
        sequence_number,
        seq_key,
        partition_key,
        arrival,
        None if data is None else bytearray(data),
        envelope_error,
        RECORD,
        None,
        None,
    )


def lateness_us(fmt: str | None, seconds: float) -> int:
    """The lateness bound of a source: none for formats whose in-band markers are exact."""
    return 0 if fmt in IN_BAND_RESOLVED else int(seconds * 1_000_000)


def _iso(micros: int | None) -> str | None:
    moment = from_micros(micros)
    return None if moment is None else moment.isoformat()
