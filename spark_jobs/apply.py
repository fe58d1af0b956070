"""MERGE a table's resolved changes into its Delta table.

Each target row keeps the sequence (``_cdc_sequence``) and record (``_cdc_record_id``) of the
change that produced it; a change only replaces a row whose sequence is lower, so a late or
replayed older change never overwrites newer state. A delete leaves a tombstone
(``_cdc_deleted``) that keeps an older upsert from resurrecting the row; the maintenance job
(:mod:`spark_jobs.maintain`) removes tombstones once the resolved timestamp has passed them
by the tombstone retention. Columns that
appear in the stream but not in the DDL are added to the table, typed where the stream's
schema says their type and as strings otherwise; a column the batch widened (INT to BIGINT)
is widened in the table; columns that disappear stay, null in new rows. A partial update
(YDB's UPDATES mode) sets only its columns and keeps the others. Query live rows with
``WHERE NOT _cdc_deleted``.

Cost: target tables are created with deletion vectors, so a MERGE marks replaced rows instead
of rewriting whole files, and both the status lookup and the MERGE carry the batch's range of
the first key column as a target-only predicate, which Delta uses to skip files.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    DateType,
    DecimalType,
    IntegralType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from airflow_cdc.core.columns import needs_mapping
from airflow_cdc.core.ddl import TableSpec
from spark_jobs.delta_tables import committed_version, retry_on_conflict
from spark_jobs.faults import fault_point
from spark_jobs.ledger import APPLIED, DUPLICATE, QUARANTINED, SUPERSEDED, per_record
from spark_jobs.schemas import quoted, struct, table_properties
from spark_jobs.session import compiled

log = logging.getLogger("airflow_cdc.jobs")
# A late change that a true resolved timestamp promised could not arrive.
BELOW_PUBLISHED_CUT = "below_published_cut"
TARGET_META_DDL = (
    "_cdc_deleted BOOLEAN, _cdc_sequence STRING, _cdc_op STRING, _cdc_commit_ts TIMESTAMP,"
    " _cdc_record_id STRING, _cdc_batch STRING, _cdc_special_values MAP<STRING, STRING>"
)
TARGET_PROPERTIES = {"delta.enableDeletionVectors": "true"}
MAPPING_MODE = "delta.columnMapping.mode"
COLUMN_MAPPING = {MAPPING_MODE: "name"}
TYPE_WIDENING = {"delta.enableTypeWidening": "true"}
TIMESTAMP_NTZ = {"delta.feature.timestampNtz": "supported"}
_RANGE_TYPES = (IntegralType, DecimalType, StringType, DateType, TimestampType, TimestampNTZType)


def target_schema(changes: StructType) -> StructType:
    """The target table of resolved changes: their columns, then the target's metadata."""
    columns = [f for f in changes.fields if not f.name.startswith("_cdc_")]
    return StructType([*columns, *struct(TARGET_META_DDL).fields])


def sql_type(data_type: DataType) -> str:
    """A column's type as SQL DDL text: ``simpleString()``, but TIMESTAMP spelled
    TIMESTAMP_LTZ, which a session whose ``spark.sql.timestampType`` is TIMESTAMP_NTZ would
    otherwise read as TIMESTAMP_NTZ."""
    return "timestamp_ltz" if isinstance(data_type, TimestampType) else data_type.simpleString()


def ensure_target(spark: SparkSession, path: str, schema: StructType) -> None:
    """Create the target table (with deletion vectors, and column mapping when a column's name
    needs it) or give it every column of ``schema``: add the missing ones, widen the ones
    ``schema`` widens (Delta's type widening)."""
    if not DeltaTable.isDeltaTable(spark, path):
        properties = dict(TARGET_PROPERTIES)
        if any(needs_mapping(f.name) for f in schema.fields):
            properties.update(COLUMN_MAPPING)
        # SQL with the path quoted, not DeltaTableBuilder.location(), which takes a path
        # holding a backtick for broken SQL.
        columns = ", ".join(
            f"{quoted(f.name)} {sql_type(f.dataType)}{'' if f.nullable else ' NOT NULL'}"
            for f in schema.fields
        )
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS delta.{quoted(path)} ({columns}) USING delta"
            f" TBLPROPERTIES ({table_properties(properties)})"
        )
        return
    conform(spark, path, schema)


