"""Decoding of DSQL-serialized values into the Python values of their Spark types.

The rules are the Aurora DSQL reference's "Data type serialization" tables. Values that a Spark
type cannot hold (NaN or infinity in a ``numeric``, the ``±infinity`` sentinels of dates and
timestamps) decode to ``None`` plus a *special* marker that the apply step keeps in the row's
``_cdc_special_values`` map, so nothing is lost.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import math
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Context, Decimal, InvalidOperation
from typing import Any

from airflow_cdc.core import jsontext
from airflow_cdc.core.ddl import ColumnSpec
from airflow_cdc.core.exceptions import DecodeError
from airflow_cdc.core.jsontext import JsonNumber

# Wide enough for any DECIMAL(38, s) without rounding.
_DECIMAL_CONTEXT = Context(prec=80)
# Unconstrained ``numeric`` lands in the widest decimal Spark has, with room for fractions.
DEFAULT_DECIMAL = (38, 18)
# The least magnitude that rounds to infinity as a 32-bit float (the largest float, plus
# half a unit in its last place: a tie rounds to the even infinity).
FLOAT32_LIMIT = float(2**128 - 2**103)
SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# "±Infinity maps to sentinel values: 9223372036825200000 for +infinity and
# -9223372036832400000 for -infinity" (timestamp and timestamptz).
TIMESTAMP_POS_INFINITY = 9223372036825200000
TIMESTAMP_NEG_INFINITY = -9223372036832400000
MICROS_PER_DAY = 86_400_000_000
# The calendar Python (and so the core) holds: years 1 to 9999, from the epoch.
MIN_MICROS = -62_135_596_800_000_000  # datetime.min
MAX_MICROS = 253_402_300_799_999_999  # datetime.max
MIN_DAYS, MAX_DAYS = -719_162, 2_932_896  # date.min, date.max
# A date's infinities as text (PostgreSQL's output; CockroachDB's changefeeds write them so).
DATE_INFINITIES = ("infinity", "-infinity")
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_INT_RANGES = {
    "tinyint": (-(2**7), 2**7 - 1),
    "smallint": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
    "oid": (0, 2**32 - 1),
    "interval": (-(2**63), 2**63 - 1),
}
_SPARK_TYPES = {
    "tinyint": "TINYINT",
    "smallint": "SMALLINT",
    "integer": "INT",
    "bigint": "BIGINT",
    "oid": "BIGINT",
    "real": "FLOAT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
    "text": "STRING",
    "bytea": "BINARY",
    "date": "DATE",
    "date32": "DATE",
    "time": "STRING",
    "timetz": "STRING",
    "timestamp": "TIMESTAMP_NTZ",
    "timestamptz": "TIMESTAMP",
    "datetime64": "TIMESTAMP_NTZ",
    "interval": "BIGINT",
    "json": "STRING",
    "json_value": "STRING",
    "uuid": "STRING",
    "oidvector": "ARRAY<BIGINT>",
    "untyped": "STRING",
}


@dataclass(frozen=True)
class Decoded:
    """A decoded value; ``special`` is set where the Spark value had to be ``None``."""

    value: Any
    special: str | None = None


def spark_type(column: ColumnSpec) -> str:
    """The Spark SQL type of a declared column, as DDL text (``DECIMAL(12,2)``, ``STRING``...).

    ``time``/``timetz`` become ``HH:MM:SS.ffffff`` strings and ``interval`` a count of
    microseconds, because Delta tables cannot store Spark's time or interval types.
    """
    if column.pg_type == "numeric":
        precision, scale = decimal_shape(column)
        return f"DECIMAL({precision},{scale})"
    return _SPARK_TYPES[column.pg_type]


def decode(column: ColumnSpec, value: Any) -> Decoded:
    """Decode one JSON value of ``column`` per the DSQL serialization rules.

    :raises DecodeError: when the value does not fit the declared type.
    """
    if value is None:
        return Decoded(None)
    decoder = _DECODERS[column.pg_type]
    try:
        return decoder(column, value)
    except DecodeError:
        raise
    except RecursionError as err:
        raise DecodeError(column.name, f"a {column.pg_type} value nests too deep") from err
    except (ValueError, TypeError, ArithmeticError, OverflowError) as err:
        raise DecodeError(
            column.name, f"{_shown(value)} is not a valid {column.pg_type}: {err}"
        ) from err


def _shown(value: Any, limit: int = 200) -> str:
    """``value`` for an error message, cut to ``limit`` characters (an integer past Python's
    digit limit has no text at all)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def decode_undeclared(value: Any) -> str | None:
    """A column the DDL does not declare is kept as text: strings as is, others as JSON."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _expect(column: ColumnSpec, value: Any, *kinds: type) -> None:
    if isinstance(value, bool) and bool not in kinds:
        raise DecodeError(column.name, f"{value!r} is a boolean, expected {column.pg_type}")
    if not isinstance(value, kinds):
        raise DecodeError(
            column.name, f"{value!r} is a {type(value).__name__}, expected {column.pg_type}"
        )


def _integer(column: ColumnSpec, value: Any) -> Decoded:
    _expect(column, value, int)
    low, high = _INT_RANGES[column.pg_type]
    if not low <= value <= high:
        raise DecodeError(column.name, f"{value!r} is out of range for {column.pg_type}")
    return Decoded(value)


def _float(column: ColumnSpec, value: Any) -> Decoded:
    if isinstance(value, str):
        if value not in SPECIAL_FLOATS:
            raise DecodeError(column.name, f"{value!r} is not NaN, Infinity or -Infinity")
        return Decoded(SPECIAL_FLOATS[value])
    _expect(column, value, int, float)
    number = float(value)  # OverflowError past a double's range
    # A number the column cannot hold is out of range (PostgreSQL's rule), not infinite; a
    # real holds what rounds to a finite 32-bit float.
    if not math.isfinite(number) or (column.pg_type == "real" and abs(number) >= FLOAT32_LIMIT):
        raise DecodeError(column.name, f"{_shown(value)} is out of range for {column.pg_type}")
    return Decoded(number)


def decimal_shape(column: ColumnSpec) -> tuple[int, int]:
    """A numeric column's (precision, scale): :data:`DEFAULT_DECIMAL` when it declares none."""
    if column.precision is None:
        return DEFAULT_DECIMAL
    return column.precision, column.scale or 0


