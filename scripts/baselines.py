"""Baselines that ``scripts/bench.py`` measures the pipeline against.

Each function runs on an existing Delta-enabled session (``spark_jobs.session.get_session``,
``local[*]``, session time zone UTC); the caller times it, in seconds of wall-clock time.

* :func:`bare_pass`: read the dump lines, decode each record, parse its JSON envelope, count.
* :func:`floor`: the same parse, then one Delta append of every record (its text and its
  envelope's fields as flat columns): the least that any pipeline landing the records durably
  must do.
* :func:`auto_cdc` (DSQL only): the SCD1 algorithm of Spark 4.2's open-source AUTO CDC
  (``pyspark.pipelines.create_auto_cdc_flow``), ported to Delta and run once, as one
  micro-batch, over the dump's ``full`` records.

How Spark implements AUTO CDC SCD1 (``sql/pipelines`` in apache/spark, package
``org.apache.spark.sql.pipelines.autocdc``: ``Scd1ForeachBatchHandler``,
``Scd1ReconciliationStrategy`` / ``Scd1RowLevelReconciliation``, ``Scd1BatchProcessor``,
``ScdBatchValidator``, ``AutoCdcReservedNames``; ``graph/AutoCdcAuxiliaryTable``). The flow is
a streaming ``foreachBatch``; per micro-batch:

1. Validate: the sequencing value and every key column must be non-null (the batch fails
   otherwise) and the sequencing type orderable.
2. Deduplicate: group by key and keep, with ``max_by(struct(all columns), sequence)``, the one
   event with the greatest sequence (ties: undefined which).
3. Add a metadata struct column ``__spark_autocdc_metadata`` = ``{deleteSequence,
   upsertSequence}``: the sequence goes to ``deleteSequence`` when the ``apply_as_deletes``
   condition is true, otherwise (false or null) to ``upsertSequence``; then apply the column
   selection, keeping the metadata column last.
4. Drop superseded events: left anti-join with the auxiliary table (one per target,
   ``__spark_autocdc_aux_state_<target>``: key columns + the metadata column, one tombstone per
   deleted key) on equal keys where ``greatest(deleteSequence, upsertSequence)`` of the event is
   lower than the tombstone's ``deleteSequence``.
5. MERGE the reconciled batch (keys + metadata only) into the auxiliary table: a matched key
   whose event is a delete newer than the tombstone advances it; a matched key whose event is
   an upsert with sequence >= the tombstone's removes the tombstone (the key lives again); an
   unmatched delete inserts a tombstone.
6. MERGE the reconciled batch into the target (which holds live rows only, each with its
   ``upsertSequence``): matched and delete sequence > the row's upsert sequence: delete;
   matched and upsert sequence >= the row's: update every non-key column and the metadata;
   not matched and not a delete: insert. Upserts win ties with deletes. Both merges are
   guarded by sequence comparisons, so replaying a batch after a failure between them is
   harmless.

What is ported here: steps 2 to 6 as written, with Delta's ``DeltaTable.merge`` in place of
``DataFrame.mergeInto``, the tables at ``<path>/<schema>/<table>`` and
``<path>/<schema>/__spark_autocdc_aux_state_<table>`` (created empty first, as the pipeline
materializes its datasets before the flow runs). Keys are the DDL's primary key, the sequence
is ``source.ts_ns``, the delete condition is ``op = 'd'`` (any other op upserts), the column
selection is the declared columns. Step 1 differs: rows with a null key or sequence (bad input)
are dropped instead of failing the batch. Records of type ``chunked`` and their fragments are
ignored (reassembly is not part of AUTO CDC), as are tables the DDL does not declare. Values
are typed naively: each declared column is read from the image as JSON text and cast with
``try_cast`` to the column's Spark type (a value that does not cast becomes null; array
columns go through ``from_json``), not decoded by the DSQL rules.
"""

from __future__ import annotations

from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark import StorageLevel
from pyspark.sql import Column, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    LongType,
    MapType,
    StructField,
    StructType,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from airflow_cdc.core.ddl import TableSpec

# Spark's reserved AUTO CDC names (AutoCdcReservedNames, AutoCdcAuxiliaryTable).
RESERVED_PREFIX = "__spark_autocdc_"
METADATA = f"{RESERVED_PREFIX}metadata"
AUX_PREFIX = f"{RESERVED_PREFIX}aux_state_"
DELETE_SEQUENCE = "deleteSequence"
UPSERT_SEQUENCE = "upsertSequence"
# Working columns of this baseline (never written to a table).
_TYPE, _SCHEMA, _TABLE, _OP, _SEQ, _IMAGE = (
    f"{RESERVED_PREFIX}{name}" for name in ("type", "schema", "table", "op", "seq", "image")
)
_WINNER, _EVENTS = f"{RESERVED_PREFIX}winning_row", f"{RESERVED_PREFIX}events"
_DSQL_ENVELOPE = (
    "type STRING, op STRING, source STRUCT<ts_ns: BIGINT, `schema`: STRING, `table`: STRING>,"
    " after MAP<STRING, STRING>, before MAP<STRING, STRING>"
)


