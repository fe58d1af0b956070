"""Decode changes into typed rows of the declared tables and resolve each key's order.

Per batch and declared table: every change is decoded per the table's DDL (a value that does
not decode, a missing key, or a type that would lose data quarantines the change with its raw
records); then per primary key only the change with the highest commit sequence survives, the
others are marked ``superseded`` (older) or ``duplicate`` (the same sequence again). Partial
updates (YDB's UPDATES mode) are folded column by column onto the newest full image before
them. Survivors are staged for the apply job. Changes of tables nobody declared are
quarantined (``undeclared_table``).

Column types: the DDL's, widened where the target table was widened before, plus the columns
the stream's own schemas (Kafka Connect) declare; a lossless widening the batch needs (int32
to int64) is applied to the staged table here and to the target by the apply job.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from airflow_cdc.core.ddl import ColumnSpec, TableSpec, parse_tables
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.partial import fold
from airflow_cdc.core.rows import decode_row
from airflow_cdc.core.types import column_of, column_of_spark, spark_type, widen
from spark_jobs.common import (
    DUPLICATE,
    SUPERSEDED,
    JobContext,
    Outcomes,
    base_parser,
    conform,
    finish,
    log,
    read_table,
    snapshot,
    start,
    table_exists,
    with_payloads,
)
from spark_jobs.reassemble import CHANGES_SCHEMA
from spark_jobs.schemas import struct

JOB_NAME = "resolve"
JOB_VERSION = "1.1.0"

META_DDL = (
    "_cdc_key STRING, _cdc_is_delete BOOLEAN, _cdc_sequence STRING, _cdc_op STRING,"
    " _cdc_commit_ts TIMESTAMP, _cdc_record_id STRING, _cdc_members ARRAY<STRING>,"
    " _cdc_extra MAP<STRING, STRING>, _cdc_special_values MAP<STRING, STRING>,"
    " _cdc_batch STRING, _cdc_set_columns ARRAY<STRING>"
)


def staged_schema(spec: TableSpec) -> StructType:
    """Declared columns with their Spark types, then the change's metadata."""
    columns = ", ".join(f"`{c.name}` {spark_type(c)}" for c in spec.columns)
    return struct(f"{columns}, {META_DDL}")


def decode_partition(spec: TableSpec, batch_id: str) -> Any:
    """Rows of ``changes`` -> staged tuples plus (error reason, error detail)."""
    names = [c.name for c in spec.columns]
    width = len(names) + 11

    def run(rows: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
        import json

        def load(text: str | None) -> Any:
            return json.loads(text) if text else None

        for row in rows:
            try:
                kind = "delete" if row["op"] == "d" else "upsert"
                decoded = decode_row(
                    spec,
                    kind,
                    load(row["before_json"]),
                    load(row["after_json"]),
                    load(row["key_json"]),
                    bool(row["partial"]),
                    load(row["types_json"]),
                )
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
                decoded.set_columns,
                None,
                None,
                None,
                None,
            )

    return run


def belongs(spec: TableSpec, only_table: bool) -> Column:
    """Changes of ``spec``'s table: named by schema and table, by table name alone (formats
    that name tables by topic), or by nothing at all when a single table is declared."""
    schema, table = F.col("schema"), F.col("table")
    exact = (schema == spec.table.schema) & (table == spec.table.name)
    by_name = (F.coalesce(schema, F.lit("")) == "") & (table == spec.table.name)
    unnamed = (F.coalesce(schema, F.lit("")) == "") & (F.coalesce(table, F.lit("")) == "")
    return exact | by_name | (unnamed & F.lit(only_table))


def effective_spec(ctx: JobContext, spec: TableSpec, mine: DataFrame) -> TableSpec:
    """The declared table with the target's current column types and the typed columns that
    this batch's records declare (widened where that loses nothing)."""
    columns = {c.name: c for c in spec.columns}
    target = ctx.warehouse.target(spec.table)
    if table_exists(ctx.spark, target):
        for field in DeltaTable.forPath(ctx.spark, target).toDF().schema.fields:
            if field.name.startswith("_cdc_"):
                continue
            stored = field.dataType.simpleString().upper().replace(" ", "")
            declared = columns.get(field.name)
            if declared is not None and spark_type(declared).replace(" ", "") == stored:
                continue
            if declared is None and stored == "STRING":
                # Added from untyped stream values: it keeps taking any value, as text.
                columns[field.name] = ColumnSpec(field.name, "untyped")
                continue
            nullable = declared.nullable if declared is not None else True
            try:
                columns[field.name] = replace(
                    column_of_spark(field.name, stored), nullable=nullable
                )
            except ValueError:
                log.warning("column %s of %s keeps its declared type", field.name, target)
    seen = (
        mine.where(F.col("types_json").isNotNull())
        .groupBy("types_json")
        .agg(F.min("sequence").alias("first"))
        .orderBy("first")
        .collect()
    )
    for row in seen:
        for name, incoming in json.loads(row["types_json"]).items():
            current = columns.get(name)
            if current is None:
                columns[name] = column_of(name, incoming)
                continue
            wider = widen(current, incoming)
            if wider is not None:
                columns[name] = wider
    return TableSpec(spec.table, tuple(columns.values()), spec.primary_key)


