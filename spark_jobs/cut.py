"""Consistent cuts: every table as of one point of the source's commit time.

With a cut, the apply job applies exactly the changes committed before ``T``, the source's
resolved timestamp capped by the run's data interval end, and holds the rest in the open
state (``_cdc/held``, partitioned by source, rewritten once per run, like the pending
fragment sets) for the first run whose cut passes them. After every target table has taken
its one MERGE, one row appended to ``_cdc/cuts`` publishes the cut: the source, ``T``, the
interval, whether ``T`` is heuristic (a source without in-band resolved timestamps, where the
landing job's lateness rule gives ``T``) and each table's Delta version. That append is the
publish point: a run that dies before it publishes nothing, and its re-run publishes the cut
once. A small JSON file (:func:`~airflow_cdc.jobs.published_cut_path`) then points at the
newest published cut, for readers without Spark.

Cuts only move forward: a run whose ``T`` is not past the newest published cut (a backfill of
an earlier hour) changes no table and publishes nothing; the changes it finds are held for the
next forward cut. A change committed below a published cut that arrives later is *late*: with
a heuristic cut it is applied by the next cut and its ledger entry says so (the lateness bound
was too small); with true resolved timestamps (CockroachDB, YDB, Huawei CDL) the source
promised it could not arrive, so a change that would move a row is quarantined
(``below_published_cut``) and a redelivered one stays a duplicate.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from airflow_cdc.core.ddl import TableSpec
from airflow_cdc.core.exceptions import ResolvedTimestampUnavailable
from airflow_cdc.core.formats import IN_BAND_RESOLVED
from airflow_cdc.core.resolved import ShardProgress, resolved_timestamp
from airflow_cdc.core.resolved_state import parse_state
from airflow_cdc.jobs import published_cut_path
from spark_jobs import ledger, open_state
from spark_jobs.delta_tables import table_version
from spark_jobs.files import read_text, write_text
from spark_jobs.ledger import PENDING
from spark_jobs.parse import PARSED_COLUMNS, TEXT_FIELDS, TXN, from_text
from spark_jobs.resolve import has_commit_time, is_unordered
from spark_jobs.schemas import struct
from spark_jobs.times import from_micros, horizon_us, to_micros
from spark_jobs.warehouse import PROGRESS, RECORD, JobContext

log = logging.getLogger("airflow_cdc.jobs")

MEMBERS = "ARRAY<STRUCT<record_id: STRING, batch_id: STRING>>"
PAYLOADS = "ARRAY<STRUCT<record_id: STRING, payload: STRING>>"
CUTS_SCHEMA = struct(
    "cut_at TIMESTAMP, interval_start TIMESTAMP, interval_end TIMESTAMP, heuristic BOOLEAN,"
    " tables MAP<STRING, BIGINT>, locations MAP<STRING, STRING>, batch_id STRING,"
    " run_id STRING, published_at TIMESTAMP, source STRING"
)


@dataclass(frozen=True)
class Cut:
    """Where one run cuts the source's changes."""

    at: dt.datetime | None  # T; None when the source has no resolved timestamp yet
    interval_start: dt.datetime | None
    interval_end: dt.datetime
    heuristic: bool
    published: dt.datetime | None  # the newest cut published before this run
    blocked_by: tuple[str, ...] = ()  # earlier batches with undecided records
    waiting_for: tuple[str, ...] = ()  # incomplete transactions that lowered the cut
    overtaken_by: tuple[str, ...] = ()  # later batches that capped the cut
    fresh: bool = False  # no cut published and no earlier batch of the source landed

    @property
    def forward(self) -> bool:
        """Whether this run publishes a new cut (and changes tables)."""
        return self.at is not None and (self.published is None or self.at > self.published)

    def describe(self) -> dict[str, Any]:
        return {
            "at": _iso(self.at),
            "interval_start": _iso(self.interval_start),
            "interval_end": _iso(self.interval_end),
            "heuristic": self.heuristic,
            "published_before": _iso(self.published),
            "forward": self.forward,
            "blocked_by": list(self.blocked_by),
            "waiting_for": list(self.waiting_for),
            "overtaken_by": list(self.overtaken_by),
        }


# A run without a cut: every held change is applied, and nothing is published.
NO_CUT = Cut(None, None, dt.datetime.max.replace(tzinfo=dt.UTC), heuristic=True, published=None)


def _iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.astimezone(dt.UTC).isoformat()


