"""Keep a source's tables fast and bounded: bookkeeping retention, tombstones, compaction,
VACUUM.

Bookkeeping retention, first: a landed record whose outcome became final (applied,
superseded, duplicate, control) more than ``--raw-retention-seconds`` ago (7 days by
default) leaves the source's partitions of ``_cdc/raw``, ``_cdc/quarantine`` and
``_cdc/ledger``; a quarantined record stays until it is replayed (then it is final like the
others) or for ``--quarantine-retention-seconds`` (30 days by default). Pending and
unprocessed records always stay. The raw rows go first, then the quarantine's, then the
ledger's, each set read from the ledger: a run that dies between them leaves every batch's
accounting identity true (an accounted record is one the raw table still has), and its
re-run finishes the rest. Landing checkpoints stay: the progress rows of the newest landing
run are the checkpoint, and only older ones go, in the partitions whose records expire and,
past the same retention, in partitions with no record left (a batch that landed nothing).

Per declared target table of the source: delete the tombstones (``_cdc_deleted`` rows) that
the source's resolved timestamp has passed by the tombstone retention (an older change can
no longer arrive to be kept out by them; a change landed and not yet decided, in a batch
whose apply has not run, failed, or holds it, or a record quarantined for a reason a
replay fixes, can still be applied: the timestamp counts only up to the earliest such
record's arrival, :func:`spark_jobs.settled.follow`), compact small files
(Delta ``OPTIMIZE``), then ``VACUUM`` the files a commit removed longer ago than the VACUUM
retention (and files no commit ever added, such as a failed write's; a table with no file
that old is done without VACUUM's listing). The retention is the table's
``delta.deletedFileRetentionDuration``, set only when it differs from Delta's default (7
days): Delta 4 ignores VACUUM's ``RETAIN`` clause, and refuses time travel beyond that
retention. Changing it is one metadata commit, which a concurrent apply's MERGE retries like
any conflict. A table's history table (``<table>__history``, :mod:`spark_jobs.history`) is
compacted and vacuumed the same way, and nothing is deleted from it: its delete rows are
history. The source's partitions of the bookkeeping tables (``_cdc/raw``, ``ledger``,
``quarantine``, ``cuts``) and of the open state (``pending``, ``held``, ``transactions``:
rewritten by every apply run, so each run leaves files behind) are compacted too, and the
tables vacuumed.

Safe beside the CDC jobs: each step is one Delta transaction; when a concurrent writer
commits first (a MERGE into the table), the step is retried on the new snapshot (Delta's
conflict exceptions only, a few times, with backoff), never skipped silently. The apply
job's MERGE does the same; its bookkeeping writes are blind appends, which compaction does
not conflict with. Run one maintenance task at a time per warehouse (the example DAG chains
them): VACUUMs of the shared bookkeeping tables would count each other's files. The apply
jobs no longer purge tombstones themselves: a DELETE over the whole table on every batch
cost as much as the MERGE, in proportion to the table's size.

Consistent cuts (:mod:`spark_jobs.cut`): every table version that a cut published within
``--cut-retention-seconds`` references stays readable (a target table's file retention is
at least the cut retention: a cut's version was current when it was published, so every file
removed since went after that, and the Delta log is kept as long; :func:`~airflow_cdc.cuts.
read_cut` lifts Delta's time-travel limit, which counts from the version's own commit, for
the versions cuts name), and tombstones go only below the
oldest such cut, so that a late change the next cut applies is still kept out by them. Older
cuts, all but the newest, leave the cut history (:func:`expire_cuts`): their versions' files
are not kept, and a reader must not be handed them.

The bookkeeping reads follow the open state, not the retained history: the ledger's
batches with an entry older than the shorter retention (:func:`expired_records`), the landing
runs and open batches since the last run (:mod:`spark_jobs.settled`), the progress rows of
runs since the first one still kept (:func:`old_checkpoints`).

Reports per table the files and bytes before and after, the bytes OPTIMIZE rewrote, the
tombstones purged and the files VACUUM deleted.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from delta.tables import DeltaTable
from pyspark.errors import (
    AnalysisException,
    IllegalArgumentException,
    UnsupportedOperationException,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_cdc.core.ddl import TableSpec, parse_tables
from airflow_cdc.core.exceptions import ResolvedTimestampUnavailable
from airflow_cdc.core.resolved_state import parse_state
from airflow_cdc.jobs import (
    CLUSTER_ABOVE_BYTES,
    CUT_RETENTION_SECONDS,
    MAX_RETENTION_SECONDS,
    MIN_VACUUM_RETENTION_HOURS,
    QUARANTINE_RETENTION_SECONDS,
    RAW_RETENTION_SECONDS,
    TOMBSTONE_RETENTION_SECONDS,
)
from spark_jobs import history, ledger, settled
from spark_jobs.arguments import add_table_arguments, at_least, base_parser, source_name
from spark_jobs.cut import member_ids
from spark_jobs.delta_tables import retry_on_conflict, table_exists
from spark_jobs.faults import fault_point
from spark_jobs.files import hadoop_path, read_text
from spark_jobs.frames import in_parallel
from spark_jobs.reassemble import OPEN
from spark_jobs.runs import start, write_stats
from spark_jobs.schemas import quoted, table_properties
from spark_jobs.settled import Settled
from spark_jobs.times import from_micros
from spark_jobs.warehouse import PROGRESS, RECORD, JobContext

log = logging.getLogger("airflow_cdc.jobs")

JOB_NAME = "maintain"
JOB_VERSION = "1.4.14"
# Delta clusters by at most four columns.
MAX_CLUSTERING_COLUMNS = 4


def resolved_time(ctx: JobContext, source: str) -> dt.datetime | None:
    """The source's resolved timestamp, as its last landing run recorded it (if it has)."""
    text = read_text(ctx, ctx.warehouse.resolved_file(source))
    try:
        return parse_state(text) if text else None
    except ResolvedTimestampUnavailable:
        return None


