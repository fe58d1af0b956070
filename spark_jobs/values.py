"""Column values decoded into the declared Spark types, with Spark expressions only.

:func:`decode_value` is the JVM counterpart of :func:`airflow_cdc.core.types.decode` (and of
``decode_undeclared`` for ``untyped`` columns): it takes the column's JSON value as a VARIANT
(as ``from_json(image, "MAP<STRING, VARIANT>")`` gives it) and returns the typed value, the
special marker where the value had to be null (``NaN`` in a numeric, the infinity sentinels of
dates and timestamps) and an error text where the value does not decode, which quarantines
the change. Nothing raises: every cast is a ``try_`` form.

The JSON type comes from ``schema_of_variant``: integers are ``BIGINT`` (or ``DECIMAL(p,0)``
past 64 bits), other numbers ``DECIMAL`` or ``DOUBLE``, so the core's type checks (an integer
column takes JSON integers only, a boolean is never a number) carry over. Each expression is
kept small: callers pass a column reference, and every family builds a handful of
expressions over it (Spark copies a reused sub-expression into every place it is used).

Where the two differ (``tests/spark/test_values.py`` lists each case): Spark's VARIANT stores
a number by value, so ``1.0`` is the integer 1; text forms follow the vendors' documented forms
(ISO 8601 dates, times and timestamps) rather than every form Python's parsers accept; JSON
objects stored as text are Spark's compact JSON (non-ASCII characters kept as they are); a
number of more than 38 digits (or 38 after its point) is a DOUBLE in a VARIANT, and a number
past a double's range an infinite one (a date of such an integer is refused; a JSON value kept
as text holds the double, ``1.0E38`` or ``"Infinity"``, where the core keeps the digits; the
formats the core parses write the zeros that end a fraction off such a number first, so a
decimal padded to its scale stays exact: ``airflow_cdc.core.jsontext``); a number written with
an exponent is a DOUBLE too, so a numeric column takes it, or one past 38 digits, rounded to a
double's 17 digits (zero below a double's range) where the core reads every digit; a number of
more than 1,000 characters is past what Spark's JSON reader takes (JSON text holding one is
refused). ``tests/spark/test_values_fuzz.py`` holds the two to exactly these differences.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from airflow_cdc.core.ddl import ColumnSpec
from airflow_cdc.core.types import (
    DATE_INFINITIES,
    FLOAT32_LIMIT,
    INTERVAL_TEXT,
    MAX_DAYS,
    MAX_MICROS,
    MICROS_PER_DAY,
    MIN_DAYS,
    MIN_MICROS,
    TIMESTAMP_NEG_INFINITY,
    TIMESTAMP_POS_INFINITY,
    decimal_shape,
    spark_type,
)
from spark_jobs.json_columns import WholeJson, base64_bytes

_INT_KINDS = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_RANGES = {
    "tinyint": (-(2**7), 2**7 - 1),
    "smallint": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
    "oid": (0, 2**32 - 1),
    "interval": (-(2**63), 2**63 - 1),
}
_SPECIAL_FLOATS = ("NaN", "Infinity", "-Infinity")
# Every pattern ends with ``\z``: Java's ``$`` also matches before a final line terminator
# (``\n``, ``\r\n``, ``\u0085``, ``\u2028``...), which the core's rules refuse. ``\d`` is
# ASCII in Java.
# The characters Python's ``str.strip()`` removes (``str.isspace``), as a regex class.
_WHITESPACE = r"[\t\n\x0B\f\r\x1C-\x1F \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"
# A decimal number as text: sign, integer digits, fraction digits, exponent.
_DECIMAL_TEXT = rf"^{_WHITESPACE}*([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?{_WHITESPACE}*\z"
_TIME_TEXT = r"^(\d{2})(?::(\d{2})(?::(\d{2})(?:[.,](\d+))?)?)?(Z|[+-]\d{2}(?::?\d{2})?)?\z"
_DATE_TEXT = r"^(\d{4})-(\d{2})-(\d{2})\z"
# A UTC timestamp as text, to the microsecond: the common text form of timestamps.
_UTC_TEXT = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?Z\z"
_TIMESTAMP_TEXT = (
    r"^(\d{4}-\d{2}-\d{2})(?:[T ](\d{2})(?::(\d{2})(?::(\d{2})(?:[.,](\d+))?)?)?)?"
    r"(Z|[+-]\d{2}(?::?\d{2})?)?\z"
)
# Hex digits and the ASCII whitespace ``bytes.fromhex`` skips between pairs of them.
_HEX_CHARS = r"^[0-9a-fA-F \t\n\x0B\f\r]*\z"


# The projections a decoded value is staged in (see :class:`_Json`).
LEVELS = 5


@dataclass(frozen=True)
class DecodedColumn:
    """The columns of one decoded value; all null for an absent value or JSON null."""

    value: Column  # of the column's Spark type
    # STRING: the special marker where the value had to be null; None where these parts
    # never carry one (:func:`decode_fast`'s)
    special: Column | None
    error: Column  # STRING: null when the value decodes, else what is wrong


@dataclass(frozen=True)
class _Result:
    value: Column
    problem: Column  # null when the value decodes
    special: Column | None = None


class _Json:
    """One VARIANT value and its JSON type.

    With a ``prefix``, the values that decoders refer to many times become columns of their
    own (:meth:`stage`), computed in projections before the decoded value: level 1 the JSON
    type and the value as text or number, level 2 what a family derives from those (the
    groups of a timestamp's text), level 3 what it computes from those (the instant the
    groups name), level 4 what is wrong with the value, level 5 the value and its special
    marker (the outputs refer to each of these several times). Without one, everything
    stays one expression.
    """

    def __init__(self, value: Column, prefix: str | None = None) -> None:
        self.variant = value
        self.prefix = prefix
        self.levels: tuple[dict[str, Column], ...] = tuple({} for _ in range(LEVELS))
        self._read: dict[str, Column] = {}
        self._of: dict[tuple[str, ...], Column] = {}

    # Each level-1 part is staged when a decoder first refers to it: the fast forms
    # (:func:`decode_fast`) stage only the few they read.
    @functools.cached_property
    def kind(self) -> Column:
        return self.stage("kind", F.schema_of_variant(self.variant), level=1)

    @functools.cached_property
    def present(self) -> Column:
        present = self.variant.isNotNull() & (self.kind != "VOID")
        return self.stage("present", present, level=1)

    @functools.cached_property
    def int64(self) -> Column:
        # Only integral JSON numbers are read as numbers: a failed cast costs an exception.
        # Their JSON text is their digits, and a cast from it is cheaper than variant_get's
        # (which builds and evaluates a Cast expression per value).
        int64 = F.when(self.kind.isin(*_INT_KINDS), F.to_json(self.variant).try_cast("bigint"))
        return self.stage("int64", int64, level=1)

    @functools.cached_property
    def _integral(self) -> Column:
        integral = F.when(self.int64.isNotNull(), self.int64.cast("decimal(38,0)")).when(
            F.coalesce(self.kind.rlike(r"^DECIMAL\(\d+,0\)$"), F.lit(False)),
            F.try_variant_get(self.variant, "$", "decimal(38,0)"),
        )
        return self.stage("integral", integral, level=1)

    @property
    def text(self) -> Column:
        """The value as text, for error messages and untyped columns (computed where used)."""
        return F.when(
            self.kind == "STRING", F.try_variant_get(self.variant, "$", "string")
        ).otherwise(F.to_json(self.variant))

    def stage(self, name: str, expression: Column, level: int = 2) -> Column:
        """``expression`` as a column of its own (with a prefix), else as it is."""
        if self.prefix is None:
            return expression
        column = f"{self.prefix}_{name}"
        self.levels[level - 1][column] = expression
        return F.col(column)

    def of(self, *kinds: str) -> Column:
        # Built once per set of kinds: each decoder asks again, and a column is immutable.
        if kinds not in self._of:
            self._of[kinds] = F.coalesce(self.kind.isin(*kinds), F.lit(False))
        return self._of[kinds]

    @functools.cached_property
    def is_integer(self) -> Column:
        return self.of(*_INT_KINDS) | F.coalesce(
            self.kind.rlike(r"^DECIMAL\(\d+,0\)$"), F.lit(False)
        )

    @functools.cached_property
    def is_number(self) -> Column:
        return self.of(*_INT_KINDS, "DOUBLE", "FLOAT") | F.coalesce(
            self.kind.startswith("DECIMAL"), F.lit(False)
        )

    @property
    def is_string(self) -> Column:
        return self.of("STRING")

    def get(self, spark: str) -> Column:
        """The value as ``spark``, where its JSON type reads as that (text forms only for
        JSON strings: every regex then skips the other values); staged, so read once per
        value however many times a decoder refers to it."""
        if spark == "decimal(38,0)":
            return self._integral
        if spark not in self._read:
            readable = {
                "string": self.is_string,
                "double": self.is_number,
                "boolean": self.of("BOOLEAN"),
                "array<variant>": F.coalesce(self.kind.startswith("ARRAY"), F.lit(False)),
            }[spark]
            read = F.when(readable, F.try_variant_get(self.variant, "$", spark))
            self._read[spark] = self.stage(spark.replace("<", "_").replace(">", ""), read, level=1)
        return self._read[spark]


def decode_value(column: ColumnSpec, value: Column) -> DecodedColumn:
    """Decode ``value`` (a VARIANT column reference: SQL NULL when the column is absent from
    the image, a variant null for JSON null) into ``column``'s Spark type."""
    return _decoded(column, _Json(value))