def dump_lines(spark, dump: str):
    """The dump's lines, its files named one by one (a glob makes Spark log a stack trace
    while it looks for a streaming sink's metadata under the pattern)."""
    return spark.read.text(sorted(str(path) for path in Path(dump).glob("*.ndjson")))


def bare_pass(spark, dump: str, fmt: str) -> int:
    from pyspark.sql import functions as F

    lines = dump_lines(spark, dump)
    if fmt == "dsql":
        data = F.unbase64(F.get_json_object("value", "$.Data")).cast("string")
        record = F.from_json(
            data,
            "type STRING, op STRING, source STRUCT<ts_ns: BIGINT,"
            " `schema`: STRING, `table`: STRING>, after MAP<STRING, STRING>,"
            " before MAP<STRING, STRING>",
        )
        return int(lines.select(record.alias("r")).where(F.col("r").isNotNull()).count())
    value = F.get_json_object("value", "$.value")
    record = F.from_json(value, "MAP<STRING, STRING>")
    parsed = lines.select(value.alias("v"), record.alias("r"))
    return int(parsed.where(F.col("r").isNotNull() | F.col("v").isNull()).count())


def floor(spark: SparkSession, dump: str, fmt: str, path: str) -> int:
    """Parse the dump as :func:`bare_pass` does, then append every record to one Delta table.

    DSQL rows: ``record`` (the decoded record text), ``type``, ``op``, ``source_ts_ns``
    (nanoseconds), ``source_schema``, ``source_table``, ``after`` and ``before`` (maps of
    column name to JSON text). Kafka rows: ``record`` (the message value) and ``fields`` (its
    top-level JSON fields, name to JSON text). Records that do not parse are written too, with
    null fields.

    :param dump: Directory of ``*.ndjson`` dump files.
    :param fmt: ``dsql`` or a Kafka format.
    :param path: Delta table location; the append creates the table.
    :returns: Records written, counted as the write consumes them (the table is not read
        back).
    """
    lines = dump_lines(spark, dump)
    if fmt == "dsql":
        data = F.unbase64(F.get_json_object("value", "$.Data")).cast("string")
        parsed = lines.select(data.alias("record"), F.from_json(data, _DSQL_ENVELOPE).alias("r"))
        rows = parsed.select(
            "record",
            F.col("r.type").alias("type"),
            F.col("r.op").alias("op"),
            F.col("r.source.ts_ns").alias("source_ts_ns"),
            F.col("r.source.schema").alias("source_schema"),
            F.col("r.source.table").alias("source_table"),
            F.col("r.after").alias("after"),
            F.col("r.before").alias("before"),
        )
    else:
        value = F.get_json_object("value", "$.value")
        rows = lines.select(
            value.alias("record"), F.from_json(value, "MAP<STRING, STRING>").alias("fields")
        )
    # Counted as the rows stream into the write: no second pass, no read of the table.
    written = Observation()
    observed = rows.observe(written, F.count(F.lit(1)).alias("records"))
    observed.write.format("delta").mode("append").save(path)
    return int(written.get["records"])


def auto_cdc(spark: SparkSession, dump: str, ddl: str, path: str) -> dict[str, int]:
    """Apply the dump's DSQL ``full`` records to Delta tables with AUTO CDC's SCD1 algorithm.

    One micro-batch per declared table (see the module docstring): deduplicate by key on
    ``source.ts_ns``, drop events older than a recorded tombstone, one guarded MERGE into the
    tombstone table ``<path>/<schema>/__spark_autocdc_aux_state_<table>``, one guarded MERGE
    into the target ``<path>/<schema>/<table>``. Tables missing at ``path`` are created empty
    first; existing ones are merged into, as a later micro-batch would be.

    :param dump: Directory of ``*.ndjson`` Kinesis dump files of DSQL records.
    :param ddl: PostgreSQL ``CREATE TABLE`` statements of the target tables.
    :param path: Root directory of the Delta tables.
    :returns: Per target table (``schema.table``), the rows its MERGE inserted, updated or
        deleted; under ``full``, the ``full`` records of declared tables that were used (with
        a non-null key and sequence).
    """
    from airflow_cdc.core.ddl import parse_tables

    specs = parse_tables(ddl)
    # Parsed once for all tables: filters on the parsed fields would otherwise be pushed below
    # the parse and decode and parse every record again per table and per condition.
    records = _parse(spark, dump, specs).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        full = records.where(F.col(_TYPE) == "full")
        result: dict[str, int] = {}
        used = 0
        for spec in specs:
            merged, events = _apply_table(spark, full, spec, path)
            result[spec.table.qualified] = merged
            used += events
    finally:
        records.unpersist()
    result["full"] = used
    return result


