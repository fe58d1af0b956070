"""Apply one landed batch of a source to its Delta tables, in one pass.

parse -> reassemble -> decode and resolve -> MERGE, as DataFrame transforms in one Spark
job: the batch flows from the raw table to the targets without intermediate tables. Per run:
one MERGE per target table (plus schema changes when the stream adds or widens columns), one
ledger append, one quarantine append, and one rewrite of the source's open fragment sets.

What it reads: the batch's partition of ``_cdc/raw`` and of the ledger (so a re-run skips
what an earlier run of the batch finished), the source's open state, and each target only
where the batch's keys can be. Crash safety: the targets commit first (MERGE only moves a row
forward, and a re-run counts the change that produced a row as applied), then the quarantine,
the ledger and the open state; a re-run after a crash between any two repeats what is missing
and nothing else. With ``--catalog`` the run ends by registering each table by name in the
session's catalog (:mod:`spark_jobs.catalog`), which a re-run repeats.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from airflow_cdc.core.columns import MAX_ADDED_COLUMNS, MAX_COLUMNS_PER_RECORD
from airflow_cdc.core.ddl import TableSpec, history_tables, parse_tables
from airflow_cdc.core.events import TableRef
from airflow_cdc.core.formats import EMBEDDED_JSON, FRAGMENTED, NAMES_SCHEMAS, UNTYPED
from airflow_cdc.core.formats.common import (
    FRAGMENTS_CEILING,
    MAX_FRAGMENTS,
    MAX_NUMBER_LENGTH,
    MAX_SET_BYTES,
    SET_BYTES_CEILING,
    UNORDERED,
    RecordLimits,
)
from airflow_cdc.jobs import MAX_PENDING_WALL_SECONDS
from spark_jobs import (
    apply,
    catalog,
    history,
    ledger,
    open_state,
    parse,
    reassemble,
    resolve,
    transactions,
)
from spark_jobs import cut as cutting
from spark_jobs.apply import BELOW_PUBLISHED_CUT
from spark_jobs.arguments import (
    add_table_arguments,
    at_least,
    base_parser,
    instant,
    positive_count,
    source_name,
)
from spark_jobs.delta_tables import version_before_batch
from spark_jobs.faults import fault_point
from spark_jobs.frames import checkpoint_counting, in_parallel
from spark_jobs.ledger import CONTROL, QUARANTINED, Outcomes, per_record, union_all
from spark_jobs.parse import RTYPES, parse_records
from spark_jobs.runs import start, write_stats
from spark_jobs.session import fit_to_size
from spark_jobs.times import from_micros
from spark_jobs.warehouse import RECORD, JobContext

log = logging.getLogger("airflow_cdc.jobs")
JOB_NAME = "apply_changes"
JOB_VERSION = "2.8.30"


@dataclass(frozen=True)
class Limits:
    """Bounds on what one change may bring (see :mod:`airflow_cdc.core.columns`)."""

    columns: int = MAX_COLUMNS_PER_RECORD  # columns in one image
    added_columns: int = MAX_ADDED_COLUMNS  # columns streams may add to a table beyond its DDL
    column_mapping: bool = False  # stream columns may turn on a table's column mapping


def batch_records(ctx: JobContext, source: str) -> DataFrame:
    """The records of ``source`` landed in this batch (one partition of the raw table)."""
    raw = ctx.spark.read.format("delta").load(ctx.warehouse.raw)
    return raw.where(
        (F.col("source") == source)
        & (F.col("batch_id") == ctx.batch_id)
        & (F.col("kind") == RECORD)
    )


# The parsed records that keep their payload: bad records (quarantined at once), fragments
# and chunked records (buffered with it). A change's payload stays in the raw table until a
# record needs it (:func:`spark_jobs.parse.payloads`): carried through the batch, the
# payloads are most of the parsed rows' bytes (measured: 743 of 1,015 MiB at 1,000,000 DSQL
# records, past what a local executor holds in memory).
PAYLOAD_KEPT = ("error", "fragment", "chunked")


def keep_payloads(parsed: DataFrame) -> DataFrame:
    """Parsed records with the payload of the kinds in :data:`PAYLOAD_KEPT` only."""
    kept = F.col("rtype").isin(*PAYLOAD_KEPT)
    return parsed.withColumn("payload", F.when(kept, F.col("payload")))


@dataclass(frozen=True)
class ParsedFacts:
    """What the batch's parse counted as its checkpoint was written (no query of its own)."""

    kinds: dict[str, int]  # records per kind (``rtype``), of the kinds present
    newest: dt.datetime | None  # the newest arrival


