"""Debezium transaction metadata: a cut never passes a transaction it has not seen whole.

With transaction metadata on (``provide.transaction.metadata``), Debezium writes a ``BEGIN``
and an ``END`` event per transaction to the transaction topic, and every change event carries
its transaction's ``id`` and its ``total_order`` in it. The ``END`` counts the transaction's
events per data collection. Landed from the same source as the table topics
(``--transactions`` on the apply job), they make the cut transactional:

* a transaction is *complete* once its ``END`` has arrived and, for every data collection of
  the ``END`` that names a declared table (``schema.table``, or ending in ``.schema.table``),
  as many distinct events of that table (by ``total_order``) have arrived as the ``END``
  counts; collections of undeclared tables are not waited for (their changes could not be
  applied anyway);
* every change of a transaction takes the transaction's commit time, the newest of its
  changes' times, so that a cut takes a transaction whole or not at all;
* the cut is lowered to the commit time (as far as it is known) of the earliest incomplete
  transaction: every transaction committed before the published cut is in it, whole. An
  incomplete transaction's changes wait with the held changes; the cut waits for it, unless
  it lies below the published cut with no ``END`` carried (a redelivered event of a
  transaction applied whole, or one whose ``END`` expired: its changes are late), or it has
  waited for ``--max-pending-wall-seconds``: its ``END`` for an event that never came
  (quarantined when it landed, say), or its held changes for an ``END`` that never came
  (quarantined, or lost by the source). Then it is applied as far as it arrived.

The ``END`` events are open state (``_cdc/transactions``, partitioned by source, rewritten
once per run), each ``pending`` in the ledger until the run that applies its transaction
(then ``control``). An ``END`` that no known change of its transaction has followed for
``--max-pending-wall-seconds`` is dropped (``control``, expired): its transaction's changes
came through a run without a cut, or never will. ``BEGIN`` events are ``control`` at once.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from airflow_cdc.core.ddl import TableSpec
from spark_jobs import ledger, open_state, resolve
from spark_jobs.cut import Cut
from spark_jobs.ledger import CONTROL, PENDING, union_all
from spark_jobs.schemas import struct
from spark_jobs.times import from_micros
from spark_jobs.warehouse import JobContext

END_SCHEMA = "event_count BIGINT, collections MAP<STRING, BIGINT>"
OPEN_SCHEMA = struct(
    "txn_id STRING, event_count BIGINT, collections MAP<STRING, BIGINT>, record_id STRING,"
    " batch_id STRING, carried_at TIMESTAMP, source STRING"
)
log = logging.getLogger("airflow_cdc.jobs")

# Transactions named in the log when they hold the cut back.
NAMED = 5


def is_end(parsed: DataFrame) -> Column:
    """Whether a parsed record is a transaction's ``END`` event."""
    return (F.col("rtype") == "control") & F.col("txn.end_json").isNotNull()


def ends(parsed: DataFrame, source: str, now: dt.datetime) -> DataFrame:
    """The batch's ``END`` events as open-state rows (:data:`OPEN_SCHEMA`)."""
    end = F.from_json(F.col("txn.end_json"), END_SCHEMA)
    return parsed.where(is_end(parsed)).select(
        F.col("txn.id").alias("txn_id"),
        end["event_count"].alias("event_count"),
        end["collections"].alias("collections"),
        "record_id",
        "batch_id",
        F.lit(now).cast("timestamp").alias("carried_at"),
        F.lit(source).alias("source"),
    )


def read_open(ctx: JobContext, source: str) -> DataFrame | None:
    """The ``END`` events the source carries, less any whose record an interrupted run already
    made final; ``None`` when it carries none."""
    carried = open_state.read(ctx.spark, ctx.warehouse.transactions, source)
    if carried is None:
        return None
    batches = [r[0] for r in carried.select("batch_id").distinct().collect()]
    final = ledger.final_ids(ctx.spark, ctx.warehouse.ledger, source, batches)
    return carried if final is None else carried.join(final, "record_id", "left_anti")


def _spec_index(specs: list[TableSpec], matches: list[Column]) -> Column:
    """The index of the first declared table that ``matches`` says a row belongs to."""
    index: Column = F.lit(None).cast("int")
    for i in reversed(range(len(specs))):
        index = F.when(matches[i], F.lit(i)).otherwise(index)
    return index


def _names(spec: TableSpec) -> Column:
    """Whether a data collection (``collection``) names ``spec``'s table."""
    qualified = spec.table.qualified
    collection = F.col("collection")
    return (collection == qualified) | collection.endswith(f".{qualified}")


