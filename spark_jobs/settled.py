"""Which of a source's landed batches still have undecided records, followed from one
maintenance run to the next so that a run reads the batches landed since the last one and
the batches still open, not the whole retained history.

A record is undecided while the ledger has no final entry for it (its batch's apply has not
run, failed, holds it, or its set waits for fragments), or while its outcome now is
``quarantined`` for a reason a replay fixes (:data:`~spark_jobs.ledger.HOLDS_TOMBSTONES`). A batch
is *open* while it has an undecided record or any record quarantined now: a replay run with
explicit reasons can turn a quarantined record's outcome into a replayable one, and nothing
else makes a decided record undecided again (a final entry outranks a later ``pending``,
:func:`~spark_jobs.ledger.current_status`). So a batch found settled stays settled, until a
landing run adds records to it, which its landing sequence shows.

The state (``_cdc/settled/<source>.json``) holds the ids of the raw table and the ledger,
the newest landing sequence looked at, and each open batch's earliest undecided arrival
(the earliest found since it opened). It is a cache of facts
that stay true: a run that dies before writing it leaves the previous one, and a missing or
unreadable one (or one of another raw table or ledger) makes the run look at every batch
again.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_cdc.jobs import bookkeeping_location, check_source
from spark_jobs import ledger
from spark_jobs.delta_tables import table_exists
from spark_jobs.files import read_text, write_text
from spark_jobs.times import from_micros
from spark_jobs.warehouse import RECORD, JobContext

log = logging.getLogger("airflow_cdc.jobs")

STATE_VERSION = 1


@dataclass
class Settled:
    """What a run knows of the source's batches (module doc)."""

    table_id: str | None = None
    # Every landing run up to this landing sequence has been looked at.
    through: int = 0
    # The progress rows of every landing run up to this one are gone, in batches that hold
    # records (they go with them), or in ``quiet`` batches, kept for now
    # (:func:`spark_jobs.maintain.old_checkpoints`).
    quiet_through: int = 0
    quiet: list[str] = field(default_factory=list)
    # Open batches: the earliest arrival (microseconds) among each one's undecided records,
    # or None when it only holds quarantined records a replay does not take by default.
    open: dict[str, int | None] = field(default_factory=dict)
    # The batches this run read (reported).
    read: list[str] = field(default_factory=list)

    def since(self) -> dt.datetime | None:
        """The earliest arrival among the undecided records (``None``: there is none)."""
        found = [us for us in self.open.values() if us is not None]
        return from_micros(min(found)) if found else None


def state_path(ctx: JobContext, source: str) -> str:
    return bookkeeping_location(ctx.warehouse.root, "settled", f"{check_source(source)}.json")


def load(ctx: JobContext, source: str, table_id: str) -> Settled | None:
    """The last run's state, if it is of this raw table and readable; else ``None``."""
    text = read_text(ctx, state_path(ctx, source))
    if not text:
        return None
    try:
        state = json.loads(text)
        if state.get("version") != STATE_VERSION or state.get("table_id") != table_id:
            return None
        opened, through, quiet = state["open"], state["through"], state["quiet_through"]
        if not all(isinstance(n, int) for n in (through, quiet)) or not isinstance(opened, dict):
            return None
        return Settled(
            table_id,
            through,
            quiet_through=quiet,
            quiet=[str(b) for b in state["quiet"]],
            open={str(b): None if us is None else int(us) for b, us in opened.items()},
        )
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        log.warning("settled batches of %s unreadable (%s): every batch is read again", source, err)
        return None


def save(ctx: JobContext, source: str, settled: Settled) -> None:
    """Write the state for the next run (none without a raw table)."""
    if settled.table_id is None:
        return
    state = {
        "version": STATE_VERSION,
        "table_id": settled.table_id,
        "through": settled.through,
        "quiet_through": settled.quiet_through,
        "quiet": sorted(settled.quiet),
        "open": dict(sorted(settled.open.items())),
    }
    write_text(ctx, state_path(ctx, source), json.dumps(state))


