"""Keep a source's tables fast and bounded: tombstones, compaction, VACUUM.

Per declared target table of the source: delete the tombstones (``_cdc_deleted`` rows) that
the source's resolved timestamp has passed by the tombstone retention (an older change can
no longer arrive to be kept out by them), compact small files (Delta ``OPTIMIZE``), then
``VACUUM`` the files no version younger than the VACUUM retention references. The source's
partitions of the bookkeeping tables (``_cdc/raw``, ``ledger``, ``quarantine``) are compacted
too, and the tables vacuumed (``pending``, the open fragment sets, is rewritten by every
apply run).

Safe beside the CDC jobs: each step is one Delta transaction; when a concurrent writer
commits first (a MERGE into the table), the step is retried on the new snapshot (Delta's
conflict exceptions only, a few times, with backoff), never skipped silently. The apply
job's MERGE does the same; its bookkeeping writes are blind appends, which compaction does
not conflict with. Run one maintenance task at a time per warehouse (the example DAG chains
them): VACUUMs of the shared bookkeeping tables would count each other's files. The apply
jobs no longer purge tombstones themselves: a DELETE over the whole table on every batch
cost as much as the MERGE, in proportion to the table's size.

Reports per table the files and bytes before and after, the bytes OPTIMIZE rewrote, the
tombstones purged and the files VACUUM deleted.
"""

from __future__ import annotations

import datetime as dt
from functools import partial
from typing import Any

from delta.tables import DeltaTable

from airflow_cdc.core.ddl import parse_tables
from airflow_cdc.core.exceptions import ResolvedTimestampUnavailable
from airflow_cdc.core.resolved_state import parse_state
from airflow_cdc.jobs import MIN_VACUUM_RETENTION_HOURS
from spark_jobs.common import (
    JobContext,
    add_table_arguments,
    at_least,
    base_parser,
    fault_point,
    log,
    quoted,
    read_text,
    retry_on_conflict,
    source_name,
    start,
    table_exists,
    write_stats,
)

JOB_NAME = "maintain"
JOB_VERSION = "1.0.0"


def resolved_time(ctx: JobContext, source: str) -> dt.datetime | None:
    """The source's resolved timestamp, as its last landing run recorded it (if it has)."""
    text = read_text(ctx, ctx.warehouse.resolved_file(source))
    try:
        return parse_state(text) if text else None
    except ResolvedTimestampUnavailable:
        return None


def purge_tombstones(
    ctx: JobContext, path: str, resolved: dt.datetime | None, retention: dt.timedelta
) -> int:
    """Delete tombstones committed before ``resolved - retention``; returns how many."""
    if resolved is None:
        return 0
    horizon = (resolved - retention).astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    deleted = ctx.spark.sql(
        f"DELETE FROM delta.{quoted(path)} WHERE _cdc_deleted"
        f" AND _cdc_commit_ts < TIMESTAMP '{horizon}+00:00'"
    ).first()
    return int(deleted[0]) if deleted is not None else 0


def detail(ctx: JobContext, path: str) -> dict[str, int]:
    """The table's current files and bytes (from its Delta log, no data read)."""
    row = DeltaTable.forPath(ctx.spark, path).detail().select("numFiles", "sizeInBytes").first()
    assert row is not None
    return {"files": int(row["numFiles"]), "bytes": int(row["sizeInBytes"])}


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


def vacuum(ctx: JobContext, path: str, hours: float) -> int:
    """VACUUM the table (Delta's retention check stays on); how many files were eligible
    (a dry run's list: Delta logs VACUUM's own counts on some file systems only)."""
    table = f"delta.{quoted(path)}"
    doomed = ctx.spark.sql(f"VACUUM {table} RETAIN {hours} HOURS DRY RUN").count()
    if doomed:
        ctx.spark.sql(f"VACUUM {table} RETAIN {hours} HOURS")
    return doomed


def maintain_table(
    ctx: JobContext, path: str, vacuum_hours: float, where: str | None = None, **extra: int
) -> dict[str, Any]:
    before = detail(ctx, path)
    compacted = compact(ctx, path, where)
    vacuumed = vacuum(ctx, path, vacuum_hours)
    after = detail(ctx, path)
    return {
        **extra,
        "files_before": before["files"],
        "files_after": after["files"],
        "bytes_before": before["bytes"],
        "bytes_after": after["bytes"],
        **compacted,
        "files_vacuumed": vacuumed,
    }


def run(ctx: JobContext, args: Any) -> dict[str, Any]:
    source = args.source
    specs = parse_tables(args.ddl, args.default_schema)
    retention = dt.timedelta(seconds=args.tombstone_retention_seconds)
    resolved = resolved_time(ctx, source)
    stats: dict[str, Any] = {"job": JOB_NAME, "source": source, "batch_id": ctx.batch_id}
    tables: dict[str, Any] = {}
    for spec in specs:
        path = ctx.warehouse.target(spec.table)
        if not table_exists(ctx.spark, path):
            continue
        purged = retry_on_conflict(
            partial(purge_tombstones, ctx, path, resolved, retention),
            f"tombstone purge of {path}",
        )
        tables[spec.table.qualified] = maintain_table(
            ctx, path, args.vacuum_retention_hours, tombstones_purged=purged
        )
    wh = ctx.warehouse
    mine = f"source = '{source}'"  # a plain name (source_name), safe to quote
    for name, path in (
        ("_cdc.raw", wh.raw),
        ("_cdc.ledger", wh.ledger),
        ("_cdc.quarantine", wh.quarantine),
    ):
        if table_exists(ctx.spark, path):
            tables[name] = maintain_table(ctx, path, args.vacuum_retention_hours, where=mine)
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
        type=at_least(0.0, "seconds"),
        default=86400.0,
        help="how long past the resolved timestamp tombstones are kept",
    )
    parser.add_argument(
        "--vacuum-retention-hours",
        type=at_least(MIN_VACUUM_RETENTION_HOURS, "hours (Delta's VACUUM safety floor)"),
        default=MIN_VACUUM_RETENTION_HOURS,
        help=f"VACUUM keeps files younger than this (>= {MIN_VACUUM_RETENTION_HOURS})",
    )
    args = parser.parse_args(argv)
    ctx = start(JOB_NAME, JOB_VERSION, args)
    return run(ctx, args)


if __name__ == "__main__":
    main()
