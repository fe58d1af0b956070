"""The JVM value decoders against the core's ``types.decode``, value by value.

Every case is a JSON value text for a column family; both sides decode it and must agree on
whether it decodes, to which value and with which special marker. The cases where the JVM
knowingly differs are asserted separately, each with its reason.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import struct
from decimal import Decimal
from typing import Any

import pytest

from airflow_cdc.core import jsontext
from airflow_cdc.core.ddl import ColumnSpec
from airflow_cdc.core.exceptions import DecodeError
from airflow_cdc.core.types import decode, decode_undeclared
from spark_jobs.values import DecodedColumn, decode_columns, decode_fast

pytestmark = pytest.mark.spark

INTS = [
    "0",
    "1",
    "-1",
    "127",
    "-128",
    "128",
    "32767",
    "32768",
    "2147483647",
    "2147483648",
    "-2147483649",
    "9223372036854775807",
    "9223372036854775808",
    "1.5",
    "true",
    '"5"',
    "null",
    "[1]",
    "{}",
]
CASES: dict[ColumnSpec, list[str]] = {
    ColumnSpec("c", "smallint"): INTS,
    ColumnSpec("c", "integer"): INTS,
    ColumnSpec("c", "bigint"): INTS,
    ColumnSpec("c", "oid"): [*INTS, "4294967295", "4294967296"],
    ColumnSpec("c", "interval"): [
        *INTS,
        '"27:46:40.5"',
        '"-00:00:01.5"',
        '"1 day"',
        '"-1 days +02:00:00"',
        '"3 days 04:05:06.000007"',
        '""',
        '"1 mon"',
        '"1 day02:00:00"',
        '"00:60:00"',
        '"9999999999:00:00"',
        '"-2562047788:00:54.775808"',
        '"-2562047788:00:54.775809"',
        '"01:00:00\\r"',
        '"01:00:00\\n"',
    ],
    ColumnSpec("c", "real"): [
        # Past a 32-bit float's range (it rounds to infinity) is out of range; just below, not.
        "1e39",
        "-1e39",
        "3.4028235e38",
        "3.4028235677973366e38",
        f"{2**128}",
        "1.5",
        "0",
        "-3",
        '"NaN"',
        '"Infinity"',
        '"-Infinity"',
        '"nan"',
        '"1.5"',
        "true",
        "null",
        "[]",
    ],
    ColumnSpec("c", "double"): [
        "1e309",
        f"{10**309}",
        "1.5",
        "1e10",
        "-2.25",
        '"NaN"',
        '"Infinity"',
        "false",
        '"x"',
    ],
    ColumnSpec("c", "numeric", 12, 2): [
        # Java's $ also matches before a final line terminator: these are no numbers.
        '"0\\u2028"',
        '"5\\n"',
        '"0.5\\u0085"',
        # Whitespace is Python's (str.strip); digits are ASCII, without underscores.
        '"7\\u2003"',
        '"\\u30007"',
        '"1_0"',
        '"\\u0661\\u0662"',
        '"\\uff11"',
        # Zero takes any exponent; an exponent moves the point across the digits.
        '"0e1000000000000000000"',
        '"0e10000"',
        '"-0.000e99"',
        '"0E+9999999999"',
        '"1e10000"',
        '"1e-10000"',
        '"1e9999999999"',
        '"0.0259E3"',
        '"2999e-2"',
        '"29.99"',
        '"-29.99"',
        '"1.5"',
        '"1.50"',
        '"1.500"',
        '"1.505"',
        '"0.01"',
        '"0"',
        '"9999999999.99"',
        '"10000000000"',
        '"NaN"',
        '"Infinity"',
        '"-Infinity"',
        '"abc"',
        '""',
        '"1e2"',
        '"1.2e-1"',
        '"1.23e-1"',
        "5",
        "1.25",
        # JSON numbers (CockroachDB writes DECIMAL so): digits on either side of the point.
        "1.250",
        "1.255",
        "-0.0",
        "0.05",
        "9999999999.99",
        "-9999999999",
        "10000000000",
        "10000000000.5",
        "123456789012345678901234567890",
        "1e2",
        "1.5E-1",
        "true",
        "null",
        '" 7 "',
        '"--5"',
        '"+3"',
        '".5"',
        '"5."',
        '"-0"',
        '"0.00"',
        '"007.50"',
        '"-9999999999.99"',
        '"9999999999.999"',
        '"99999999999"',
    ],
    ColumnSpec("c", "numeric", 5, 5): [
        '"0.0259E1"',
        '"0.0259E-1"',
        '"259e-5"',
        '"0.12345"',
        '"-0.5"',
        '"1.5"',
        '"0.123456"',
        '"0"',
    ],
    ColumnSpec("c", "numeric", 3, 0): [
        '"10e-1"',
        '"120e-1"',
        '"-20.e-1"',
        '"0e5"',
        '"1e3"',
        '"999"',
        '"-999"',
        '"1000"',
        '"5.0"',
        '"5.5"',
        '"0"',
    ],
    ColumnSpec("c", "numeric"): [
        '"123456789012345678.123456789012345678"',
        '"1e-18"',
        '"1e-19"',
        "42",
        "-123456789012345678901",
        "0.000000000000000001",
        "0.0000000000000000001",
        "12345678901234567890.5",
        '"NaN"',
    ],
    ColumnSpec("c", "boolean"): ["true", "false", '"true"', "1", "null"],
    ColumnSpec("c", "text"): ['"x"', '""', '"zürich 東京 🚀"', "5", "true", "{}"],
    ColumnSpec("c", "bytea"): [
        # Hex digits come in pairs, whitespace only between pairs; Base64 ends with the text.
        '"\\\\x0"',
        '"\\\\x686"',
        '"\\\\x6 8"',
        '"\\\\x68 65\\t"',
        '"aGVsbG8=\\n"',
        '"aGVsbG8="',
        '"aGVsbG8"',
        '"\\\\x68656c6c6f"',
        '"\\\\xzz"',
        '""',
        '"!!"',
        "5",
    ],
    ColumnSpec("c", "date"): [
        # PostgreSQL's and CockroachDB's dates before year 1; YDB's date as a UTC timestamp.
        '"0044-03-15 BC"',
        '"0001-01-01 BC"',
        '"2024-12-01T00:00:00.000000Z"',
        '"infinity"',
        '"-infinity"',
        '"Infinity"',
        '"0000-01-01"',
        '"0001-01-01"',
        '"2024-01-15\\n"',
        "0",
        "19737",
        "-1",
        "2932896",
        "2932897",
        "-719162",
        "-719163",
        "9223372036854775807",
        '"2024-01-15"',
        '"2024-02-30"',
        '"2024-01-15T10:00:00Z"',
        '"x"',
        "1.5",
        "true",
    ],
    ColumnSpec("c", "time"): [
        '"12:00:00\\n"',
        '"23:30:30.7962088735"',
        '"12:00:00\\u2029"',
        "0",
        "86400000000",
        "86400000001",
        "-1",
        "45296789012",
        "86399999999",
        '"12:34:56.789012"',
        '"12:34:56"',
        '"12:34"',
        '"25:00:00"',
        '"12:34:56.1"',
        '"x"',
        "1.5",
    ],
    ColumnSpec("c", "timetz"): [
        "45296789012",
        '"08:00:00"',
        "true",
        '"12:00:00+02:00"',
        '"01:30:00+02:00"',
        '"22:00:00-05:30"',
        '"12:00:00.25+0100"',
        '"12:00:00+02"',
        '"12:00:00+24:00"',
        '"12:00:00+23:60"',
        '"12:00:00Z"',
        '"24:00:00"',
    ],
    ColumnSpec("c", "timestamp"): [
        '"2024-01-15T10:30:00Z' + " " * 5000 + 'x"',
        '"\\t2024-01-15T10:30:00Z"',
        '"2024-01-15T10:30:00Z\\u3000"',
        '"2024-01-15T10:30:00.1234567890Z"',
        '"2024-01-15T10:30:00Z\\n"',
        '"0001-01-01T00:00:00+01:00"',
        "0",
        "1705318200000000",
        "-1",
        "9223372036825200000",
        "-9223372036832400000",
        "253402300799999999",
        "253402300800000000",
        "-62135596800000000",
        "-62135596800000001",
        "-9223372036854775808",
        '"2024-01-15T10:30:00"',
        '"2024-01-15 10:30:00.123456"',
        '"2024-01-15T10:30:00Z"',
        '"2024-01-15T10:30:00+02:00"',
        '"2024-01-15T10:30:00-05:30"',
        '"2024-01-15T10:30:00+24:00"',
        '"2024-01-15T10:30:00+2359"',
        '"2024-01-15"',
        '"2024-13-15T00:00:00"',
        '"0000-01-01T00:00:00Z"',
        '"2024-02-30T00:00:00Z"',
        '"2024-01-15T24:00:00Z"',
        '"2024-01-15T10:30:60Z"',
        '"2024-01-15T10:30:00.1234567Z"',
        '"2024-01-15 10:30:00.123Z"',
        '"9999-12-31T23:59:59.999999Z"',
        '"x"',
        "1.5",
        "true",
    ],
    ColumnSpec("c", "timestamptz"): [
        # UTC puts these instants outside the years 1-9999.
        '"0001-01-01T00:00:00+01:00"',
        '"9999-12-31T23:59:59.999999-01:00"',
        "1705318200000000",
        "9223372036825200000",
        '"2024-01-15T10:30:00+02:00"',
        '"2024-01-15T10:30:00"',
        '"2024-01-15T10:30:00.5Z"',
        '"1969-12-31T23:59:59.999999Z"',
    ],
    # YDB's Date32: days since the epoch, within the years 1-9999 (YDB has no infinities).
    ColumnSpec("c", "date32"): [
        "0",
        "19737",
        "-1",
        "2932896",
        "2932897",
        "-719162",
        "-719163",
        "9223372036854775808",
        "1.5",
        '"2024-01-15"',
        '"infinity"',
        "true",
    ],
    # YDB's Datetime64: seconds since the epoch, within the years 1-9999.
    ColumnSpec("c", "datetime64"): [
        "0",
        "1733011200",
        "-1",
        "253402300799",
        "253402300800",
        "-62135596800",
        "-62135596801",
        "9223372036854775807",
        "92233720368547758070",
        "1.5",
        "1e3",
        '"1733011200"',
        '"2024-12-01T00:00:00Z"',
        "true",
        "[1]",
    ],
    ColumnSpec("c", "json"): [
        '"{\\"a\\": 1}"',
        '"[1, 2]"',
        '"not json"',
        # No NaN or Infinity; half a surrogate pair (and an escaped backslash before "ud800")
        # and a duplicate key are JSON text, as PostgreSQL's json has them.
        '"NaN"',
        '"[Infinity]"',
        '"[\\"\\\\ud800\\"]"',
        '"[\\"\\\\\\\\ud800\\"]"',
        '"{\\"a\\": 1, \\"a\\": [2]}"',
        '"{\\"a\\": 1} trailing"',  # a document, then more: not JSON text
        '"{\\"a\\": 1}] {}"',
        '"null"',
        '{"b": 1, "a": [1, 2]}',
        '[1, {"x": null}]',
        "5",
    ],
    ColumnSpec("c", "json_value"): [
        '"a string"',
        '"{\\"a\\": 1}"',
        '{"b": 1, "a": [1, 2.50]}',
        "5",
        "-1.5e3",
        "true",
        '[1, {"x": null}]',
    ],
    ColumnSpec("c", "uuid"): [
        '"0f8fad5b-d9cb-469f-a165-70867728950e\\n"',
        '"0f8fad5b-d9cb-469f-a165-70867728950e\\u2028"',
        '"0f8fad5b-d9cb-469f-a165-70867728950e"',
        '"0F8FAD5B-D9CB-469F-A165-70867728950E"',
        '"0f8fad5bd9cb469fa16570867728950e"',
        '"x"',
        "5",
    ],
    ColumnSpec("c", "oidvector"): [
        "[1, 2, 3]",
        "[]",
        '["1"]',
        "[1.5]",
        "5",
        f"[{2**63 - 1}]",
        f"[{2**63}]",
    ],
    ColumnSpec("c", "untyped"): ['"x"', "5", "1.5", "true", '{"b": 1, "a": "x"}', "[1, 2]", "null"],
}


def core(column: ColumnSpec, text: str) -> tuple[str, Any, Any]:
    # Read as the core's parsers read a record: a fraction keeps its digits.
    return core_of_value(column, jsontext.loads(text))


def special_of(part: DecodedColumn) -> Any:
    """A decoded column's special marker as a column (null throughout where it has none)."""
    from pyspark.sql import functions as F

    return F.lit(None).cast("string") if part.special is None else part.special


