"""Value decoding, per the DSQL reference's "Data type serialization" tables."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import pytest

from airflow_cdc.core.ddl import ColumnSpec
from airflow_cdc.core.exceptions import DecodeError
from airflow_cdc.core.types import Decoded, decode, decode_undeclared, spark_type


def col(pg_type: str, precision: int | None = None, scale: int | None = None) -> ColumnSpec:
    return ColumnSpec("c", pg_type, precision, scale)


@pytest.mark.parametrize(
    ("pg_type", "value", "expected"),
    [
        # Examples from the reference's tables.
        ("smallint", 42, 42),
        ("integer", 1001, 1001),
        ("bigint", 9223372036854775807, 9223372036854775807),
        ("oid", 16384, 16384),
        ("real", 3.14159, 3.14159),
        ("double", 3.141592653589793, 3.141592653589793),
        ("boolean", True, True),
        ("text", "Hello, world!", "Hello, world!"),
        ("text", "ABC", "ABC"),
        ("bytea", "SGVsbG8gV29ybGQh", b"Hello World!"),
        ("date", 19797, dt.date(2024, 3, 15)),
        ("time", 52200123456, "14:30:00.123456"),
        ("timetz", 52200123456, "14:30:00.123456+00:00"),
        ("timestamp", 1710510600123456, dt.datetime(2024, 3, 15, 13, 50, 0, 123456)),
        (
            "timestamptz",
            1710510600123456,
            dt.datetime(2024, 3, 15, 13, 50, 0, 123456, tzinfo=dt.UTC),
        ),
        ("interval", 2802603000000, 2802603000000),
        ("uuid", "550e8400-e29b-41d4-a716-446655440000", "550e8400-e29b-41d4-a716-446655440000"),
        ("json", '{"key": "value"}', '{"key": "value"}'),
        ("oidvector", [], []),
    ],
)
def test_reference_examples(pg_type: str, value: Any, expected: Any) -> None:
    assert decode(col(pg_type), value) == Decoded(expected)


def test_numeric_is_a_string_kept_exact() -> None:
    # "Aurora DSQL serializes numeric and decimal values as JSON strings to preserve exact
    # precision."
    assert decode(col("numeric", 12, 2), "123.45").value == Decimal("123.45")
    assert decode(col("numeric"), "0.000000000000000001").value == Decimal("1E-18")


@pytest.mark.parametrize("special", ["NaN", "Infinity", "-Infinity"])
def test_numeric_specials_are_kept_as_markers(special: str) -> None:
    assert decode(col("numeric", 10, 2), special) == Decoded(None, special)


@pytest.mark.parametrize("pg_type", ["real", "double"])
def test_float_specials(pg_type: str) -> None:
    # "NaN and ±Infinity are serialized as the strings "NaN", "Infinity", "-Infinity"."
    assert math.isnan(decode(col(pg_type), "NaN").value)
    assert decode(col(pg_type), "Infinity").value == math.inf
    assert decode(col(pg_type), "-Infinity").value == -math.inf


@pytest.mark.parametrize(
    ("days", "expected"),
    [(0, dt.date(1970, 1, 1)), (19737, dt.date(2024, 1, 15)), (-719162, dt.date(1, 1, 1))],
)
def test_ydb_date32_is_days_since_the_epoch(days: int, expected: dt.date) -> None:
    assert decode(col("date32"), days) == Decoded(expected)


@pytest.mark.parametrize("value", [2932897, -719163, 2**63, "2024-01-15", "infinity", 1.5])
def test_a_date32_outside_years_1_to_9999_is_refused_not_an_infinity(value: Any) -> None:
    """YDB's Date32 reaches years -144169 to 148107 and has no infinities: a day DATE cannot
    hold does not decode (DSQL's date marks such integers as its ±infinity sentinels)."""
    with pytest.raises(DecodeError):
        decode(col("date32"), value)


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0, dt.datetime(1970, 1, 1)),
        (1733011200, dt.datetime(2024, 12, 1)),  # 20,058 days
        (-1, dt.datetime(1969, 12, 31, 23, 59, 59)),
        (253402300799, dt.datetime(9999, 12, 31, 23, 59, 59)),
        (-62135596800, dt.datetime(1, 1, 1)),
    ],
)
def test_ydb_datetime64_is_seconds_since_the_epoch(seconds: int, expected: dt.datetime) -> None:
    assert decode(col("datetime64"), seconds) == Decoded(expected)
    assert spark_type(col("datetime64")) == "TIMESTAMP_NTZ"