def _utc(value: dt.datetime) -> dt.datetime:
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def batch_resolved(
    ctx: JobContext, source: str, before_run: int | None = None
) -> dt.datetime | None:
    """The resolved timestamp as the landing run of this batch left it: every change
    committed before it was landed in this batch or an earlier one. With ``before_run``, as
    the landing run before that landing sequence left it (whatever its batch).

    The source's state file holds the newest landing run's; when a later batch has landed
    since (or ``before_run`` asks for an earlier run), that run's checkpoint rows (its
    shards' horizons) give it, less the lateness that the newest run subtracted (its shards'
    horizons against its resolved timestamp)."""
    text = read_text(ctx, ctx.warehouse.resolved_file(source))
    if text is None:
        return None
    try:
        newest = parse_state(text)
    except ResolvedTimestampUnavailable as err:
        log.warning("no cut for %s: %s", source, err)
        return None
    state = json.loads(text)
    if state.get("batch_id") == ctx.batch_id and before_run is None:
        return newest
    shards = [
        ShardProgress(
            shard,
            to_micros(_utc(dt.datetime.fromisoformat(v["horizon_ts"])))
            if v.get("horizon_ts")
            else None,
            bool(v.get("closed")),
        )
        for shard, v in state.get("shards", {}).items()
    ]
    before = resolved_timestamp(shards, 0)
    if before is None:
        return None
    lateness = max(0, before - to_micros(newest))
    progress_of = (F.col("source") == source) & (F.col("kind") == PROGRESS)
    if before_run is None:
        progress_of = progress_of & (F.col("batch_id") == ctx.batch_id)
    else:  # landing sequences follow one another: the run before is before_run - 1
        progress_of = progress_of & (F.col("land_seq") == before_run - 1)
    rows = (
        ctx.spark.read.format("delta")
        .load(ctx.warehouse.raw)
        .where(progress_of)
        .select("shard_id", horizon_us(), "shard_closed", "land_seq")
        .collect()
    )
    if not rows:
        return None  # nothing landed in this batch: no cut can be vouched for
    last = max(r["land_seq"] for r in rows)
    progress = [
        ShardProgress(r["shard_id"], r["horizon_us"], bool(r["shard_closed"]))
        for r in rows
        if r["land_seq"] == last
    ]
    resolved = resolved_timestamp(progress, lateness)
    if resolved is None:
        return None
    return from_micros(resolved)


def unfinished_batches(ctx: JobContext, source: str, since: str | None) -> list[str]:
    """Earlier batches of the source, landed after ``since`` (the newest published cut's
    batch), that still have records no run has decided: a cut must not pass them. Reads the
    ledger only when the raw table has files of such batches (usually it has none: the
    previous batch published the newest cut)."""
    wh = ctx.warehouse
    records = earlier_records(ctx, source, since).select("record_id", "batch_id")
    if not records.inputFiles():  # the files left after Delta's partition pruning
        return []
    if DeltaTable.isDeltaTable(ctx.spark, wh.ledger):
        decided = ctx.spark.read.format("delta").load(wh.ledger).where(F.col("source") == source)
        if since is not None:
            decided = decided.where(F.col("batch_id") > since)
        decided = decided.where(F.col("batch_id") < ctx.batch_id).select("record_id", "batch_id")
        records = records.join(decided, ["record_id", "batch_id"], "left_anti")
    return sorted(r[0] for r in records.select("batch_id").distinct().collect())


def decide(
    ctx: JobContext,
    source: str,
    fmt: str,
    interval_end: dt.datetime,
    interval_start: dt.datetime | None,
) -> Cut:
    """The run's cut: the resolved timestamp this batch's landing left
    (:func:`batch_resolved`), capped by ``interval_end``; no cut while an earlier batch has
    records no run has decided (:func:`unfinished_batches`); capped where a later batch landed
    records before this batch's last landing run (:func:`overtaken_by`)."""
    resolved = batch_resolved(ctx, source)
    at = None if resolved is None else min(resolved, _utc(interval_end))
    published, since = newest_published(ctx, source)
    blocked = unfinished_batches(ctx, source, since) if at is not None else []
    if blocked:
        log.warning(
            "no cut for %s: earlier batches %s have records no run has decided (re-run them)",
            source,
            blocked,
        )
        at = None
    overtaken, first = overtaken_by(ctx, source) if at is not None else ([], None)
    if first is not None and at is not None:
        capped = batch_resolved(ctx, source, before_run=first)
        log.warning(
            "cut of %s capped at %s: later batches %s landed records before this batch's last"
            " landing run, whose resolved timestamp counts them",
            source,
            capped,
            overtaken,
        )
        at = None if capped is None else min(at, capped)
    return Cut(
        at=at,
        interval_start=None if interval_start is None else _utc(interval_start),
        interval_end=_utc(interval_end),
        heuristic=fmt not in IN_BAND_RESOLVED,
        published=published,
        blocked_by=tuple(blocked),
        overtaken_by=tuple(overtaken),
        fresh=published is None and not landed_before(ctx, source),
    )


