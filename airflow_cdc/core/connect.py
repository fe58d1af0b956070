"""Kafka Connect schemas (JsonConverter's ``{"schema": ..., "payload": ...}``).

A schema-included record says each column's type. :func:`image_plan` maps the fields of a
row image to the type families of :mod:`airflow_cdc.core.types`, and :func:`normalize` turns
the JSON values of Connect's logical types into the forms the decoders read (days since the
epoch for dates, microseconds for times and timestamps, decimal text for decimals).

Primitive types: ``int8`` .. ``int64``, ``float32``, ``float64``, ``boolean``, ``string``,
``bytes`` (Base64 in JSON); ``struct``, ``array`` and ``map`` are kept as JSON text.
Logical types by ``name``: Connect's ``Decimal`` (Base64 of the unscaled two's-complement
integer, ``scale`` in ``parameters``), ``Date`` (days), ``Time`` (ms), ``Timestamp`` (ms);
Debezium's ``io.debezium.time`` types (``Date``, ``Time``, ``MicroTime``, ``NanoTime``,
``Timestamp``, ``MicroTimestamp``, ``NanoTimestamp``, ``ZonedTimestamp``, ``ZonedTime``,
``MicroDuration``), ``VariableScaleDecimal``,
``Json`` and ``Uuid``; any other logical name ending in ``Decimal`` (for example Huawei CDL's
``com.xxx.cdc.data.Decimal``) is a decimal serialized as a string, and a ``string`` of a
logical name ending in ``.timestamp`` (CDL 2.0's ``com.xxx.cdc.data.timestamp``) a timestamp
as text.
"""

from __future__ import annotations

import binascii
import functools
from collections import deque
from decimal import (
    MAX_EMAX,
    MIN_EMIN,
    Context,
    Decimal,
    DefaultContext,
    Inexact,
    InvalidOperation,
    Overflow,
    Underflow,
)
from typing import Any

from airflow_cdc.core import jsontext
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.types import padded_base64

_PRIMITIVES = {
    "int8": "tinyint",
    "int16": "smallint",
    "int32": "integer",
    "int64": "bigint",
    "float32": "real",
    "float": "real",
    "float64": "double",
    "double": "double",
    "boolean": "boolean",
    "string": "text",
    "bytes": "bytea",
    "struct": "json",
    "array": "json",
    "map": "json",
}
_CONNECT = "org.apache.kafka.connect.data."
_DEBEZIUM_TIME = "io.debezium.time."
# Logical type -> (family, factor to microseconds for integer values).
_LOGICAL: dict[str, tuple[str, int | None]] = {
    _CONNECT + "Date": ("date", None),
    _CONNECT + "Time": ("time", 1000),
    _CONNECT + "Timestamp": ("timestamptz", 1000),
    _DEBEZIUM_TIME + "Date": ("date", None),
    _DEBEZIUM_TIME + "Time": ("time", 1000),
    _DEBEZIUM_TIME + "MicroTime": ("time", 1),
    _DEBEZIUM_TIME + "NanoTime": ("time", -1000),
    _DEBEZIUM_TIME + "Timestamp": ("timestamp", 1000),
    _DEBEZIUM_TIME + "MicroTimestamp": ("timestamp", 1),
    _DEBEZIUM_TIME + "NanoTimestamp": ("timestamp", -1000),
    _DEBEZIUM_TIME + "ZonedTimestamp": ("timestamptz", None),
    _DEBEZIUM_TIME + "ZonedTime": ("timetz", None),
    _DEBEZIUM_TIME + "MicroDuration": ("interval", 1),
    "io.debezium.data.Json": ("json", None),
    "io.debezium.data.Uuid": ("uuid", None),
}
DECIMAL_PRECISION = 38


def image_plan(envelope: Any, image: str) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The Connect field schemas of the row image ``image`` in an envelope schema, by column,
    and the type family of each (:func:`family`). Both are shared: read them, never change
    them; nor change ``envelope`` afterwards (its fields are kept to recognize the schema)."""
    return _planned(_image_fields(envelope, image))


def struct_plan(schema: Any) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """:func:`image_plan` of a struct schema's own fields: a message key's schema."""
    return _planned(_fields(schema) if isinstance(schema, dict) else [])


def _planned(fields: list[Any]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    if not fields:
        return {}, {}
    for known, columns, types in tuple(_PLANS):  # a copy: another thread may add a plan
        if known == fields:
            return columns, types
    columns = {
        f["field"]: f for f in fields if isinstance(f, dict) and isinstance(f.get("field"), str)
    }
    types = {name: family(f) for name, f in columns.items()}
    _PLANS.appendleft((fields, columns, types))
    return columns, types


# The images planned last: the records of one table carry equal schemas, so a record's plan
# is most often one of these (found by comparing the schemas, which costs less than planning:
# values that compare equal, like 1 and 1.0, plan alike).
_PLANS: deque[tuple[list[Any], dict[str, dict[str, Any]], dict[str, str]]] = deque(maxlen=16)


def _image_fields(envelope: Any, image: str) -> list[Any]:
    """The field schemas of the struct ``image`` of an envelope schema (none if it has none)."""
    if not isinstance(envelope, dict):
        return []
    for field in _fields(envelope):
        if isinstance(field, dict) and field.get("field") == image:
            return _fields(field)
    return []


def _fields(schema: dict[str, Any]) -> list[Any]:
    """A struct schema's ``fields``: a list, or absent."""
    fields = schema.get("fields")
    if fields is None:
        return []
    if not isinstance(fields, list):
        raise RecordFormatError(
            "invalid_schema",
            f"a Connect struct's fields must be a list, got {type(fields).__name__}",
        )
    return fields