@pytest.mark.parametrize(
    "value", [253402300800, -62135596801, 2**63, 1733011200.0, "1733011200", True, [1]]
)
def test_a_datetime64_that_is_no_whole_second_in_years_1_to_9999_does_not_decode(
    value: Any,
) -> None:
    with pytest.raises(DecodeError):
        decode(col("datetime64"), value)


@pytest.mark.parametrize("text", ["0044-03-15 BC", "0001-01-01 BC", "2024-01-15 BC"])
def test_a_date_before_year_1_is_refused_not_read_as_the_year_after_it(text: str) -> None:
    """CockroachDB (``pgdate.Date.Format``) and PostgreSQL write a date of year 0 or before
    as its year before Christ, then " BC": DATE holds no such date, and the digits alone
    name another one (AD 44)."""
    with pytest.raises(DecodeError, match="before year 1"):
        decode(col("date"), text)


@pytest.mark.parametrize("pg_type", ["timestamp", "timestamptz"])
def test_timestamp_infinity_sentinels(pg_type: str) -> None:
    # "±Infinity maps to sentinel values: 9223372036825200000 for +infinity and
    # -9223372036832400000 for -infinity."
    assert decode(col(pg_type), 9223372036825200000) == Decoded(None, "infinity")
    assert decode(col(pg_type), -9223372036832400000) == Decoded(None, "-infinity")


@pytest.mark.parametrize("text", ["infinity", "-infinity"])
def test_a_date_infinity_written_as_text_is_kept_as_its_marker(text: str) -> None:
    """PostgreSQL and CockroachDB (``pgdate.Date.Format``) write a date's infinities as
    ``infinity`` and ``-infinity``: null in the DATE column, the text kept as its marker."""
    assert decode(col("date"), text) == Decoded(None, text)


def test_date_infinity_sentinels_are_beyond_the_calendar() -> None:
    # PostgreSQL's date infinities are int32 extremes of days from 2000-01-01, shifted to the
    # Unix epoch (10,957 days).
    assert decode(col("date"), 2**31 - 1 + 10957) == Decoded(None, "infinity")
    assert decode(col("date"), -(2**31) + 10957) == Decoded(None, "-infinity")


def test_interval_overflow_arrives_as_null() -> None:
    # "If the result exceeds the 64-bit signed integer range [...] Aurora DSQL emits JSON null"
    assert decode(col("interval"), None) == Decoded(None)


@pytest.mark.parametrize(
    ("pg_type", "value"),
    [
        ("integer", "12"),
        ("integer", 2**31),
        ("smallint", True),
        ("numeric", "12.345"),
        ("numeric", "abc"),
        ("real", "nan"),
        ("boolean", "true"),
        ("bytea", "not base64!"),
        # Padding after a whole group: Python's decoder takes it, Base64 has none.
        ("bytea", "AAAA="),
        ("bytea", "QUJDRA==="),
        ("bytea", "QUJDRA"),  # the last group without its padding
        ("date", 1.5),
        ("time", 86_400_000_001),
        ("uuid", "550e8400e29b41d4a716446655440000"),
        ("json", "{broken"),
        ("text", 5),
        ("timestamp", 2**62),
        ("oidvector", [1, "2"]),
    ],
)
def test_values_that_do_not_fit_raise_decode_error(pg_type: str, value: Any) -> None:
    with pytest.raises(DecodeError) as info:
        decode(col(pg_type, 4, 2) if pg_type == "numeric" else col(pg_type), value)
    assert info.value.reason == "decode_error"
    assert info.value.column == "c"


