"""History tables (SCD type 2): every version of a declared table's rows, in commit order.

Opt-in per table (``apply_changes --history``). Beside the table's current state at
``<schema>/<table>``, ``<schema>/<table>__history`` holds one row per change applied to it:
the row as that change left it, open from ``__start_at`` (the change's commit time) until
``__end_at`` (the commit time of the key's next change; null for the current version). A
delete is a row too (``_cdc_deleted``, its key and no values): it closes the version before
it, and its own row stands for the time the key did not exist. Live versions are
``WHERE NOT _cdc_deleted``; the table as of time T is the versions with
``__start_at <= T < coalesce(__end_at, +inf)``.

Each run inserts its changes (one row per key and commit sequence: a redelivery adds
nothing) and recomputes the neighbours of the keys it touched, so a late change, older than
versions already written, takes its place and re-closes the version before it: the history
equals the one built from the changes in commit order, whatever order they arrived in. A
partial update (YDB's UPDATES mode) takes each column it does not set from the key's version
before it, so a late full image refolds the partial versions after it. A change without a
commit time (placed by its position in its partition) starts when the version before it did.
One MERGE per run, keyed by the primary key and the commit sequence: a re-run after a crash
writes nothing new (a change already written under another sequence, which a change without
a commit position gets when its run is repeated, is known by its record).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from airflow_cdc.core.ddl import TableSpec, history_ref
from spark_jobs.apply import ensure_target, key_range, merging_into
from spark_jobs.delta_tables import retry_on_conflict
from spark_jobs.schemas import quoted, struct

HISTORY_META_DDL = (
    "__start_at TIMESTAMP, __end_at TIMESTAMP, _cdc_deleted BOOLEAN, _cdc_sequence STRING,"
    " _cdc_commit_ts TIMESTAMP, _cdc_op STRING, _cdc_record_id STRING, _cdc_batch STRING,"
    " _cdc_special_values MAP<STRING, STRING>, _cdc_set_columns ARRAY<STRING>"
)
META = tuple(f.name for f in struct(HISTORY_META_DDL).fields)


def of(spec: TableSpec) -> TableSpec:
    """The history table of a declared table (its columns, keyed by its primary key and the
    commit sequence)."""
    return replace(spec, table=history_ref(spec.table))


def versions(changes: DataFrame, spec: TableSpec, extras: list[str], batch_id: str) -> DataFrame:
    """History rows of a batch's decoded changes: one per key and commit sequence (a
    redelivery's first record), a delete with its key only, each still open."""
    keys = list(spec.primary_key)
    first = Window.partitionBy(*(F.col(quoted(k)) for k in keys), "_cdc_sequence").orderBy(
        "_cdc_record_id"
    )
    distinct = changes.withColumn("_cdc_n", F.row_number().over(first)).where(F.col("_cdc_n") == 1)
    deleted = F.col("_cdc_is_delete")
    values: list[Column] = []
    for field in changes.schema.fields:
        name = field.name
        if name.startswith("_cdc_"):
            continue
        value = F.col(quoted(name))
        if name not in keys:
            value = F.when(~deleted, value)
        values.append(value.alias(name))
    for name in extras:
        values.append(F.when(~deleted, F.col("_cdc_extra").getItem(name)).alias(name))
    return distinct.select(
        *values,
        F.col("_cdc_commit_ts").alias("__start_at"),
        F.lit(None).cast("timestamp").alias("__end_at"),
        deleted.alias("_cdc_deleted"),
        "_cdc_sequence",
        "_cdc_commit_ts",
        "_cdc_op",
        "_cdc_record_id",
        F.lit(batch_id).alias("_cdc_batch"),
        F.when(~deleted, F.col("_cdc_special_values")).alias("_cdc_special_values"),
        F.when(~deleted, F.col("_cdc_set_columns")).alias("_cdc_set_columns"),
    )