def parse_batch(
    todo: DataFrame, fmt: str, record_limits: RecordLimits
) -> tuple[DataFrame, ParsedFacts]:
    """The records parsed (:func:`keep_payloads`) and materialized, and their facts."""
    kind = F.col("rtype")
    parsed, got = checkpoint_counting(
        keep_payloads(parse_records(todo, fmt, record_limits)),
        **{name: F.count_if(kind == name) for name in RTYPES},
        newest=F.unix_micros(F.max("arrival_ts")),
    )
    kinds = {name: int(got[name]) for name in RTYPES if got[name]}
    return parsed, ParsedFacts(kinds, from_micros(got["newest"]))


def batch_size(ctx: JobContext, source: str) -> int:
    """Rows of the batch's partition of the raw table (records and landing markers)."""
    raw = ctx.spark.read.format("delta").load(ctx.warehouse.raw)
    return raw.where((F.col("source") == source) & (F.col("batch_id") == ctx.batch_id)).count()


def open_sets(
    ctx: JobContext, source: str, held: DataFrame | None = None
) -> tuple[DataFrame, bool]:
    """(the source's open fragment sets, less any an interrupted run already finished (its
    records final, or members of ``held`` changes), whose markers it leaves as that run
    would have (:func:`~spark_jobs.reassemble.with_markers`); whether the source has rows
    in the open-state table)."""
    state = open_state.read(ctx.spark, ctx.warehouse.pending, source)
    if state is None:
        return ctx.spark.createDataFrame([], reassemble.STATE_SCHEMA), False
    if "buffered_at" not in state.columns:  # written by apply_changes before 2.1.0
        state = state.withColumn("buffered_at", F.lit(None).cast("timestamp"))
    batches = [
        r[0]
        for r in state.where(F.col("state") == reassemble.OPEN)
        .select("batch_id")
        .distinct()
        .collect()
    ]
    done = ledger.final_entries(ctx.spark, ctx.warehouse.ledger, source, batches)
    if done is not None:
        done = done.localCheckpoint()  # read once, for the markers and the open rows
        state = _without_open(reassemble.with_markers(state, done), done)
    if held is not None:
        members = pending_members(held)
        state = _without_open(reassemble.with_markers(state, members), members)
    return state, True


def with_batch_markers(
    ctx: JobContext,
    source: str,
    records: DataFrame,
    decided: DataFrame | None,
    state: DataFrame,
    fmt: str,
    record_limits: RecordLimits,
    now: dt.datetime,
) -> DataFrame:
    """``state`` with the markers of the sets this batch's records settled, when a run of
    the batch made them final or held their change (``decided``: ``record_id``, ``status``,
    ``reason``, :func:`with_held_members`) and died
    before its open state's commit (no run of the batch has committed the open state
    lately): the markers were only in that run, and a later redelivery of such a set would
    wait, not be a duplicate. A first run decided nothing yet: one look at its ledger
    partition."""
    if decided is None or fmt not in FRAGMENTED:
        return state
    pending = ctx.warehouse.pending
    if DeltaTable.isDeltaTable(ctx.spark, pending) and (
        version_before_batch(ctx.spark, pending, ctx.batch_id, source) is not None
    ):
        return state
    if decided.isEmpty():
        return state
    # Parsed again: the final records that may be chunked ones (a cheap look at the text).
    maybe = F.col("data").cast("string").contains("chunked")
    final = records.where(maybe).join(decided.select("record_id"), "record_id", "left_semi")
    mains = parse_records(final, fmt, record_limits).where(F.col("rtype") == "chunked")
    rebuilt = reassemble.with_markers(reassemble.to_state(mains, source, now), decided)
    rebuilt = rebuilt.where(F.col("state") != reassemble.OPEN)
    return state.unionByName(rebuilt.join(state.select("record_id"), "record_id", "left_anti"))


def with_held_members(
    decided: DataFrame | None, held: DataFrame | None, batch_id: str
) -> DataFrame | None:
    """``decided`` (``record_id``, ``status``, ``reason``) and the members of the ``held``
    changes landed in ``batch_id``, ``pending``: a run of the batch that held a change had
    settled its set, and left its marker (:func:`with_batch_markers`), though its records
    are not final. (Held changes of the batch are there only when a run of it committed
    them: a first run finds none.)"""
    if decided is None or held is None:
        return decided
    return decided.unionByName(pending_members(held, batch_id))


def pending_members(held: DataFrame, batch_id: str | None = None) -> DataFrame:
    """The members of the ``held`` changes (landed in ``batch_id``, where given) as ledger
    outcomes (``record_id``, ``status``, ``reason``): ``pending``."""
    members = ledger.per_record(held, members="members")
    if batch_id is not None:
        members = members.where(F.col("batch_id") == batch_id)
    return members.select(
        "record_id",
        F.lit(ledger.PENDING).alias("status"),
        F.lit(None).cast("string").alias("reason"),
    )


