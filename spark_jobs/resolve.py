"""Decode changes into typed rows of the declared tables and resolve each key's order.

Per batch and declared table: every change is decoded per the table's DDL (a value that does
not decode, or a missing key, quarantines the change with its raw records); then per primary
key only the change with the highest commit sequence survives, the others are marked
``superseded`` (older) or ``duplicate`` (the same sequence again). Survivors are staged for
the apply job. Changes of tables nobody declared are quarantined (``undeclared_table``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from airflow_cdc.core.ddl import TableSpec, parse_tables
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.rows import decode_row
from airflow_cdc.core.types import spark_type
from spark_jobs.common import (
    DUPLICATE,
    SUPERSEDED,
    JobContext,
    Outcomes,
    base_parser,
    finish,
    read_table,
    snapshot,
    start,
    with_payloads,
)
from spark_jobs.reassemble import CHANGES_SCHEMA
from spark_jobs.schemas import struct

JOB_NAME = "resolve"
JOB_VERSION = "1.0.0"

META_DDL = (
    "_cdc_key STRING, _cdc_is_delete BOOLEAN, _cdc_sequence STRING, _cdc_op STRING,"
    " _cdc_commit_ts TIMESTAMP, _cdc_record_id STRING, _cdc_members ARRAY<STRING>,"
    " _cdc_extra MAP<STRING, STRING>, _cdc_special_values MAP<STRING, STRING>,"
    " _cdc_batch STRING"
)


def staged_schema(spec: TableSpec) -> StructType:
    """Declared columns with their Spark types, then the change's metadata."""
    columns = ", ".join(f"`{c.name}` {spark_type(c)}" for c in spec.columns)
    return struct(f"{columns}, {META_DDL}")


def decode_partition(spec: TableSpec, batch_id: str) -> Any:
    """Rows of ``changes`` -> staged tuples plus (error reason, error detail)."""
    names = [c.name for c in spec.columns]
    width = len(names) + 10

    def run(rows: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
        import json

        for row in rows:
            try:
                before = json.loads(row["before_json"]) if row["before_json"] else None
                after = json.loads(row["after_json"]) if row["after_json"] else None
                kind = "delete" if row["op"] == "d" else "upsert"
                decoded = decode_row(spec, kind, before, after)
            except RecordFormatError as err:
                yield (*([None] * width), row["record_id"], row["members"], err.reason, str(err))
                continue
            yield (
                *(decoded.values[n] for n in names),
                decoded.key_text,
                decoded.is_delete,
                row["sequence"],
                row["op"],
                row["commit_ts"],
                row["record_id"],
                row["members"],
                decoded.extra,
                decoded.special,
                batch_id,
                None,
                None,
                None,
                None,
            )

    return run


def decode_table(ctx: JobContext, spec: TableSpec, changes: DataFrame) -> DataFrame:
    schema = staged_schema(spec)
    extended = StructType(
        [
            *schema.fields,
            *struct(
                "_err_record STRING, _err_members ARRAY<STRING>, _err_reason STRING,"
                " _err_detail STRING"
            ).fields,
        ]
    )
    mine = changes.where(
        (F.col("schema") == spec.table.schema) & (F.col("table") == spec.table.name)
    )
    return ctx.spark.createDataFrame(
        mine.rdd.mapPartitions(decode_partition(spec, ctx.batch_id)), extended
    )


def resolve_keys(decoded: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(winners, losers): one change per key, the newest; losers with their status."""
    per_key = Window.partitionBy("_cdc_key").orderBy(
        F.col("_cdc_sequence").desc(), F.col("_cdc_record_id").asc()
    )
    ranked = decoded.withColumn("_rank", F.row_number().over(per_key)).withColumn(
        "_newest", F.first("_cdc_sequence").over(per_key)
    )
    winners = ranked.where(F.col("_rank") == 1).drop("_rank", "_newest")
    losers = ranked.where(F.col("_rank") > 1).select(
        F.explode("_cdc_members").alias("record_id"),
        F.when(F.col("_cdc_sequence") == F.col("_newest"), F.lit(DUPLICATE))
        .otherwise(F.lit(SUPERSEDED))
        .alias("status"),
        F.concat(F.lit("newer change in batch: "), F.col("_newest")).alias("reason"),
    )
    return winners, losers


def quarantine_changes(ctx: JobContext, failed: DataFrame, outcomes: Outcomes) -> None:
    """Quarantine changes (``_err_members``, reason, detail) with each member's raw payload."""
    rows = failed.select(
        F.explode("_err_members").alias("record_id"),
        F.col("_err_reason").alias("reason"),
        F.col("_err_detail").alias("detail"),
    )
    outcomes.quarantine(with_payloads(ctx, rows))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = base_parser(__doc__)
    parser.add_argument("--ddl", required=True, help="CREATE TABLE statements of the targets")
    parser.add_argument("--default-schema", default="public")
    args = parser.parse_args(argv)
    specs = parse_tables(args.ddl, args.default_schema)
    ctx = start(JOB_NAME, JOB_VERSION, args)
    outcomes = Outcomes(ctx)
    changes = (
        read_table(ctx.spark, ctx.warehouse.changes, CHANGES_SCHEMA).where(
            F.col("batch_id") == ctx.batch_id
        )
    ).transform(snapshot)
    stats: dict[str, Any] = {"job": JOB_NAME, "batch_id": ctx.batch_id, "tables": {}}
    for spec in specs:
        decoded = decode_table(ctx, spec, changes).transform(snapshot)
        failed = decoded.where(F.col("_err_reason").isNotNull())
        quarantine_changes(ctx, failed, outcomes)
        good = decoded.where(F.col("_err_reason").isNull()).drop(
            "_err_record", "_err_members", "_err_reason", "_err_detail"
        )
        winners, losers = resolve_keys(good)
        outcomes.status(losers)
        (
            winners.write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", f"_cdc_batch = '{ctx.batch_id}'")
            .option("mergeSchema", "true")
            .save(ctx.warehouse.staged(spec.table))
        )
        staged = read_table(ctx.spark, ctx.warehouse.staged(spec.table), staged_schema(spec))
        stats["tables"][spec.table.qualified] = {
            "changes": decoded.count(),
            "quarantined": failed.count(),
            "staged": staged.where(F.col("_cdc_batch") == ctx.batch_id).count(),
        }
    declared = F.lit(False)
    for spec in specs:
        declared = declared | (
            (F.col("schema") == spec.table.schema) & (F.col("table") == spec.table.name)
        )
    undeclared = changes.where(~declared).select(
        F.col("members").alias("_err_members"),
        F.lit("undeclared_table").alias("_err_reason"),
        F.concat_ws(".", "schema", "table").alias("_err_detail"),
    )
    stats["undeclared"] = undeclared.count()
    quarantine_changes(ctx, undeclared, outcomes)
    return finish(ctx, outcomes, stats, args.stats_file)


if __name__ == "__main__":
    main()