# A decimal number as text: ASCII digits, an optional point and exponent, and no
# underscores (``Decimal`` also reads other scripts' digits and ``1_000``: no source writes
# them, and PostgreSQL refuses them).
DECIMAL_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _is_zero(text: Any) -> bool:
    """Whether a decimal number's text has no digit but zeros before its exponent."""
    return isinstance(text, str) and not text.strip().lower().split("e")[0].strip("+-.0")


def _numeric(column: ColumnSpec, value: Any) -> Decoded:
    if isinstance(value, str) and value in SPECIAL_FLOATS:
        return Decoded(None, value)
    if isinstance(value, JsonNumber):  # JSON numbers (CockroachDB's DECIMAL), as written
        value = value.text
    elif isinstance(value, float):  # the shortest text that reads back the same
        value = repr(value)
    _expect(column, value, str, int)
    if isinstance(value, str) and not DECIMAL_TEXT.fullmatch(value.strip()):
        raise DecodeError(column.name, f"{_shown(value)} is not a decimal number")
    try:
        # Zero is zero whatever its exponent (Decimal refuses one of 19 digits or more).
        number = Decimal(0) if _is_zero(value) else Decimal(value)
    except InvalidOperation as err:
        raise DecodeError(column.name, f"{value!r} is not a decimal number") from err
    if not number.is_finite():
        raise DecodeError(column.name, f"{value!r} is not a decimal number")
    precision, scale = decimal_shape(column)
    quantized = number.quantize(Decimal(1).scaleb(-scale), context=_DECIMAL_CONTEXT)
    if quantized != number:
        raise DecodeError(column.name, f"{value!r} has more than {scale} fractional digits")
    if len(quantized.as_tuple().digits) > precision and quantized != 0:
        raise DecodeError(column.name, f"{value!r} does not fit DECIMAL({precision},{scale})")
    return Decoded(quantized)


def _boolean(column: ColumnSpec, value: Any) -> Decoded:
    _expect(column, value, bool)
    return Decoded(value)


def _text(column: ColumnSpec, value: Any) -> Decoded:
    _expect(column, value, str)
    return Decoded(value)


# Padded standard Base64 (RFC 4648, section 4): alphabet characters, then at most two "=",
# in groups of four.
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def padded_base64(text: str) -> bytes:
    """The bytes of padded standard Base64 ``text``.

    :raises binascii.Error: for any other text, including padding after a whole group
        ("AAAA=", which Python's decoder takes) and a last group without its padding.
    """
    if len(text) % 4 or not _BASE64.fullmatch(text):
        raise binascii.Error("not padded standard Base64")
    return base64.b64decode(text, validate=True)