def _decoded(column: ColumnSpec, json: _Json) -> DecodedColumn:
    result = _DECODERS[column.pg_type](column, json)
    problem = F.when(json.present, result.problem)
    value = result.value
    special = result.special if result.special is not None else F.lit(None)
    common_form = _FAST.get(column.pg_type)
    if common_form is not None:
        applies, fast_value = common_form(column, json)
        fast = json.stage("fast", F.coalesce(applies, F.lit(False)), level=2)
        problem = F.when(~fast, problem)
        value = F.when(fast, fast_value).otherwise(value)
        special = F.when(~fast, special)
    problem = json.stage("problem", problem, level=4)
    ok = json.present & problem.isNull()
    value = json.stage("value", F.when(ok, value).cast(spark_type(column)), level=5)
    shown = F.substring(json.text, 1, 40)
    return DecodedColumn(
        value=value,
        special=json.stage("special", F.when(ok, special).cast("string"), level=5),
        error=F.when(
            problem.isNotNull(),
            F.concat(F.lit(f"column {column.name!r}: "), shown, F.lit(" "), problem),
        ),
    )


def _digits(text: Column, spark: str) -> Column:
    """``text`` as a number where it is all ASCII digits, else null. A cast that fails costs
    an exception per row even in ``try_cast``, so it is never attempted on other text."""
    return F.when(text.rlike(r"^[0-9]+\z"), text.cast(spark))