def utc_literal(moment: dt.datetime) -> str:
    """``moment`` as a SQL timestamp literal in UTC."""
    return f"TIMESTAMP '{moment.astimezone(dt.UTC).strftime('%Y-%m-%d %H:%M:%S.%f')}+00:00'"


def delete_where(ctx: JobContext, path: str, condition: str) -> int:
    """Delete the table's rows that match the SQL ``condition`` (one commit); how many."""
    deleted = ctx.spark.sql(f"DELETE FROM delta.{quoted(path)} WHERE {condition}").first()
    return int(deleted[0]) if deleted is not None else 0


def purge_tombstones(
    ctx: JobContext, path: str, resolved: dt.datetime | None, retention: dt.timedelta
) -> int:
    """Delete tombstones committed before ``resolved - retention``; returns how many."""
    if resolved is None:
        return 0
    return delete_where(
        ctx, path, f"_cdc_deleted AND _cdc_commit_ts < {utc_literal(resolved - retention)}"
    )


def detail(ctx: JobContext, path: str) -> dict[str, Any]:
    """The table's current files, bytes and properties (from its Delta log, no data read)."""
    row = (
        DeltaTable.forPath(ctx.spark, path)
        .detail()
        .select("numFiles", "sizeInBytes", "properties", "clusteringColumns")
        .first()
    )
    assert row is not None
    return {
        "files": int(row["numFiles"]),
        "bytes": int(row["sizeInBytes"]),
        "clustering": list(row["clusteringColumns"] or []),
        "properties": dict(row["properties"] or {}),
    }