def family(field: dict[str, Any]) -> str:
    """The type family of one Connect field schema (``numeric(38,2)`` for decimals)."""
    name = field.get("name")
    if isinstance(name, str):
        if name in _LOGICAL:
            return _LOGICAL[name][0]
        if name.endswith("Decimal"):
            return _decimal_family(_decimal_scale(field))
        if name.endswith(".timestamp") and field.get("type") == "string":
            # Huawei CDL 2.0's com.xxx.cdc.data.timestamp: the column its 1.0 types as
            # Connect's Timestamp, written as text.
            return "timestamptz"
    connect_type = field.get("type")
    if not isinstance(connect_type, str) or connect_type not in _PRIMITIVES:
        raise RecordFormatError("invalid_schema", f"unknown Connect type {connect_type!r}")
    return _PRIMITIVES[connect_type]


def normalize(field: dict[str, Any], value: Any) -> Any:
    """The JSON value of a logical type, in the form the decoders read."""
    if value is None:
        return None
    name = field.get("name")
    if name in _LOGICAL:
        factor = _LOGICAL[name][1]
        if factor is not None and isinstance(value, int) and not isinstance(value, bool):
            return value * factor if factor > 0 else value // -factor
        return value
    if isinstance(name, str) and name.endswith("Decimal"):
        return _decimal_text(field, value)
    if field.get("type") in ("struct", "array", "map"):
        return jsontext.dump(value, separators=(",", ":"), sort_keys=True)
    return value


def _decimal_family(scale: int | None) -> str:
    """The column type of a Connect Decimal of ``scale``: DECIMAL(38, scale) where Spark has
    one. A negative scale (PostgreSQL 15's rounding to tens, hundreds...) leaves whole numbers:
    DECIMAL(38, 0). More than 38 fraction digits fit no Spark DECIMAL: the exact decimal
    text, as a string column."""
    if scale is None:
        return "numeric"
    if scale < 0:
        return f"numeric({DECIMAL_PRECISION},0)"
    if scale > DECIMAL_PRECISION:
        return "text"
    return f"numeric({DECIMAL_PRECISION},{scale})"


def _decimal_scale(field: dict[str, Any]) -> int | None:
    params = field.get("parameters")
    if isinstance(params, dict) and "scale" in params:
        try:
            return int(params["scale"])
        except (TypeError, ValueError):
            return None
    return None


def _decimal_text(field: dict[str, Any], value: Any) -> Any:
    """Connect's Decimal is Base64 bytes; Debezium's VariableScaleDecimal is {scale, value}.

    Decimals of type ``string`` (``decimal.handling.mode=string``, CDL) are already text.
    """
    if isinstance(value, dict) and "value" in value:
        scale = value.get("scale")
        encoded = value.get("value")
    elif field.get("type") == "bytes":
        scale = _decimal_scale(field)
        encoded = value
    else:
        return value
    if not isinstance(encoded, str) or not isinstance(scale, int) or isinstance(scale, bool):
        raise RecordFormatError(
            "decode_error", f"decimal {repr(value)[:60]} has no Base64 value and scale"
        )
    try:
        raw = padded_base64(encoded)
    except binascii.Error as err:
        raise RecordFormatError("decode_error", f"decimal {encoded[:40]!r} is not Base64") from err
    if not raw:  # Connect's reader (BigInteger of no bytes) refuses it too
        raise RecordFormatError("decode_error", "decimal has no bytes")
    unscaled = int.from_bytes(raw, "big", signed=True)
    # At least the integer's digits (log10(2) < 10/33), counted without writing it out:
    # Python writes no integer of more than 4,300 digits.
    digits = max(DefaultContext.prec, unscaled.bit_length() * 10 // 33 + 2)
    return str(Decimal(unscaled).scaleb(-scale, _exact(-(-digits // 64) * 64)))


@functools.lru_cache(maxsize=64)
def _exact(precision: int) -> Context:
    """A context that computes exactly or raises: the default one rounds to 28 significant
    digits, and to its exponent limits. Shared (its flags are never read)."""
    return Context(
        prec=precision,
        Emax=MAX_EMAX,
        Emin=MIN_EMIN,
        traps=[InvalidOperation, Inexact, Overflow, Underflow],
    )