def _bytea(column: ColumnSpec, value: Any) -> Decoded:
    _expect(column, value, str)
    if value.startswith("\\x"):
        return Decoded(bytes.fromhex(value[2:]))
    try:
        return Decoded(padded_base64(value))
    except binascii.Error as err:
        raise DecodeError(column.name, f"{value[:40]!r} is not Base64: {err}") from err


def _date(column: ColumnSpec, value: Any) -> Decoded:
    if isinstance(value, str):
        # The date part of a text that may go on with a time (YDB writes a date as a UTC
        # timestamp); PostgreSQL and CockroachDB end a date before year 1 with " BC"
        # ("0044-03-15 BC"), which no DATE holds.
        if "BC" in value[10:]:
            raise DecodeError(column.name, f"{_shown(value)} is a date before year 1")
        if value in DATE_INFINITIES:  # as PostgreSQL and CockroachDB write them
            return Decoded(None, value)
        return Decoded(dt.date.fromisoformat(value[:10]))
    _expect(column, value, int)
    # The ±infinity sentinels are "derived from epoch-offset arithmetic" and lie far outside
    # the calendar; anything past year 9999 (or before year 1) is one of them.
    try:
        return Decoded(_EPOCH_DATE + dt.timedelta(days=value))
    except OverflowError:
        return Decoded(None, "infinity" if value > 0 else "-infinity")


def _date32(column: ColumnSpec, value: Any) -> Decoded:
    """YDB's ``Date32``: a JSON integer of days since the epoch (its changefeeds write no
    other form). It reaches past the years 1-9999 that DATE holds, and has no infinities:
    a day outside them does not decode."""
    _expect(column, value, int)
    if not MIN_DAYS <= value <= MAX_DAYS:
        raise DecodeError(column.name, f"{value!r} days is outside the date range")
    return Decoded(_EPOCH_DATE + dt.timedelta(days=value))


def _time_of_day(column: ColumnSpec, value: Any) -> Decoded:
    if isinstance(value, str):
        parsed = dt.time.fromisoformat(value)
        value = ((parsed.hour * 60 + parsed.minute) * 60 + parsed.second) * 1_000_000
        value += parsed.microsecond
        offset = parsed.utcoffset()
        if column.pg_type == "timetz" and offset is not None:
            # "The local time is adjusted to UTC by applying the stored timezone offset ...
            # wrapped to the range [0, 86400000000) microseconds."
            value = (value - offset // dt.timedelta(microseconds=1)) % MICROS_PER_DAY
    _expect(column, value, int)
    if not 0 <= value <= MICROS_PER_DAY:
        raise DecodeError(column.name, f"{value!r} µs is not a time of day")
    seconds, micros = divmod(value, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    text = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}.{micros:06d}"
    return Decoded(text + "+00:00" if column.pg_type == "timetz" else text)


def _timestamp(column: ColumnSpec, value: Any) -> Decoded:
    if isinstance(value, str):
        return Decoded(_iso_timestamp(column, value))
    _expect(column, value, int)
    if value == TIMESTAMP_POS_INFINITY:
        return Decoded(None, "infinity")
    if value == TIMESTAMP_NEG_INFINITY:
        return Decoded(None, "-infinity")
    try:
        naive = _EPOCH + dt.timedelta(microseconds=value)
    except OverflowError as err:
        raise DecodeError(column.name, f"{value!r} µs is outside the timestamp range") from err
    if column.pg_type == "timestamptz":
        return Decoded(naive.replace(tzinfo=dt.UTC))
    return Decoded(naive)


def _datetime64(column: ColumnSpec, value: Any) -> Decoded:
    """YDB's ``Datetime64``: a JSON integer of seconds since the epoch, in UTC (its
    changefeeds write no other form)."""
    _expect(column, value, int)
    try:
        return Decoded(_EPOCH + dt.timedelta(seconds=value))
    except OverflowError as err:
        raise DecodeError(column.name, f"{value!r} s is outside the timestamp range") from err


def _iso_timestamp(column: ColumnSpec, value: str) -> dt.datetime:
    """ISO 8601 text (YDB, CockroachDB, Debezium's ZonedTimestamp), ``Z`` for UTC."""
    text = value.strip().replace(" ", "T", 1)
    parsed = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    # An instant is kept in UTC: one that UTC puts outside years 1-9999 is out of range
    # (``astimezone`` raises OverflowError).
    if column.pg_type == "timestamptz":
        return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)
    return parsed.astimezone(dt.UTC).replace(tzinfo=None) if parsed.tzinfo else parsed