def compact(ctx: JobContext, path: str, where: str | None = None) -> dict[str, int]:
    """OPTIMIZE (bin-packing) the table, or the partitions ``where`` selects."""

    def optimize() -> Any:
        builder = DeltaTable.forPath(ctx.spark, path).optimize()
        if where is not None:
            builder = builder.where(where)
        return builder.executeCompaction().select("metrics.*").first()

    fault_point("maintain:before_compact")
    metrics = retry_on_conflict(optimize, f"OPTIMIZE {path}")
    if metrics is None:
        return {"files_added": 0, "files_removed": 0, "bytes_rewritten": 0}
    return {
        "files_added": int(metrics["numFilesAdded"]),
        "files_removed": int(metrics["numFilesRemoved"]),
        "bytes_rewritten": int(metrics["filesRemoved"]["totalSize"] or 0),
    }


# How many files :func:`may_vacuum` looks at before it lets VACUUM list the table itself.
PRECHECK_FILES = 10_000


def may_vacuum(ctx: JobContext, path: str, hours: float) -> bool:
    """Whether VACUUM could delete anything: a file under the table (its log aside) written
    before the retention horizon (with an hour's margin for the clocks). VACUUM only deletes
    such files, so a young table is done without its distributed listing; a table with more
    than :data:`PRECHECK_FILES` files, or with an old one, is left to VACUUM."""
    target, fs = hadoop_path(ctx, path)
    horizon_ms = (time.time() - (hours - 1) * 3600) * 1000
    log_dir = f"{target.toUri().getPath().rstrip('/')}/_delta_log/"
    files = fs.listFiles(target, True)
    for _ in range(PRECHECK_FILES):
        if not files.hasNext():
            return False
        status = files.next()
        if status.getPath().toUri().getPath().startswith(log_dir):
            continue
        if status.getModificationTime() < horizon_ms:
            return True
    return True


def vacuum(ctx: JobContext, path: str, hours: float) -> int:
    """VACUUM the table (Delta's retention check stays on); how many files were eligible
    (a dry run's list: Delta logs VACUUM's own counts on some file systems only)."""
    if not may_vacuum(ctx, path, hours):
        return 0
    # The retention is the table's (see keep_removed_files): Delta 4 ignores a RETAIN clause
    # other than 0 hours.
    table = f"delta.{quoted(path)}"
    doomed = ctx.spark.sql(f"VACUUM {table} DRY RUN").count()
    if doomed:
        ctx.spark.sql(f"VACUUM {table}")
    return doomed


FILE_RETENTION = "delta.deletedFileRetentionDuration"
LOG_RETENTION = "delta.logRetentionDuration"
DEFAULT_LOG_RETENTION_HOURS = 30 * 24.0


def retention_hours(properties: dict[str, str]) -> float | None:
    """The table's deleted-file retention in hours, as :func:`keep_removed_files` sets it
    (``interval <n> hours``); ``None`` at Delta's default or in another form."""
    found = re.fullmatch(r"interval (\d+) hours", properties.get(FILE_RETENTION, ""))
    return float(found.group(1)) if found else None


def keep_removed_files(
    ctx: JobContext, path: str, hours: float, properties: dict[str, str]
) -> None:
    """Make ``hours`` the table's deleted-file retention: the files a commit removed stay that
    long (VACUUM deletes them after it, and Delta reads no older version than it allows), and
    the log at least as long (Delta requires it). One commit, and only when the retention
    changes: never at the defaults (Delta's 7 days, a log of 30)."""
    wanted = f"interval {math.ceil(hours)} hours"
    settings = {}
    current = properties.get(FILE_RETENTION)
    if current != wanted and not (current is None and hours == MIN_VACUUM_RETENTION_HOURS):
        settings[FILE_RETENTION] = wanted
    if hours > DEFAULT_LOG_RETENTION_HOURS and properties.get(LOG_RETENTION) != wanted:
        settings[LOG_RETENTION] = wanted
    if not settings:
        return
    listed = table_properties(dict(sorted(settings.items())))
    retry_on_conflict(
        lambda: ctx.spark.sql(f"ALTER TABLE delta.{quoted(path)} SET TBLPROPERTIES ({listed})"),
        f"retention of {path}",
    )