def decode_table(ctx: JobContext, spec: TableSpec, mine: DataFrame) -> DataFrame:
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


def fold_partials(decoded: DataFrame, keys: tuple[str, ...]) -> tuple[DataFrame, DataFrame]:
    """(winners, losers) of keys that have partial updates, folded column by column.

    Per key, in sequence order: changes before the newest full image (or delete) are
    superseded; the full image and the partial updates after it make one change whose columns
    are the newest value each one was set to. Without a full image in the batch, the result
    is itself partial: only the columns some update set.
    """
    schema = StructType(
        [*decoded.schema.fields, *struct("_fold_status STRING, _fold_reason STRING").fields]
    )
    names = [f.name for f in decoded.schema.fields]
    columns = [n for n in names if not n.startswith("_cdc_") and n not in keys]

    def run(group: tuple[str, Iterable[Any]]) -> Iterator[tuple[Any, ...]]:
        result, losers = fold([r.asDict() for r in group[1]], columns)
        for loser, status, reason in losers:
            yield (*(loser[n] for n in names), status, reason)
        yield (*(result[n] for n in names), None, None)

    rdd = decoded.rdd.map(lambda r: (r["_cdc_key"], r)).groupByKey().flatMap(run)
    folded = decoded.sparkSession.createDataFrame(rdd, schema).transform(snapshot)
    winners = folded.where(F.col("_fold_status").isNull()).drop("_fold_status", "_fold_reason")
    losers = folded.where(F.col("_fold_status").isNotNull()).select(
        F.explode("_cdc_members").alias("record_id"),
        F.col("_fold_status").alias("status"),
        F.col("_fold_reason").alias("reason"),
    )
    return winners, losers


def resolve_table(decoded: DataFrame, keys: tuple[str, ...]) -> tuple[DataFrame, list[DataFrame]]:
    """(winners, losers) of one table's decoded changes, partial updates folded."""
    partial_keys = decoded.where(F.col("_cdc_set_columns").isNotNull()).select("_cdc_key")
    if partial_keys.isEmpty():
        winners, losers = resolve_keys(decoded)
        return winners, [losers]
    partial_keys = partial_keys.distinct()
    full = decoded.join(partial_keys, "_cdc_key", "left_anti")
    winners, losers = resolve_keys(full)
    folded, fold_losers = fold_partials(decoded.join(partial_keys, "_cdc_key", "left_semi"), keys)
    return winners.unionByName(folded), [losers, fold_losers]


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
    only_table = len(specs) == 1
    for declared_spec in specs:
        mine = changes.where(belongs(declared_spec, only_table))
        spec = effective_spec(ctx, declared_spec, mine)
        decoded = decode_table(ctx, spec, mine).transform(snapshot)
        failed = decoded.where(F.col("_err_reason").isNotNull())
        quarantine_changes(ctx, failed, outcomes)
        good = decoded.where(F.col("_err_reason").isNull()).drop(
            "_err_record", "_err_members", "_err_reason", "_err_detail"
        )
        winners, losers = resolve_table(good, spec.primary_key)
        for frame in losers:
            outcomes.status(frame)
        path = ctx.warehouse.staged(spec.table)
        conform(ctx.spark, path, staged_schema(spec))
        (
            winners.write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", f"_cdc_batch = '{ctx.batch_id}'")
            .option("mergeSchema", "true")
            .save(path)
        )
        staged = read_table(ctx.spark, path, staged_schema(spec))
        stats["tables"][spec.table.qualified] = {
            "changes": decoded.count(),
            "quarantined": failed.count(),
            "staged": staged.where(F.col("_cdc_batch") == ctx.batch_id).count(),
        }
    declared = F.lit(False)
    for spec in specs:
        declared = declared | belongs(spec, only_table)
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