# PostgreSQL's ``postgres`` interval output without months (CockroachDB's changefeeds write
# INTERVAL so): ``[<days> day[s]] [+|-]<hours>:MM:SS[.ffffff]``, at least one of the two.
INTERVAL_TEXT = re.compile(
    r"^(?:([+-]?[0-9]{1,9}) days?(?: (?=[+-]?[0-9])|$))?"
    r"(?:([+-])?([0-9]{1,10}):([0-5][0-9]):([0-5][0-9])(?:\.([0-9]{1,6}))?)?$"
)


def _interval(column: ColumnSpec, value: Any) -> Decoded:
    """µs: a JSON integer (DSQL, YDB, Debezium's MicroDuration; DSQL already emits null when
    the total overflows 64 bits), or PostgreSQL's interval text without months."""
    if not isinstance(value, str):
        return _integer(column, value)
    match = INTERVAL_TEXT.fullmatch(value)
    if not value or match is None:
        raise DecodeError(
            column.name, f"{_shown(value)} is not an interval of days and [-]HH:MM:SS[.ffffff]"
        )
    days, sign, hours, minutes, seconds, fraction = match.groups()
    clock = (int(hours or 0) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)) * 10**6
    clock += int((fraction or "").ljust(6, "0"))
    total = int(days or 0) * 86_400 * 10**6 + (-clock if sign == "-" else clock)
    low, high = _INT_RANGES["interval"]
    if not low <= total <= high:
        raise DecodeError(column.name, f"{_shown(value)} is out of range for interval")
    return Decoded(total)


def _json(column: ColumnSpec, value: Any) -> Decoded:
    if isinstance(value, dict | list):
        # CockroachDB emits JSONB columns as JSON values rather than text.
        return Decoded(json.dumps(value, separators=(",", ":"), sort_keys=True))
    _expect(column, value, str)
    try:
        jsontext.loads_rfc8259(value)
    except ValueError as err:
        raise DecodeError(column.name, f"{value[:40]!r} is not JSON text: {err}") from err
    return Decoded(value)


def _json_value(column: ColumnSpec, value: Any) -> Decoded:
    """A ``json``/``jsonb`` column of a source that embeds the JSON value itself (CockroachDB,
    YDB): any JSON value, a string being a JSON string and not JSON text."""
    return Decoded(jsontext.dump(value, separators=(",", ":"), sort_keys=True))


def _uuid(column: ColumnSpec, value: Any) -> Decoded:
    _expect(column, value, str)
    parsed = uuid.UUID(value)
    if str(parsed) != value.lower():
        raise DecodeError(column.name, f"{value!r} is not in 8-4-4-4-12 form")
    return Decoded(str(parsed))


def _oidvector(column: ColumnSpec, value: Any) -> Decoded:
    _expect(column, value, list)
    low, high = _INT_RANGES["bigint"]
    for item in value:
        _expect(column, item, int)
        if not low <= item <= high:
            raise DecodeError(column.name, f"{item!r} is out of range for an oidvector item")
    return Decoded(list(value))


_DECODERS: dict[str, Callable[[ColumnSpec, Any], Decoded]] = {
    "smallint": _integer,
    "tinyint": _integer,
    "integer": _integer,
    "bigint": _integer,
    "oid": _integer,
    "real": _float,
    "double": _float,
    "numeric": _numeric,
    "boolean": _boolean,
    "text": _text,
    "bytea": _bytea,
    "date": _date,
    "date32": _date32,
    "time": _time_of_day,
    "timetz": _time_of_day,
    "timestamp": _timestamp,
    "timestamptz": _timestamp,
    "datetime64": _datetime64,
    "interval": _interval,
    "json": _json,
    "json_value": _json_value,
    "uuid": _uuid,
    "oidvector": _oidvector,
    "untyped": lambda column, value: Decoded(decode_undeclared(value)),
}


# The columns of instants that a date widens to, and a day in each one's integer unit.
DAY_IN_UNITS = {"timestamp": MICROS_PER_DAY, "datetime64": 86_400}