@dataclass(frozen=True)
class RetainedCuts:
    """The published cuts younger than the cut retention (and the newest, whatever its age):
    the oldest one's time, per table the oldest Delta version any of them references, when
    the first of them was published, and the newest one's time (microseconds)."""

    oldest_at: dt.datetime | None
    versions: dict[str, int]
    first_published: dt.datetime | None = None
    newest_us: int | None = None


def kept_since_hours(published: dt.datetime | None, now: dt.datetime) -> float:
    """VACUUM's retention that keeps every file removed since ``published`` (a kept cut
    older than the cut retention: the newest), in whole days so that it changes the table's
    retention property once a day at most; 0 without one."""
    if published is None:
        return 0.0
    age = max(now - published, dt.timedelta(0)) + dt.timedelta(hours=1)
    return 24.0 * math.ceil(age / dt.timedelta(days=1))


def retained_cuts(
    ctx: JobContext, source: str, now: dt.datetime, retention: dt.timedelta
) -> RetainedCuts:
    """The source's cuts published within ``retention`` of ``now`` (one row per cut)."""
    path = ctx.warehouse.cuts
    if not table_exists(ctx.spark, path):
        return RetainedCuts(None, {})
    mine = ctx.spark.read.format("delta").load(path).where(F.col("source") == source)
    # Times leave Spark as microseconds: a collected TIMESTAMP is naive in the driver's
    # local zone, and one in a daylight-saving fold would not find its row again.
    cut_us = F.unix_micros("cut_at")
    found = mine.agg(F.max(cut_us)).first()
    newest = None if found is None or found[0] is None else int(found[0])
    # The newest cut stays whatever its age: it is what the sensor hands out.
    kept = F.col("published_at") >= F.lit(now - retention)
    if newest is not None:
        kept = kept | (cut_us == F.lit(newest))
    rows = (
        mine.where(kept)
        .select(
            cut_us.alias("cut_at"),
            F.unix_micros("published_at").alias("published_at"),
            F.explode("tables").alias("table", "version"),
        )
        .collect()
    )
    oldest = from_micros(min((r["cut_at"] for r in rows), default=None))
    first = from_micros(min((r["published_at"] for r in rows), default=None))
    versions: dict[str, int] = {}
    for row in rows:
        versions[row["table"]] = min(versions.get(row["table"], row["version"]), row["version"])
    return RetainedCuts(oldest, versions, first, newest)


def expire_cuts(
    ctx: JobContext, source: str, now: dt.datetime, retention: dt.timedelta, kept: RetainedCuts
) -> int:
    """Delete the source's cuts published more than ``retention`` before ``now`` from the cut
    history, all but the newest (the cuts :func:`retained_cuts` found ``kept``); how many
    rows went.
    VACUUM keeps the files of the kept cuts' versions only: a reader must not find the
    others (a backfill of their hour would read versions whose files may be gone; it reads
    the oldest kept cut past its hour instead, :func:`airflow_cdc.cuts.cut_for`)."""
    path = ctx.warehouse.cuts
    if kept.newest_us is None:  # no cut of the source (or no history)
        return 0
    condition = (
        f"source = '{source}'"  # a checked name
        f" AND published_at < {utc_literal(now - retention)}"
        f" AND unix_micros(cut_at) < {kept.newest_us}"
    )
    return retry_on_conflict(lambda: delete_where(ctx, path, condition), f"cut retention of {path}")


def cluster(
    ctx: JobContext, path: str, keys: tuple[str, ...], table: dict[str, Any], above: int
) -> dict[str, Any]:
    """Cluster the table by its primary key (Delta's liquid clustering: from then on OPTIMIZE
    clusters the files it rewrites) once it holds ``above`` bytes, so that a MERGE whose keys
    fall in a narrow range skips the files outside it. Done once; a table Delta cannot
    cluster by those columns (no statistics for them) stays as it is, and the report says
    why."""
    columns = list(keys[:MAX_CLUSTERING_COLUMNS])
    if table["clustering"] == columns or table["bytes"] < above:
        return {}
    listed = ", ".join(quoted(c) for c in columns)
    statement = f"ALTER TABLE delta.{quoted(path)} CLUSTER BY ({listed})"
    try:
        retry_on_conflict(lambda: ctx.spark.sql(statement), f"clustering of {path}")
    except (AnalysisException, IllegalArgumentException, UnsupportedOperationException) as err:
        log.warning("%s is not clustered by %s: %s", path, columns, err)
        return {"clustering_refused": str(err).splitlines()[0]}
    log.info("%s is clustered by %s from now on", path, columns)
    return {"clustered_by": columns}