def _without_open(state: DataFrame, finished: DataFrame) -> DataFrame:
    """``state`` less the open rows of the records in ``finished`` (``record_id``): a
    settled set's closed marker stays, though its record is final too, for the set's
    redeliveries to be known as such."""
    found = finished.select("record_id").distinct().withColumn("_finished", F.lit(True))
    return (
        state.join(found, "record_id", "left")
        .where(F.col("_finished").isNull() | (F.col("state") != reassemble.OPEN))
        .drop("_finished")
    )


def buffer(parsed: DataFrame, state: DataFrame, source: str, now: dt.datetime) -> DataFrame:
    """The open state plus this batch's fragments and chunked records, buffered ``now`` (the
    state's copy of a record wins: a re-run of the batch must not buffer a record twice; a
    state row from before ``buffered_at`` existed counts as buffered ``now``)."""
    arrivals = reassemble.to_state(
        parsed.where(F.col("rtype").isin("fragment", "chunked")), source, now
    ).join(state.select("record_id"), "record_id", "left_anti")
    carried = state.withColumn(
        "buffered_at", F.coalesce("buffered_at", F.lit(now).cast("timestamp"))
    )
    return carried.unionByName(arrivals)


def record_outcomes(parsed: DataFrame, outcomes: Outcomes, tracking: bool = False) -> None:
    """Quarantine what did not parse; control messages end as ``control`` (with ``tracking``,
    a transaction's END event only once its transaction is applied: :mod:`spark_jobs.
    transactions`)."""
    outcomes.quarantine(
        parsed.where(F.col("rtype") == "error").select(
            "record_id", "batch_id", "reason", "detail", "payload"
        )
    )
    control = F.col("rtype") == "control"
    if tracking:
        control = control & ~transactions.is_end(parsed)
    outcomes.status(
        parsed.where(control).select(
            "record_id",
            "batch_id",
            F.lit(CONTROL).alias("status"),
            F.concat_ws(": ", "reason", "detail").alias("reason"),
        )
    )


def apply_tables(
    ctx: JobContext,
    fmt: str,
    specs: list[TableSpec],
    changes: DataFrame,
    outcomes: Outcomes,
    limits: Limits,
    late: Column | None = None,
    refuse_late: bool = False,
    histories: frozenset[TableRef] = frozenset(),
) -> dict[str, Any]:
    """Decode, resolve and MERGE the changes of every declared table; quarantine the rest
    (and, with ``refuse_late``, the ``late`` changes that would move a row: see
    :func:`spark_jobs.apply.classify`). Tables in ``histories`` also record every change in
    their history table (:mod:`spark_jobs.history`), a late one only where it is applied."""
    only_table = len(specs) == 1
    names_schemas = fmt in NAMES_SCHEMAS
    # Its changes name no column types (held changes neither: a source keeps its format).
    untyped = fmt in UNTYPED

    def apply_one(declared: TableSpec) -> tuple[str, dict[str, Any]]:
        mine = changes.where(resolve.belongs(declared, only_table, names_schemas))
        path = ctx.warehouse.target(declared.table)
        types = [] if untyped else resolve.record_types(mine, limits.columns)
        spec = resolve.effective_spec(
            ctx.spark, path, declared, types, limits.added_columns, limits.column_mapping
        )
        decoding = resolve.embed_json(spec) if fmt in EMBEDDED_JSON else spec
        decoded, facts = resolve.decode_changes(mine, decoding, types, limits.columns)
        decoded, added, facts = resolve.admit_extras(
            decoded, facts, declared, spec, limits.added_columns, limits.column_mapping
        )
        quarantine_changes(decoded.where(F.col("_err_reason").isNotNull()), outcomes)
        good = decoded.where(F.col("_err_reason").isNull()).drop(*resolve.ERROR_COLUMNS)
        keys = list(spec.primary_key)
        source = outcomes.source
        good = resolve.place_unordered(
            ctx.spark, good, keys, path, ctx.batch_id, source, present=facts.unordered
        )
        stored = (
            resolve.earlier_rows(ctx.spark, path, keys, ctx.batch_id, source)
            if facts.partial
            else None
        )
        winners, losers = resolve.resolve_table(good, keys, partial=facts.partial, stored=stored)
        for frame in losers:
            outcomes.status(frame)
        statuses, counts = apply.apply_table(
            ctx.spark, path, spec, winners, ctx.batch_id, added, late, refuse_late
        )
        refused = F.col("status") == QUARANTINED
        outcomes.status(statuses.where(~refused))
        if counts.get(QUARANTINED):
            rows = statuses.where(refused).select("record_id", "batch_id", "reason", "detail")
            outcomes.quarantine(rows)
        reasons = dict(facts.quarantined)
        if counts.get(QUARANTINED):
            reasons[BELOW_PUBLISHED_CUT] = counts[QUARANTINED]
        counts["quarantined"] = sum(reasons.values())
        counts["quarantined_by_reason"] = dict(sorted(reasons.items()))
        if declared.table in histories:
            recorded = good.where(~late) if refuse_late and late is not None else good
            counts["history"] = history.record(
                ctx.spark,
                ctx.warehouse.target(history.of(declared).table),
                spec,
                recorded,
                list(counts.get("extra_columns", [])),
                ctx.batch_id,
            )
        return spec.table.qualified, counts

    stats = dict(in_parallel(ctx.spark, apply_one, specs))
    declared_any = F.lit(False)
    for spec in specs:
        declared_any = declared_any | resolve.belongs(spec, only_table, names_schemas)
    undeclared = changes.where(~declared_any).select(
        F.col("members").alias("_cdc_members"),
        F.lit("undeclared_table").alias("_err_reason"),
        F.concat(F.lit("undeclared_table: "), F.concat_ws(".", "schema", "table")).alias(
            "_err_detail"
        ),
    )
    quarantine_changes(undeclared, outcomes)
    return stats