def follow(ctx: JobContext, source: str) -> Settled:
    """The source's open batches now: those open at the last run and those that landing runs
    since added records to are read again (partition pruned; the new landing runs' rows found
    by their landing sequence's statistics). :func:`save` writes it for the next run."""
    wh = ctx.warehouse
    if not table_exists(ctx.spark, wh.raw):
        return Settled()
    table_id = table_ids(ctx)
    known = load(ctx, source, table_id)
    raw = ctx.spark.read.format("delta").load(wh.raw).where(F.col("source") == source)
    landed = raw if known is None else raw.where(F.col("land_seq") > known.through)
    runs = (
        landed.groupBy("batch_id")
        .agg(F.max("land_seq").alias("newest"), F.max(F.col("kind") == RECORD).alias("records"))
        .collect()
    )
    through = max([r["newest"] for r in runs if r["newest"] is not None], default=0)
    if known is not None:
        through = max(through, known.through)
    batches = {r["batch_id"] for r in runs if r["records"]} | set(known.open if known else ())
    settled = Settled(table_id, through, read=sorted(batches))
    if known is not None:
        settled.quiet_through, settled.quiet = known.quiet_through, known.quiet
    if batches:
        settled.open = open_batches(ctx, source, raw, settled.read)
    if known is not None:
        # An open batch keeps the earliest arrival found for it: a record landed without one
        # counts its raw file's time, which a rewrite of the file (compaction, the
        # retention's deletes) moves later.
        for batch, since in settled.open.items():
            before = known.open.get(batch)
            if since is not None and before is not None:
                settled.open[batch] = min(since, before)
    log.info(
        "batches of %s: read %d, open %s, undecided since %s",
        source,
        len(settled.read),
        sorted(settled.open),
        settled.since(),
    )
    return settled


def table_ids(ctx: JobContext) -> str:
    """The ids of the raw table and the ledger (none yet: empty), which the state is of."""
    ids = []
    for path in (ctx.warehouse.raw, ctx.warehouse.ledger):
        found = None
        if table_exists(ctx.spark, path):
            found = DeltaTable.forPath(ctx.spark, path).detail().select("id").first()
        ids.append("" if found is None else str(found[0]))
    return "/".join(ids)


def open_batches(
    ctx: JobContext, source: str, raw: DataFrame, batches: list[str]
) -> dict[str, int | None]:
    """Of ``batches``, the open ones (module doc) with their earliest undecided arrival. A
    record landed without an arrival time (a ``lines`` file's) counts the time its raw file
    was written (at landing, or later by compaction): it bounds the commit time from above,
    as the arrival does."""
    written = F.col("_metadata.file_modification_time")
    records = raw.where((F.col("kind") == RECORD) & F.col("batch_id").isin(batches)).select(
        "record_id", "batch_id", F.coalesce("arrival_ts", written).alias("arrival_ts")
    )
    final = ledger.final_entries(ctx.spark, ctx.warehouse.ledger, source, batches)
    if final is None:
        status, reason = F.lit(None).cast("string"), F.lit(None).cast("string")
    else:
        records = records.join(final, "record_id", "left")
        status, reason = F.col("status"), F.col("reason")
    quarantined = F.coalesce(status == ledger.QUARANTINED, F.lit(False))
    undecided = status.isNull() | (quarantined & reason.isin(*ledger.HOLDS_TOMBSTONES))
    found = (
        records.where(undecided | quarantined)
        .groupBy("batch_id")
        .agg(F.unix_micros(F.min(F.when(undecided, F.col("arrival_ts")))).alias("since"))
        .collect()
    )
    return {r["batch_id"]: r["since"] for r in found}


def describe(settled: Settled) -> dict[str, Any]:
    """What the run reports: the batches read, the open ones."""
    return {"batches_read": len(settled.read), "open": sorted(settled.open)}