def overtaken_by(ctx: JobContext, source: str) -> tuple[list[str], int | None]:
    """(later batches of the source that landed records before this batch's last landing
    run, the first landing sequence of such a record): runs of two intervals at once, the
    earlier one landing again after the later one. The resolved timestamp this batch's last
    run left counts their records, which this run does not apply: the cut goes no further
    than the landing run before the first of them left it. Partitions of later batches
    only (usually none)."""
    raw = ctx.spark.read.format("delta").load(ctx.warehouse.raw)
    mine = raw.where((F.col("source") == source) & (F.col("batch_id") == ctx.batch_id))
    last = mine.agg(F.max("land_seq")).first()
    if last is None or last[0] is None:
        return [], None
    later = raw.where(
        (F.col("source") == source)
        & (F.col("batch_id") > ctx.batch_id)
        & (F.col("kind") == RECORD)
        & (F.col("land_seq") < F.lit(int(last[0])))
    )
    found = later.groupBy("batch_id").agg(F.min("land_seq").alias("first")).collect()
    if not found:
        return [], None
    return sorted(r["batch_id"] for r in found), min(int(r["first"]) for r in found)


def earlier_records(ctx: JobContext, source: str, since: str | None = None) -> DataFrame:
    """The raw records of ``source`` landed in batches before this one (and after ``since``,
    where given): partitions of the raw table, which Delta prunes to their files."""
    between = (
        (F.col("source") == source) & (F.col("batch_id") < ctx.batch_id) & (F.col("kind") == RECORD)
    )
    if since is not None:
        between = between & (F.col("batch_id") > since)
    return ctx.spark.read.format("delta").load(ctx.warehouse.raw).where(between)


def landed_before(ctx: JobContext, source: str) -> bool:
    """Whether a batch of ``source`` before this one landed records (the files left after
    Delta's partition pruning, no data read)."""
    return bool(earlier_records(ctx, source).inputFiles())


def newest_published(ctx: JobContext, source: str) -> tuple[dt.datetime | None, str | None]:
    """(when, batch) of the newest cut published for ``source`` (one row per published cut,
    per source); (None, None) before the first."""
    path = ctx.warehouse.cuts
    if not DeltaTable.isDeltaTable(ctx.spark, path):
        return None, None
    newest = (
        ctx.spark.read.format("delta")
        .load(path)
        .where(F.col("source") == source)
        .agg(F.max(F.struct(F.unix_micros("cut_at"), "batch_id")))
        .first()
    )
    row = None if newest is None else newest[0]
    return (None, None) if row is None else (from_micros(row[0]), row[1])


# --- the held changes: open state ---------------------------------------------------------


def read_held(ctx: JobContext, source: str) -> DataFrame | None:
    """The source's held changes (change shape: ``PARSED_COLUMNS`` + ``members``, payloads
    kept apart in ``payloads``), less any whose members an interrupted run already made final;
    ``None`` when the source holds none."""
    held = open_state.read(ctx.spark, ctx.warehouse.held, source)
    if held is None:
        return None
    members = ledger.per_record(held, members="members")
    batches = [r[0] for r in members.select("batch_id").distinct().collect()]
    final = ledger.final_ids(ctx.spark, ctx.warehouse.ledger, source, batches)
    if final is not None:
        held = held.join(final, "record_id", "left_anti")
    return held


def member_ids(held: DataFrame) -> DataFrame:
    """``record_id`` of every member of the held changes."""
    return held.select(F.explode("members.record_id").alias("record_id"))


def from_held(held: DataFrame) -> DataFrame:
    """Held rows in the change shape (images back as maps; payloads stay in ``payloads``)."""
    return held.select(
        *[
            from_text(c)
            if c in TEXT_FIELDS
            else F.lit(None).cast("string").alias(c)
            if c == "payload"
            else F.lit(None).cast(TXN).alias(c)
            if c == "txn" and c not in held.columns  # held by apply_changes before 2.4.0
            else F.col(c)
            for c in PARSED_COLUMNS
        ],
        "members",
    )


def held_payloads(held: DataFrame) -> DataFrame:
    """``record_id``, ``payload`` of every member of the held changes."""
    return held.select(F.explode("payloads").alias("p")).select("p.record_id", "p.payload")