def quarantine_changes(failed: DataFrame, outcomes: Outcomes) -> None:
    """Quarantine changes (their members, reason, detail); each member's raw payload is looked
    up when the quarantine is written."""
    rows = per_record(
        failed, F.col("_err_reason").alias("reason"), F.col("_err_detail").alias("detail")
    )
    outcomes.quarantine(rows)


@dataclass
class Holding:
    """A run with a cut: the cut, the changes it holds now and held before."""

    cut: cutting.Cut
    before: DataFrame | None  # held rows carried in (``_cdc/held``), if any
    rows: DataFrame | None = None  # held rows to carry out
    tracking: transactions.Tracking | None = None  # a run that follows transactions


def commit_bookkeeping(
    ctx: JobContext,
    source: str,
    outcomes: Outcomes,
    payloads: list[DataFrame],
    state: DataFrame,
    had_state: bool,
    holding: Holding | None = None,
) -> None:
    """The quarantine, the ledger, the held changes, then the open fragment sets (``state``;
    ``had_state``: the source had rows of them): one commit each, none for a table with
    nothing to record (no quarantined record; no open set before or after). Held changes go
    before the open sets: a re-run after a crash between the two finds the members of held
    changes in neither the batch's work nor the open sets."""
    wh = ctx.warehouse
    commit_outcomes(ctx, source, outcomes, payloads)
    if holding is not None and holding.rows is not None:
        fault_point("apply_changes:before_held")
        cutting.write_held(ctx, source, holding.rows, holding.before is not None)
    tracking = holding.tracking if holding is not None else None
    if tracking is not None and tracking.carried_out is not None:
        transactions.write_open(ctx, source, tracking.carried_out, tracking.carried_in is not None)
    fault_point("apply_changes:before_state")
    open_state.replace(wh.pending, source, state, had_state)


def commit_outcomes(
    ctx: JobContext, source: str, outcomes: Outcomes, payloads: list[DataFrame]
) -> None:
    """The quarantine (less the records it already has: a re-run after a crash between the
    two commits, or a replayed record that fails again), then the ledger: one append each.
    ``payloads`` (``record_id``, ``payload``) hold the payloads of the records quarantined
    without theirs."""
    wh = ctx.warehouse
    quarantined = outcomes.quarantine_rows(payloads)
    if quarantined is not None:
        quarantined = quarantined.localCheckpoint()
        batches = [r[0] for r in quarantined.select("batch_id").distinct().collect()]
        known = ledger.read_partitions(ctx.spark, wh.quarantine, source, batches)
        if known is not None:
            quarantined = quarantined.join(known.select("record_id"), "record_id", "left_anti")
        if batches:  # nothing quarantined: no commit
            ledger.append(quarantined, wh.quarantine)
    fault_point("apply_changes:before_ledger")
    entries = outcomes.ledger_rows()
    if entries is not None:
        ledger.append(entries, wh.ledger)