def maintain_table(
    ctx: JobContext,
    path: str,
    vacuum_hours: float,
    where: str | None = None,
    keys: tuple[str, ...] = (),
    cluster_above: int = CLUSTER_ABOVE_BYTES,
    shared: bool = False,
    **extra: int,
) -> dict[str, Any]:
    """Compact and vacuum the table (clustered by ``keys`` past ``cluster_above`` bytes).
    ``shared``: a table every source's maintenance keeps (the bookkeeping), whose file
    retention only grows, to the longest any source asked for: sources with different
    retentions would otherwise change the property back and forth, a metadata commit that
    conflicts with the other jobs' appends, and one source's VACUUM would cut another's."""
    before = detail(ctx, path)
    if shared:
        vacuum_hours = max(vacuum_hours, retention_hours(before["properties"]) or 0.0)
    keep_removed_files(ctx, path, vacuum_hours, before["properties"])
    clustered = cluster(ctx, path, keys, before, cluster_above) if keys else {}
    compacted = compact(ctx, path, where)
    vacuumed = vacuum(ctx, path, vacuum_hours)
    after = detail(ctx, path)
    return {
        **extra,
        **clustered,
        "files_before": before["files"],
        "files_after": after["files"],
        "bytes_before": before["bytes"],
        "bytes_after": after["bytes"],
        **compacted,
        "files_vacuumed": vacuumed,
        "vacuum_retention_hours": vacuum_hours,
    }


def expired_records(
    ctx: JobContext, source: str, now: dt.datetime, final_for: dt.timedelta, held_for: dt.timedelta
) -> DataFrame | None:
    """``record_id``, ``batch_id`` of the records whose retention is over, by the ledger:
    final for ``final_for``, or quarantined (never replayed) for ``held_for``."""
    if not table_exists(ctx.spark, ctx.warehouse.ledger):
        return None
    entries = ctx.spark.read.format("delta").load(ctx.warehouse.ledger)
    entries = entries.where(F.col("source") == source)
    # A record's outcome now is one of its entries: only a batch with an entry older than
    # the shorter retention can hold an expired record. Delta skips the others' files by
    # their decided_at statistics (each apply run's entries share one decided_at).
    oldest = entries.where(F.col("decided_at") < F.lit(now - min(final_for, held_for)))
    batches = sorted(r[0] for r in oldest.select("batch_id").distinct().collect())
    if not batches:
        return None
    status = ledger.current_status(entries.where(F.col("batch_id").isin(batches)))
    quarantined = F.col("status") == ledger.QUARANTINED
    over = F.when(quarantined, F.col("decided_at") < F.lit(now - held_for)).otherwise(
        (F.col("status") != ledger.PENDING) & (F.col("decided_at") < F.lit(now - final_for))
    )
    expired = status.where(over).select("record_id", "batch_id")
    # A record the open state still holds (an open fragment set, a held change) stays
    # whatever its ledger says: an apply that died before rewriting the open state is
    # re-run against the ledger, which must still name the record's outcome.
    for carried in open_records(ctx, source):
        expired = expired.join(carried, "record_id", "left_anti")
    return expired.localCheckpoint()