def to_held(
    changes: DataFrame,
    payloads: DataFrame,
    source: str,
    now: dt.datetime,
    before: DataFrame | None = None,
) -> DataFrame:
    """Changes (change shape) as held rows: images as JSON text, each member's raw payload
    from ``payloads`` (``record_id``, ``payload``), and ``held_at``, when the change was first
    held: ``now``, or its time in the held rows carried in (``before``)."""
    held_at = F.lit(now).cast("timestamp")
    if before is not None:
        since = before.groupBy("record_id").agg(F.min("held_at").alias("_held_since"))
        changes = changes.join(since, "record_id", "left")
        held_at = F.coalesce("_held_since", held_at)
    member_payloads = (
        changes.select("record_id", F.explode("members").alias("m"))
        .join(
            payloads.withColumnRenamed("record_id", "_member"),
            F.col("m.record_id") == F.col("_member"),
        )
        .groupBy("record_id")
        .agg(
            F.collect_list(F.struct(F.col("_member").alias("record_id"), "payload")).alias(
                "payloads"
            )
        )
    )
    return changes.join(member_payloads, "record_id", "left").select(
        *[
            F.to_json(F.col(c)).alias(f"{c}_json") if c in TEXT_FIELDS else F.col(c)
            for c in PARSED_COLUMNS
            if c != "payload"
        ],
        "members",
        F.coalesce("payloads", F.array().cast(PAYLOADS)).alias("payloads"),
        held_at.alias("held_at"),
        F.lit(source).alias("source"),
    )


def write_held(ctx: JobContext, source: str, rows: DataFrame, had_rows: bool) -> None:
    """Replace the source's held changes with ``rows`` (one commit; none when the source held
    nothing before and holds nothing now)."""
    open_state.replace(ctx.warehouse.held, source, rows, had_rows)


def split(changes: DataFrame, cut: Cut) -> tuple[DataFrame, DataFrame]:
    """(ready, held): the changes committed before the cut, and the rest. A change without a
    commit position (``UNORDERED``: only its place in its partition orders it) waits with the
    held changes of its partition that come before it, unless a new version of its key
    follows it, ready (:func:`_in_key_order`). Nothing is ready when the cut does not move
    forward."""
    if not cut.forward:
        return changes.limit(0), changes
    before = F.coalesce(F.col("commit_ts") < F.lit(cut.at).cast("timestamp"), F.lit(False))
    unordered = F.coalesce(is_unordered(F.col("sequence")), F.lit(False))
    first_held = (
        changes.where(~unordered & ~before & F.col("partition").isNotNull())
        .groupBy("partition")
        .agg(F.min("position").alias("_first_held"))
    )
    marked = changes.join(F.broadcast(first_held), "partition", "left").withColumn(
        "_ready",
        F.when(
            unordered, F.coalesce(F.col("position") < F.col("_first_held"), F.lit(True))
        ).otherwise(before),
    )
    marked = marked.drop("_first_held").localCheckpoint()
    if not marked.where(unordered).isEmpty():
        marked = _in_key_order(marked, unordered, cut).localCheckpoint()
    return (
        marked.where(F.col("_ready")).drop("_ready"),
        marked.where(~F.col("_ready")).drop("_ready"),
    )


def _in_key_order(marked: DataFrame, unordered: Column, cut: Cut) -> DataFrame:
    """``marked`` with a held change without a commit position made ready when a ready
    change of its key follows it in its partition that is a version never seen before:
    newer than every earlier change of its key in its partition here, and not below the
    published cut, below which every earlier batch's version lies (without one, only when
    no earlier batch was landed: versions applied without a cut could be any). By the changefeed's
    per-key order ("the changefeed will not emit any previously unseen versions of that row
    with a lower timestamp") that version was committed before the cut, and this change
    before it. Held, it would be released after that version was applied, and placed after
    it (a delete would remove the newer row). A later change that is no such version is a
    redelivery of one the held change already follows."""
    key = F.to_json("key")
    by_key = Window.partitionBy("partition", "schema", "table", key).orderBy("position")
    before = by_key.rowsBetween(Window.unboundedPreceding, -1)
    after = by_key.rowsBetween(1, Window.unboundedFollowing)
    timed = ~unordered & F.col("commit_ts").isNotNull()
    newer = F.coalesce(
        F.col("commit_ts") > F.max(F.when(timed, F.col("commit_ts"))).over(before), F.lit(True)
    )
    if cut.published is not None:
        newer = newer & (F.col("commit_ts") >= F.lit(cut.published).cast("timestamp"))
    elif not cut.fresh:  # earlier batches, applied without a cut, may hold any version
        return marked
    keyed = F.col("key").isNotNull() & F.col("partition").isNotNull()
    proving = marked.withColumn("_proves", keyed & timed & F.col("_ready") & newer)
    proven = F.coalesce(F.max("_proves").over(after), F.lit(False))
    return proving.withColumn(
        "_ready", F.when(unordered & keyed, F.col("_ready") | proven).otherwise(F.col("_ready"))
    ).drop("_proves")