def hold_changes(
    changes: DataFrame,
    holding: Holding,
    payloads: list[DataFrame],
    outcomes: Outcomes,
    source: str,
    now: dt.datetime,
) -> tuple[DataFrame, Column | None]:
    """(the changes to apply now, the mark of late ones): the batch's changes and the held
    ones, split by the cut; what stays held is set aside in ``holding`` (its payloads with
    it), and the newly held changes' records are ``pending``."""
    if holding.before is not None:
        changes = changes.unionByName(cutting.from_held(holding.before))
        payloads.append(cutting.held_payloads(holding.before))
    if holding.tracking is not None:
        changes = follow_transactions(changes, holding, outcomes, source)
    cut = holding.cut
    if cut is cutting.NO_CUT:
        ready, held = changes, changes.limit(0)
    else:
        ready, held = cutting.split(changes, cut)
    fresh = held
    if holding.before is not None:
        fresh = held.join(holding.before.select("record_id"), "record_id", "left_anti")
    outcomes.status(cutting.hold_statuses(fresh, cut))
    holding.rows = cutting.to_held(held, union_all(payloads), source, now, holding.before)
    if not cut.forward and cut is not cutting.NO_CUT:
        if cut.blocked_by:
            why = f"earlier batches {list(cut.blocked_by)} have undecided records"
        elif cut.overtaken_by:
            why = f"later batches {list(cut.overtaken_by)} capped it"
        elif cut.at is None:
            why = "this batch's landing left no resolved timestamp"
        elif cut.waiting_for:
            why = f"transactions {list(cut.waiting_for)} are incomplete below it"
        else:
            why = f"it does not pass the newest published cut {cut.published}"
        log.info(
            "no cut of %s at %s: %s; no table changes, nothing published, changes held",
            source,
            cut.at,
            why,
        )
    return ready, cutting.late(cut)


def follow_transactions(
    changes: DataFrame, holding: Holding, outcomes: Outcomes, source: str
) -> DataFrame:
    """The changes at their transactions' commit times, the cut lowered below any incomplete
    transaction, and the END events settled (:mod:`spark_jobs.transactions`)."""
    tracking = holding.tracking
    assert tracking is not None
    summary = transactions.assess(changes, tracking.open_ends, tracking.specs, holding.before)
    changes = transactions.stamp(changes, summary).localCheckpoint()
    cut = holding.cut
    if cut is not cutting.NO_CUT:
        holding.cut = transactions.lower(cut, summary, tracking.expire_before)
        if holding.cut.at != cut.at:
            log.info(
                "cut of %s lowered from %s to %s: transactions %s are incomplete",
                source,
                cut.at,
                holding.cut.at,
                list(holding.cut.waiting_for),
            )
    settled = transactions.settle(
        tracking.open_ends,
        tracking.fresh,
        summary,
        holding.cut,
        holding.cut is cutting.NO_CUT,
        tracking.expire_before,
    )
    outcomes.status(settled.statuses)
    tracking.carried_out = settled.carried
    return changes


def publish_cut(
    ctx: JobContext, source: str, holding: Holding, specs: list[TableSpec]
) -> dict[str, Any]:
    """Publish the run's cut when it moves forward (or re-point at it when a run already
    published it); what the run did about the cut."""
    cut = holding.cut
    result: dict[str, Any] = cut.describe()
    if cut.at is not None and (cut.forward or cut.at == cut.published):
        fault_point("apply_changes:before_publish")
        result["published"] = cutting.publish(ctx, source, cut, specs)
    return result


def quarantined_records(
    ctx: JobContext, source: str, reasons: list[str], batches: list[str] | None
) -> tuple[DataFrame | None, list[str]]:
    """The raw rows of the source's records whose outcome is ``quarantined`` for one of
    ``reasons`` (in ``batches``, or any batch the quarantine table holds), and their batches.
    Reads the source's quarantine partition, then only those batches of the ledger and raw."""
    wh = ctx.warehouse
    if not DeltaTable.isDeltaTable(ctx.spark, wh.quarantine):
        return None, []
    rows = ctx.spark.read.format("delta").load(wh.quarantine).where(F.col("source") == source)
    if batches:
        rows = rows.where(F.col("batch_id").isin(batches))
    rows = rows.where(F.col("reason").isin(reasons)).select("batch_id").distinct()
    found = sorted(r[0] for r in rows.collect())
    entries = ledger.read_partitions(ctx.spark, wh.ledger, source, found)
    if entries is None:
        return None, []
    current = ledger.current_status(entries).where(
        (F.col("status") == QUARANTINED) & F.col("reason").isin(reasons)
    )
    records = (
        ctx.spark.read.format("delta")
        .load(wh.raw)
        .where(
            (F.col("source") == source) & F.col("batch_id").isin(found) & (F.col("kind") == RECORD)
        )
        .join(current.select("record_id", "batch_id"), ["record_id", "batch_id"])
    )
    return records.localCheckpoint(), found