def core_of_value(column: ColumnSpec, value: Any) -> tuple[str, Any, Any]:
    """The core's outcome for a parsed JSON value: ok with the value and special marker, or
    an error."""
    if column.pg_type == "untyped":
        return ("ok", decode_undeclared(value), None)
    try:
        decoded = decode(column, value)
    except DecodeError:
        return ("error", None, None)
    return ("ok", decoded.value, decoded.special)


def normalized(column: ColumnSpec, value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if column.pg_type == "real" and isinstance(value, float):
        return struct.unpack("<f", struct.pack("<f", value))[0]  # as a 32-bit column holds it
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, dt.datetime) and column.pg_type == "timestamptz":
        # Collected from Spark, a TIMESTAMP is naive in the local zone: astimezone reads it so.
        return value.astimezone(dt.UTC)
    if isinstance(value, Decimal):
        return value.normalize()
    if column.pg_type in ("json", "json_value") and isinstance(value, str):
        return json.loads(value)
    return value


def case_frame(
    spark: Any, cases: dict[ColumnSpec, list[str]] | None = None
) -> tuple[Any, list[ColumnSpec]]:
    """Every case (of ``cases``, :data:`CASES` by default) as a VARIANT: column ``v<i>`` holds
    the cases of the i-th column family (as column ``c<i>``), one case per row (``row``); null
    past a family's last case."""
    from pyspark.sql import functions as F

    cases = CASES if cases is None else cases
    columns = list(cases)
    width = max(len(v) for v in cases.values())
    rows = [
        (row, *(cases[c][row] if row < len(cases[c]) else None for c in columns))
        for row in range(width)
    ]
    schema = "row INT, " + ", ".join(f"t{i} STRING" for i in range(len(columns)))
    frame = spark.createDataFrame(rows, schema).select(
        "row", *(F.try_parse_json(f"t{i}").alias(f"v{i}") for i in range(len(columns)))
    )
    specs = [ColumnSpec(f"c{i}", c.pg_type, c.precision, c.scale) for i, c in enumerate(columns)]
    return frame, specs