def test_numeric_precision_overflow() -> None:
    with pytest.raises(DecodeError, match="does not fit"):
        decode(col("numeric", 4, 2), "123.45")


def test_spark_types() -> None:
    assert spark_type(col("numeric", 12, 2)) == "DECIMAL(12,2)"
    assert spark_type(col("numeric")) == "DECIMAL(38,18)"
    assert spark_type(col("timestamptz")) == "TIMESTAMP"
    assert spark_type(col("timestamp")) == "TIMESTAMP_NTZ"
    assert spark_type(col("bytea")) == "BINARY"


def test_undeclared_columns_are_text() -> None:
    assert decode_undeclared("x") == "x"
    assert decode_undeclared(5) == "5"
    assert decode_undeclared({"b": 1, "a": [True]}) == '{"a":[true],"b":1}'
    assert decode_undeclared(None) is None


def test_unconstrained_numeric_keeps_wide_values_exact() -> None:
    # 12 integer digits + 18 fractional digits: more than Python's default 28-digit context.
    assert decode(col("numeric"), "202237214451.46562").value == Decimal("202237214451.46562")


def test_widening_rules() -> None:
    from airflow_cdc.core.ddl import ColumnSpec
    from airflow_cdc.core.types import column_of, widen

    age = ColumnSpec("age", "integer")
    assert widen(age, "bigint") == ColumnSpec("age", "bigint")  # int32 -> int64 widens
    assert widen(column_of("age", "bigint"), "integer") == column_of("age", "bigint")  # fits
    assert widen(column_of("age", "bigint"), "text") is None  # would lose data
    assert widen(column_of("w", "real"), "double") == column_of("w", "double")
    assert widen(column_of("p", "numeric(10,2)"), "numeric(12,4)") == column_of(
        "p", "numeric(12,4)"
    )
    assert widen(column_of("p", "numeric(38,0)"), "numeric(38,2)") is None
    assert widen(ColumnSpec("note", "untyped"), "bigint") == ColumnSpec("note", "untyped")


def test_other_sources_value_forms_decode() -> None:
    import datetime as dt
    from decimal import Decimal

    from airflow_cdc.core.ddl import ColumnSpec
    from airflow_cdc.core.types import decode

    assert decode(ColumnSpec("d", "date"), "2022-02-22").value == dt.date(2022, 2, 22)
    stamp = decode(ColumnSpec("t", "timestamptz"), "2022-12-12T00:00:00.000000Z").value
    assert stamp == dt.datetime(2022, 12, 12, tzinfo=dt.UTC)
    assert decode(ColumnSpec("t", "timestamp"), "2019-01-02T03:04:05").value == dt.datetime(
        2019, 1, 2, 3, 4, 5
    )
    assert decode(ColumnSpec("n", "numeric", 10, 2), 25.0).value == Decimal("25.00")
    assert decode(ColumnSpec("j", "json"), {"color": "red"}).value == '{"color":"red"}'
    assert decode(ColumnSpec("b", "bytea"), "\\x0a0b").value == b"\n\x0b"
    assert decode(ColumnSpec("x", "untyped"), 18).value == "18"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The DSQL document: timetz is "microseconds since midnight, UTC", "adjusted to UTC by
        # applying the stored timezone offset", "wrapped to the range [0, 86400000000)".
        ("12:00:00+02:00", "10:00:00.000000+00:00"),
        ("01:30:00+02:00", "23:30:00.000000+00:00"),
        ("22:00:00-05:30", "03:30:00.000000+00:00"),
        ("12:00:00Z", "12:00:00.000000+00:00"),
        ("12:00:00.25+0100", "11:00:00.250000+00:00"),
        ("12:00:00", "12:00:00.000000+00:00"),
    ],
)
def test_timetz_text_with_an_offset_is_converted_to_utc(text: str, expected: str) -> None:
    assert decode(ColumnSpec("t", "timetz"), text).value == expected


def test_time_without_zone_keeps_its_wall_clock() -> None:
    assert decode(ColumnSpec("t", "time"), "12:00:00+02:00").value == "12:00:00.000000"