def open_records(ctx: JobContext, source: str) -> list[DataFrame]:
    """``record_id`` of every record in the source's open state (the open fragment sets of
    ``_cdc/pending``, the members of ``_cdc/held``, the END events ``_cdc/transactions``
    carries)."""
    frames = []
    wh = ctx.warehouse
    if table_exists(ctx.spark, wh.pending):
        pending = ctx.spark.read.format("delta").load(wh.pending)
        # Open rows only: a closed marker's record is final, and only recognizes redeliveries.
        is_open = (F.col("source") == source) & (F.col("state") == OPEN)
        frames.append(pending.where(is_open).select("record_id"))
    if table_exists(ctx.spark, wh.held):
        held = ctx.spark.read.format("delta").load(wh.held).where(F.col("source") == source)
        frames.append(member_ids(held))
    if table_exists(ctx.spark, wh.transactions):
        ends = ctx.spark.read.format("delta").load(wh.transactions)
        frames.append(ends.where(F.col("source") == source).select("record_id"))
    return frames


def delete_records(
    ctx: JobContext, path: str, source: str, rows: DataFrame, batches: list[str]
) -> int:
    """Delete ``rows`` (``record_id``, ``batch_id``) from the source's ``batches`` of
    ``path`` (one MERGE, retried on a concurrent commit); how many rows went."""
    if not table_exists(ctx.spark, path):
        return 0
    on = (F.col("t.source") == source) & F.col("t.batch_id").isin(batches)
    on = on & (F.col("t.batch_id") == F.col("r.batch_id"))
    on = on & (F.col("t.record_id") == F.col("r.record_id"))

    def merge() -> int:
        table = DeltaTable.forPath(ctx.spark, path).alias("t")
        metrics = table.merge(rows.alias("r"), on).whenMatchedDelete().execute().first()
        return int(metrics["num_deleted_rows"]) if metrics is not None else 0

    return retry_on_conflict(merge, f"retention of {path}")


def old_checkpoints(
    ctx: JobContext, source: str, batches: list[str], quiet_before: dt.datetime, known: Settled
) -> DataFrame:
    """The progress rows of landing runs before the newest (``known.through``: the newest
    run's rows are the whole checkpoint) in ``batches``, and in batches without a record
    left in the raw table (a quiet batch's, or one whose records expired while its run was
    the newest) whose file was written before ``quiet_before`` (at landing, or later by
    compaction: an apply that runs that late finds no resolved timestamp to vouch for a cut,
    and takes none). Of the latter, only the runs after ``known.quiet_through`` are read (by
    the landing sequence's statistics), and the ``known.quiet`` batches, whose rows were
    kept for now; both move on."""
    wh = ctx.warehouse
    mine = (F.col("source") == source) & (F.col("kind") == PROGRESS)
    progress = ctx.spark.read.format("delta").load(wh.raw).where(mine)
    progress = progress.where(F.col("land_seq") < F.lit(known.through))
    stale = F.col("_metadata.file_modification_time") < F.lit(quiet_before)
    looked_at = (F.col("land_seq") > F.lit(known.quiet_through)) | F.col("batch_id").isin(
        known.quiet
    )
    runs = (
        progress.where(looked_at & ~F.col("batch_id").isin(batches))
        .groupBy("batch_id")
        .agg(F.min(stale).alias("stale"))
        .collect()
    )
    holding = set()
    if runs:
        found = [r["batch_id"] for r in runs]
        records = ledger.read_partitions(ctx.spark, wh.raw, source, found)
        assert records is not None
        held = records.where(F.col("kind") == RECORD).select("batch_id").distinct()
        holding = {r[0] for r in held.collect()}
    quiet = [r["batch_id"] for r in runs if r["batch_id"] not in holding and r["stale"]]
    known.quiet = sorted(r["batch_id"] for r in runs if r["batch_id"] not in holding | set(quiet))
    known.quiet_through = known.through - 1
    expiring = F.col("batch_id").isin(batches) | F.col("batch_id").isin(quiet)
    return progress.where(expiring).select("record_id", "batch_id")


