"""MERGE the staged changes of a batch into one Delta table per declared source table.

Each target row keeps the sequence (``_cdc_sequence``) and record (``_cdc_record_id``) of the
change that produced it; a staged change only replaces a row whose sequence is lower, so a
late or replayed older change never overwrites newer state. A delete leaves a tombstone
(``_cdc_deleted``) that keeps an older upsert from resurrecting the row; tombstones are
removed once the resolved timestamp has passed them by ``--tombstone-retention-seconds``.
Columns that appear in the stream but not in the DDL are added to the table, typed where the
stream's schema says their type and as strings otherwise; a column the resolve step widened
(INT to BIGINT) is widened in the table; columns that disappear stay, null in new rows. A
partial update (YDB's UPDATES mode) sets only its columns and keeps the others. Query live
rows with ``WHERE NOT _cdc_deleted``.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from airflow_cdc.core.ddl import TableSpec, parse_tables
from spark_jobs.common import (
    APPLIED,
    DUPLICATE,
    SUPERSEDED,
    JobContext,
    Outcomes,
    base_parser,
    conform,
    ensure_table,
    fault_point,
    finish,
    log,
    read_text,
    snapshot,
    start,
    table_exists,
)
from spark_jobs.schemas import struct

JOB_NAME = "apply"
JOB_VERSION = "1.1.0"

TARGET_META_DDL = (
    "_cdc_deleted BOOLEAN, _cdc_sequence STRING, _cdc_op STRING, _cdc_commit_ts TIMESTAMP,"
    " _cdc_record_id STRING, _cdc_batch STRING, _cdc_special_values MAP<STRING, STRING>"
)


def target_schema(staged: StructType) -> StructType:
    """The target table of a staged table: its columns, then the target's metadata."""
    columns = [f for f in staged.fields if not f.name.startswith("_cdc_")]
    return StructType([*columns, *struct(TARGET_META_DDL).fields])


def classify(staged: DataFrame, target: DataFrame, keys: list[str]) -> DataFrame:
    """Status of each staged change against the current target row of its key.

    The change that already produced the target row (a re-run after a crash) counts as
    applied; another change with the same sequence is a duplicate delivery.
    """
    current = target.select(
        *(F.col(k).alias(f"_t_{k}") for k in keys),
        F.col("_cdc_sequence").alias("_t_seq"),
        F.col("_cdc_record_id").alias("_t_record"),
    )
    on = [staged[k] == current[f"_t_{k}"] for k in keys]
    joined = staged.join(current, on, "left")
    seq, t_seq = F.col("_cdc_sequence"), F.col("_t_seq")
    status = (
        F.when(t_seq.isNull() | (seq > t_seq), F.lit(APPLIED))
        .when((seq == t_seq) & (F.col("_cdc_record_id") == F.col("_t_record")), F.lit(APPLIED))
        .when(seq == t_seq, F.lit(DUPLICATE))
        .otherwise(F.lit(SUPERSEDED))
    )
    return joined.select(
        F.explode("_cdc_members").alias("record_id"),
        status.alias("status"),
        F.when(status == APPLIED, F.lit(None))
        .otherwise(F.concat(F.lit("target holds sequence "), t_seq))
        .alias("reason"),
    )


def evolve(ctx: JobContext, path: str, staged: DataFrame) -> list[str]:
    """Add undeclared stream columns to the target; returns every extra column it has."""
    target = DeltaTable.forPath(ctx.spark, path)
    existing = {f.name for f in target.toDF().schema.fields}
    seen = [r[0] for r in staged.select(F.explode(F.map_keys("_cdc_extra"))).distinct().collect()]
    added = [StructField(c, StringType()) for c in sorted(seen) if c not in existing]
    conform(ctx.spark, path, StructType(added))
    schema = DeltaTable.forPath(ctx.spark, path).toDF().schema
    declared = {f.name for f in staged.schema.fields}
    return [
        f.name for f in schema.fields if f.name not in declared and not f.name.startswith("_cdc_")
    ]