def assess(
    changes: DataFrame,
    open_ends: DataFrame,
    specs: list[TableSpec],
    held: DataFrame | None = None,
) -> DataFrame:
    """Per transaction that ``changes`` or ``open_ends`` name: ``txn_id``, ``commit_ts`` (the
    newest of its known changes' times; null when none is known), ``complete``, ``carried_at``
    (since when its ``END`` is carried; null without one) and ``held_since`` (since when a
    change of it is held, from the held rows carried in, ``held``; null when none is)."""
    only_table = len(specs) == 1
    belongs = [resolve.belongs(spec, only_table) for spec in specs]
    event = F.coalesce(
        F.col("txn.order").cast("string"),
        F.concat_ws("\u0000", "schema", "table", "op", "sequence"),
    )
    known = changes.where(F.col("txn").isNotNull()).select(
        F.col("txn.id").alias("txn_id"),
        _spec_index(specs, belongs).alias("_spec"),
        event.alias("_event"),
        "commit_ts",
    )
    seen = union_all(
        [
            known.where(F.col("_spec").isNotNull())
            .groupBy("txn_id", "_spec")
            .agg(F.countDistinct("_event").alias("seen")),
            known.groupBy("txn_id")
            .agg(F.countDistinct("_event").alias("seen"))
            .select("txn_id", F.lit(-1).alias("_spec"), "seen"),
        ]
    )
    # One END per transaction: a redelivered END is a second record with the same counts.
    carried = open_ends.groupBy("txn_id").agg(F.min("carried_at").alias("carried_at"))
    open_ends = open_ends.dropDuplicates(["txn_id"])
    counted = F.coalesce(F.size("collections"), F.lit(0)) > 0
    per_collection = open_ends.where(counted).select(
        "txn_id", F.explode("collections").alias("collection", "n")
    )
    expected = union_all(
        [
            per_collection.select(
                "txn_id", _spec_index(specs, [_names(s) for s in specs]).alias("_spec"), "n"
            )
            .where(F.col("_spec").isNotNull())
            .groupBy("txn_id", "_spec")
            .agg(F.sum("n").alias("expected")),
            # An END without per-collection counts: every event of the transaction counts.
            open_ends.where(~counted).select(
                "txn_id", F.lit(-1).alias("_spec"), F.col("event_count").alias("expected")
            ),
        ]
    )
    short = (
        expected.join(seen, ["txn_id", "_spec"], "left")
        .where(F.coalesce(F.col("seen"), F.lit(0)) < F.col("expected"))
        .select("txn_id")
        .distinct()
        .withColumn("_short", F.lit(True))
    )
    times = known.groupBy("txn_id").agg(F.max("commit_ts").alias("commit_ts"))
    summary = times.join(carried, "txn_id", "full").join(short, "txn_id", "left")
    held_since = F.lit(None).cast("timestamp")
    if held is not None and "txn" in held.columns:  # held by apply_changes 2.4.0 and later
        since = (
            held.where(F.col("txn").isNotNull())
            .groupBy(F.col("txn.id").alias("txn_id"))
            .agg(F.min("held_at").alias("_held_since"))
        )
        summary = summary.join(since, "txn_id", "left")
        held_since = F.col("_held_since")
    return summary.select(
        "txn_id",
        "commit_ts",
        (F.col("carried_at").isNotNull() & ~F.coalesce("_short", F.lit(False))).alias("complete"),
        "carried_at",
        held_since.alias("held_since"),
    ).localCheckpoint()


def stamp(changes: DataFrame, summary: DataFrame) -> DataFrame:
    """Each change of a transaction at its transaction's commit time (``assess``)."""
    times = summary.where(F.col("commit_ts").isNotNull()).select(
        F.col("txn_id").alias("_txn_id"), F.col("commit_ts").alias("_txn_ts")
    )
    return (
        changes.join(times, F.col("txn.id") == F.col("_txn_id"), "left")
        .withColumn("commit_ts", F.coalesce("_txn_ts", "commit_ts"))
        .drop("_txn_id", "_txn_ts")
    )


def given_up(expire_before: dt.datetime) -> Column:
    """Whether an incomplete transaction is no longer waited for, since before
    ``expire_before``: its ``END`` has been carried that long, and an event it counts never
    came (quarantined when it landed, say); or no ``END`` came while a change of it was held
    that long (the ``END`` quarantined, or lost by the source)."""
    expire = F.lit(expire_before).cast("timestamp")
    waited = F.when(F.col("carried_at").isNotNull(), F.col("carried_at") < expire).otherwise(
        F.col("held_since") < expire
    )
    return F.coalesce(~F.col("complete") & F.col("commit_ts").isNotNull() & waited, F.lit(False))


