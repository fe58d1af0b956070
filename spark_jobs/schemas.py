"""Spark schemas from DDL text, without a running session.

``StructType.fromDDL`` needs a live JVM; the jobs declare their table schemas at import time
(and the core's type mapping produces DDL text), so this small parser covers the types the
project uses. Names and table properties are spelled as Spark SQL text here too
(:func:`quoted`, :func:`table_properties`).
"""

from __future__ import annotations

import re

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    VariantType,
)

_SIMPLE: dict[str, DataType] = {
    "STRING": StringType(),
    "BOOLEAN": BooleanType(),
    "TIMESTAMP": TimestampType(),
    "TIMESTAMP_NTZ": TimestampNTZType(),
    "BINARY": BinaryType(),
    "TINYINT": ByteType(),
    "SMALLINT": ShortType(),
    "INT": IntegerType(),
    "BIGINT": LongType(),
    "FLOAT": FloatType(),
    "DOUBLE": DoubleType(),
    "DATE": DateType(),
    "VARIANT": VariantType(),
}
_DECIMAL = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")


def struct(ddl: str) -> StructType:
    """``"a STRING, `b c` DECIMAL(10,2)"`` -> StructType."""
    fields = []
    for part in _split(ddl):
        part = part.strip()
        if part.startswith("`"):
            end = part.index("`", 1)
            name, rest = part[1:end], part[end + 1 :]
        else:
            name, _, rest = part.partition(" ")
        fields.append(StructField(name, data_type(rest.strip())))
    return StructType(fields)


def data_type(text: str) -> DataType:
    text = text.strip()
    upper = text.upper()
    if upper in _SIMPLE:
        return _SIMPLE[upper]
    decimal = _DECIMAL.fullmatch(upper)
    if decimal:
        return DecimalType(int(decimal.group(1)), int(decimal.group(2)))
    if upper.startswith("ARRAY<") and upper.endswith(">"):
        return ArrayType(data_type(text[6:-1]))
    if upper.startswith("STRUCT<") and upper.endswith(">"):
        return struct(", ".join(p.replace(":", " ", 1) for p in _split(text[7:-1])))
    if upper.startswith("MAP<") and upper.endswith(">"):
        key, value = _split(text[4:-1])
        return MapType(data_type(key), data_type(value))
    raise ValueError(f"unsupported type in schema DDL: {text!r}")


def _split(text: str) -> list[str]:
    """Split on commas that are not inside <> or ()."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def quoted(name: str) -> str:
    """A name as a Spark SQL identifier (backticks doubled)."""
    return "`" + name.replace("`", "``") + "`"


def table_properties(properties: dict[str, str]) -> str:
    """``properties`` (the jobs' own keys and values, never data) as the list that SQL's
    ``TBLPROPERTIES (...)`` takes."""
    return ", ".join(f"'{key}' = '{value}'" for key, value in properties.items())