def rechain(rows: DataFrame, keys: list[str]) -> DataFrame:
    """Every version of the keys in ``rows``, each closed by its key's next change and each
    partial update folded onto the versions before it."""
    per_key = Window.partitionBy(*(F.col(quoted(k)) for k in keys)).orderBy(
        "_cdc_sequence", "_cdc_record_id"
    )
    so_far = per_key.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    partial = F.col("_cdc_set_columns")
    # A change without a commit time (a position in its partition only) starts when the
    # version before it did: the earliest it can have happened.
    commit = F.col("_cdc_commit_ts")
    known = F.when(F.unix_micros(commit) > 0, commit)
    chained = rows.withColumn("__start_at", F.last(known, True).over(so_far)).withColumn(
        "__end_at", F.lead("__start_at").over(per_key)
    )
    markers: list[Column] = []
    for field in rows.schema.fields:
        name = field.name
        if name in keys or name in META or name.startswith("_cdc_"):
            continue
        # The newest value set so far (a full image sets every column, a delete clears
        # them); wrapped in a struct so that a null set on purpose is a value too.
        sets = partial.isNull() | F.array_contains(partial, name)
        newest = F.last(F.when(sets, F.struct(F.col(quoted(name)).alias("v"))), True)
        chained = chained.withColumn(name, newest.over(so_far)["v"])
        # And the special value (NaN, infinity) the version that set it stored for it, as
        # the target keeps it (:func:`spark_jobs.apply.merge`).
        if "_cdc_special_values" in rows.columns:
            special = F.col("_cdc_special_values").getItem(name)
            kept = F.last(F.when(sets, F.struct(special.alias("v"))), True)
            markers += [F.lit(name), kept.over(so_far)["v"]]
    if markers:
        folded = F.map_filter(F.create_map(*markers), lambda _, v: v.isNotNull())
        chained = chained.withColumn(
            "_cdc_special_values",
            F.when(partial.isNull(), F.col("_cdc_special_values")).otherwise(folded),
        )
    return chained


def record(
    spark: SparkSession,
    path: str,
    spec: TableSpec,
    changes: DataFrame,
    extras: list[str],
    batch_id: str,
) -> dict[str, Any]:
    """Write the history of ``changes`` (a table's decoded changes that this run applies or
    supersedes) to the history table at ``path``: one MERGE; what it inserted and re-closed."""
    keys = list(spec.primary_key)
    fresh = versions(changes, spec, extras, batch_id).localCheckpoint()
    pruning = key_range(fresh, keys, "h")
    if pruning is None:
        return {"versions": 0, "reclosed": 0}
    schema = StructType([f for f in fresh.schema.fields if f.name not in META])
    ensure_target(spark, path, StructType([*schema.fields, *struct(HISTORY_META_DDL).fields]))
    touched = fresh.select(*(F.col(quoted(k)) for k in keys)).distinct()
    condition = pruning & (F.col("h._cdc_sequence") == F.col("s._cdc_sequence"))
    for key in keys:
        condition = condition & (F.col(f"h.{quoted(key)}") == F.col(f"s.{quoted(key)}"))

    def merge() -> dict[str, Any]:
        # Read again on each attempt: a conflict means another writer moved these keys.
        known = spark.read.format("delta").load(path).alias("h")
        before = known.where(pruning).join(touched, keys, "left_semi")
        # A change already written (by its sequence, or by its record: a change without a
        # commit position gets another sequence when its run is repeated).
        new = fresh.join(before, [*keys, "_cdc_sequence"], "left_anti").join(
            before.select("_cdc_record_id"), "_cdc_record_id", "left_anti"
        )
        old = before.select(*(F.col(quoted(c)) for c in fresh.columns))
        chained = rechain(
            new.withColumn("_cdc_new", F.lit(True)).unionByName(
                old.withColumn("_cdc_new", F.lit(False))
            ),
            keys,
        )
        # Only what changes: new versions, and known ones whose span or folded values moved.
        values = [c for c in fresh.columns if c not in keys]
        state = F.to_json(F.struct(*(F.col(quoted(c)) for c in values)))
        previous = before.select(
            *(F.col(quoted(k)) for k in keys), "_cdc_sequence", state.alias("_cdc_was")
        )
        moved = (
            chained.join(previous, [*keys, "_cdc_sequence"], "left")
            .where(F.col("_cdc_new") | ~state.eqNullSafe(F.col("_cdc_was")))
            .drop("_cdc_was")
            .localCheckpoint()
        )
        counts = moved.agg(
            F.count(F.when(F.col("_cdc_new"), True)).alias("versions"),
            F.count(F.when(~F.col("_cdc_new"), True)).alias("reclosed"),
        ).first()
        assert counts is not None
        moved = moved.drop("_cdc_new")
        columns = {quoted(c): F.col(f"s.{quoted(c)}") for c in moved.columns}
        (
            DeltaTable.forPath(spark, path)
            .alias("h")
            .merge(moved.alias("s"), condition)
            .whenMatchedUpdate(set=columns)  # type: ignore[arg-type]
            .whenNotMatchedInsert(values=columns)  # type: ignore[arg-type]
            .execute()
        )
        return {"versions": int(counts["versions"]), "reclosed": int(counts["reclosed"])}

    with merging_into(spark, path):
        return retry_on_conflict(merge, f"MERGE into {path}")