def _parse(spark: SparkSession, dump: str, specs: list[TableSpec]) -> DataFrame:
    """Every record's type, schema, table, op, sequence (``source.ts_ns``) and image (the after
    image, the before image for deletes) with the declared columns of every table as JSON
    text."""
    names = sorted({column.name for spec in specs for column in spec.columns})
    image = ", ".join(f"`{name}`: STRING" for name in names)
    envelope = (
        "type STRING, op STRING, source STRUCT<ts_ns: BIGINT, `schema`: STRING, `table`: STRING>,"
        f" after STRUCT<{image}>, before STRUCT<{image}>"
    )
    lines = dump_lines(spark, dump)
    data = F.unbase64(F.get_json_object("value", "$.Data")).cast("string")
    record = lines.select(F.from_json(data, envelope).alias("r"))
    op = F.col("r.op")
    return record.select(
        F.col("r.type").alias(_TYPE),
        F.col("r.source.schema").alias(_SCHEMA),
        F.col("r.source.table").alias(_TABLE),
        op.alias(_OP),
        F.col("r.source.ts_ns").alias(_SEQ),
        F.when(op == "d", F.col("r.before")).otherwise(F.col("r.after")).alias(_IMAGE),
    )


def _typed(name: str, dtype: DataType) -> Column:
    """A declared column, cast from its JSON text as a baseline naively would (null if the
    value does not cast)."""
    text = F.col(_IMAGE).getField(name)
    if isinstance(dtype, ArrayType | MapType | StructType):
        return F.from_json(text, dtype.simpleString()).alias(name)
    return text.try_cast(dtype).alias(name)


def _metadata_type() -> StructType:
    """``__spark_autocdc_metadata``: the event's sequence (``source.ts_ns``, nanoseconds since
    the epoch) as a delete or as an upsert."""
    return StructType(
        [StructField(DELETE_SEQUENCE, LongType()), StructField(UPSERT_SEQUENCE, LongType())]
    )