def jvm(spark: Any) -> dict[tuple[int, int], tuple[str, Any, Any]]:
    frame, specs = case_frame(spark)
    staged, parts = decode_columns(frame, specs, {s.name: f"v{i}" for i, s in enumerate(specs)})
    result = {}
    for key, cell in cells(staged, specs, parts).items():
        outcome = "error" if cell["error"] is not None else "ok"
        result[key] = (outcome, None if outcome == "error" else cell["value"], cell["special"])
    return result


def cells(
    staged: Any,
    specs: list[ColumnSpec],
    parts: dict[str, Any],
    common: dict[str, Any] | None = None,
) -> dict[tuple[int, int], Any]:
    """Each case's decoded parts (``value``, ``special``, ``error``, and ``common`` where
    given), keyed by (column family, case)."""
    from pyspark.sql import functions as F

    selected = staged.select(
        "row",
        *(
            F.struct(
                *([common[s.name].alias("common")] if common is not None else []),
                parts[s.name].value.alias("value"),
                special_of(parts[s.name]).alias("special"),
                parts[s.name].error.alias("error"),
            ).alias(s.name)
            for s in specs
        ),
    )
    families = list(CASES)
    return {
        (i, row["row"]): row[spec.name]
        for row in selected.collect()
        for i, spec in enumerate(specs)
        if row["row"] < len(CASES[families[i]])
    }


