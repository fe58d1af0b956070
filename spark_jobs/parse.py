"""Landed records -> one common change shape, parsed once per record.

Every format's envelope becomes the columns of :data:`PARSED_SCHEMA`: what the record is
(``rtype``: ``change``, ``chunked``, ``fragment``, ``control`` or ``error``), its table, op,
commit sequence and time, its row images (``before`` / ``after`` as ``MAP<STRING, VARIANT>``,
the column values still JSON), the key it carries apart from the images, and the fields of
fragments and chunk references. Quarantine reasons are the core parsers' codes.

Aurora DSQL is parsed in the JVM with ``from_json`` into VARIANT fields (types are checked,
never coerced, as the core parser checks them). The other formats still run their core
parser once per record, through Arrow (``mapInArrow``), and their images are parsed into
maps in the JVM right after; :mod:`airflow_cdc.core.formats` stays the specification that
``tests/spark/test_parse.py`` holds this module to.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from airflow_cdc.core import jsontext
from airflow_cdc.core.events import (
    EXPIRED_BEFORE_LANDING,
    EXPIRED_PREFIX,
    ChangeRecord,
    Control,
    Fragment,
    Message,
    envelope_failure,
)
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats import parser_for
from airflow_cdc.core.formats.common import RecordLimits
from spark_jobs.frames import arrow_batch
from spark_jobs.json_columns import WholeJson, is_object
from spark_jobs.schemas import struct

IMAGE = "MAP<STRING, VARIANT>"
# What a parsed record is (``rtype``).
RTYPES = ("change", "chunked", "fragment", "control", "error")
# Columns every parser produces; images are JSON text here and maps after parse_records.
_TEXT_DDL = (
    "record_id STRING, batch_id STRING, arrival_ts TIMESTAMP, rtype STRING, reason STRING,"
    " detail STRING, chunk_id STRING, frag_index BIGINT, frag_data STRING,"
    " schema STRING, table STRING, op STRING, sequence STRING, commit_ts TIMESTAMP,"
    " before_json STRING, after_json STRING, key_json STRING, partial BOOLEAN,"
    " types_json STRING, before_chunk_id STRING, before_total BIGINT, before_crc BIGINT,"
    " after_chunk_id STRING, after_total BIGINT, after_crc BIGINT,"
    " txn_id STRING, txn_order BIGINT, txn_end_json STRING"
)
TEXT_SCHEMA = struct(_TEXT_DDL)
# Where a record sits in its source transaction (Debezium's transaction metadata): a change's
# transaction ``id`` and ``order`` (total_order); a transaction's END event (a control record)
# has its ``id`` and ``end_json``, ``{"event_count": n, "collections": {name: n}}``.
TXN = "STRUCT<id: STRING, order: BIGINT, end_json: STRING>"
# A chunked record's references to the fragments of its images.
CHUNK_REFS = (
    *("before_chunk_id", "before_total", "before_crc"),
    *("after_chunk_id", "after_total", "after_crc"),
)
# What parse_records returns: the raw payload, and the images and key parsed; ``partition``
# and ``position`` place a record without a commit position among its key's messages (only
# the formats parsed by the core have such records; null otherwise).
PARSED_COLUMNS = [
    "record_id",
    "batch_id",
    "arrival_ts",
    "payload",
    "rtype",
    "reason",
    "detail",
    "chunk_id",
    "frag_index",
    "frag_data",
    "schema",
    "table",
    "op",
    "sequence",
    "commit_ts",
    "before",
    "after",
    "key",
    "partial",
    "types_json",
    *CHUNK_REFS,
    "partition",
    "position",
    "txn",
]
RAW_COLUMNS = (
    "record_id",
    "shard_id",
    "batch_id",
    "arrival_ts",
    "data",
    "envelope_error",
    "partition_key",
    "seq_key",
    "stream",
)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_INT64 = 2**63
# 64-bit bounds as decimal literals (py4j passes Python ints as longs).
# Widest commit position a sequence part may have (ordering.sequence_key pads to 20 digits).
SEQUENCE_DIGITS = 20


# The parsed fields that are kept as JSON text (``<name>_json``) outside the parsed shape.
TEXT_FIELDS = ("before", "after", "key")


def from_text(name: str) -> Column:
    """A field of :data:`TEXT_FIELDS` back from its JSON text column: images as maps of
    VARIANT values, the key as a VARIANT."""
    if name == "key":
        return F.try_parse_json(F.col("key_json")).alias("key")
    return F.from_json(F.col(f"{name}_json"), IMAGE).alias(name)


def parse_records(raw: DataFrame, fmt: str, record_limits: RecordLimits | None = None) -> DataFrame:
    """Landed record rows (``RAW_COLUMNS``) -> ``PARSED_COLUMNS``, one row per record, each
    held to ``record_limits``."""
    parser_for(fmt)  # an unknown format fails here, naming the known ones
    record_limits = record_limits or RecordLimits()
    records = raw.select(*RAW_COLUMNS)
    if fmt == "dsql":
        return parse_dsql(records, record_limits.fragments)
    return parse_with_core(records, fmt, record_limits)


# --- Aurora DSQL, in the JVM -------------------------------------------------------------


def json_type(value: Column) -> Column:
    """The JSON type of a VARIANT: STRING, BIGINT, DECIMAL(p,s), OBJECT<...>, VOID (null)...;
    SQL NULL when the field is absent."""
    return F.schema_of_variant(value)


def failure(reason: str, detail: Column | str) -> Column:
    """A ``struct<reason, detail>`` of why a record (or an image, a change) is refused."""
    text = F.lit(detail) if isinstance(detail, str) else detail
    return F.struct(F.lit(reason).alias("reason"), text.alias("detail"))


# Each envelope field the DSQL rules look at, as (path from the record, alias).
_DSQL_FIELDS = {
    "type": "$.type",
    "op": "$.op",
    "source": "$.source",
    "ts_ns": "$.source.ts_ns",
    "schema": "$.source.schema",
    "table": "$.source.table",
    "before": "$.before",
    "after": "$.after",
    "chunked": "$.chunked",
    "chunk_id": "$.chunk_id",
    "index": "$.index",
    "data": "$.data",
    **{
        f"{image}_{field}": f"$.chunked.{image}{'.' + field if field != 'ref' else ''}"
        for image in ("before", "after")
        for field in ("ref", "chunk_id", "total_fragments", "crc32c")
    },
}
_INTEGRAL = ("TINYINT", "SMALLINT", "INT", "BIGINT")


class _Fields:
    """Column accessors over the per-field ``<name>_t`` (JSON type) and ``<name>_s`` (text)."""

    def kind(self, name: str) -> Column:
        return F.col(f"{name}_t")

    def text(self, name: str) -> Column:
        return F.col(f"{name}_s")

    def is_string(self, name: str) -> Column:
        return F.coalesce(self.kind(name) == "STRING", F.lit(False))

    def is_object(self, name: str) -> Column:
        return F.coalesce(self.kind(name).startswith("OBJECT"), F.lit(False))

    def is_null(self, name: str) -> Column:
        return F.coalesce(self.kind(name) == "VOID", F.lit(True))

    def is_integer(self, name: str) -> Column:
        kind = self.kind(name)
        integral = kind.isin(*_INTEGRAL) | kind.rlike(r"^DECIMAL\(\d+,0\)$")
        return F.coalesce(integral, F.lit(False))

    def integer(self, name: str) -> Column:
        """Decimal digits of a JSON integer or of a string of digits (the core's ``integer``)."""
        digits = self.is_string(name) & self.text(name).rlike(r"^-?[0-9]+\z")
        return F.when(self.is_integer(name) | digits, self.text(name))

    def described(self, name: str) -> Column:
        return F.coalesce(F.lower(self.kind(name)), F.lit("absent"))


def payload_text() -> Column:
    """A landed record's payload: its bytes as a string, unvalidated, as Spark's cast from
    binary makes it (and as the core's Arrow batches pass it: :func:`parse_with_core`)."""
    return F.col("data").cast("string")


def payloads(records: DataFrame) -> DataFrame:
    """``record_id``, ``payload`` of landed records, for where a record needs its payload
    after its parsed row no longer carries it."""
    return records.select("record_id", payload_text().alias("payload"))


def _dsql_fields(records: DataFrame) -> DataFrame:
    """Records with the JSON type and text of every envelope field, each computed once."""
    text = payload_text()
    whole = WholeJson()
    # Each field straight from the parsed text: taking the document out first would copy it.
    wrapped, is_whole = F.col("_wrapped"), F.col("_whole")
    atoms = [
        F.when(is_whole, whole.at(wrapped, path, "variant")).alias(name)
        for name, path in _DSQL_FIELDS.items()
        if name not in _IMAGES
    ]
    # An image straight into a map: as a field first, it would be copied twice.
    images = [
        F.when(is_whole, whole.at(wrapped, _DSQL_FIELDS[name], IMAGE)).alias(f"{name}_map")
        for name in _IMAGES
    ]
    fields = (
        records.select(
            "record_id",
            "batch_id",
            "arrival_ts",
            "envelope_error",
            text.alias("payload"),
            whole.wrapped(text).alias("_wrapped"),
        )
        .select("*", whole.whole(wrapped).alias("_whole"))
        .select("*", *atoms, *images)
    )
    document = whole.at(wrapped, "$", "variant")  # read only where it is not an object
    document_is_object = whole.is_object_at(wrapped)
    return fields.select(
        "record_id",
        "batch_id",
        "arrival_ts",
        "envelope_error",
        "payload",
        F.when(is_whole, _kind(document, document_is_object)).alias("_doc_t"),
        *(
            _kind(F.col(name), is_object(F.col(name))).alias(f"{name}_t")
            for name in _DSQL_FIELDS
            if name not in _IMAGES
        ),
        *(
            F.when(
                is_whole,
                _kind(
                    whole.at(wrapped, _DSQL_FIELDS[name], "variant"),
                    F.col(f"{name}_map").isNotNull(),
                ),
            ).alias(f"{name}_t")
            for name in _IMAGES
        ),
        *(
            F.variant_get(F.col(name), "$", "string").alias(f"{name}_s")
            for name in _DSQL_FIELDS
            if name not in _DSQL_OBJECTS
        ),
        *(F.col(f"{name}_map").alias(name) for name in _IMAGES),
    )


_IMAGES = ("before", "after")
# Fields the rules only ever test for being an object (never read as text).
_DSQL_OBJECTS = ("before", "after", "source", "chunked", "before_ref", "after_ref")


def _magnitude(digits: Column) -> Column:
    """An integer's digits without its sign and leading zeros ("" for zero, however it is
    written): a negative ``ts_ns`` other than zero is refused before its sequence is read."""
    return F.regexp_replace(digits, "^-?0*", "")


def _kind(value: Column, is_object: Column) -> Column:
    """:func:`json_type`, except that any object is just ``OBJECT``: spelling out an object's
    whole schema costs more than the rest of a record's parse, and no rule reads it."""
    return F.when(is_object, F.lit("OBJECT")).otherwise(json_type(value))


def _dsql_error(f: _Fields, most: int) -> Column:
    """The first rule of :mod:`airflow_cdc.core.formats.dsql` that a record breaks, if any."""
    rtype, op = f.text("type"), f.text("op")
    chunked = F.coalesce(rtype == "chunked", F.lit(False))
    int64_max = F.lit(str(2**63 - 1)).cast("decimal(38,0)")

    def number(name: str) -> Column:
        # Null past 38 digits (a plain cast would fail the whole batch).
        return f.integer(name).try_cast("decimal(38,0)")

    def ref_error(image: str) -> Column:
        ref = f"{image}_ref"
        total, crc = f"{image}_total_fragments", f"{image}_crc32c"
        return (
            F.when(f.is_null(ref), F.lit(None))
            .when(
                ~f.is_object(ref),
                failure(
                    "invalid_chunked", F.concat(F.lit(f"chunked.{image} is "), f.described(ref))
                ),
            )
            .when(~f.is_integer(total), failure("missing_field", "total_fragments must be int"))
            .when(
                number(total) < 1,
                failure(
                    "invalid_chunked",
                    F.concat(F.lit(f"chunked.{image}.total_fragments="), f.text(total)),
                ),
            )
            .when(
                number(total) > most,
                failure(
                    "invalid_chunked",
                    F.concat(
                        F.lit(f"chunked.{image}.total_fragments="),
                        f.text(total),
                        F.lit(f" is over {most}"),
                    ),
                ),
            )
            .when(
                ~f.is_string(f"{image}_chunk_id"), failure("missing_field", "chunk_id must be str")
            )
            .when(
                f.integer(crc).isNull(),
                failure("missing_field", f"chunked.{image}.crc32c must be an integer"),
            )
            .when(
                ~F.coalesce(number(crc).between(-int64_max - 1, int64_max), F.lit(False)),
                failure(
                    "invalid_chunked", F.concat(F.lit(f"chunked.{image}.crc32c="), f.text(crc))
                ),
            )
            .when(
                ~f.is_null(image), failure("invalid_chunked", f"{image} is both inline and chunked")
            )
        )

    def image_error(image: str) -> Column:
        return F.when(
            ~f.is_null(image) & ~f.is_object(image),
            failure(
                "invalid_image",
                F.concat(F.lit(f"{image} must be an object or null, got "), f.described(image)),
            ),
        )

    needed_missing = F.when(
        op == "d", f.is_null("before") & (~chunked | f.is_null("before_ref"))
    ).otherwise(f.is_null("after") & (~chunked | f.is_null("after_ref")))
    ts = f.integer("ts_ns")
    change = F.coalesce(
        F.when(~f.is_string("op"), failure("missing_field", "op must be str")),
        F.when(~f.is_object("source"), failure("missing_field", "source must be dict")),
        F.when(ts.isNull(), failure("missing_field", "source.ts_ns must be an integer")),
        F.when(
            ts.startswith("-") & (_magnitude(ts) != ""),
            failure("missing_field", "source.ts_ns is negative"),
        ),
        F.when(
            F.length(_magnitude(ts)) > SEQUENCE_DIGITS,
            failure(
                "invalid_sequence",
                F.concat(F.lit("source.ts_ns has more than 20 digits: "), F.substring(ts, 1, 40)),
            ),
        ),
        image_error("before"),
        image_error("after"),
        F.when(
            chunked,
            F.coalesce(
                F.when(~f.is_object("chunked"), failure("missing_field", "chunked must be dict")),
                ref_error("before"),
                ref_error("after"),
                F.when(
                    f.is_null("before_ref") & f.is_null("after_ref"),
                    failure("invalid_chunked", "chunked names neither before nor after"),
                ),
            ),
        ),
        F.when(
            needed_missing,
            failure(
                "missing_image",
                F.concat(
                    F.lit("op "),
                    op,
                    F.lit(" needs a "),
                    F.when(op == "d", F.lit("before")).otherwise(F.lit("after")),
                    F.lit(" image"),
                ),
            ),
        ),
        F.when(~f.is_string("schema"), failure("missing_field", "schema must be str")),
        F.when(~f.is_string("table"), failure("missing_field", "table must be str")),
    )
    index = number("index")
    fragment = F.coalesce(
        F.when(~f.is_string("chunk_id"), failure("missing_field", "chunk_id must be str")),
        F.when(~f.is_integer("index"), failure("missing_field", "index must be int")),
        F.when(
            index < 0,
            failure(
                "invalid_fragment",
                F.concat(F.lit("index "), f.text("index"), F.lit(" is negative")),
            ),
        ),
        F.when(
            index >= most,
            failure(
                "invalid_fragment",
                F.concat(
                    F.lit("index "),
                    f.text("index"),
                    F.lit(f" is past the largest set ({most})"),
                ),
            ),
        ),
        F.when(~f.is_string("data"), failure("missing_field", "data must be str")),
    )
    return (
        F.when(
            F.col("envelope_error").startswith(EXPIRED_PREFIX),
            failure(
                EXPIRED_BEFORE_LANDING,
                F.substring("envelope_error", len(EXPIRED_PREFIX) + 1, 1 << 30),
            ),
        )
        .when(F.col("envelope_error").isNotNull(), failure("bad_envelope", F.col("envelope_error")))
        .when(
            ~F.coalesce(F.is_valid_utf8("payload"), F.lit(True)),
            failure("invalid_utf8", "the record is not UTF-8 text"),
        )
        .when(
            ~F.coalesce(F.col("_doc_t").startswith("OBJECT"), F.lit(False)),
            failure("malformed_json", "expected a JSON object"),
        )
        .when(rtype == "fragment", fragment)
        .when(rtype.isin("full", "chunked"), change)
        .otherwise(
            failure(
                "unknown_record_type",
                F.concat(
                    F.lit("type "),
                    F.coalesce(f.text("type"), F.lit("None")),
                    F.lit(" is not one of ('full', 'chunked', 'fragment')"),
                ),
            )
        )
    )


def parse_dsql(records: DataFrame, fragments: int) -> DataFrame:
    """DSQL records (the Kinesis records' ``Data``) per the rules of
    :mod:`airflow_cdc.core.formats.dsql`, as Spark expressions; an image may have at most
    ``fragments`` fragments."""
    f = _Fields()
    fields = _dsql_fields(records).withColumn("_error", _dsql_error(f, fragments))
    rtype = f.text("type")
    is_error = F.col("_error").isNotNull()
    change = ~is_error & rtype.isin("full", "chunked")
    fragment = ~is_error & (rtype == "fragment")
    chunked = change & (rtype == "chunked")
    ts = _magnitude(f.integer("ts_ns"))

    def image(name: str) -> Column:
        return F.when(change & f.is_object(name), F.col(name))

    def ref(image: str, field: str, kind: str) -> Column:
        value = (
            f.text(f"{image}_{field}")
            if kind == "string"
            else f.integer(f"{image}_{field}").try_cast(kind)
        )
        return F.when(chunked & ~f.is_null(f"{image}_ref"), value)

    return fields.select(
        "record_id",
        "batch_id",
        "arrival_ts",
        "payload",
        F.when(is_error, F.lit("error"))
        .when(fragment, F.lit("fragment"))
        .when(chunked, F.lit("chunked"))
        .otherwise(F.lit("change"))
        .alias("rtype"),
        F.col("_error.reason").alias("reason"),
        F.when(is_error, F.concat_ws(": ", "_error.reason", "_error.detail")).alias("detail"),
        F.when(fragment, f.text("chunk_id")).alias("chunk_id"),
        F.when(fragment, f.integer("index").try_cast("bigint")).alias("frag_index"),
        F.when(fragment, f.text("data")).alias("frag_data"),
        F.when(change, f.text("schema")).alias("schema"),
        F.when(change, f.text("table")).alias("table"),
        F.when(change, f.text("op")).alias("op"),
        F.when(
            change, F.lpad(F.when(ts == "", F.lit("0")).otherwise(ts), SEQUENCE_DIGITS, "0")
        ).alias("sequence"),
        F.when(
            change,
            F.timestamp_micros(
                F.floor(f.integer("ts_ns").try_cast("decimal(38,0)") / 1000).try_cast("bigint")
            ),
        ).alias("commit_ts"),
        image("before").alias("before"),
        image("after").alias("after"),
        F.lit(None).cast("variant").alias("key"),
        F.when(change, F.lit(False)).alias("partial"),
        F.lit(None).cast("string").alias("types_json"),
        ref("before", "chunk_id", "string").alias("before_chunk_id"),
        ref("before", "total_fragments", "bigint").alias("before_total"),
        ref("before", "crc32c", "bigint").alias("before_crc"),
        ref("after", "chunk_id", "string").alias("after_chunk_id"),
        ref("after", "total_fragments", "bigint").alias("after_total"),
        ref("after", "crc32c", "bigint").alias("after_crc"),
        F.lit(None).cast("string").alias("partition"),
        F.lit(None).cast("string").alias("position"),
        F.lit(None).cast(TXN).alias("txn"),
    )


# --- Other formats: the core parser, once per record, through Arrow ----------------------


# The columns that pass through the core parser's Arrow batches untouched.
PASSED = struct("payload STRING, partition STRING, position STRING")


def parse_with_core(records: DataFrame, fmt: str, record_limits: RecordLimits) -> DataFrame:
    """Run ``fmt``'s core parser over each record in Arrow batches, then parse its images.

    Beside the parser's columns, each record's payload (its bytes as a string, unvalidated,
    as Spark's cast from binary makes it), partition (``shard_id``) and position
    (``seq_key``) pass through Arrow as they came, in the batch's order: no join back."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(TEXT_SCHEMA, timezone="UTC")
    schema = StructType([*TEXT_SCHEMA.fields, *PASSED.fields])
    parse = parser_for(fmt, record_limits)

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            parsed = arrow_batch(
                [_parsed_row(parse, row) for row in batch.to_pylist()], arrow_schema
            )
            data = batch.column("data")
            text = pa.large_string() if pa.types.is_large_binary(data.type) else pa.string()
            passed = [data.view(text), batch.column("shard_id"), batch.column("seq_key")]
            yield pa.RecordBatch.from_arrays(
                [*parsed.columns, *passed], names=[*arrow_schema.names, *PASSED.names]
            )

    return records.mapInArrow(run, schema).select(
        *[
            from_text(c) if c in TEXT_FIELDS else _txn() if c == "txn" else F.col(c)
            for c in PARSED_COLUMNS
        ]
    )


def _txn() -> Column:
    return F.when(
        F.col("txn_id").isNotNull(),
        F.struct(
            F.col("txn_id").alias("id"),
            F.col("txn_order").alias("order"),
            F.col("txn_end_json").alias("end_json"),
        ),
    ).alias("txn")


def _parsed_row(parse: Any, row: dict[str, Any]) -> dict[str, Any]:
    head = {k: row[k] for k in ("record_id", "batch_id", "arrival_ts")}
    raw = row["data"]
    try:
        if row["envelope_error"]:
            raise RecordFormatError(*envelope_failure(row["envelope_error"]))
        try:
            strict = None if raw is None else bytes(raw).decode("utf-8")
        except UnicodeDecodeError as err:
            raise RecordFormatError("invalid_utf8", str(err)) from err
        message = Message(strict, row["partition_key"], row["seq_key"] or "", row["stream"])
        fields = _fields(parse(message))
        for value in fields.values():
            if isinstance(value, str):
                _check_utf8(value)
        return {**head, **fields}
    except RecordFormatError as err:
        return {**head, "rtype": "error", "reason": err.reason, "detail": str(err)}
    except RecursionError:
        # Parsed within the limit, then nested too deep to write back as JSON text.
        detail = "invalid_record: a value is nested too deep to write as JSON"
        return {**head, "rtype": "error", "reason": "invalid_record", "detail": detail}


def _fields(record: Any) -> dict[str, Any]:
    if isinstance(record, Control):
        control: dict[str, Any] = {"rtype": "control", "reason": record.kind}
        control["detail"] = record.detail
        boundary = record.transaction
        if boundary is not None:
            control["txn_id"] = boundary.id
            if boundary.status == "END":
                end = {"event_count": boundary.event_count, "collections": boundary.collections}
                control["txn_end_json"] = json.dumps(end)
        return control
    if isinstance(record, Fragment):
        _check_int64(record.index, "index")
        return {
            "rtype": "fragment",
            "chunk_id": record.chunk_id,
            "frag_index": record.index,
            "frag_data": record.data,
        }
    assert isinstance(record, ChangeRecord)
    fields: dict[str, Any] = {
        "rtype": "chunked" if record.chunked else "change",
        "schema": record.table.schema,
        "table": record.table.name,
        "op": record.op,
        "sequence": record.sequence,
        "commit_ts": _EPOCH + dt.timedelta(microseconds=record.commit_ts_us),
        "before_json": _dump(record.before),
        "after_json": _dump(record.after),
        "key_json": _dump(record.key),
        "partial": record.partial,
        "types_json": _dump(record.types),
    }
    if record.transaction is not None:
        _check_int64(record.transaction.order or 0, "transaction.total_order")
        fields["txn_id"] = record.transaction.id
        fields["txn_order"] = record.transaction.order
    for name, ref in record.chunked.items():
        _check_int64(ref.total_fragments, "total_fragments")
        _check_int64(ref.crc32c, "crc32c")
        fields.update(
            {
                f"{name}_chunk_id": ref.chunk_id,
                f"{name}_total": ref.total_fragments,
                f"{name}_crc": ref.crc32c,
            }
        )
    return fields


def _check_utf8(text: str) -> None:
    """Arrow (and Spark) hold UTF-8: a JSON escape of a lone UTF-16 surrogate (``"\\ud800"``)
    parses to a string that has none."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise RecordFormatError(
            "invalid_record",
            f"a string holds a lone UTF-16 surrogate: {err.object[err.start : err.end]!r}",
        ) from err


def _check_int64(value: int, name: str) -> None:
    if not -_INT64 <= value < _INT64:
        raise RecordFormatError("missing_field", f"{name} {value!r} does not fit 64 bits")


def _dump(value: Any) -> str | None:
    return None if value is None else jsontext.dump(value)