def _apply_table(
    spark: SparkSession, changes: DataFrame, spec: TableSpec, path: str
) -> tuple[int, int]:
    """One SCD1 micro-batch into one table; (rows the target MERGE changed, events used)."""
    from airflow_cdc.core.types import spark_type
    from spark_jobs.schemas import data_type

    keys = list(spec.primary_key)
    types = {column.name: data_type(spark_type(column)) for column in spec.columns}
    columns = list(types)
    others = [name for name in columns if name not in keys]
    target = f"{path}/{spec.table.schema}/{spec.table.name}"
    aux = f"{path}/{spec.table.schema}/{AUX_PREFIX}{spec.table.name}"
    metadata = _metadata_type()
    _ensure(spark, target, StructType([StructField(n, t) for n, t in types.items()]), metadata)
    _ensure(spark, aux, StructType([StructField(k, types[k]) for k in keys]), metadata)

    events = changes.where(
        (F.col(_SCHEMA) == spec.table.schema) & (F.col(_TABLE) == spec.table.name)
    ).select(*(_typed(name, types[name]) for name in columns), _OP, _SEQ)
    # Spark fails the batch on a null key or sequence; a baseline over bad input drops them.
    valid = F.col(_SEQ).isNotNull()
    for key in keys:
        valid &= F.col(f"`{key}`").isNotNull()
    # Deduplicate: the latest event per key by sequence (ties: any of them).
    winner = F.max_by(F.struct(*(F.col(f"`{n}`") for n in [*others, _OP, _SEQ])), F.col(_SEQ))
    latest = (
        events.where(valid)
        .groupBy(*(F.col(f"`{k}`") for k in keys))
        .agg(winner.alias(_WINNER), F.count(F.lit(1)).alias(_EVENTS))
        .select(*(F.col(f"`{k}`") for k in keys), f"{_WINNER}.*", _EVENTS)
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        total = latest.agg(F.sum(_EVENTS)).first()
        used = int(total[0] or 0) if total is not None else 0
        reconciled = _reconcile(spark, latest, columns, keys, aux, metadata)
        _merge_tombstones(spark, reconciled, keys, aux)
        merged = _merge_target(spark, reconciled, keys, others, target)
    finally:
        latest.unpersist()
    return merged, used


def _reconcile(
    spark: SparkSession,
    latest: DataFrame,
    columns: list[str],
    keys: list[str],
    aux: str,
    metadata: StructType,
) -> DataFrame:
    """Add the metadata column (delete when ``op = 'd'``), keep the declared columns, and drop
    the events that a recorded tombstone with a greater delete sequence supersedes."""
    delete_seq = F.when(F.col(_OP) == "d", F.col(_SEQ))
    upsert_seq = F.when(delete_seq.isNull(), F.col(_SEQ))
    meta = F.struct(
        delete_seq.cast(metadata[DELETE_SEQUENCE].dataType).alias(DELETE_SEQUENCE),
        upsert_seq.cast(metadata[UPSERT_SEQUENCE].dataType).alias(UPSERT_SEQUENCE),
    )
    batch = latest.select(*(F.col(f"`{n}`") for n in columns), meta.alias(METADATA)).alias("m")
    tombstones = spark.read.format("delta").load(aux).alias("a")
    event_seq = F.greatest(_field("m", DELETE_SEQUENCE), _field("m", UPSERT_SEQUENCE))
    superseded = _keys_match("m", "a", keys) & (event_seq < _field("a", DELETE_SEQUENCE))
    return batch.join(tombstones, superseded, "left_anti")


def _merge_tombstones(
    spark: SparkSession, reconciled: DataFrame, keys: list[str], aux: str
) -> None:
    """Advance, remove or add the tombstones of the batch's keys (one MERGE)."""
    from delta.tables import DeltaTable

    source = reconciled.select(*(F.col(f"`{k}`") for k in keys), METADATA).alias("s")
    incoming_delete = _field("s", DELETE_SEQUENCE)
    incoming_upsert = _field("s", UPSERT_SEQUENCE)
    is_delete = incoming_delete.isNotNull() & (
        incoming_upsert.isNull() | (incoming_delete > incoming_upsert)
    )
    stored_delete = _field("t", DELETE_SEQUENCE)
    (
        DeltaTable.forPath(spark, aux)
        .alias("t")
        .merge(source, _keys_match("s", "t", keys))
        .whenMatchedUpdate(
            condition=is_delete & (incoming_delete > stored_delete), set=_assign([METADATA])
        )
        .whenMatchedDelete(condition=~is_delete & (incoming_upsert >= stored_delete))
        .whenNotMatchedInsert(condition=is_delete, values=_assign([*keys, METADATA]))
        .execute()
    )


def _merge_target(
    spark: SparkSession, reconciled: DataFrame, keys: list[str], others: list[str], target: str
) -> int:
    """Apply the batch to the live rows (one MERGE); how many rows it inserted, updated or
    deleted."""
    from delta.tables import DeltaTable

    incoming_delete = _field("s", DELETE_SEQUENCE)
    incoming_upsert = _field("s", UPSERT_SEQUENCE)
    stored_upsert = _field("t", UPSERT_SEQUENCE)
    metrics = (
        DeltaTable.forPath(spark, target)
        .alias("t")
        .merge(reconciled.alias("s"), _keys_match("s", "t", keys))
        # A delete wins only over an older upsert; an upsert wins ties.
        .whenMatchedDelete(
            condition=incoming_delete.isNotNull() & (incoming_delete > stored_upsert)
        )
        .whenMatchedUpdate(
            condition=incoming_upsert.isNotNull() & (incoming_upsert >= stored_upsert),
            set=_assign([*others, METADATA]),
        )
        # A delete of an absent key changes nothing here: it is a tombstone in the aux table.
        .whenNotMatchedInsert(
            condition=incoming_delete.isNull(), values=_assign([*keys, *others, METADATA])
        )
        .execute()
        .first()
    )
    return int(metrics["num_affected_rows"]) if metrics is not None else 0


def _assign(names: list[str]) -> dict[str, str | Column]:
    """MERGE assignments: each of ``names`` in the table from the same column of source ``s``."""
    return {f"`{name}`": F.col(f"s.`{name}`") for name in names}


def _field(alias: str, name: str) -> Column:
    """A field of the metadata column of ``alias`` (``deleteSequence``/``upsertSequence``)."""
    return F.col(f"{alias}.`{METADATA}`").getField(name)


def _keys_match(left: str, right: str, keys: list[str]) -> Column:
    """``left.k = right.k`` for every key column ``k``."""
    return reduce(Column.__and__, (F.col(f"{left}.`{k}`") == F.col(f"{right}.`{k}`") for k in keys))


def _ensure(spark: SparkSession, path: str, schema: StructType, metadata: StructType) -> None:
    """Create the Delta table at ``path`` (``schema`` + the metadata column) if it is absent."""
    from delta.tables import DeltaTable

    if DeltaTable.isDeltaTable(spark, path):
        return
    columns = StructType([*schema.fields, StructField(METADATA, metadata)])
    DeltaTable.createIfNotExists(spark).location(path).addColumns(columns).execute()