def test_jvm_decoders_agree_with_the_core(spark: Any) -> None:
    got = jvm(spark)
    mismatches = []
    for i, (column, texts) in enumerate(CASES.items()):
        for row, text in enumerate(texts):
            want = core(column, text)
            have = got[(i, row)]
            want_n = (want[0], normalized(column, want[1]), want[2])
            have_n = (have[0], normalized(column, have[1]), have[2])
            if want_n != have_n:
                mismatches.append((column.pg_type, text, want_n, have_n))
    assert mismatches == [], "\n".join(map(str, mismatches))


def test_values_a_spark_type_cannot_hold_are_quarantined_not_crashed(spark: Any) -> None:
    # An oidvector element past 64 bits: the core raises DecodeError, the JVM agrees.
    column = ColumnSpec("c", "oidvector")
    assert core(column, f"[{2**70}]")[0] == "error"


def jvm_common_forms(spark: Any) -> dict[tuple[int, int], tuple[bool, Any]]:
    """For every case, whether :func:`decode_fast` takes it as a common form, and its value."""
    frame, specs = case_frame(spark)
    staged, parts, common = decode_fast(
        frame, specs, {s.name: f"v{i}" for i, s in enumerate(specs)}
    )
    result = {}
    for key, cell in cells(staged, specs, parts, common).items():
        assert cell["special"] is None and cell["error"] is None
        result[key] = (cell["common"], cell["value"])
    return result