def expire_bookkeeping(
    ctx: JobContext,
    source: str,
    final_for: dt.timedelta,
    held_for: dt.timedelta,
    known: Settled,
) -> dict[str, int]:
    """Apply the bookkeeping retention (module doc); rows deleted per table. ``known``: the
    source's batches as this run found them (:func:`spark_jobs.settled.follow`)."""
    wh = ctx.warehouse
    report = {"records_expired": 0, "raw_rows": 0, "quarantine_rows": 0, "ledger_rows": 0}
    if not table_exists(ctx.spark, wh.raw):
        return report
    now = dt.datetime.now(dt.UTC)
    expired = expired_records(ctx, source, now, final_for, held_for)
    batches: list[str] = []
    if expired is not None:
        report["records_expired"] = expired.count()
        batches = sorted(r[0] for r in expired.select("batch_id").distinct().collect())
    # Record ids are unique across kinds (a checkpoint's starts with "progress:"). Both sides
    # are materialized: the union reads them again, not the tables.
    checkpoints = old_checkpoints(ctx, source, batches, now - final_for, known)
    checkpoints = checkpoints.localCheckpoint()
    landed = checkpoints if expired is None else expired.unionByName(checkpoints)
    old = {r[0] for r in checkpoints.select("batch_id").distinct().collect()}
    touched = sorted({*batches, *old})
    if not touched:
        return report
    report["raw_rows"] = delete_records(ctx, wh.raw, source, landed, touched)
    fault_point("maintain:after_raw_retention")
    if expired is not None and batches:
        report["quarantine_rows"] = delete_records(ctx, wh.quarantine, source, expired, batches)
        report["ledger_rows"] = delete_records(ctx, wh.ledger, source, expired, batches)
    log.info("bookkeeping retention of %s: %s", source, report)
    return report