def lower(cut: Cut, summary: DataFrame, expire_before: dt.datetime) -> Cut:
    """The cut, lowered to the (known) commit time of the earliest incomplete transaction
    below it. Not waited for: a transaction below the published cut (a published cut cannot
    take it whole any more: a redelivered event of a transaction applied whole, or one whose
    ``END`` expired; its changes are late), and one given up (:func:`given_up`)."""
    if cut.at is None:
        return cut
    waits = (
        ~F.col("complete")
        & F.col("commit_ts").isNotNull()
        & (F.col("commit_ts") < F.lit(cut.at).cast("timestamp"))
    )
    if cut.published is not None:
        # Below the published cut, a transaction whose END is carried is waited for still
        # (late, it is applied whole); one without (its END applied or expired) is not.
        waits = waits & (
            (F.col("commit_ts") >= F.lit(cut.published).cast("timestamp"))
            | F.col("carried_at").isNotNull()
        )
    abandoned = [
        r[0]
        for r in summary.where(waits & given_up(expire_before))
        .orderBy("commit_ts", "txn_id")
        .select("txn_id")
        .take(NAMED)
    ]
    if abandoned:
        log.warning(
            "not waiting any longer for incomplete transactions %s (waited since before %s for"
            " an END, or for an event their END counts): the cut passes them",
            abandoned,
            expire_before.isoformat(),
        )
    waiting = summary.where(waits & ~given_up(expire_before))
    row = waiting.agg(
        F.unix_micros(F.min("commit_ts")).alias("at"), F.count(F.lit(1)).alias("n")
    ).first()
    if row is None or not row["n"]:
        return cut
    named = [r[0] for r in waiting.orderBy("commit_ts", "txn_id").select("txn_id").take(NAMED)]
    lowest = from_micros(row["at"])
    assert lowest is not None
    return dataclasses.replace(cut, at=min(cut.at, lowest), waiting_for=tuple(named))


@dataclass
class Tracking:
    """A run that follows transactions: the ``END`` events it starts from (carried in, and
    landed in this batch), the declared tables, and, once settled, what it carries out."""

    carried_in: DataFrame | None
    fresh: DataFrame  # the batch's END events (OPEN_SCHEMA)
    specs: list[TableSpec]
    expire_before: dt.datetime
    carried_out: DataFrame | None = None

    @property
    def open_ends(self) -> DataFrame:
        if self.carried_in is None:
            return self.fresh
        return self.carried_in.unionByName(
            self.fresh.join(self.carried_in.select("record_id"), "record_id", "left_anti")
        )


@dataclass
class Outcome:
    """What a run does with the ``END`` events: the ones it carries on, and ledger entries."""

    carried: DataFrame  # OPEN_SCHEMA rows
    statuses: DataFrame  # record_id, batch_id, status, reason


def settle(
    open_ends: DataFrame,
    fresh: DataFrame,
    summary: DataFrame,
    cut: Cut,
    applies_all: bool,
    expire_before: dt.datetime,
) -> Outcome:
    """The ``END`` events after this run: those whose transaction the run applies whole (its
    commit time below a forward cut, or ``applies_all`` for a run without a cut) or that expired
    go (``control``); the rest are carried (a newly landed one, in ``fresh``, becomes
    ``pending``)."""
    state = open_ends.join(summary.drop("carried_at"), "txn_id", "left")
    if applies_all:
        passed = applied = F.lit(True)
    else:
        # Whether the run's cut takes the transaction: below a forward cut.
        passed = F.lit(False)
        if cut.forward:
            below = F.col("commit_ts") < F.lit(cut.at).cast("timestamp")
            passed = F.coalesce(below, F.lit(False))
        applied = F.coalesce(
            F.col("complete") & (passed | F.col("commit_ts").isNull()), F.lit(False)
        )
    expired = F.col("commit_ts").isNull() & (
        F.col("carried_at") < F.lit(expire_before).cast("timestamp")
    )
    state = state.withColumn(
        "_reason",
        F.when(applied, _end_reason("applied whole"))
        .when(
            expired,
            _end_reason(f"expired, no change of it arrived since {expire_before.isoformat()}"),
        )
        .when(
            given_up(expire_before) & passed,
            _end_reason(
                f"incomplete since before {expire_before.isoformat()}, applied without the"
                " events that never came"
            ),
        ),
    ).localCheckpoint()
    gone = state.where(F.col("_reason").isNotNull()).select(
        "record_id", "batch_id", F.lit(CONTROL).alias("status"), F.col("_reason").alias("reason")
    )
    kept = state.where(F.col("_reason").isNull())
    waiting = kept.join(fresh.select("record_id"), "record_id").select(
        "record_id",
        "batch_id",
        F.lit(PENDING).alias("status"),
        _end_reason("kept until its transaction is applied").alias("reason"),
    )
    return Outcome(
        carried=kept.select(*OPEN_SCHEMA.fieldNames()), statuses=union_all([gone, waiting])
    )


def _end_reason(what: str) -> Column:
    """A ledger reason for an ``END`` event: ``transaction END <id>: <what>``."""
    return F.concat(F.lit("transaction END "), "txn_id", F.lit(f": {what}"))


def write_open(ctx: JobContext, source: str, rows: DataFrame, had_rows: bool) -> None:
    """Replace the source's carried ``END`` events with ``rows`` (one commit; none when it
    carried none before and carries none now)."""
    open_state.replace(ctx.warehouse.transactions, source, rows, had_rows)