def conform(spark: SparkSession, path: str, schema: StructType) -> None:
    """Give the table ``path`` every column of ``schema``, turning on its column mapping first
    when a new column's name needs it (the names were admitted by
    :func:`~airflow_cdc.core.columns.admit`)."""
    target = DeltaTable.forPath(spark, path)
    current = {f.name: f.dataType for f in target.toDF().schema.fields}
    added = [f for f in schema.fields if f.name not in current]
    widened = [f for f in schema.fields if f.name in current and f.dataType != current[f.name]]
    table = f"delta.{quoted(path)}"

    def set_properties(properties: dict[str, str]) -> None:
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({table_properties(properties)})")

    if any(needs_mapping(f.name) for f in added):

        def turn_on() -> None:
            properties = DeltaTable.forPath(spark, path).detail().first()["properties"]  # type: ignore[index]
            if properties.get(MAPPING_MODE) != "name":
                set_properties(COLUMN_MAPPING)
                log.info("turned on column mapping (by name) of %s", path)

        retry_on_conflict(turn_on, f"column mapping of {path}")
    if any(isinstance(f.dataType, TimestampNTZType) for f in [*added, *widened]):
        # Delta turns its TIMESTAMP_NTZ feature on by itself only in a new table.
        features = target.detail().first()["tableFeatures"]  # type: ignore[index]
        if "timestampNtz" not in (features or []):
            set_properties(TIMESTAMP_NTZ)
    if added:
        columns = ", ".join(f"{quoted(f.name)} {sql_type(f.dataType)}" for f in added)
        spark.sql(f"ALTER TABLE {table} ADD COLUMNS ({columns})")
        log.info("added columns %s to %s", [f.name for f in added], path)
    if widened:
        set_properties(TYPE_WIDENING)
        for field in widened:
            spark.sql(
                f"ALTER TABLE {table} ALTER COLUMN {quoted(field.name)}"
                f" TYPE {sql_type(field.dataType)}"
            )
        log.info("widened columns %s of %s", [f.name for f in widened], path)


def evolve(spark: SparkSession, path: str, changes: DataFrame, added: tuple[str, ...]) -> list[str]:
    """Add the admitted undeclared stream columns (``added``, see
    :func:`spark_jobs.resolve.admit_extras`) to the target, as STRING; returns every extra
    column it has."""
    if added:
        conform(spark, path, StructType([StructField(c, StringType()) for c in added]))
    schema = DeltaTable.forPath(spark, path).toDF().schema
    declared = {f.name for f in changes.schema.fields}
    return [
        f.name for f in schema.fields if f.name not in declared and not f.name.startswith("_cdc_")
    ]


def key_range(changes: DataFrame, keys: list[str], alias: str) -> Column | None:
    """A target-only predicate on the first key column: the batch's min to max, so that Delta
    skips the files that cannot hold any of the batch's keys; None when ``changes`` is empty
    (one aggregation answers both).

    The bounds never pass through Python's values: an instant goes as its microseconds since
    the epoch, a date as its days, anything else as its text, each turned back by Spark. (A
    collected timestamp is the driver process's local time: with that zone not the
    session's, or an instant in a daylight-saving fold, the bounds moved, and the MERGE
    missed rows it had to match.)"""
    first = changes.schema[keys[0]]
    column = F.col(quoted(keys[0]))
    kind = first.dataType
    ranged = isinstance(kind, _RANGE_TYPES)
    bounds = [_bound_out(kind, F.min(column)), _bound_out(kind, F.max(column))] if ranged else []
    found = changes.agg(F.count(F.lit(1)), *bounds).first()
    if found is None or not found[0]:
        return None
    if not bounds or found[1] is None:
        return F.lit(True)
    low, high = _bound_in(kind, found[1]), _bound_in(kind, found[2])
    return F.col(f"{alias}.{quoted(keys[0])}").between(low, high)


def _bound_out(kind: DataType, value: Column) -> Column:
    """A key bound as :func:`key_range` collects it."""
    if isinstance(kind, TimestampType):
        return F.unix_micros(value)
    if isinstance(kind, DateType):
        return F.unix_date(value)
    return value.cast("string")


def _bound_in(kind: DataType, collected: Any) -> Column:
    """A collected key bound (:func:`_bound_out`) as a value of the key's type again."""
    if isinstance(kind, TimestampType):
        return F.timestamp_micros(F.lit(collected))
    if isinstance(kind, DateType):
        return F.date_from_unix_date(F.lit(collected))
    return F.lit(collected).cast(kind)