def test_common_forms_agree_with_the_core_wherever_they_apply(spark: Any) -> None:
    """A value taken by its common form decodes as the core decodes it; every other value
    is left to the full rules (above), and each costly family has common forms here."""
    got = jvm_common_forms(spark)
    mismatches = []
    taken: dict[str, int] = {}
    for i, (column, texts) in enumerate(CASES.items()):
        for row, text in enumerate(texts):
            common, value = got[(i, row)]
            want = core(column, text)
            if text == "null":
                assert common and value is None, (column.pg_type, text)
                continue
            if not common:
                continue
            taken[column.pg_type] = taken.get(column.pg_type, 0) + 1
            have_n = ("ok", normalized(column, value), None)
            want_n = (want[0], normalized(column, want[1]), want[2])
            if have_n != want_n:
                mismatches.append((column.pg_type, text, want_n, have_n))
    assert mismatches == [], "\n".join(map(str, mismatches))
    costly = ("smallint", "integer", "bigint", "oid", "interval", "numeric", "date", "time")
    families = (*costly, "timetz", "timestamp", "timestamptz")
    assert all(taken.get(family, 0) >= 1 for family in families), taken
    common_of = {
        (column, text): got[(i, row)][0]
        for i, (column, texts) in enumerate(CASES.items())
        for row, text in enumerate(texts)
    }
    # UTC text to the microsecond is a common form of timestamps (Debezium's ZonedTimestamp).
    utc = [
        common
        for (column, text), common in common_of.items()
        if column.pg_type.startswith("timestamp") and text.endswith('Z"')
    ]
    assert any(utc) and not all(utc), utc
    # So are JSON numbers that fit a numeric column (CockroachDB's DECIMAL).
    numeric = ColumnSpec("c", "numeric", 12, 2)
    assert all(common_of[(numeric, n)] for n in ("1.25", "-9999999999", "9999999999.99"))


def test_a_session_given_another_time_zone_reads_times_as_utc_again(spark: Any) -> None:
    """A time without an offset is UTC, as the core parsers read it: the session a job gets
    reads it so even where a submitted conf named another zone."""
    from spark_jobs.session import get_session

    midnight = "SELECT unix_micros(TIMESTAMP'2026-01-01 00:00:00')"
    spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    try:
        assert spark.sql(midnight).first()[0] == 1767193200000000  # 15:00 UTC the day before
        assert get_session() is spark
        assert spark.sql(midnight).first()[0] == 1767225600000000
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