def in_column_unit(column: ColumnSpec, record_family: str | None, value: Any) -> Any:
    """``value`` as ``column``'s decoder reads it, where the record's own type for the column
    is ``record_family``: the only widening that changes a value's unit is a date's (a
    Connect ``Date``, days) into a column of instants (a table widened from DATE to
    TIMESTAMP, or declared so), whose integers are microseconds (seconds for
    ``datetime64``). A date's days become its midnight there; anything else is as it is."""
    if (
        record_family == "date"
        and column.pg_type in DAY_IN_UNITS
        and isinstance(value, int)
        and not isinstance(value, bool)
    ):
        return value * DAY_IN_UNITS[column.pg_type]
    return value


# Lossless widenings, narrow to wide.
_WIDER = {
    "tinyint": ("smallint", "integer", "bigint", "double"),
    "smallint": ("integer", "bigint", "double"),
    "integer": ("bigint", "double"),
    "real": ("double",),
    "date": ("timestamp", "datetime64"),
}
_TEXT_LIKE = ("text", "json", "uuid", "time", "timetz")


def column_of(name: str, family: str, nullable: bool = True) -> ColumnSpec:
    """A column of type family ``family`` (``bigint``, ``numeric(38,2)`` ...)."""
    if family.startswith("numeric(") and family.endswith(")"):
        precision, scale = (int(p) for p in family[len("numeric(") : -1].split(","))
        return ColumnSpec(name, "numeric", precision, scale, nullable)
    if family not in _DECODERS:
        raise ValueError(f"unknown type family {family!r}")
    return ColumnSpec(name, family, nullable=nullable)


def family_of(column: ColumnSpec) -> str:
    if column.pg_type == "numeric" and column.precision is not None:
        return f"numeric({column.precision},{column.scale or 0})"
    return column.pg_type


def column_of_spark(name: str, spark: str) -> ColumnSpec:
    """The column that a Delta table column of Spark type ``spark`` stores (as DDL text)."""
    text = spark.strip().upper()
    if text.startswith("DECIMAL"):
        precision, scale = (int(p) for p in text[text.index("(") + 1 : -1].split(","))
        return ColumnSpec(name, "numeric", precision, scale)
    # The families that share a Spark type with another read their values otherwise (YDB's
    # date32 and datetime64 are integers of days and seconds): never a stored column's.
    others = ("oid", "interval", "date32", "datetime64")
    by_type = {v: k for k, v in _SPARK_TYPES.items() if k not in others}
    by_type.update({"STRING": "text", "INT": "integer", "TIMESTAMP": "timestamptz"})
    family = by_type.get(text)
    if family is None:
        raise ValueError(f"no type family stores Spark type {spark!r}")
    return ColumnSpec(name, family)


def widen(current: ColumnSpec, incoming: str) -> ColumnSpec | None:
    """The column type that holds both ``current`` values and ``incoming`` ones without loss.

    Returns ``current`` when incoming values fit it (equal or narrower, as int32 into a
    BIGINT), a wider column when the incoming type is a lossless widening (int32 to int64,
    float to double, a decimal with more digits), and ``None`` when one of the two would lose
    data (int64 into a string column, a string into a BIGINT).
    """
    if current.pg_type == "untyped":
        return current  # a column the stream added without a type holds any value as text
    new = column_of(current.name, incoming, current.nullable)
    if new.pg_type == current.pg_type == "numeric":
        cp, cs = decimal_shape(current)
        np_, ns = decimal_shape(new)
        scale = max(cs, ns)
        digits = max(cp - cs, np_ - ns)
        if digits + scale > 38:
            return None
        if (digits + scale, scale) == (cp, cs):
            return current
        return ColumnSpec(current.name, "numeric", digits + scale, scale, current.nullable)
    if new.pg_type == current.pg_type or {new.pg_type, current.pg_type} == {"bigint", "interval"}:
        return current  # (an interval is stored as BIGINT µs: read back, it is a bigint)
    if current.pg_type in _TEXT_LIKE and new.pg_type in _TEXT_LIKE:
        return current if current.pg_type == "text" else None
    if current.pg_type in _WIDER.get(new.pg_type, ()):
        return current
    if new.pg_type in _WIDER.get(current.pg_type, ()):
        return new
    return None


def widens(stored: ColumnSpec, declared: ColumnSpec) -> bool:
    """Whether ``declared`` holds every value of ``stored`` without loss, in another Spark
    type that Delta widens a column to (:func:`widen`'s widenings: int32 to int64, float to
    double, a decimal with more digits and no fewer in its fraction, date to timestamp)."""
    wider = widen(stored, family_of(declared))
    return wider is not None and spark_type(wider) == spark_type(declared) != spark_type(stored)