def classify(
    changes: DataFrame,
    target: DataFrame,
    keys: list[str],
    late: Column | None = None,
    refuse_late: bool = False,
) -> DataFrame:
    """Status of each change against the current target row of its key.

    The change that already produced the target row (a re-run after a crash) counts as
    applied, whatever sequence this run gave it; another change with the same sequence is a
    duplicate delivery. ``late`` marks changes committed below a published cut
    (:mod:`spark_jobs.cut`): one that would be applied says so in its reason, or, with
    ``refuse_late``, is quarantined (``below_published_cut``) and not merged. ``effect`` says
    what an applied change does to the key's live row (:data:`INSERTED`, :data:`UPDATED`,
    :data:`DELETED`, or null).
    """
    current = target.select(
        *(F.col(quoted(k)).alias(f"_t_{i}") for i, k in enumerate(keys)),
        F.col("_cdc_sequence").alias("_t_seq"),
        F.col("_cdc_record_id").alias("_t_record"),
        F.col("_cdc_deleted").alias("_t_deleted"),
    )
    on = [changes[quoted(k)] == current[f"_t_{i}"] for i, k in enumerate(keys)]
    joined = changes.join(current, on, "left")
    seq, t_seq = F.col("_cdc_sequence"), F.col("_t_seq")
    same_record = F.coalesce(F.col("_cdc_record_id") == F.col("_t_record"), F.lit(False))
    status = (
        F.when(t_seq.isNull() | (seq > t_seq), F.lit(APPLIED))
        .when(same_record, F.lit(APPLIED))
        .when(seq == t_seq, F.lit(DUPLICATE))
        .otherwise(F.lit(SUPERSEDED))
    )
    reason = F.when(status != APPLIED, F.concat(F.lit("target holds sequence "), t_seq))
    if late is not None:
        moves = late & (status == APPLIED) & ~same_record
        committed = F.date_format("_cdc_commit_ts", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX")
        if refuse_late:
            status = F.when(moves, F.lit(QUARANTINED)).otherwise(status)
            reason = F.when(moves, F.lit(BELOW_PUBLISHED_CUT)).otherwise(reason)
        else:
            reason = F.when(
                moves,
                F.concat(F.lit("late: committed "), committed, F.lit(" below a published cut")),
            ).otherwise(reason)
        detail = F.when(
            moves,
            F.concat(
                F.lit(f"{BELOW_PUBLISHED_CUT}: committed "),
                committed,
                F.lit(
                    ", below a cut already published (the source's resolved timestamp had"
                    " passed it)"
                ),
            ),
        )
    else:
        detail = F.lit(None).cast("string")
    was_live = t_seq.isNotNull() & ~F.col("_t_deleted")
    effect = (
        F.when((status != APPLIED) | same_record, F.lit(None))
        .when(F.col("_cdc_is_delete"), F.when(was_live, F.lit(DELETED)))
        .when(was_live, F.lit(UPDATED))
        .otherwise(F.lit(INSERTED))
    )
    return per_record(
        joined,
        status.alias("status"),
        reason.alias("reason"),
        detail.alias("detail"),
        F.col("_cdc_record_id").alias("change_id"),
        effect.alias("effect"),
    )


def merge(
    path: str,
    spec: TableSpec,
    changes: DataFrame,
    extras: list[str],
    batch_id: str,
    pruning: Column,
) -> None:
    """The one guarded MERGE of a table's resolved changes."""
    spark = changes.sparkSession
    partial = F.col("s._cdc_set_columns")
    inserted: dict[str, str | Column] = {}
    updated: dict[str, str | Column] = {}
    for field in changes.schema.fields:
        name = field.name
        if name.startswith("_cdc_"):
            continue
        source = F.col(f"s.{quoted(name)}")
        inserted[quoted(name)] = source
        updated[quoted(name)] = F.when(
            partial.isNull() | F.array_contains(partial, name), source
        ).otherwise(F.col(f"t.{quoted(name)}"))
    for name in extras:
        value = F.when(~F.col("s._cdc_is_delete"), F.col("s._cdc_extra").getItem(name))
        inserted[quoted(name)] = value
        updated[quoted(name)] = F.when(
            partial.isNull() | F.array_contains(partial, name), value
        ).otherwise(F.col(f"t.{quoted(name)}"))
    meta: dict[str, str | Column] = {
        "_cdc_deleted": F.col("s._cdc_is_delete"),
        "_cdc_sequence": F.col("s._cdc_sequence"),
        "_cdc_op": F.col("s._cdc_op"),
        "_cdc_commit_ts": F.col("s._cdc_commit_ts"),
        "_cdc_record_id": F.col("s._cdc_record_id"),
        "_cdc_batch": F.lit(batch_id),
    }
    special = F.col("s._cdc_special_values")
    kept = F.map_filter(
        F.coalesce(F.col("t._cdc_special_values"), F.create_map().cast("map<string,string>")),
        lambda k, _: ~F.array_contains(F.coalesce(partial, F.array().cast("array<string>")), k),
    )
    condition = pruning
    for key in spec.primary_key:
        condition = condition & (F.col(f"t.{quoted(key)}") == F.col(f"s.{quoted(key)}"))
    (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(changes.alias("s"), condition)
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


# What an applied change did to the table's live rows: a key without a live row got one, a
# live row was replaced, a live row was removed. A delete of a key with no live row, and a
# change that a crashed run had already merged, did none of them.
INSERTED, UPDATED, DELETED = "inserted", "updated", "deleted"

# A MERGE reads and rewrites a target's files in proportion to the table, not the batch: into
# a table larger than this it runs compiled, however small the batch
# (:func:`spark_jobs.session.fit_codegen`).
LARGE_TARGET_BYTES = 32 * 1024 * 1024


def merging_into(spark: SparkSession, path: str) -> AbstractContextManager[None]:
    """The code generation a MERGE into the table at ``path`` runs with: compiled when the
    table's files take more than :data:`LARGE_TARGET_BYTES`, else the job's setting."""
    detail = DeltaTable.forPath(spark, path).detail().select("sizeInBytes").first()
    large = detail is not None and (detail[0] or 0) > LARGE_TARGET_BYTES
    return compiled(spark) if large else nullcontext()


STATUS_DDL = (
    "record_id STRING, batch_id STRING, status STRING, reason STRING, detail STRING,"
    " change_id STRING"
)


def apply_table(
    spark: SparkSession,
    path: str,
    spec: TableSpec,
    winners: DataFrame,
    batch_id: str,
    added: tuple[str, ...] = (),
    late: Column | None = None,
    refuse_late: bool = False,
) -> tuple[DataFrame, dict[str, Any]]:
    """MERGE ``winners`` into the table at ``path``, adding the undeclared columns ``added``
    first; (statuses, counts). Statuses are per record (``record_id``, ``batch_id``,
    ``status``, ``reason``, ``detail``, ``change_id``); with ``late`` and ``refuse_late``
    (see :func:`classify`) some are ``quarantined``, and their changes are not merged.

    ``winners`` is read several times (the status lookup, the key range, the MERGE): it must
    be materialized, as :func:`spark_jobs.resolve.resolve_table`'s winners are (filters of
    checkpoints), so that nothing upstream runs again."""
    # The batch's key range (a refused change leaves it a superset: still a valid bound).
    keys = list(spec.primary_key)
    pruning = key_range(winners, keys, "t")
    if pruning is None:
        return winners.sparkSession.createDataFrame([], STATUS_DDL), {"changes": 0}
    ensure_target(spark, path, target_schema(winners.schema))
    extras = evolve(spark, path, winners, added)
    target = spark.read.format("delta").load(path).alias("t")
    statuses = classify(winners, target.where(pruning), keys, late, refuse_late).localCheckpoint()
    counts: dict[str, Any] = {}
    effects = {INSERTED: 0, UPDATED: 0, DELETED: 0}
    summary = statuses.groupBy("status", "effect").agg(
        F.count(F.lit(1)).alias("n"), F.count_distinct("change_id").alias("changes")
    )
    for row in summary.collect():
        counts[row["status"]] = counts.get(row["status"], 0) + int(row["n"])
        if row["effect"] is not None:
            effects[row["effect"]] = int(row["changes"])
    statuses = statuses.drop("effect")
    if counts.get(QUARANTINED):
        refused = statuses.where(F.col("status") == QUARANTINED).select(
            F.col("change_id").alias("_cdc_record_id")
        )
        winners = winners.join(refused.distinct(), "_cdc_record_id", "left_anti").localCheckpoint()
    fault_point("apply:before_merge")
    with merging_into(spark, path):
        retry_on_conflict(
            lambda: merge(path, spec, winners, extras, batch_id, pruning), f"MERGE into {path}"
        )
    fault_point("apply:after_merge")
    return statuses, {
        "changes": sum(counts.values()),
        **counts,
        **effects,
        "extra_columns": extras,
        "version": committed_version(spark, path, "MERGE"),
    }