def _expected(column: ColumnSpec, accepted: Column) -> Column:
    return F.when(~accepted, F.lit(f"is not a valid {column.pg_type}"))


def _integer(column: ColumnSpec, json: _Json) -> _Result:
    low, high = _RANGES[column.pg_type]
    number = json.get("decimal(38,0)")
    in_range = number.between(
        F.lit(str(low)).cast("decimal(38,0)"), F.lit(str(high)).cast("decimal(38,0)")
    )
    problem = F.when(~json.is_integer, F.lit(f"is not a JSON integer ({column.pg_type})")).when(
        ~F.coalesce(in_range, F.lit(False)), F.lit(f"is out of range for {column.pg_type}")
    )
    return _Result(number, problem)


def _interval(column: ColumnSpec, json: _Json) -> _Result:
    """µs: a JSON integer, or PostgreSQL's interval text without months
    (:data:`airflow_cdc.core.types.INTERVAL_TEXT`)."""
    whole = _integer(column, json)
    text = json.get("string")
    # Java's ``$`` also matches before a final line terminator: end the pattern at the end.
    pattern = INTERVAL_TEXT.pattern.removesuffix("$") + r"\z"
    matches = F.coalesce(text.rlike(pattern), F.lit(False)) & (F.length(text) > 0)
    group = [json.stage(f"iv{i}", F.regexp_extract(text, pattern, i)) for i in range(1, 7)]

    def number(part: Column) -> Column:
        return F.coalesce(part.try_cast("decimal(38,0)"), F.lit(0).cast("decimal(38,0)"))

    days, hours, minutes, seconds = (number(g) for g in (group[0], *group[2:5]))
    fraction = number(F.rpad(group[5], 6, "0"))
    clock = ((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + fraction
    total = days * 86_400_000_000 + F.when(group[1] == "-", -clock).otherwise(clock)
    low, high = _RANGES["interval"]
    in_range = total.between(
        F.lit(str(low)).cast("decimal(38,0)"), F.lit(str(high)).cast("decimal(38,0)")
    )
    value = F.when(json.is_string, total).otherwise(whole.value)
    problem = (
        F.when(~json.is_string, whole.problem)
        .when(~matches, F.lit("is not an interval of days and [-]HH:MM:SS[.ffffff]"))
        .when(~in_range, F.lit("is out of range for interval"))
    )
    return _Result(value, problem)


def _integer_fast(column: ColumnSpec, json: _Json) -> tuple[Column, Column]:
    low, high = _RANGES[column.pg_type]
    return json.int64.between(low, high), json.int64


def _float(column: ColumnSpec, json: _Json) -> _Result:
    text = json.get("string")
    special = json.is_string & text.isin(*_SPECIAL_FLOATS)
    number = json.get("double")
    # A number the column's type cannot hold is out of range, not infinite.
    limit = FLOAT32_LIMIT if column.pg_type == "real" else float("inf")
    finite = ~F.isnan(number) & (F.abs(number) < F.lit(limit))
    value = F.when(special, text.cast("double")).otherwise(number)
    problem = F.when(
        ~(json.is_number | special), F.lit("is not NaN, Infinity, -Infinity or a number")
    ).when(json.is_number & ~finite, F.lit(f"is out of range for {column.pg_type}"))
    return _Result(value, problem)


def _numeric(column: ColumnSpec, json: _Json) -> _Result:
    precision, scale = decimal_shape(column)
    # A JSON number's own digits (VARIANT keeps them exactly), or the string's text.
    text = json.stage(
        "numtext", F.coalesce(json.get("string"), F.when(json.is_number, F.to_json(json.variant)))
    )
    special = json.is_string & text.isin(*_SPECIAL_FLOATS)
    parts = [json.stage(f"n{i}", F.regexp_extract(text, _DECIMAL_TEXT, i)) for i in range(1, 5)]
    sign, whole, fraction, exponent_text = parts
    # An exponent of more than nine digits is too large for any value but zero.
    exponent_digits = F.regexp_replace(exponent_text, "^[+-]?0*", "")
    exponent = F.when(F.length(exponent_digits) <= 9, exponent_text.try_cast("int"))
    huge = (exponent_text != "") & exponent.isNull()
    # Where the point falls in the digits once the exponent moved it; the digits it leaves
    # on each side, leading and trailing zeros aside.
    digits = F.concat(whole, fraction)
    point = F.length(whole) + F.coalesce(exponent, F.lit(0))
    leading_zeros = F.length(F.regexp_extract(digits, "^0*", 0))
    zero = leading_zeros == F.length(digits)
    whole_digits = F.greatest(point - leading_zeros, F.lit(0))
    fraction_digits = F.length(F.regexp_replace(digits, "0*\\z", "")) - point
    syntax = F.coalesce(text.rlike(_DECIMAL_TEXT), F.lit(False)) & (
        (F.length(whole) + F.length(fraction)) > 0
    )
    accepted = json.is_number | json.is_string
    problem = (
        F.when(~accepted, F.lit("is not a decimal number"))
        .when(special, F.lit(None))
        .when(~syntax, F.lit("is not a decimal number"))
        .when(zero, F.lit(None))
        .when(
            (huge & exponent_text.startswith("-")) | (~huge & (fraction_digits > scale)),
            F.lit(f"has more than {scale} fractional digits"),
        )
        .when(
            huge | ((whole_digits + scale > precision) & (whole_digits > 0)),
            F.lit(f"does not fit DECIMAL({precision},{scale})"),
        )
    )
    # The number in the plain form Spark's cast reads (whitespace and all zeros aside).
    plain = F.concat(
        sign,
        F.when(whole == "", F.lit("0")).otherwise(whole),
        F.lit("."),
        F.when(fraction == "", F.lit("0")).otherwise(fraction),
        F.lit("E"),
        F.coalesce(exponent.cast("string"), F.lit("0")),
    )
    kind = f"decimal({precision},{scale})"
    value = F.when(syntax & zero, F.lit(0).cast(kind)).when(syntax, plain.try_cast(kind))
    return _Result(
        F.when(~special, value),
        F.coalesce(problem, F.when(~special & value.isNull(), F.lit("is not a decimal number"))),
        F.when(special, text),
    )


def _numeric_fast(column: ColumnSpec, json: _Json) -> tuple[Column, Column]:
    """The common forms, a JSON string of digits that fit or a JSON number that fits: a
    plain cast."""
    precision, scale = decimal_shape(column)
    whole_form = "0" if precision == scale else f"(?:0|[1-9][0-9]{{0,{precision - scale - 1}}})"
    fraction_form = f"(?:\\.[0-9]{{1,{scale}}})?" if scale else ""
    kind = f"decimal({precision},{scale})"
    text = json.get("string").rlike(f"^-?{whole_form}{fraction_form}\\z")
    # A JSON number (CockroachDB's DECIMAL) that VARIANT holds as an exact decimal or an
    # integer whose digits fit on each side of the point: the cast is then exact.
    whole_digits = precision - scale
    # Only a decimal's kind is read: a cast of the empty text that another kind leaves costs
    # an exception per value, even in ``try_cast``.
    number_precision, number_scale = (
        F.when(
            json.kind.startswith("DECIMAL("),
            F.regexp_extract(json.kind, r"^DECIMAL\((\d+),(\d+)\)\z", group).try_cast("int"),
        )
        for group in (1, 2)
    )
    decimal = (number_scale <= scale) & (number_precision - number_scale <= whole_digits)
    integer = (
        json.int64.isNotNull()
        if whole_digits > 18
        else json.int64.between(-(10**whole_digits - 1), 10**whole_digits - 1)
    )
    number = F.coalesce(integer, F.lit(False)) | F.coalesce(decimal, F.lit(False))
    value = F.when(number, F.try_variant_get(json.variant, "$", kind)).otherwise(
        json.get("string").try_cast(kind)
    )
    return F.coalesce(text, F.lit(False)) | number, value


def _boolean(column: ColumnSpec, json: _Json) -> _Result:
    return _Result(json.get("boolean"), _expected(column, json.of("BOOLEAN")))


def _text(column: ColumnSpec, json: _Json) -> _Result:
    return _Result(json.get("string"), _expected(column, json.is_string))


def _untyped(column: ColumnSpec, json: _Json) -> _Result:
    return _Result(json.text, F.lit(None).cast("string"))


def _bytea(column: ColumnSpec, json: _Json) -> _Result:
    text = json.get("string")
    hex_text = F.substring(text, 3, 1 << 30)
    hex_digits = F.regexp_replace(hex_text, r"\s", "")
    # Pairs of digits, whitespace only between pairs: what is left once the pairs are taken
    # out, from the left, is whitespace (no repeated group: Java's would recurse per pair).
    unpaired = F.regexp_replace(hex_text, "[0-9a-fA-F]{2}", "")
    is_hex = text.startswith("\\x") & hex_text.rlike(_HEX_CHARS) & ~unpaired.rlike("[0-9a-fA-F]")
    value = F.when(is_hex, F.try_to_binary(hex_digits, F.lit("hex"))).otherwise(base64_bytes(text))
    problem = F.when(~json.is_string, F.lit("is not a string (bytea)")).when(
        value.isNull(), F.lit("is neither \\x hex nor Base64")
    )
    return _Result(value, problem)


def _date(column: ColumnSpec, json: _Json) -> _Result:
    text = F.substring(json.get("string"), 1, 10)
    # The calendar starts at year 1: year 0 is no date, nor one written "... BC" after it.
    before_christ = F.substring(json.get("string"), 11, 1 << 30).contains("BC")
    calendar = text.rlike(_DATE_TEXT) & ~text.startswith("0000") & ~before_christ
    from_text = F.when(calendar, F.try_to_date(text, "yyyy-MM-dd"))
    infinite = F.coalesce(json.get("string").isin(*DATE_INFINITIES), F.lit(False))
    days = json.get("decimal(38,0)")
    in_range = days.between(MIN_DAYS, MAX_DAYS)
    from_days = F.date_add(F.lit("1970-01-01").cast("date"), days.try_cast("int"))
    value = F.when(json.is_string, from_text).when(json.is_integer & in_range, from_days)
    special = F.when(
        json.is_integer & ~in_range,
        F.when(days > 0, F.lit("infinity")).otherwise(F.lit("-infinity")),
    ).when(infinite, json.get("string"))
    problem = F.when(~(json.is_string | json.is_integer), F.lit("is not a date")).when(
        json.is_string & from_text.isNull() & ~infinite, F.lit("is not an ISO date")
    )
    return _Result(value, problem, special)


def _date_fast(column: ColumnSpec, json: _Json) -> tuple[Column, Column]:
    """Days since the epoch, within the calendar."""
    epoch_days = json.int64.between(MIN_DAYS, MAX_DAYS)
    return epoch_days, F.date_add(F.lit("1970-01-01").cast("date"), json.int64.cast("int"))


def _clock_micros(hours: Column, minutes: Column, seconds: Column, fraction: Column) -> Column:
    micros = F.coalesce(_digits(F.rpad(F.substring(fraction, 1, 6), 6, "0"), "bigint"), F.lit(0))
    return ((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + micros


def _time_of_day(column: ColumnSpec, json: _Json) -> _Result:
    text = json.get("string")
    group = [json.stage(f"tm{i}", F.regexp_extract(text, _TIME_TEXT, i)) for i in range(1, 6)]
    hours, minutes, seconds = (F.coalesce(_digits(g, "bigint"), F.lit(0)) for g in group[:3])
    valid_text = (
        F.coalesce(text.rlike(_TIME_TEXT), F.lit(False))
        & (hours < 24)
        & (minutes < 60)
        & (seconds < 60)
        & _offset_micros(group[4]).isNotNull()
    )
    micros = F.when(json.is_string & valid_text, _clock_micros(hours, minutes, seconds, group[3]))
    if column.pg_type == "timetz":
        # A time with an offset is adjusted to UTC and wrapped into the day (the DSQL rule).
        micros = F.when(group[4] == "", micros).otherwise(
            F.pmod(micros - _offset_micros(group[4]), F.lit(MICROS_PER_DAY))
        )
    micros = F.coalesce(micros, json.get("decimal(38,0)").try_cast("bigint"))
    in_day = micros.between(0, MICROS_PER_DAY)
    suffix = "+00:00" if column.pg_type == "timetz" else ""
    problem = (
        F.when(~(json.is_string | json.is_integer), F.lit("is not a time"))
        .when(json.is_string & ~valid_text, F.lit("is not an ISO time"))
        .when(~F.coalesce(in_day, F.lit(False)), F.lit("µs is not a time of day"))
    )
    return _Result(F.concat(_clock(micros), F.lit(suffix)), problem)


def _date32(column: ColumnSpec, json: _Json) -> _Result:
    """YDB's ``Date32``: a JSON integer of days since the epoch, within years 1-9999."""
    days = json.get("decimal(38,0)")
    in_range = days.between(MIN_DAYS, MAX_DAYS)
    value = F.date_add(F.lit("1970-01-01").cast("date"), days.try_cast("int"))
    problem = F.when(~json.is_integer, F.lit("is not a whole number of days")).when(
        ~F.coalesce(in_range, F.lit(False)), F.lit("is outside the date range")
    )
    return _Result(F.when(in_range, value), problem)


def _time_fast(column: ColumnSpec, json: _Json) -> tuple[Column, Column]:
    """Microseconds since midnight, within the day."""
    suffix = "+00:00" if column.pg_type == "timetz" else ""
    return json.int64.between(0, MICROS_PER_DAY - 1), F.concat(_clock(json.int64), F.lit(suffix))


def _clock(micros: Column) -> Column:
    """Microseconds since midnight (0 to a whole day) as ``HH:MM:SS.ffffff``."""
    seconds = F.floor(micros / 1_000_000)
    return F.format_string(
        "%02d:%02d:%02d.%06d",
        (seconds / 3600).cast("int"),
        ((seconds % 3600) / 60).cast("int"),
        (seconds % 60).cast("int"),
        (micros % 1_000_000).cast("int"),
    )


def _offset_micros(zone: Column) -> Column:
    """A UTC offset as written after an ISO time (``Z``, ``+02``, ``+0200``, ``-05:30`` or
    nothing), in microseconds east of UTC; null where it is no offset (24 hours or more,
    60 minutes or more)."""
    zone = F.coalesce(zone, F.lit(""))
    digits = F.regexp_replace(zone, "[^0-9]", "")
    hours = _digits(F.substring(digits, 1, 2), "bigint")
    minutes = F.coalesce(_digits(F.substring(digits, 3, 2), "bigint"), F.lit(0))
    sign = F.when(F.substring(zone, 1, 1) == "-", -1).otherwise(1)
    offset = F.when((hours < 24) & (minutes < 60), (hours * 3600 + minutes * 60) * sign)
    return F.when(zone.isin("", "Z"), F.lit(0)).otherwise(offset) * 1_000_000


def _timestamp(column: ColumnSpec, json: _Json) -> _Result:
    # Python's strip(), in time linear in the text: the trailing run is tried only where a
    # run starts (a match tried at every space of a long run costs its square).
    text = F.regexp_replace(
        json.get("string"), rf"^{_WHITESPACE}++|(?<!{_WHITESPACE}){_WHITESPACE}++\z", ""
    )
    group = [json.stage(f"ts{i}", F.regexp_extract(text, _TIMESTAMP_TEXT, i)) for i in range(1, 7)]
    hours, minutes, seconds = (F.coalesce(_digits(g, "bigint"), F.lit(0)) for g in group[1:4])
    micros = F.coalesce(_digits(F.rpad(F.substring(group[4], 1, 6), 6, "0"), "int"), F.lit(0))
    matched = json.stage("ts_ok", F.coalesce(text.rlike(_TIMESTAMP_TEXT), F.lit(False)))
    day = F.try_to_date(group[0], "yyyy-MM-dd")
    clock_ok = (hours < 24) & (minutes < 60) & (seconds < 60)
    local = F.try_to_timestamp(
        F.format_string(
            "%s %02d:%02d:%02d.%06d",
            group[0],
            hours.cast("int"),
            minutes.cast("int"),
            seconds.cast("int"),
            micros,
        ),
        F.lit("yyyy-MM-dd HH:mm:ss.SSSSSS"),
    ).cast("timestamp_ntz")
    # A local time with an offset is the instant at UTC minus the offset.
    utc_micros = F.unix_micros(local.cast("timestamp")) - _offset_micros(group[5])
    offset_ok = _offset_micros(group[5]).isNotNull()
    valid_text = json.stage(
        "ts_valid", matched & day.isNotNull() & clock_ok & (F.year(day) >= 1) & offset_ok, level=3
    )
    from_text = F.when(json.is_string & valid_text, utc_micros)
    number = json.get("decimal(38,0)")
    sentinel = F.when(number == TIMESTAMP_POS_INFINITY, F.lit("infinity")).when(
        number == TIMESTAMP_NEG_INFINITY, F.lit("-infinity")
    )
    from_number = F.when(json.is_integer & sentinel.isNull(), number.try_cast("bigint"))
    micros_total = json.stage("ts_micros", F.coalesce(from_text, from_number), level=3)
    in_range = micros_total.between(MIN_MICROS, MAX_MICROS)
    moment = F.timestamp_micros(micros_total)
    # A timestamp without time zone keeps the wall time (an offset converts it to UTC).
    value = moment.cast("timestamp_ntz") if column.pg_type == "timestamp" else moment
    problem = (
        F.when(~(json.is_string | json.is_integer), F.lit("is not a timestamp"))
        .when(json.is_string & ~valid_text, F.lit("is not an ISO 8601 timestamp"))
        .when(
            sentinel.isNull() & ~F.coalesce(in_range, F.lit(False)),
            F.lit("is outside the timestamp range"),
        )
    )
    return _Result(
        F.when(in_range, value),
        problem,
        F.when(json.is_integer, sentinel),
    )


def _timestamp_fast(column: ColumnSpec, json: _Json) -> tuple[Column, Column]:
    """Microseconds since the epoch, within the calendar; or UTC text in ISO 8601 to the
    microsecond (``2024-01-15T10:30:00.5Z``, as Debezium's ZonedTimestamp writes it), which
    Spark's cast reads as the full rules do."""
    from_number = json.int64.between(MIN_MICROS, MAX_MICROS)
    text = json.get("string")
    parsed = F.when(text.rlike(_UTC_TEXT), text.try_cast("timestamp"))
    from_text = F.unix_micros(parsed).between(MIN_MICROS, MAX_MICROS)
    instant = F.when(from_number, F.timestamp_micros(json.int64)).otherwise(parsed)
    return (
        F.coalesce(from_number, F.lit(False)) | F.coalesce(from_text, F.lit(False)),
        instant.cast("timestamp_ntz") if column.pg_type == "timestamp" else instant,
    )


def _datetime64(column: ColumnSpec, json: _Json) -> _Result:
    """YDB's ``Datetime64``: a JSON integer of seconds since the epoch (UTC wall time)."""
    seconds = json.get("decimal(38,0)")
    in_range = seconds.between(MIN_MICROS // 1_000_000, MAX_MICROS // 1_000_000)
    value = F.timestamp_seconds(seconds.cast("bigint")).cast("timestamp_ntz")
    problem = F.when(~json.is_integer, F.lit("is not a whole number of seconds")).when(
        ~F.coalesce(in_range, F.lit(False)), F.lit("is outside the timestamp range")
    )
    return _Result(F.when(in_range, value), problem)


def _json(column: ColumnSpec, json: _Json) -> _Result:
    structured = (
        json.of("ARRAY")
        | F.coalesce(json.kind.startswith("OBJECT"), F.lit(False))
        | (F.coalesce(json.kind.startswith("ARRAY"), F.lit(False)))
    )
    text = json.get("string")
    parsed = WholeJson()
    # PostgreSQL's json checks a \u escape only for its four hex digits, so half a surrogate
    # pair is JSON text; Spark's reader refuses it. The check reads every surrogate escape
    # as \u0000, once each escaped backslash is \u005c (so "\\ud800" stays text).
    unpaired = F.regexp_replace(text, r"\\\\", r"\\u005c")
    checked = F.regexp_replace(unpaired, r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}", r"\\u0000")
    # Staged: the value and the problem both read it, and it parses the text.
    valid = json.stage("json_ok", F.coalesce(parsed.whole(parsed.wrapped(checked)), F.lit(False)))
    value = F.when(structured, F.to_json(json.variant)).when(json.is_string & valid, text)
    problem = F.when(~(structured | json.is_string), F.lit("is not JSON")).when(
        json.is_string & ~valid, F.lit("is not JSON text")
    )
    return _Result(value, problem)


def _json_value(column: ColumnSpec, json: _Json) -> _Result:
    """Any JSON value, as JSON text (:func:`airflow_cdc.core.types._json_value`)."""
    return _Result(F.to_json(json.variant), F.lit(None).cast("string"))


def _uuid(column: ColumnSpec, json: _Json) -> _Result:
    text = json.get("string")
    canonical = F.coalesce(
        text.rlike(
            r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\z"
        ),
        F.lit(False),
    )
    problem = F.when(~json.is_string | ~canonical, F.lit("is not a UUID in 8-4-4-4-12 form"))
    return _Result(F.lower(text), problem)


def _oidvector(column: ColumnSpec, json: _Json) -> _Result:
    items = json.get("array<variant>")
    integral = F.forall(
        items, lambda item: F.coalesce(F.schema_of_variant(item).isin(*_INT_KINDS), F.lit(False))
    )
    value = F.transform(items, lambda item: F.try_variant_get(item, "$", "bigint"))
    problem = F.when(
        ~F.coalesce(json.kind.startswith("ARRAY"), F.lit(False)), F.lit("is not an array")
    ).when(~integral, F.lit("has an element that is not a 64-bit integer"))
    return _Result(value, problem)


_DECODERS: dict[str, Callable[[ColumnSpec, _Json], _Result]] = {
    "tinyint": _integer,
    "smallint": _integer,
    "integer": _integer,
    "bigint": _integer,
    "oid": _integer,
    "interval": _interval,
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
    "json": _json,
    "json_value": _json_value,
    "uuid": _uuid,
    "oidvector": _oidvector,
    "untyped": _untyped,
}


# The common form of each family whose full rules are costly (regular expressions on every
# value): where it applies, its value is the full rules' value, with no special marker, and
# the full rules' result is not used (:func:`_decoded`) or not built (:func:`decode_fast`).
_FAST: dict[str, Callable[[ColumnSpec, _Json], tuple[Column, Column]]] = {
    "tinyint": _integer_fast,
    "smallint": _integer_fast,
    "integer": _integer_fast,
    "bigint": _integer_fast,
    "oid": _integer_fast,
    "interval": _integer_fast,
    "numeric": _numeric_fast,
    "date": _date_fast,
    "date32": _date_fast,
    "time": _time_fast,
    "timetz": _time_fast,
    "timestamp": _timestamp_fast,
    "timestamptz": _timestamp_fast,
}


def decode_fast(
    frame: DataFrame, columns: list[ColumnSpec], slots: dict[str, str]
) -> tuple[DataFrame, dict[str, DecodedColumn], dict[str, Column]]:
    """Decode many columns by their common forms only (as :func:`decode_columns` takes them).

    Returns the frame with the parts the decoders stage (few: the common forms read the
    JSON type and the text or integer, the other families what their rules read), each
    column's parts, and
    per column ``common``: whether the row's value is absent, null or in its common form.
    Where it holds, the column's parts equal :func:`decode_columns`'s (no error, no special
    marker); elsewhere the value needs the full rules. The families without a costly rule
    (text, booleans, floats, UUIDs, bytes, JSON, arrays) take their full rules here.
    """
    parts: dict[str, DecodedColumn] = {}
    common: dict[str, Column] = {}
    levels: list[dict[str, Column]] = [{} for _ in range(LEVELS)]
    for column in columns:
        json = _Json(F.col(slots[column.name]), prefix=f"{slots[column.name]}f")
        fast = _FAST.get(column.pg_type)
        if fast is not None:
            applies, value = fast(column, json)
        else:
            result = _DECODERS[column.pg_type](column, json)
            applies = result.problem.isNull()
            if result.special is not None:
                applies = applies & result.special.isNull()
            value = result.value
        applies = F.coalesce(applies, F.lit(False))
        common[column.name] = ~json.present | applies
        parts[column.name] = DecodedColumn(
            value=F.when(json.present & applies, value).cast(spark_type(column)),
            special=None,
            error=F.lit(None).cast("string"),
        )
        for mine, theirs in zip(levels, json.levels, strict=True):
            mine.update(theirs)
    return _project(frame, levels), parts, common


def decode_columns(
    frame: DataFrame, columns: list[ColumnSpec], slots: dict[str, str]
) -> tuple[DataFrame, dict[str, DecodedColumn]]:
    """Decode many columns: ``slots`` names the frame column holding each one's VARIANT.

    Returns the frame with the decoders' intermediate columns added (one projection per
    level, so that no sub-expression is copied into every place that uses it), and each
    column's parts.
    """
    parts: dict[str, DecodedColumn] = {}
    levels: list[dict[str, Column]] = [{} for _ in range(LEVELS)]
    for column in columns:
        json = _Json(F.col(slots[column.name]), prefix=f"{slots[column.name]}d")
        parts[column.name] = _decoded(column, json)
        for mine, theirs in zip(levels, json.levels, strict=True):
            mine.update(theirs)
    return _project(frame, levels), parts


def _project(frame: DataFrame, levels: list[dict[str, Column]]) -> DataFrame:
    """``frame`` with the staged columns of each level, one projection per level that has
    any."""
    for level in levels:
        if level:
            frame = frame.select("*", *(e.alias(n) for n, e in level.items()))
    return frame