def run(ctx: JobContext, args: Any) -> dict[str, Any]:
    source = args.source
    specs = parse_tables(args.ddl, args.default_schema)
    retention = dt.timedelta(seconds=args.tombstone_retention_seconds)
    resolved = resolved_time(ctx, source)
    stats: dict[str, Any] = {"job": JOB_NAME, "source": source, "batch_id": ctx.batch_id}
    known = settled.follow(ctx, source)
    stats["expired"] = expire_bookkeeping(
        ctx,
        source,
        dt.timedelta(seconds=args.raw_retention_seconds),
        dt.timedelta(seconds=args.quarantine_retention_seconds),
        known,
    )
    settled.save(ctx, source, known)
    stats["batches"] = settled.describe(known)
    now = dt.datetime.now(dt.UTC)
    cut_retention = dt.timedelta(seconds=args.cut_retention_seconds)
    cuts = retained_cuts(ctx, source, now, cut_retention)
    stats["cuts_expired"] = expire_cuts(ctx, source, now, cut_retention, cuts)
    # Tombstones go only below the oldest cut still kept (and past the resolved timestamp,
    # as far as every landed record has been decided).
    horizon = resolved
    if cuts.oldest_at is not None and resolved is not None:
        horizon = min(resolved, cuts.oldest_at + retention)
    since = known.since()
    if since is not None and horizon is not None:
        horizon = min(horizon, since)
    stats["tombstone_horizon"] = None if horizon is None else (horizon - retention).isoformat()
    tables: dict[str, Any] = {}

    def vacuum_hours(table: str) -> float:
        if table in cuts.versions:
            # A kept cut's version was current when the cut was published: every file
            # removed since is removed after it, and stays as long as the cut.
            return max(
                args.vacuum_retention_hours,
                cut_retention.total_seconds() / 3600,
                kept_since_hours(cuts.first_published, now),
            )
        return float(args.vacuum_retention_hours)

    def declared(spec: TableSpec) -> dict[str, Any]:
        """The table (its tombstones purged first), then its history table."""
        path = ctx.warehouse.target(spec.table)
        if not table_exists(ctx.spark, path):
            return {}
        purged = retry_on_conflict(
            partial(purge_tombstones, ctx, path, horizon, retention),
            f"tombstone purge of {path}",
        )
        name = spec.table.qualified
        done = {
            name: maintain_table(
                ctx,
                path,
                vacuum_hours(name),
                keys=spec.primary_key,
                cluster_above=args.cluster_above_bytes,
                tombstones_purged=purged,
            )
        }
        kept = history.of(spec).table  # compacted, never purged: its deletes are history
        path = ctx.warehouse.target(kept)
        if table_exists(ctx.spark, path):
            done[kept.qualified] = maintain_table(ctx, path, vacuum_hours(kept.qualified))
        return done

    wh = ctx.warehouse
    mine = f"source = '{source}'"  # a plain name (source_name), safe to quote

    def bookkeeping(name: str, path: str) -> dict[str, Any]:
        if not table_exists(ctx.spark, path):
            return {}
        return {
            name: maintain_table(ctx, path, args.vacuum_retention_hours, where=mine, shared=True)
        }

    work: list[Callable[[], dict[str, Any]]] = [
        *(partial(declared, spec) for spec in specs),
        *(
            partial(bookkeeping, name, path)
            for name, path in (
                ("_cdc.raw", wh.raw),
                ("_cdc.ledger", wh.ledger),
                ("_cdc.quarantine", wh.quarantine),
                ("_cdc.cuts", wh.cuts),
                ("_cdc.pending", wh.pending),
                ("_cdc.held", wh.held),
                ("_cdc.transactions", wh.transactions),
            )
        ),
    ]
    # Every table on its own, two at a time (one's planning and commits overlap the other's
    # tasks); the stats in the order of the work.
    for done in in_parallel(ctx.spark, lambda step: step(), work):
        tables.update(done)
    stats["tables"] = tables
    stats["resolved_ts"] = resolved.isoformat() if resolved else None
    log.info("maintained %d tables of %s", len(tables), source)
    write_stats(args.stats_file, stats)
    return stats


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = base_parser(__doc__)
    parser.add_argument(
        "--source", required=True, type=source_name, help="the source whose tables to keep"
    )
    add_table_arguments(parser)
    parser.add_argument(
        "--tombstone-retention-seconds",
        type=at_least(0.0, "seconds", MAX_RETENTION_SECONDS),
        default=TOMBSTONE_RETENTION_SECONDS,
        help="how long past the resolved timestamp tombstones are kept",
    )
    parser.add_argument(
        "--vacuum-retention-hours",
        type=at_least(MIN_VACUUM_RETENTION_HOURS, "hours (Delta's VACUUM safety floor)"),
        default=MIN_VACUUM_RETENTION_HOURS,
        help=f"VACUUM keeps files younger than this (>= {MIN_VACUUM_RETENTION_HOURS})",
    )
    parser.add_argument(
        "--raw-retention-seconds",
        type=at_least(0.0, "seconds", MAX_RETENTION_SECONDS),
        default=RAW_RETENTION_SECONDS,
        help="a landed record whose outcome has been final this long leaves the raw table,"
        " the quarantine and the ledger",
    )
    parser.add_argument(
        "--quarantine-retention-seconds",
        type=at_least(0.0, "seconds", MAX_RETENTION_SECONDS),
        default=QUARANTINE_RETENTION_SECONDS,
        help="a quarantined record never replayed is kept this long",
    )
    parser.add_argument(
        "--cut-retention-seconds",
        type=at_least(0.0, "seconds", MAX_RETENTION_SECONDS),
        default=CUT_RETENTION_SECONDS,
        help="every table version that a consistent cut published this recently references"
        " stays readable (VACUUM and the Delta log keep it)",
    )
    parser.add_argument(
        "--cluster-above-bytes",
        type=int,
        default=CLUSTER_ABOVE_BYTES,
        help="a target table this large is clustered by its primary key (liquid clustering)",
    )
    args = parser.parse_args(argv)
    ctx = start(JOB_NAME, JOB_VERSION, args)
    return run(ctx, args)


if __name__ == "__main__":
    main()