def hold_statuses(held: DataFrame, cut: Cut) -> DataFrame:
    """``pending`` ledger entries of the members of newly held changes."""
    reason = (
        f"held: committed at or after the cut {_iso(cut.at)}"
        if cut.forward
        else f"held: the cut {_iso(cut.at)} does not pass the published cut {_iso(cut.published)}"
    )
    return ledger.per_record(
        held, F.lit(PENDING).alias("status"), F.lit(reason).alias("reason"), members="members"
    )


def late(cut: Cut) -> Column | None:
    """Whether a decoded change (``_cdc_commit_ts``) lies below the published cut (a change
    without a commit time, ``UNORDERED`` or placed after another, is never late: nothing
    places it in time)."""
    if cut.published is None:
        return None
    timed = has_commit_time(F.col("_cdc_sequence"))
    below = F.col("_cdc_commit_ts") < F.lit(cut.published).cast("timestamp")
    return F.coalesce(timed & below, F.lit(False))


# --- publishing ---------------------------------------------------------------------------


def versions(ctx: JobContext, specs: list[TableSpec]) -> tuple[dict[str, int], dict[str, str]]:
    """Each existing target table's current Delta version and location."""
    numbers: dict[str, int] = {}
    locations: dict[str, str] = {}
    for spec in specs:
        path = ctx.warehouse.target(spec.table)
        if not DeltaTable.isDeltaTable(ctx.spark, path):
            continue
        version = table_version(ctx.spark, path)
        if version is not None:
            numbers[spec.table.qualified] = version
            locations[spec.table.qualified] = path
    return numbers, locations


# The times a published cut names, in its pointer file's order.
TIMES = ("cut_at", "interval_start", "interval_end")


def publish(ctx: JobContext, source: str, cut: Cut, specs: list[TableSpec]) -> dict[str, Any]:
    """Append the cut to ``_cdc/cuts`` unless a run already published it, then point the
    source's JSON file at the newest published cut; what was published."""
    assert cut.at is not None
    numbers, locations = versions(ctx, specs)
    path = ctx.warehouse.cuts
    known = None
    # A forward cut is past every published one: only a re-run finds its own cut published.
    if not cut.forward and DeltaTable.isDeltaTable(ctx.spark, path):
        known = (
            ctx.spark.read.format("delta")
            .load(path)
            .where(
                (F.col("source") == source) & (F.col("cut_at") == F.lit(cut.at).cast("timestamp"))
            )
            .select(
                *(F.unix_micros(c).alias(c) for c in TIMES),
                "heuristic",
                "tables",
                "locations",
                "batch_id",
            )
            .first()
        )
    if known is None:
        row = (
            cut.at,
            cut.interval_start,
            cut.interval_end,
            cut.heuristic,
            numbers,
            locations,
            ctx.batch_id,
            ctx.run_id,
            dt.datetime.now(dt.UTC),
            source,
        )
        (
            ctx.spark.createDataFrame([row], CUTS_SCHEMA)
            .write.format("delta")
            .mode("append")
            .partitionBy("source")
            .save(path)
        )
        times: tuple[dt.datetime | None, ...] = (cut.at, cut.interval_start, cut.interval_end)
        heuristic, batch_id = cut.heuristic, ctx.batch_id
    else:
        # A re-run after the publish, or a later run whose cut has not moved: the cut as it
        # was published, with the interval and batch it was published for.
        times = tuple(from_micros(known[c]) for c in TIMES)
        heuristic, batch_id = known["heuristic"], known["batch_id"]
        numbers, locations = dict(known["tables"]), dict(known["locations"])
    published = {
        "source": source,
        **{name: _iso(time) for name, time in zip(TIMES, times, strict=True)},
        "heuristic": heuristic,
        "tables": {t: {"location": locations[t], "version": v} for t, v in sorted(numbers.items())},
        "batch_id": batch_id,
    }
    write_text(ctx, published_cut_path(ctx.warehouse.root, source), json.dumps(published, indent=2))
    return published