def replay_quarantine(ctx: JobContext, args: Any, specs: list[TableSpec]) -> dict[str, Any]:
    """Run the source's quarantined records through the pipeline again (after the DDL or a
    limit was fixed): each ends as its new outcome, in the ledger appended after the MERGEs,
    as in any run. Outside the cuts: nothing is held, nothing is published, the open state is
    not touched. A fragment, a chunked record (its set was quarantined whole) and a change
    without a commit position (placed by its batch) stay quarantined."""
    source = args.source
    reasons = args.replay_reasons or list(ledger.REPLAYABLE)
    stats: dict[str, Any] = {"job": JOB_NAME, "source": source, "batch_id": ctx.batch_id}
    records, batches = quarantined_records(ctx, source, reasons, args.replay_batches)
    replay: dict[str, Any] = {"reasons": reasons, "batches": batches, "records": 0, "kept": 0}
    stats["replay"] = replay
    if records is None or records.isEmpty():
        return finish(ctx, args, specs, stats)
    stats.update(fit_to_size(ctx.spark, records.count()))
    outcomes = Outcomes(source, JOB_NAME, ctx.run_id)
    record_limits = RecordLimits(args.max_fragments_per_image, args.max_number_length)
    parsed = parse_records(records, args.format, record_limits)
    unordered = F.coalesce(F.col("sequence").startswith(UNORDERED), F.lit(False))
    kept = F.col("rtype").isin("fragment", "chunked") | unordered
    parsed = parsed.withColumn("_kept", kept).localCheckpoint()
    replay["records"] = parsed.count()
    replay["kept"] = parsed.where("_kept").count()
    parsed = parsed.where(~F.col("_kept")).drop("_kept")
    record_outcomes(parsed, outcomes)
    changes = parsed.where(F.col("rtype") == "change").withColumn(
        "members", F.array(F.struct("record_id", "batch_id"))
    )
    limits = Limits(args.max_columns_per_record, args.max_added_columns, args.column_mapping)
    payloads = [parsed.select("record_id", "payload")]
    stats["tables"] = apply_tables(
        ctx, args.format, specs, changes, outcomes, limits, histories=histories_of(args)
    )
    commit_outcomes(ctx, source, outcomes, payloads)
    stats["accounting"] = ledger.accounting_of(
        ctx.spark, records, ctx.warehouse.ledger, source, batches
    )
    return finish(ctx, args, specs, stats)


def check_before_work(ctx: JobContext, args: Any) -> None:
    """Fail before any work on a history name the DDL does not declare, or a catalog that
    would not keep the tables' names (a warehouse of jobs 1.x fails in ``start``)."""
    histories_of(args)
    if args.catalog:
        catalog.check_catalog(ctx.spark, args.catalog)


def finish(
    ctx: JobContext, args: Any, specs: list[TableSpec], stats: dict[str, Any]
) -> dict[str, Any]:
    """Register the tables by name (with ``--catalog``), then write the run's stats."""
    if args.catalog:
        stats["catalog"] = register_targets(ctx, args, specs)
    write_stats(args.stats_file, stats)
    return stats


def register_targets(ctx: JobContext, args: Any, specs: list[TableSpec]) -> dict[str, Any]:
    """Register every table of the source (each declared table, each history table) by name
    in ``--catalog``, after the run's commits: outside the run's crash protocol, a re-run
    repeats it (:mod:`spark_jobs.catalog`)."""
    kept = history_tables(args.history, specs, args.default_schema)
    tables = [*(s.table for s in specs), *(history.of(s).table for s in kept)]
    locations = {table: ctx.warehouse.target(table) for table in tables}
    return catalog.register_tables(ctx.spark, args.catalog, locations)


def histories_of(args: Any) -> frozenset[TableRef]:
    """The declared tables that keep a history table."""
    specs = parse_tables(args.ddl, args.default_schema)
    return frozenset(s.table for s in history_tables(args.history, specs, args.default_schema))


def settle(
    newest: dt.datetime | None,
    buffered: DataFrame,
    in_buffer: dict[str, Any],
    args: Any,
    wall: dt.datetime,
) -> reassemble.Settlement:
    """Settle the buffered fragment sets (none buffered, nothing to settle), aged by the
    stream's newest arrival (the batch's, ``newest``, or the buffer's) and by ``wall``.
    ``in_buffer`` is what the buffer's checkpoint counted: its ``rows`` and ``newest`` arrival."""
    if not in_buffer["rows"]:
        return reassemble.nothing_to_settle(buffered)
    clock = reassemble.Clock(
        reassemble.stream_time(newest, from_micros(in_buffer["newest"])),
        dt.timedelta(seconds=args.max_pending_age_seconds),
        wall,
        dt.timedelta(seconds=args.max_pending_wall_seconds),
    )
    return reassemble.settle_sets(buffered, clock, args.max_bytes_per_fragment_set)