def merge(
    ctx: JobContext, path: str, spec: TableSpec, staged: DataFrame, extras: list[str]
) -> None:
    keys = list(spec.primary_key)
    partial = F.col("s._cdc_set_columns")
    inserted: dict[str, str | Column] = {}
    updated: dict[str, str | Column] = {}
    for field in staged.schema.fields:
        name = field.name
        if name.startswith("_cdc_"):
            continue
        inserted[f"`{name}`"] = F.col(f"s.`{name}`")
        updated[f"`{name}`"] = F.when(
            partial.isNull() | F.array_contains(partial, name), F.col(f"s.`{name}`")
        ).otherwise(F.col(f"t.`{name}`"))
    for name in extras:
        value = F.when(~F.col("s._cdc_is_delete"), F.col("s._cdc_extra").getItem(name))
        inserted[f"`{name}`"] = value
        updated[f"`{name}`"] = F.when(
            partial.isNull() | F.array_contains(partial, name), value
        ).otherwise(F.col(f"t.`{name}`"))
    meta: dict[str, str | Column] = {
        "_cdc_deleted": F.col("s._cdc_is_delete"),
        "_cdc_sequence": F.col("s._cdc_sequence"),
        "_cdc_op": F.col("s._cdc_op"),
        "_cdc_commit_ts": F.col("s._cdc_commit_ts"),
        "_cdc_record_id": F.col("s._cdc_record_id"),
        "_cdc_batch": F.col("s._cdc_batch"),
    }
    special = F.col("s._cdc_special_values")
    kept = F.map_filter(
        F.coalesce(F.col("t._cdc_special_values"), F.create_map().cast("map<string,string>")),
        lambda k, _: ~F.array_contains(F.coalesce(partial, F.array().cast("array<string>")), k),
    )
    condition = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
    (
        DeltaTable.forPath(ctx.spark, path)
        .alias("t")
        .merge(staged.alias("s"), condition)
        .whenMatchedUpdate(
            condition="s._cdc_sequence > t._cdc_sequence",
            set={
                **updated,
                **meta,
                "_cdc_special_values": F.when(partial.isNull(), special).otherwise(
                    F.map_concat(kept, special)
                ),
            },
        )
        .whenNotMatchedInsert(values={**inserted, **meta, "_cdc_special_values": special})
        .execute()
    )


def purge_tombstones(
    ctx: JobContext, path: str, resolved: dt.datetime | None, retention: dt.timedelta
) -> int:
    """Delete tombstones committed before ``resolved - retention``; returns how many."""
    if resolved is None:
        return 0
    horizon = resolved - retention
    table = DeltaTable.forPath(ctx.spark, path)
    doomed = F.col("_cdc_deleted") & (F.col("_cdc_commit_ts") < F.lit(horizon))
    count = table.toDF().where(doomed).count()
    if count:
        table.delete(doomed)
    return count


def read_resolved(ctx: JobContext, source: str | None) -> dt.datetime | None:
    if not source:
        return None
    text = read_text(ctx, ctx.warehouse.resolved_file(source))
    if text is None:
        log.warning("no resolved timestamp for %s yet: tombstones are kept", source)
        return None
    value = json.loads(text).get("resolved_ts")
    return dt.datetime.fromisoformat(value) if value else None


def apply_table(
    ctx: JobContext,
    spec: TableSpec,
    resolved: dt.datetime | None,
    retention: dt.timedelta,
    outcomes: Outcomes,
) -> dict[str, Any]:
    staged_path = ctx.warehouse.staged(spec.table)
    if not table_exists(ctx.spark, staged_path):
        return {"staged": 0}
    staged = (
        ctx.spark.read.format("delta").load(staged_path).where(F.col("_cdc_batch") == ctx.batch_id)
    ).transform(snapshot)
    path = ctx.warehouse.target(spec.table)
    schema = target_schema(staged.schema)
    ensure_table(ctx.spark, path, schema)
    conform(ctx.spark, path, schema)
    extras = evolve(ctx, path, staged)
    statuses = classify(
        staged, ctx.spark.read.format("delta").load(path), list(spec.primary_key)
    ).transform(snapshot)
    counts = {
        r["status"]: r["n"]
        for r in statuses.groupBy("status").agg(F.count(F.lit(1)).alias("n")).collect()
    }
    fault_point("apply:before_merge")
    merge(ctx, path, spec, staged, extras)
    fault_point("apply:after_merge")
    outcomes.status(statuses)
    purged = purge_tombstones(ctx, path, resolved, retention)
    return {
        "staged": sum(counts.values()),
        **{k: int(v) for k, v in counts.items()},
        "tombstones_purged": purged,
        "extra_columns": extras,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = base_parser(__doc__)
    parser.add_argument("--ddl", required=True, help="CREATE TABLE statements of the targets")
    parser.add_argument("--default-schema", default="public")
    parser.add_argument(
        "--resolved-source",
        help="landed source whose resolved timestamp allows tombstones to be purged",
    )
    parser.add_argument("--tombstone-retention-seconds", type=float, default=86400.0)
    args = parser.parse_args(argv)
    specs = parse_tables(args.ddl, args.default_schema)
    ctx = start(JOB_NAME, JOB_VERSION, args)
    outcomes = Outcomes(ctx)
    resolved = read_resolved(ctx, args.resolved_source)
    retention = dt.timedelta(seconds=args.tombstone_retention_seconds)
    stats: dict[str, Any] = {"job": JOB_NAME, "batch_id": ctx.batch_id, "tables": {}}
    for spec in specs:
        stats["tables"][spec.table.qualified] = apply_table(
            ctx, spec, resolved, retention, outcomes
        )
    return finish(ctx, outcomes, stats, args.stats_file)


if __name__ == "__main__":
    main()
