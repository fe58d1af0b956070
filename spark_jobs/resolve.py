"""Decode changes into typed rows of a declared table and resolve each key's order.

Per declared table: every change is decoded per the table's DDL with Spark expressions
(:mod:`spark_jobs.decode`; a value that does not decode, a missing key, or a type that would
lose data marks the change with a quarantine reason), then per primary key, compared by its
*typed* value, only the change with the highest commit sequence survives; the others are
``superseded`` (older) or ``duplicate`` (the same sequence again). Partial updates (YDB's
UPDATES mode) fold column by column onto the newest full image before them
(:mod:`airflow_cdc.core.partial`, through Arrow, for the keys that have them).

Column types: the DDL's, widened where the target table was widened before, plus the columns
the stream's own schemas (Kafka Connect) declare; a lossless widening the batch needs (int32
to int64) is applied to the target by :mod:`spark_jobs.apply`.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from airflow_cdc.core.columns import COLUMN_LIMIT, INVALID_NAME, RESERVED_PREFIX, admit
from airflow_cdc.core.ddl import ColumnSpec, TableSpec
from airflow_cdc.core.formats.common import PLACED, UNORDERED
from airflow_cdc.core.rows import SPECIAL_KEY, type_conflicts
from airflow_cdc.core.types import (
    DAY_IN_UNITS,
    column_of,
    column_of_spark,
    spark_type,
    widen,
    widens,
)
from spark_jobs.delta_tables import version_before_batch
from spark_jobs.frames import checkpoint_counting, materialize
from spark_jobs.ledger import DUPLICATE, SUPERSEDED, per_record, union_all
from spark_jobs.parse import IMAGE, failure
from spark_jobs.schemas import quoted
from spark_jobs.values import DecodedColumn, decode_columns, decode_fast, decode_value

log = logging.getLogger("airflow_cdc.jobs")

MEMBERS = "ARRAY<STRUCT<record_id: STRING, batch_id: STRING>>"
META_DDL = (
    "_cdc_is_delete BOOLEAN, _cdc_sequence STRING, _cdc_op STRING, _cdc_commit_ts TIMESTAMP,"
    f" _cdc_record_id STRING, _cdc_members {MEMBERS}, _cdc_extra MAP<STRING, STRING>,"
    " _cdc_special_values MAP<STRING, STRING>, _cdc_set_columns ARRAY<STRING>"
)
ERROR_COLUMNS = ("_err_reason", "_err_detail")
_UNTYPED = ColumnSpec("value", "untyped")


def belongs(spec: TableSpec, only_table: bool, names_schemas: bool = False) -> Column:
    """Changes of ``spec``'s table: named by schema and table, by table name alone (formats
    that name tables by topic), or by nothing at all when a single table is declared.

    ``names_schemas``: the format always names the schema (Aurora DSQL's ``source.schema``),
    so a change must name the declared schema exactly; an empty one names no declared table.
    """
    schema, table = F.col("schema"), F.col("table")
    exact = (schema == spec.table.schema) & (table == spec.table.name)
    if names_schemas:
        return F.coalesce(exact, F.lit(False))
    by_name = (F.coalesce(schema, F.lit("")) == "") & (table == spec.table.name)
    unnamed = (F.coalesce(schema, F.lit("")) == "") & (F.coalesce(table, F.lit("")) == "")
    return exact | by_name | (unnamed & F.lit(only_table))


def stored_columns(spark: SparkSession, target: str, spec: TableSpec) -> dict[str, ColumnSpec]:
    """The declared columns with the types the target table stores (a column the DDL has
    widened since keeps the DDL's type: the table is widened to it), and the table's columns
    that the DDL does not declare."""
    columns = {c.name: c for c in spec.columns}
    if not DeltaTable.isDeltaTable(spark, target):
        return columns
    for field in DeltaTable.forPath(spark, target).toDF().schema.fields:
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
            kept = replace(column_of_spark(field.name, stored), nullable=nullable)
        except ValueError:
            log.warning("column %s of %s keeps its declared type", field.name, target)
            continue
        exact = field.name not in spec.primary_key or kept.pg_type != "real"
        if declared is not None and exact and widens(kept, declared):
            # Widened by the DDL since the table was created: ensure_target widens the table
            # (spark_jobs.apply.conform), as it does for a stream's wider schema. Not a real
            # key column: a stored FLOAT read as a DOUBLE no longer equals the key's value.
            continue
        columns[field.name] = kept
    return columns


def effective_spec(
    spark: SparkSession,
    target: str,
    spec: TableSpec,
    types: list[str],
    limit: int,
    mapping: bool = False,
) -> TableSpec:
    """The declared table with the target's current column types and the typed columns that
    this batch's records declare (``types``, from :func:`record_types`), widened where that
    loses nothing. A typed column the table may not take (:func:`~airflow_cdc.core.columns.
    admit`, at most ``limit`` columns beyond the DDL) stays out: its values are then
    undeclared, and their changes are quarantined by :func:`admit_extras`."""
    columns = stored_columns(spark, target, spec)
    parsed = [json.loads(types_json) for types_json in types]
    admitted = admit(
        columns, [c.name for c in spec.columns], (n for t in parsed for n in t), limit, mapping
    ).added
    for record_types in parsed:
        for name, incoming in record_types.items():
            current = columns.get(name)
            if current is None:
                if name in admitted:
                    columns[name] = column_of(name, incoming)
                continue
            wider = widen(current, incoming)
            if wider is not None:
                columns[name] = wider
    return TableSpec(spec.table, tuple(columns.values()), spec.primary_key)


def record_types(mine: DataFrame, max_columns: int) -> list[str]:
    """The distinct Connect schemas of the batch's records, oldest first (few per batch); a
    schema of more than ``max_columns`` columns adds none (its records are quarantined as
    ``too_many_columns``)."""
    seen = (
        mine.where(
            F.col("types_json").isNotNull()
            & (F.size(F.json_object_keys("types_json")) <= max_columns)
        )
        .groupBy("types_json")
        .agg(F.min("sequence").alias("first"))
        .orderBy("first")
        .collect()
    )
    return [row["types_json"] for row in seen]


def _columns(names: list[str]) -> list[Column]:
    """Columns by name, whatever the name holds (a dot, a backtick)."""
    return [F.col(quoted(n)) for n in names]


# The reasons a change is quarantined for as it decodes.
DECODE_REASONS = (
    "too_many_columns",
    "missing_key",
    "missing_image",
    "key_mismatch",
    "type_conflict",
    "decode_error",
    "special_key",
)


# Every reason a table's decoded changes can carry: the decode's, and admit_extras's for an
# undeclared column the table may not take.
REASONS = (*DECODE_REASONS, INVALID_NAME, COLUMN_LIMIT)


def _error(reason: str, detail: Column) -> Column:
    if reason not in DECODE_REASONS:
        raise ValueError(f"{reason!r} is not in DECODE_REASONS: the facts count each by name")
    return failure(reason, detail)


def decode_changes(
    changes: DataFrame, spec: TableSpec, types: list[str], max_columns: int
) -> tuple[DataFrame, BatchFacts]:
    """Changes (parsed shape plus ``members``) -> (typed rows of ``spec`` with ``_cdc_*``
    metadata, or ``_err_reason`` / ``_err_detail`` where the change cannot be applied (an
    image of more than ``max_columns`` columns is quarantined whole); their
    :class:`BatchFacts`). The rows are materialized (checkpoints): read them as often as
    needed. The facts are counted as they are written, not by a query of their own.

    Most values are in their common form, which a few cheap expressions decode. The full
    rules (regular expressions, many branches: costly to compile and to run) are built only
    for the changes that hold another value, and there only for the columns that do: one
    pass decodes every change by the common forms and marks those changes, keeping their
    JSON values; a second decodes those columns of them again by the full rules (few rows;
    none in most batches) and leaves the rest of each row as the first pass made it. The
    result does not depend on that choice."""
    rare = F.col("_cdc_rare")
    # Beside the facts of the rows it settles: the marked changes, and the columns that need
    # the full rules (a set of name lists: its size follows their combinations, not the
    # marked changes).
    first, found = checkpoint_counting(
        _decode(changes, spec, types, max_columns),
        marked=F.count(rare),
        columns=F.array_distinct(F.flatten(F.collect_set(rare["columns"]))),
        **_fact_metrics(rare.isNull()),
    )
    rows = first.where(rare.isNull()).drop("_cdc_rare")
    facts = _facts(found)
    if found["marked"]:
        full = [c for c in spec.columns if c.name in set(found["columns"])]
        second, more = checkpoint_counting(
            _decode_rare(first.where(rare.isNotNull()), spec, full),
            **_fact_metrics(F.lit(True)),
        )
        rows = rows.unionByName(second)
        facts = _added(facts, _facts(more))
    return rows, facts


def _slots(spec: TableSpec) -> dict[str, str]:
    """The frame column that holds each declared column's JSON value while it decodes: named
    with the prefix no table column may take (:data:`~airflow_cdc.core.columns.
    RESERVED_PREFIX`), as are the decoders' own columns (they extend it), so that the second
    pass adds them beside the first pass's rows, which hold every declared column."""
    return {c.name: f"{RESERVED_PREFIX}v{i}" for i, c in enumerate(spec.columns)}


def _decode(
    changes: DataFrame,
    spec: TableSpec,
    types: list[str],
    max_columns: int,
) -> DataFrame:
    """:func:`decode_changes` by the common forms alone, with ``_cdc_rare`` where one of the
    change's values is in no common form (and its row is wrong): every declared column's
    JSON value (``values``, by slot) and the names of the columns in no common form
    (``columns``)."""
    keys = list(spec.primary_key)
    is_delete = F.col("op") == "d"
    image = F.when(is_delete, F.col("before")).otherwise(F.col("after"))
    key = F.col("key")
    key_kind = F.schema_of_variant(key)
    empty = F.create_map().cast(IMAGE)
    frame = changes.select(
        "*",
        is_delete.alias("_delete"),
        # A delete names its row by the key alone; an upsert needs its image.
        F.coalesce(image, F.when(key.isNotNull() & is_delete, empty)).alias("_image"),
        F.when(key_kind.startswith("OBJECT"), F.variant_get(key, "$", IMAGE)).alias("_key_map"),
        F.when(key_kind.startswith("ARRAY"), F.variant_get(key, "$", "ARRAY<VARIANT>")).alias(
            "_key_list"
        ),
    )
    img, key_map, key_list = F.col("_image"), F.col("_key_map"), F.col("_key_list")

    def raw(name: str) -> Column:
        if name in keys:
            # The image is the row: the key fills only the key columns it lacks (see
            # ``core.rows.decode_row``); a message key may not be the primary key at all.
            by_position = F.try_element_at(key_list, F.lit(keys.index(name) + 1))
            own = img[name]
            return F.coalesce(F.when(~_lacks(img, name), own), key_map[name], by_position, own)
        return F.when(~F.col("_delete"), img[name])

    # Each column's JSON value once, as a column: the decoders refer to it many times.
    slots = _slots(spec)
    frame = frame.select(
        "*", *[_in_column_unit(c, types, raw(c.name)).alias(slots[c.name]) for c in spec.columns]
    )
    columns = list(spec.columns)
    frame, parts, common = decode_fast(frame, columns, slots)
    every = F.lit(True)
    for column in columns:
        every = every & common[column.name]
    names = F.array(*(F.when(~common[c.name], F.lit(c.name)) for c in columns)).cast(
        "array<string>"
    )
    rare = F.when(
        ~every,
        F.struct(
            F.struct(*(F.col(slots[c.name]) for c in columns)).alias("values"),
            F.filter(names, lambda n: n.isNotNull()).alias("columns"),
        ),
    ).alias("_cdc_rare")
    return _finish(frame, spec, types, parts, slots, max_columns, rare)


def _in_column_unit(column: ColumnSpec, types: list[str], value: Column) -> Column:
    """``value`` (a VARIANT) as ``column``'s decoder reads it, for the changes whose record
    types it as a date (``types``: the batch's record types) while the column holds instants:
    an integer of days becomes its midnight in the column's unit
    (:func:`~airflow_cdc.core.types.in_column_unit`)."""
    day = DAY_IN_UNITS.get(column.pg_type)
    dated = [t for t in types if day is not None and json.loads(t).get(column.name) == "date"]
    if not dated:
        return value
    days = F.when(
        F.schema_of_variant(value).isin("TINYINT", "SMALLINT", "INT", "BIGINT"),
        F.try_variant_get(value, "$", "bigint"),
    )
    instant = days.cast("decimal(38,0)") * F.lit(day).cast("decimal(38,0)")
    return F.when(
        F.col("types_json").isin(*dated) & days.isNotNull(),
        F.try_parse_json(instant.cast("string")),
    ).otherwise(value)


def _lacks(image: Column, name: str) -> Column:
    """Whether ``image`` lacks the column ``name`` or holds it null (SQL or JSON null)."""
    return image[name].isNull() | F.is_variant_null(image[name])


def _lacks_key(image: Column, keys: list[str]) -> Column:
    """Whether ``image`` lacks one of the key columns ``keys``: only then is the record's own
    key read."""
    lacks = F.lit(False)
    for name in keys:
        lacks = lacks | _lacks(image, name)
    return lacks


def _decode_rare(marked: DataFrame, spec: TableSpec, full: list[ColumnSpec]) -> DataFrame:
    """The first pass's rows of the changes it marked (``_cdc_rare``), with the columns
    ``full`` decoded by their full rules: their values, their special markers, and the
    first decode error in the declared order where the first pass found nothing wrong with
    the change as a whole (which :func:`_finish` checks before any value)."""
    slots = _slots(spec)
    frame = marked.select(
        "*", *(F.col("_cdc_rare")["values"][slots[c.name]].alias(slots[c.name]) for c in full)
    )
    frame, parts = decode_columns(frame, full, slots)
    errors = [
        F.when(parts[c.name].error.isNotNull(), _error("decode_error", parts[c.name].error))
        for c in full
    ]
    # Only values in no common form can be special (NaN, infinity): a key holding one is
    # refused here, after the decode errors, as the core refuses it.
    error = F.coalesce(*errors, *_special_key(list(spec.primary_key), parts))
    found = F.col("_err_reason").isNotNull()
    declared = {c.name for c in spec.columns}
    kept = [c for c in marked.columns if c not in declared and c not in _REDECODED]
    return frame.select(
        *(
            (parts[c.name].value if c.name in parts else F.col(quoted(c.name))).alias(c.name)
            for c in spec.columns
        ),
        *_columns(kept),
        _special_values(parts).alias("_cdc_special_values"),
        F.when(found, F.col("_err_reason")).otherwise(error["reason"]).alias("_err_reason"),
        F.when(found, F.col("_err_detail"))
        .otherwise(F.concat_ws(": ", error["reason"], error["detail"]))
        .alias("_err_detail"),
    )


def _special_values(decoded: dict[str, DecodedColumn]) -> Column:
    """The special markers the values hold, by column name: only columns decoded by their
    full rules can hold one (empty where none was)."""
    markers = [
        F.struct(F.lit(name).alias("k"), parts.special.alias("v"))
        for name, parts in decoded.items()
        if parts.special is not None
    ]
    if not markers:
        return F.create_map().cast("map<string,string>")
    return F.map_from_entries(F.filter(F.array(*markers), lambda e: e["v"].isNotNull()))


# The first pass's columns that the second replaces or drops.
_REDECODED = ("_cdc_rare", "_cdc_special_values", *ERROR_COLUMNS)


def _special_key(keys: list[str], decoded: dict[str, DecodedColumn]) -> list[Column]:
    """The ``special_key`` error of a change whose key columns hold special values (NaN,
    infinity), which their types store only as null (see ``core.rows.decode_row``)."""
    specials: list[tuple[str, Column]] = []
    for name in keys:
        marker = decoded[name].special if name in decoded else None
        if marker is not None:
            specials.append((name, marker))
    if not specials:
        return []
    named = F.concat_ws(
        ", ",
        *[F.when(s.isNotNull(), F.concat(F.lit(f"{name} holds "), s)) for name, s in specials],
    )
    message = F.concat(named, F.lit(f": {SPECIAL_KEY}"))
    held = F.lit(False)
    for _, s in specials:
        held = held | s.isNotNull()
    return [F.when(held, _error("special_key", message))]


def _finish(
    frame: DataFrame,
    spec: TableSpec,
    types: list[str],
    decoded: dict[str, DecodedColumn],
    slots: dict[str, str],
    max_columns: int,
    *extra: Column,
) -> DataFrame:
    """Decoded changes -> typed rows with ``_cdc_*`` metadata and the quarantine reason
    (and the ``extra`` columns)."""
    keys = list(spec.primary_key)
    declared = [c.name for c in spec.columns]
    img, key, key_list = F.col("_image"), F.col("key"), F.col("_key_list")
    missing = [k for k in keys if k not in declared]
    key_absent = F.lit(False)
    for name in keys:
        value = F.col(slots[name]) if name in slots else F.lit(None)
        key_absent = key_absent | value.isNull() | (F.schema_of_variant(value) == "VOID")
    conflicts = F.lit(None).cast("array<struct<name:string,message:string>>")
    for types_json in types:
        found = type_conflicts(spec, json.loads(types_json)).items()
        if found:
            entries = F.array(
                *[F.struct(F.lit(n).alias("name"), F.lit(m).alias("message")) for n, m in found]
            )
            conflicts = F.when(F.col("types_json") == F.lit(types_json), entries).otherwise(
                conflicts
            )
    present = F.filter(conflicts, lambda c: F.map_contains_key(img, c["name"]))
    error = F.coalesce(
        F.when(
            F.size(img) > max_columns,
            _error(
                "too_many_columns",
                F.concat(
                    F.lit("the image has "),
                    F.size(img).cast("string"),
                    F.lit(f" columns; the limit is {max_columns}"),
                ),
            ),
        ),
        F.when(
            img.isNull() & F.col("_delete"),
            _error(
                "missing_key", F.lit("the delete has no before image and the record carries no key")
            ),
        ),
        F.when(img.isNull(), _error("missing_image", F.lit("after image is NoneType"))),
        F.when(
            key_list.isNotNull() & (F.size(key_list) != len(keys)) & _lacks_key(img, keys),
            _error(
                "key_mismatch",
                F.concat(
                    F.lit("key "),
                    F.to_json(key),
                    F.lit(
                        f" has the wrong number of components,"
                        f" {spec.table.qualified} declares {keys}"
                    ),
                ),
            ),
        ),
        F.when(
            key_absent, _error("missing_key", F.lit(f"key columns of {keys} are absent or null"))
        ),
        F.when(F.size(present) > 0, _error("type_conflict", present[0]["message"])),
        *[
            F.when(decoded[c.name].error.isNotNull(), _error("decode_error", decoded[c.name].error))
            for c in spec.columns
        ],
    )
    if missing:
        error = _error("missing_key", F.lit(f"key columns {missing} are not declared"))
    empty_map = F.create_map().cast("map<string,string>")
    untyped = F.transform_values(
        F.map_filter(img, lambda k, _: ~k.isin(*declared)) if declared else img,
        lambda _, v: decode_value(_UNTYPED, v).value,
    )
    # Most images name declared columns only: they skip the lambdas over their entries.
    only_declared = F.size(F.array_except(F.map_keys(img), F.array(*map(F.lit, declared)))) == 0
    undeclared = F.when(only_declared, empty_map).otherwise(untyped) if declared else untyped
    set_columns = F.array_sort(F.filter(F.map_keys(img), lambda k: ~k.isin(*keys)))
    return frame.select(
        *[decoded[c.name].value.alias(c.name) for c in spec.columns],
        F.col("_delete").alias("_cdc_is_delete"),
        F.col("sequence").alias("_cdc_sequence"),
        F.col("op").alias("_cdc_op"),
        F.col("commit_ts").alias("_cdc_commit_ts"),
        F.col("record_id").alias("_cdc_record_id"),
        F.col("members").alias("_cdc_members"),
        F.col("partition").alias("_cdc_partition"),
        F.col("position").alias("_cdc_position"),
        F.when(F.col("_delete"), empty_map).otherwise(undeclared).alias("_cdc_extra"),
        _special_values(decoded).alias("_cdc_special_values"),
        F.when(F.coalesce(F.col("partial"), F.lit(False)) & ~F.col("_delete"), set_columns).alias(
            "_cdc_set_columns"
        ),
        error["reason"].alias("_err_reason"),
        F.concat_ws(": ", error["reason"], error["detail"]).alias("_err_detail"),
        *extra,
    )


def embed_json(spec: TableSpec) -> TableSpec:
    """``spec`` with its json columns decoded as embedded JSON values (``json_value``), for
    the formats of :data:`~airflow_cdc.core.formats.EMBEDDED_JSON`; both are STRING columns."""
    columns = tuple(
        replace(c, pg_type="json_value") if c.pg_type == "json" else c for c in spec.columns
    )
    return replace(spec, columns=columns)


def admit_extras(
    decoded: DataFrame,
    facts: BatchFacts,
    declared: TableSpec,
    spec: TableSpec,
    limit: int,
    mapping: bool = False,
) -> tuple[DataFrame, tuple[str, ...], BatchFacts]:
    """(decoded, columns to add, its facts): of the undeclared columns of the batch's good
    changes (``facts.extras``), those the table may take (:func:`~airflow_cdc.core.columns.
    admit`); a change carrying any other undeclared column gets the core's quarantine reason
    for the least of its refused names (and the facts are counted again)."""
    current = [c.name for c in spec.columns]
    admission = admit(current, [c.name for c in declared.columns], facts.extras, limit, mapping)
    if not admission.refused:
        return decoded, admission.added, facts
    unknown = {reason for reason, _ in admission.refused.values()} - set(REASONS)
    if unknown:
        raise ValueError(f"{sorted(unknown)} are not in REASONS: the facts count each by name")
    refused = decoded.sparkSession.createDataFrame(
        [(name, reason, f"{reason}: {text}") for name, (reason, text) in admission.refused.items()],
        "_cdc_refused STRING, _cdc_refused_reason STRING, _cdc_refused_detail STRING",
    )
    allowed = list(admission.added)
    # The least refused name, as admit orders them: a map's order is the record's text for one
    # format and sorted for another.
    least = F.array_min(
        F.filter(F.map_keys("_cdc_extra"), lambda k: ~k.isin(*allowed) if allowed else F.lit(True))
    )
    # A change already quarantined keeps its own reason; another takes its least refused name's.
    flagged = decoded.withColumn("_cdc_refused", F.when(F.col("_err_reason").isNull(), least))
    hit = F.col("_cdc_refused_reason").isNotNull()
    marked = flagged.join(F.broadcast(refused), "_cdc_refused", "left").select(
        *_columns([c for c in decoded.columns if c not in ERROR_COLUMNS]),
        F.coalesce("_cdc_refused_reason", "_err_reason").alias("_err_reason"),
        F.when(hit, F.col("_cdc_refused_detail"))
        .otherwise(F.col("_err_detail"))
        .alias("_err_detail"),
    )
    return marked, admission.added, batch_facts(marked)


def is_unordered(sequence: Column) -> Column:
    """A change without a commit position: its sequence is ``UNORDERED`` + its position."""
    return sequence.startswith(UNORDERED)


def has_commit_time(sequence: Column) -> Column:
    """Whether a change's sequence comes from its commit time: not one without a commit
    position, before (:func:`is_unordered`) or after :func:`place_unordered` placed it
    (after a change of a commit time: ``PLACED`` in its sequence)."""
    placed = sequence.rlike(f"^[0-9.]+{PLACED}")
    return ~F.coalesce(is_unordered(sequence) | placed, F.lit(False))


def is_partial(set_columns: Column) -> Column:
    """A partial update: it names the columns it sets."""
    return set_columns.isNotNull()


@dataclass(frozen=True)
class BatchFacts:
    """What one aggregation over a table's decoded changes tells the steps after it."""

    quarantined: dict[str, int]  # records (a change's fragments each count) per reason
    unordered: bool  # a good change without a commit position (:func:`place_unordered`)
    partial: bool  # a good partial update (:func:`resolve_table`)
    # the undeclared columns of the changes that decode (:func:`admit_extras` decides on them)
    extras: tuple[str, ...] = ()


def batch_facts(decoded: DataFrame) -> BatchFacts:
    """:class:`BatchFacts` of ``decoded``: one query."""
    got = decoded.agg(*(m.alias(n) for n, m in _fact_metrics(F.lit(True)).items())).first()
    assert got is not None  # an aggregate without grouping has one row
    return _facts(got.asDict())


def _fact_metrics(scope: Column) -> dict[str, Column]:
    """Aggregates over decoded rows, where ``scope`` holds, that :func:`_facts` reads: the
    records of each reason of :data:`REASONS`."""
    reason = F.col("_err_reason")
    good = scope & reason.isNull()
    records = F.size("_cdc_members")
    return {
        **{f"f_{r}": F.sum(F.when(scope & (reason == r), records)) for r in REASONS},
        "f_unordered": F.bool_or(F.when(good, is_unordered(F.col("_cdc_sequence")))),
        "f_partial": F.bool_or(F.when(good, is_partial(F.col("_cdc_set_columns")))),
        # A set of sorted name lists: its size follows their combinations, not the changes.
        "f_extras": F.array_distinct(
            F.flatten(F.collect_set(F.when(good, F.array_sort(F.map_keys("_cdc_extra")))))
        ),
    }


def _facts(got: dict[str, Any]) -> BatchFacts:
    """:class:`BatchFacts` from :func:`_fact_metrics`' values."""
    return BatchFacts(
        {r: int(got[f"f_{r}"]) for r in REASONS if got[f"f_{r}"]},
        bool(got["f_unordered"]),
        bool(got["f_partial"]),
        tuple(sorted(got["f_extras"] or ())),
    )


def _added(one: BatchFacts, other: BatchFacts) -> BatchFacts:
    """The facts of two sets of rows together."""
    return BatchFacts(
        dict(Counter(one.quarantined) + Counter(other.quarantined)),
        one.unordered or other.unordered,
        one.partial or other.partial,
        tuple(sorted({*one.extras, *other.extras})),
    )


def earlier_rows(
    spark: SparkSession, target: str, keys: list[str], batch_id: str, source: str
) -> DataFrame | None:
    """The table's rows that earlier batches wrote (batch ids sort in landing order), as
    they were before this batch changed the table: a re-run of the batch after its MERGE
    reads the version before the batch's first commit by ``source``, so that it decides as
    the first run did (another source's run of a batch of the same id, into the same table,
    is no run of this one). Each key (``_t_<i>``), its sequence (``_t_seq``) and commit
    time (``_t_ts``); ``None`` before the table exists."""
    if not DeltaTable.isDeltaTable(spark, target):
        return None
    reader = spark.read.format("delta")
    before = version_before_batch(spark, target, batch_id, source)
    if before is not None:
        if before < 0:
            return None
        reader = reader.option("versionAsOf", before)
    return (
        reader.load(target)
        .where(F.col("_cdc_batch") < batch_id)
        .select(
            *(F.col(quoted(k)).alias(f"_t_{i}") for i, k in enumerate(keys)),
            F.col("_cdc_sequence").alias("_t_seq"),
            F.col("_cdc_commit_ts").alias("_t_ts"),
        )
    )


def with_stored(changes: DataFrame, stored: DataFrame | None, keys: list[str]) -> DataFrame:
    """``changes`` with their key's stored ``_t_seq`` and ``_t_ts`` (null where none), from
    ``stored`` (:func:`earlier_rows`)."""
    if stored is None:
        return changes.select(
            "*",
            F.lit(None).cast("string").alias("_t_seq"),
            F.lit(None).cast("timestamp").alias("_t_ts"),
        )
    on = [changes[quoted(k)] == stored[f"_t_{i}"] for i, k in enumerate(keys)]
    return changes.join(stored, on, "left").drop(*(f"_t_{i}" for i in range(len(keys))))


def place_unordered(
    spark: SparkSession,
    good: DataFrame,
    keys: list[str],
    target: str,
    batch_id: str,
    source: str,
    present: bool,
) -> DataFrame:
    """Give each change without a commit position (sequence ``UNORDERED`` + its position) its
    place among its key's changes, by the source's per-key ordering ("Once the changefeed has
    emitted a row with a timestamp, the changefeed will not emit any previously unseen
    versions of that row with a lower timestamp": a key's messages in a partition are in
    commit order). It comes after every change of its key at a lower position of its
    partition: its sequence becomes ``<base>~~<position>`` (:data:`PLACED`), where the base
    is the newest sequence key among those changes in this batch and the table's row when an
    earlier batch wrote it (batch ids sort in landing order, as data interval ends do), and
    its commit time that change's. A CockroachDB delete without ``updated`` (a Kafka message
    with a null value) after an upsert with it is then newer, as it is in the source, and
    newer than a redelivery of that upsert at a later offset too; it is never late for a cut
    (:func:`has_commit_time`).

    ``present``: whether ``good`` holds such a change (:attr:`BatchFacts.unordered`)."""
    if not present:
        return good
    unordered = is_unordered(F.col("_cdc_sequence"))
    earlier = (
        Window.partitionBy(*_columns(keys), "_cdc_partition")
        .orderBy("_cdc_position")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    timed = F.when(~unordered, F.col("_cdc_sequence"))
    framed = good.select(
        "*",
        F.max(timed).over(earlier).alias("_prior"),
        F.max_by("_cdc_commit_ts", timed).over(earlier).alias("_prior_ts"),
    )
    stored = earlier_rows(spark, target, keys, batch_id, source)
    placed = with_stored(framed.where(unordered), stored, keys)
    # Sequence keys only: a position suffix would compound batch after batch.
    anchor = F.substring_index(F.col("_t_seq"), "~", 1)
    prior = F.substring_index(F.col("_prior"), "~", 1)
    by_target = prior.isNull() | (anchor > prior)
    base = F.coalesce(F.when(by_target, anchor).otherwise(prior), F.lit(UNORDERED[:-1]))
    # No commit time of its own: it was committed at or after the change it follows, whose
    # time it takes (the tombstone of a delete is kept for the retention past that time).
    # (A row an earlier version placed holds 1970 for its time: none.)
    stored_ts = F.when(F.unix_micros("_t_ts") > 0, F.col("_t_ts"))
    since = F.when(by_target, stored_ts).otherwise(F.col("_prior_ts"))
    placed = placed.withColumns(
        {
            "_cdc_sequence": F.concat(base, F.lit(PLACED), F.col("_cdc_position")),
            "_cdc_commit_ts": F.coalesce(since, F.col("_cdc_commit_ts")),
        }
    ).drop("_t_seq", "_t_ts")
    return framed.where(~unordered).unionByName(placed).drop("_prior", "_prior_ts")


def resolve_keys(decoded: DataFrame, keys: list[str]) -> tuple[DataFrame, DataFrame]:
    """(winners, losers): one change per key, the newest; losers with their status."""
    per_key = Window.partitionBy(*_columns(keys)).orderBy(
        F.col("_cdc_sequence").desc(), F.col("_cdc_record_id").asc()
    )
    # Materialized once: the winners and the ledger's losers both come from it.
    ranked = materialize(
        decoded.withColumn("_cdc_rank", F.row_number().over(per_key)).withColumn(
            "_cdc_newest", F.first("_cdc_sequence").over(per_key)
        )
    )
    winners = ranked.where(F.col("_cdc_rank") == 1).drop("_cdc_rank", "_cdc_newest")
    losers = per_record(
        ranked.where(F.col("_cdc_rank") > 1),
        F.when(F.col("_cdc_sequence") == F.col("_cdc_newest"), F.lit(DUPLICATE))
        .otherwise(F.lit(SUPERSEDED))
        .alias("status"),
        F.concat(F.lit("newer change in batch: "), F.col("_cdc_newest")).alias("reason"),
    )
    return winners, losers


def _by_position(left: Column, right: Column) -> Column:
    """An ``array_sort`` comparator of structs by their ``p``."""
    return F.when(left["p"] < right["p"], -1).when(left["p"] > right["p"], 1).otherwise(0)


# The change metadata a folded change takes from the newest of its key's changes.
_NEWEST = ("_cdc_is_delete", "_cdc_sequence", "_cdc_op", "_cdc_commit_ts", "_cdc_record_id")


def fold_partials(decoded: DataFrame, keys: list[str]) -> tuple[DataFrame, DataFrame]:
    """(winners, losers) of keys that have partial updates, folded column by column as the
    core's :func:`~airflow_cdc.core.partial.fold` folds them, with window functions and one
    aggregation per key. In sequence order: a change with the sequence of the one before it
    is a duplicate; the newest full image (or delete) is the base, the changes before it are
    superseded; each partial update after it overwrites the columns it sets (an undeclared
    one in ``_cdc_extra``). Without a base, the result sets only the columns some update set.
    """
    names = [f.name for f in decoded.schema.fields]
    columns = [n for n in names if not n.startswith("_cdc_") and n not in keys]
    by_key = _columns(keys)
    sequence, record = F.col("_cdc_sequence"), F.col("_cdc_record_id")
    # In (sequence, record) order: a change with the sequence of the one before it is a
    # duplicate; the others are numbered; the newest full image is the base. Materialized once:
    # the fold and the losers both read it.
    ordered = Window.partitionBy(*by_key).orderBy(sequence, record)
    whole = Window.partitionBy(*by_key)
    duplicate = F.col("_cdc_f_dup")
    ranked = decoded.select(
        "*", F.coalesce(F.lag(sequence).over(ordered) == sequence, F.lit(False)).alias("_cdc_f_dup")
    )
    ranked = ranked.select(
        "*",
        F.sum(F.when(~duplicate, 1))
        .over(ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow))
        .alias("_cdc_f_pos"),
    )
    full = F.col("_cdc_set_columns").isNull() & ~duplicate
    ranked = materialize(
        ranked.select(
            "*",
            F.max(F.when(full, F.col("_cdc_f_pos"))).over(whole).alias("_cdc_f_start"),
            F.max(sequence).over(whole).alias("_cdc_f_newest"),
        )
    )
    unique = ranked.where(~duplicate)
    start, pos = F.col("_cdc_f_start"), F.col("_cdc_f_pos")
    superseded = unique.where(start.isNotNull() & (pos < start))
    folding = unique.where(start.isNull() | (pos >= start))
    patch = start.isNull() | (pos > start)
    every = F.struct(*_columns(names))
    empty = F.create_map().cast("map<string,string>")

    def set_here(name: str) -> Column:
        # An update that sets a name it also carries as undeclared sets that, not the column.
        column = F.array_contains("_cdc_set_columns", name) & ~F.map_contains_key(
            F.coalesce("_cdc_extra", empty), name
        )
        return patch & F.coalesce(column, F.lit(False))

    patched = {
        c: F.max_by(
            F.struct(F.col(quoted(c)).alias("v"), F.col("_cdc_special_values")[c].alias("s")),
            F.when(set_here(c), pos),
        ).alias(f"_cdc_f_c{i}")
        for i, c in enumerate(columns)
    }
    set_extras = F.map_filter(
        F.coalesce("_cdc_extra", empty), lambda k, _: F.array_contains("_cdc_set_columns", k)
    )
    groups = folding.groupBy(*by_key).agg(
        F.max_by(every, F.when(pos == start, pos)).alias("_cdc_f_base"),
        F.min_by(every, pos).alias("_cdc_f_first"),
        F.max_by(F.struct(*_columns(list(_NEWEST))), pos).alias("_cdc_f_last"),
        F.collect_list(F.struct(pos.alias("p"), F.col("_cdc_members").alias("m"))).alias(
            "_cdc_f_members"
        ),
        F.collect_list(F.when(patch, F.struct(pos.alias("p"), set_extras.alias("m")))).alias(
            "_cdc_f_extras"
        ),
        F.collect_list(F.when(patch, F.col("_cdc_set_columns"))).alias("_cdc_f_sets"),
        *patched.values(),
    )
    has_base = F.col("_cdc_f_base").isNotNull()
    origin = F.when(has_base, F.col("_cdc_f_base")).otherwise(F.col("_cdc_f_first"))
    extras = F.aggregate(
        F.array_sort("_cdc_f_extras", _by_position),
        F.when(has_base, F.coalesce(F.col("_cdc_f_base._cdc_extra"), empty)).otherwise(empty),
        lambda acc, x: F.map_concat(
            F.map_filter(acc, lambda k, _: ~F.map_contains_key(x["m"], k)), x["m"]
        ),
    )
    found = {c: F.col(f"_cdc_f_c{i}") for i, c in enumerate(columns)}
    overridden = F.array_compact(
        F.array(*[F.when(found[c].isNotNull(), F.lit(c)) for c in columns])
        if columns
        else F.array().cast("array<string>")
    )
    base_specials = F.when(
        has_base, F.coalesce(F.col("_cdc_f_base._cdc_special_values"), empty)
    ).otherwise(empty)
    new_specials = (
        F.map_from_entries(
            F.filter(
                F.array(
                    *[F.struct(F.lit(c).alias("k"), found[c]["s"].alias("v")) for c in columns]
                ),
                lambda e: e["v"].isNotNull(),
            )
        )
        if columns
        else empty
    )
    specials = F.map_concat(
        F.map_filter(base_specials, lambda k, _: ~F.array_contains(overridden, k)), new_specials
    )

    def value(name: str) -> Column:
        if name in keys:
            return F.col(quoted(name))
        if name in columns:
            kept = F.when(has_base, F.col("_cdc_f_base")[name])
            return F.when(found[name].isNotNull(), found[name]["v"]).otherwise(kept)
        if name in _NEWEST:
            return F.col("_cdc_f_last")[name]
        if name == "_cdc_members":
            return F.flatten(
                F.transform(F.array_sort("_cdc_f_members", _by_position), lambda x: x["m"])
            )
        if name == "_cdc_set_columns":
            return F.when(~has_base, F.array_sort(F.array_distinct(F.flatten("_cdc_f_sets"))))
        if name == "_cdc_extra":
            return extras
        if name == "_cdc_special_values":
            return specials
        return origin[name]

    folded = materialize(
        groups.select(*[value(n).cast(decoded.schema[n].dataType).alias(n) for n in names])
    )
    losers = union_all(
        [
            per_record(
                ranked.where(duplicate),
                F.lit(DUPLICATE).alias("status"),
                F.lit("same sequence again in batch").alias("reason"),
            ),
            per_record(
                superseded,
                F.lit(SUPERSEDED).alias("status"),
                F.concat(F.lit("newer change in batch: "), F.col("_cdc_f_newest")).alias("reason"),
            ),
        ]
    )
    return folded, losers


def resolve_table(
    decoded: DataFrame, keys: list[str], partial: bool, stored: DataFrame | None = None
) -> tuple[DataFrame, list[DataFrame]]:
    """(winners, losers) of one table's decoded changes, partial updates folded; both are
    filters of materialized frames, cheap to read again. ``partial``: whether ``decoded``
    holds a partial update (:attr:`BatchFacts.partial`). ``stored``: the table's rows that
    earlier batches wrote (:func:`earlier_rows`): a change of a key with partial updates
    that is not newer than its stored row is superseded (or a duplicate) before the fold,
    which would otherwise write its columns over newer stored ones (the MERGE guards the
    whole change by its newest sequence, and a fold without a full image sets columns)."""
    if not partial:
        winners, losers = resolve_keys(decoded, keys)
        return winners, [losers]
    partial_keys = (
        decoded.where(is_partial(F.col("_cdc_set_columns"))).select(*_columns(keys)).distinct()
    )
    full = decoded.join(partial_keys, keys, "left_anti")
    winners, losers = resolve_keys(full, keys)
    folding = decoded.join(partial_keys, keys, "left_semi")
    stale: list[DataFrame] = []
    if stored is not None:
        known = materialize(with_stored(folding, stored, keys))
        seq, t_seq = F.col("_cdc_sequence"), F.col("_t_seq")
        older = F.coalesce(t_seq.isNotNull() & (seq <= t_seq), F.lit(False))
        stale.append(
            per_record(
                known.where(older),
                F.when(seq == t_seq, F.lit(DUPLICATE)).otherwise(F.lit(SUPERSEDED)).alias("status"),
                F.concat(F.lit("target holds sequence "), t_seq).alias("reason"),
            )
        )
        folding = known.where(~older).drop("_t_seq", "_t_ts")
    folded, fold_losers = fold_partials(folding, keys)
    return winners.unionByName(folded), [losers, fold_losers, *stale]