def run(ctx: JobContext, args: Any) -> dict[str, Any]:
    source = args.source
    specs = parse_tables(args.ddl, args.default_schema, args.format)
    check_before_work(ctx, args)
    if args.replay:
        return replay_quarantine(ctx, args, specs)
    outcomes = Outcomes(source, JOB_NAME, ctx.run_id)
    stats: dict[str, Any] = {"job": JOB_NAME, "source": source, "batch_id": ctx.batch_id}
    if not DeltaTable.isDeltaTable(ctx.spark, ctx.warehouse.raw):
        stats["accounting"] = {"landed": 0}
        write_stats(args.stats_file, stats)
        return stats
    records = batch_records(ctx, source)
    stats.update(fit_to_size(ctx.spark, batch_size(ctx, source)))
    decided = ledger.final_entries(ctx.spark, ctx.warehouse.ledger, source, [ctx.batch_id])
    done = None if decided is None else decided.select("record_id")
    todo = records if done is None else records.join(done, "record_id", "left_anti")
    holding = None
    if args.cut_at is not None:
        cut = cutting.decide(ctx, source, args.format, args.cut_at, args.interval_start)
        holding = Holding(cut, cutting.read_held(ctx, source))
    else:  # no cut: changes a run with a cut held are applied now, and the held rows go
        held = cutting.read_held(ctx, source)
        if held is not None or args.transactions:
            holding = Holding(cutting.NO_CUT, held)
    if holding is not None and holding.before is not None:
        todo = todo.join(cutting.member_ids(holding.before), "record_id", "left_anti")
    carried_ends = transactions.read_open(ctx, source) if args.transactions else None
    if carried_ends is not None:
        todo = todo.join(carried_ends.select("record_id"), "record_id", "left_anti")
    record_limits = RecordLimits(args.max_fragments_per_image, args.max_number_length)
    parsed, facts = parse_batch(todo, args.format, record_limits)
    record_outcomes(parsed, outcomes, tracking=args.transactions)
    state, had_state = open_sets(ctx, source, holding.before if holding else None)
    wall = dt.datetime.now(dt.UTC)
    state = with_batch_markers(
        ctx,
        source,
        records,
        with_held_members(decided, holding.before if holding else None, ctx.batch_id),
        state,
        args.format,
        record_limits,
        wall,
    )
    if holding is not None and args.transactions:
        holding.tracking = transactions.Tracking(
            carried_ends,
            transactions.ends(parsed, source, wall).localCheckpoint(),
            specs,
            wall - dt.timedelta(seconds=args.max_pending_wall_seconds),
        )
    # Counted as it is materialized: whether anything is buffered, and its newest arrival
    # (in microseconds: a collected TIMESTAMP is naive in the driver's local zone).
    buffered, in_buffer = checkpoint_counting(
        buffer(parsed, state, source, wall),
        rows=F.count(F.lit(1)),
        newest=F.unix_micros(F.max("arrival_ts")),
    )
    settlement = settle(facts.newest, buffered, in_buffer, args, wall)
    for frame in settlement.statuses:
        outcomes.status(frame)
    for frame in settlement.quarantined:
        outcomes.quarantine(frame)
    # Not materialized whole: a filter of the parsed rows and the (few) settled changes (a
    # copy of the change rows spilled at 1,000,000 DSQL records; it saved nothing at 26,000).
    changes = (
        parsed.where(F.col("rtype") == "change")
        .withColumn("members", F.array(F.struct("record_id", "batch_id")))
        .unionByName(settlement.changes.localCheckpoint())
    )
    # The open state's payloads: its closed markers (a settled set's record, kept a while to
    # recognize a redelivery) have none, and must not hide a held change's.
    carried = buffered.where(F.col("payload").isNotNull()).select("record_id", "payload")
    payloads = [parse.payloads(records), carried]
    late, refuse_late = None, False
    if holding is not None:
        changes, late = hold_changes(changes, holding, payloads, outcomes, source, wall)
        refuse_late = not holding.cut.heuristic
    limits = Limits(args.max_columns_per_record, args.max_added_columns, args.column_mapping)
    stats["tables"] = apply_tables(
        ctx,
        args.format,
        specs,
        changes,
        outcomes,
        limits,
        late,
        refuse_late,
        histories_of(args),
    )
    stats["parsed"] = facts.kinds
    commit_bookkeeping(ctx, source, outcomes, payloads, settlement.state, had_state, holding)
    if holding is not None and holding.cut is not cutting.NO_CUT:
        kept = history_tables(args.history, specs, args.default_schema)
        stats["cut"] = publish_cut(ctx, source, holding, [*specs, *map(history.of, kept)])
    stats["accounting"] = ledger.accounting(
        ctx.spark, batch_records(ctx, source), ctx.warehouse.ledger, source, ctx.batch_id
    )
    return finish(ctx, args, specs, stats)


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError(f"expected comma-separated names, got {text!r}")
    return names


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = base_parser(__doc__)
    parser.add_argument(
        "--source", required=True, type=source_name, help="the landed source to apply"
    )
    parser.add_argument("--format", default="dsql", help="the records' format")
    add_table_arguments(parser)
    parser.add_argument(
        "--max-pending-age-seconds",
        type=float,
        default=3600.0,
        help="stream time after which an incomplete fragment set is quarantined",
    )
    parser.add_argument(
        "--max-pending-wall-seconds",
        type=at_least(1.0, "seconds"),
        default=MAX_PENDING_WALL_SECONDS,
        help="wall-clock time in the open state after which an incomplete fragment set is"
        " quarantined, however the stream moves; with --transactions, also how long a cut"
        " waits for an incomplete transaction (its END, or an event its END counts)",
    )
    parser.add_argument(
        "--max-columns-per-record",
        type=positive_count("columns"),
        default=MAX_COLUMNS_PER_RECORD,
        help="a change whose image has more columns is quarantined (too_many_columns)",
    )
    parser.add_argument(
        "--max-added-columns",
        type=positive_count("columns"),
        default=MAX_ADDED_COLUMNS,
        help="columns the stream may add to a table beyond its DDL; a change bringing more"
        " is quarantined (column_limit)",
    )
    parser.add_argument(
        "--column-mapping",
        action="store_true",
        help="a stream column whose name Delta stores only with column mapping (a space,"
        " ,;{}()=, a tab or newline) is added, turning on the table's column mapping; without"
        " it such a change is quarantined (invalid_column_name)",
    )
    parser.add_argument(
        "--max-fragments-per-image",
        type=positive_count("fragments", FRAGMENTS_CEILING),
        default=MAX_FRAGMENTS,
        help="a chunked record whose image has more fragments is a bad record",
    )
    parser.add_argument(
        "--max-bytes-per-fragment-set",
        type=positive_count("bytes", SET_BYTES_CEILING),
        default=MAX_SET_BYTES,
        help="a fragment set whose chunk id's distinct fragments hold more data (UTF-8 bytes;"
        " a redelivered fragment counts once) is quarantined unread (oversized_fragment_set)",
    )
    parser.add_argument(
        "--max-number-length",
        type=positive_count("characters", MAX_NUMBER_LENGTH),
        default=MAX_NUMBER_LENGTH,
        help="a record holding a JSON number literal of more characters is a bad record"
        " (formats parsed by the core; the most is Spark's JSON reader's 1,000)",
    )
    parser.add_argument(
        "--cut-at",
        type=instant,
        help="apply only the changes committed before this time (ISO 8601, the data interval"
        " end), capped by the source's resolved timestamp; hold the rest and publish the cut",
    )
    parser.add_argument(
        "--interval-start", type=instant, help="the data interval start, recorded with the cut"
    )
    parser.add_argument(
        "--transactions",
        action="store_true",
        help="follow the source's transactions (Debezium transaction metadata, its transaction"
        " topic landed with the tables): a cut never passes a transaction whose END or events"
        " have not all arrived",
    )
    parser.add_argument(
        "--history",
        default="",
        help="comma-separated declared tables (schema.table, or table in the default schema;"
        " * for all) that also keep a history table (SCD type 2) at <schema>/<table>__history:"
        " every version of each row, open from its change's commit time until the next",
    )
    parser.add_argument(
        "--catalog",
        type=catalog.catalog_name,
        help="register each table (and history table) by name in this catalog of the Spark"
        " session, as an external Delta table <catalog>.<schema>.<table> at its location:"
        " spark_catalog (a Hive metastore when the session has one) or a catalog configured as"
        " spark.sql.catalog.<name>; a name that exists elsewhere is reported and left alone",
    )
    parser.add_argument(
        "--replay",
        action="store_true",
        help="instead of a batch, run the source's quarantined records through the pipeline"
        " again (after a fix to the DDL or the limits); --batch-id names the run",
    )
    parser.add_argument(
        "--replay-reasons",
        type=_names,
        help="comma-separated quarantine reasons to replay (default: "
        + ", ".join(ledger.REPLAYABLE)
        + ")",
    )
    parser.add_argument(
        "--replay-batches", type=_names, help="comma-separated batches to replay (default: all)"
    )
    args = parser.parse_args(argv)
    ctx = start(JOB_NAME, JOB_VERSION, args)
    return run(ctx, args)


if __name__ == "__main__":
    main()
