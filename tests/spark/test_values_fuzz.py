"""A seeded differential fuzz of the JVM value decoders against the core's ``types.decode``.

For every column family of ``test_values.CASES`` (with its numeric precisions), a few hundred
JSON value texts drawn from fixed seeds: the valid forms and their near-misses (digit counts
at the range edges, signs, leading zeros, exponents, whitespace of every kind, digits of other
scripts, surrogate escapes, long strings, UTC offsets, leap days and seconds, years 0 to 10000,
fractions of 0 to 12 digits, Base64 and ``\\x`` hex spellings, UUID spellings, JSON text with
more after it, interval texts, NaN spellings, arrays of non-integers). The full rules and the
common forms each decode all of them in one Spark pass, over a frame built as
``test_values.case_frame`` builds it, and each value is compared with the core as
``test_values`` compares it (its ``core`` and ``normalized``). Dates and timestamps are
collected as integers and rebuilt in Python, because PySpark cannot collect some of the values
the JVM could give (a date of year 0).

The only differences allowed are the documented ones (``spark_jobs/values.py``'s docstring),
each a narrow predicate in :data:`DOCUMENTED`: it names the one way the two may differ and
holds only where the JVM's result is what that documented rule gives.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import random
import re
import string
import uuid
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

import pytest

from airflow_cdc.core.ddl import ColumnSpec
from airflow_cdc.core.types import (
    MAX_DAYS,
    MAX_MICROS,
    MICROS_PER_DAY,
    MIN_DAYS,
    MIN_MICROS,
    TIMESTAMP_NEG_INFINITY,
    TIMESTAMP_POS_INFINITY,
    decimal_shape,
    family_of,
)
from spark_jobs.values import decode_columns, decode_fast
from tests.spark.test_values import (
    CASES,
    case_frame,
    core,
    core_of_value,
    normalized,
    special_of,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SEED = 20260517
PER_FAMILY = 300

Outcome = tuple[str, Any, Any]  # ("ok" | "error" | "raised ...", value, special)
Rng = random.Random

# ---------------------------------------------------------------------------------------------
# Material for the generators.

WHITESPACE = (
    " ",
    "\t",
    "\r",
    "\n",
    "\r\n",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x85",
    "\xa0",
    "\u2003",
    "\u2028",
    "\u2029",
    "\u3000",
    "\u200b",
    "\ufeff",
)
# Decimal digits of other scripts (Arabic-Indic, Extended Arabic-Indic, Devanagari, full
# width): Python's int() and Decimal() read them as digits.
DIGITS = tuple("".join(chr(zero + d) for d in range(10)) for zero in (0x660, 0x6F0, 0x966, 0xFF10))
NAN_SPELLINGS = (
    "NaN",
    "Infinity",
    "-Infinity",
    "nan",
    "NAN",
    "-NaN",
    "+NaN",
    "sNaN",
    "inf",
    "Inf",
    "-inf",
    "+inf",
    "+Infinity",
    "infinity",
    "INFINITY",
    "Infinity ",
    " NaN",
    "\u221e",
)
# Characters of random text: ASCII, JSON's specials, controls, non-ASCII, an astral one.
TEXT_CHARS = (
    string.ascii_letters
    + string.digits
    + " -_:.,+/=\\\"'{}[]\t\n\r\x00\x1f\x7f"
    + "\xfc\xdf\u6771\u4eac\U0001f680\u0301\u200b\u2028\ufeff\xa0\x85"
)
# Integers at the edges of the integer families, of 64 bits and of DECIMAL(38, 0).
RANGE_EDGES = (
    0,
    -(2**15),
    2**15 - 1,
    -(2**31),
    2**31 - 1,
    2**32 - 1,
    -(2**63),
    2**63 - 1,
    2**64,
    10**38 - 1,
    -(10**38),
    10**38,
)
OTHER_JSON = ("true", "false", "null", "[]", "[1]", "{}", '{"a": 1}', '""', '"x"', "0", "1.5")


def _digits(rng: Rng, count: int) -> str:
    """``count`` digits, the first not 0 (``0`` for none)."""
    if count <= 0:
        return "0"
    return str(rng.randint(1, 9)) + "".join(rng.choice(string.digits) for _ in range(count - 1))


def _any_digits(rng: Rng, count: int) -> str:
    if rng.random() < 0.1:
        return "0" * count
    return "".join(rng.choice(string.digits) for _ in range(count))


def _jstr(rng: Rng, payload: str) -> str:
    """``payload`` as a JSON string, its non-ASCII characters escaped or not."""
    return json.dumps(payload, ensure_ascii=rng.random() < 0.3)


def _insert(rng: Rng, text: str, piece: str) -> str:
    at = rng.randrange(len(text) + 1)
    return text[:at] + piece + text[at:]


def _foreign_digits(rng: Rng, text: str) -> str:
    table = {ord(str(d)): rng.choice(DIGITS)[d] for d in range(10)}
    spots = [i for i, c in enumerate(text) if c in string.digits]
    if not spots or rng.random() < 0.3:
        return text.translate(table)
    at = rng.choice(spots)
    return text[:at] + text[at].translate(table) + text[at + 1 :]


def _drop(rng: Rng, text: str) -> str:
    if not text:
        return text
    at = rng.randrange(len(text))
    return text[:at] + text[at + 1 :]


def _repeat(rng: Rng, text: str) -> str:
    if not text:
        return text
    at = rng.randrange(len(text))
    return text[:at] + text[at] + text[at:]


MUTATIONS: tuple[Callable[[Rng, str], str], ...] = (
    lambda rng, t: rng.choice(WHITESPACE) + t,
    lambda rng, t: t + rng.choice(WHITESPACE),
    lambda rng, t: _insert(rng, t, rng.choice(WHITESPACE)),
    _foreign_digits,
    _drop,
    _repeat,
    lambda rng, t: rng.choice(("+", "-", "--", "0", "00", "+-", "\u2212")) + t,
    lambda rng, t: t.swapcase(),
    lambda rng, t: t + rng.choice(("x", ".", ":", "0", "Z", "z", "\x00", "e", "+", "\n", " 0")),
    lambda rng, t: _insert(rng, t, rng.choice(("0", "-", ":", ".", ",", "_", "e", "T", " "))),
)


def _mutate(rng: Rng, text: str, rate: float = 0.6) -> str:
    """``text`` as it is (``1 - rate`` of the time) or with one to three mutations."""
    if rng.random() >= rate:
        return text
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        text = rng.choice(MUTATIONS)(rng, text)
    return text


def _text(rng: Rng, limit: int = 20) -> str:
    return "".join(rng.choice(TEXT_CHARS) for _ in range(rng.randrange(limit)))


def _number(rng: Rng) -> str:
    """A JSON number: integers of every size, fractions, exponents."""
    sign = rng.choice(("", "", "-"))
    whole = "0" if rng.random() < 0.2 else _digits(rng, rng.choice((1, 2, 3, 10, 19, 20, 39, 60)))
    fraction = ""
    if rng.random() < 0.6:
        fraction = "." + _any_digits(rng, rng.choice((1, 2, 3, 6, 15, 17, 20, 30, 40)))
    exponent = ""
    if rng.random() < 0.3:
        power = rng.choice((0, 1, 2, 5, 18, 38, 39, 308, 309, 324, 400, 1000))
        exponent = rng.choice("eE") + rng.choice(("", "+", "-")) + str(power)
    return sign + whole + fraction + exponent


def _json(rng: Rng, depth: int = 2) -> str:
    """A random JSON value, as text."""
    kind = rng.randrange(8 if depth > 0 else 6)
    if kind == 0:
        return rng.choice(("true", "false", "null"))
    if kind in (1, 2):
        return _number(rng)
    if kind in (3, 4, 5):
        return _jstr(rng, _text(rng))
    if kind == 6:
        return "[" + ", ".join(_json(rng, depth - 1) for _ in range(rng.randrange(4))) + "]"
    keys = dict.fromkeys(_text(rng, 6) for _ in range(rng.randrange(4)))
    return "{" + ", ".join(f"{_jstr(rng, k)}: {_json(rng, depth - 1)}" for k in keys) + "}"


def _other(rng: Rng) -> str:
    return rng.choice(OTHER_JSON) if rng.random() < 0.5 else _json(rng)


def _long(rng: Rng, payload: str) -> str:
    return _jstr(rng, payload * (100_000 // max(len(payload), 1)))


# ---------------------------------------------------------------------------------------------
# Integers (smallint, integer, bigint, oid; interval's JSON integers).


def _scientific(number: int, rng: Rng) -> str:
    text = str(abs(number))
    sign = "-" if number < 0 else ""
    stripped = text.rstrip("0") or "0"
    power = len(text) - len(stripped)
    if power and rng.random() < 0.5:
        return f"{sign}{stripped}{rng.choice(('e', 'E', 'e+', 'E+'))}{power}"
    return f"{sign}{text[0]}.{text[1:] or '0'}e{len(text) - 1}"


def _integer_text(rng: Rng) -> str:
    roll = rng.random()
    if roll < 0.45:
        number = rng.choice(RANGE_EDGES) + rng.randint(-3, 3)
    elif roll < 0.85:
        number = rng.choice((1, -1)) * int(_digits(rng, rng.randint(1, 42)))
    else:
        number = rng.randint(-1000, 1000)
    form = rng.random()
    if form < 0.55:
        return str(number)
    if form < 0.7:
        return f"{number}.{'0' * rng.randint(1, 3)}"  # integral, with a fraction
    if form < 0.8:
        return _scientific(number, rng)
    if form < 0.85:
        return f"{number}.{rng.randint(1, 9)}"
    return _jstr(rng, _mutate(rng, str(number)))


def integer_texts(column: ColumnSpec, rng: Rng) -> tuple[list[str], Callable[[], str]]:
    fixed = [str(edge + d) for edge in RANGE_EDGES for d in (-1, 0, 1)]
    fixed += ["-0", "1.0", "-0.0", "0.0", "1.50", "1e0", "1E2", "1e+2", "100e-2", "0e0"]
    fixed += ["-1.5e1", "2147483647.0", "32767.0000", "32768.0", "4294967295.0", "1e18", "1e19"]
    fixed += ["9223372036854775807.0", "9223372036854775808.0", "1e400", "-1e400", "1e-400"]
    fixed += ['"5"', '" 5"', '"-1"', '"1e2"', '"\\u0665"', '"0x10"', *OTHER_JSON]
    fixed += [str(10**k) for k in (18, 19, 20, 37, 38, 39, 40, 300, 999)]

    def draw() -> str:
        return _integer_text(rng) if rng.random() < 0.9 else _other(rng)

    return fixed, draw


# ---------------------------------------------------------------------------------------------
# Intervals: PostgreSQL's text without months, and JSON integers.

# 2**63 - 1 µs and -2**63 µs, in days and a clock, and in hours.
INTERVAL_EDGES = (
    "106751991 days 04:00:54.775807",
    "106751991 days 04:00:54.775808",
    "-106751991 days -04:00:54.775808",
    "-106751991 days -04:00:54.775809",
    "2562047788:00:54.775807",
    "2562047788:00:54.775808",
    "-2562047788:00:54.775808",
    "-2562047788:00:54.775809",
    "999999999 days",
    "1000000000 days",
    "-999999999 days -9999999999:59:59.999999",
    "9999999999:59:59.999999",
    "99999999999:00:00",
    "0 days",
    "-0 days",
    "+1 day",
    "1 days",
    "1 day -00:00:00",
    "1 day +00:00:00",
    "00:00:00",
    "00:00:00.",
    "00:00:00.1234567",
    "1 day 1 day",
    "1 day ",
    " 1 day",
    "1 day  01:00:00",
    "01:02",
    "1:02:03",
    "1 day 24:00:00",
    "1 day 25:61:61",
    "P1D",
    "@ 1 day",
    "1 day 00:00:00 ago",
    "1 mon 1 day",
    "1 day\n",
    "01:00:00\u2028",
    "01:00:00\x85",
    "01:00:00\r\n",
    "\u0661 day",
    "-",
    "+",
    "--01:00:00",
    "-+01:00:00",
)


def _interval_text(rng: Rng) -> str:
    days = None
    if rng.random() < 0.6:
        count = rng.choice((1, 1, 2, 3, 9, 10))
        days = rng.choice(("", "", "-", "+")) + _any_digits(rng, count) + " "
        days += rng.choice(("day", "days", "days", "Day", "DAYS", "d", "dayz", "day s"))
    clock = None
    if days is None or rng.random() < 0.7:
        hours = _any_digits(rng, rng.choice((1, 2, 2, 2, 3, 10, 11)))
        minutes, seconds = rng.randint(0, 61), rng.randint(0, 61)
        clock = f"{rng.choice(('', '', '-', '+'))}{hours}:{minutes:02d}:{seconds:02d}"
        if rng.random() < 0.5:
            clock += rng.choice("...,") + _any_digits(rng, rng.randint(0, 8))
    text = rng.choice((" ", " ", " ", "", "  ", "\t")).join(p for p in (days, clock) if p)
    return _jstr(rng, _mutate(rng, text, 0.4))


def interval_texts(column: ColumnSpec, rng: Rng) -> tuple[list[str], Callable[[], str]]:
    fixed = [json.dumps(t) for t in INTERVAL_EDGES] + ["-0", "1.0", '""', *OTHER_JSON]
    fixed += [str(edge + d) for edge in (-(2**63), 2**63 - 1) for d in (-1, 0, 1)]

    def draw() -> str:
        roll = rng.random()
        if roll < 0.3:
            return _integer_text(rng)
        return _interval_text(rng) if roll < 0.95 else _other(rng)

    return fixed, draw


# ---------------------------------------------------------------------------------------------
# Floats (real, double).

FLOAT_EDGES = (
    "0",
    "-0",
    "-0.0",
    "1",
    "0.1",
    "1.5",
    "123456.789",
    "16777216",
    "16777217",
    "3.4028235e38",
    "3.4028236e38",
    "3.5e38",
    "1e38",
    "1e39",
    "-1e39",
    "1.17549435e-38",
    "1.4e-45",
    "7e-46",
    "1e-46",
    "1.7976931348623157e308",
    "1.7976931348623158e308",
    "1.7976931348623159e308",
    "1e308",
    "1e309",
    "-1e309",
    "5e-324",
    "2.5e-324",
    "2e-324",
    "1e-400",
    str(2**53 + 1),
    str(2**63),
    str(10**38),
    str(10**39),
    str(10**308),
    str(10**309),
    str(10**400),
    "0.1000000000000000055511151231257827",
    "1e0",
    "1E+0",
)


def float_texts(column: ColumnSpec, rng: Rng) -> tuple[list[str], Callable[[], str]]:
    fixed = [*FLOAT_EDGES, *(json.dumps(s) for s in NAN_SPELLINGS), '"1.5"', *OTHER_JSON]

    def draw() -> str:
        roll = rng.random()
        if roll < 0.55:
            return _number(rng)
        if roll < 0.85:
            return _jstr(rng, _mutate(rng, rng.choice(NAN_SPELLINGS), 0.5))
        return _other(rng)

    return fixed, draw


# ---------------------------------------------------------------------------------------------
# Numerics of each precision.


def _numeric_fixed(column: ColumnSpec) -> list[str]:
    precision, scale = decimal_shape(column)
    whole = precision - scale
    largest = ("9" * whole or "0") + ("." + "9" * scale if scale else "")
    texts = [largest, "-" + largest, "1" + "0" * whole, "9" * (whole + 1), "0"]
    texts += ["0." + "0" * scale + "1", "0." + "0" * (scale - 1) + "1" if scale else "1"]
    texts += [("9" * whole or "0") + "." + "9" * (scale + 1), "1e-" + str(scale)]
    texts += ["1e-" + str(scale + 1), "1e" + str(max(whole - 1, 0)), "1e" + str(whole)]
    texts += ["0e5", "0.5e1", "10e-1", "120e-1", "-0.000e99", "0.0259E1", "5E-0"]
    strings = [*texts, "0e10000", "0e-10000", "0E+9999", "1e9999", "0.0e99999", "1e0001"]
    strings += ["1_0", "\u0661\u0662", "\uff11\uff12", " 7 ", "\t7\n", "7\u2003", "\u30007"]
    strings += ["+3", "--5", ".5", "5.", ".", "-", "e5", "5e", "5e+", "0x10", "1,5", "1.5.5"]
    strings += ["\u22125", "-0", "-0.0", "00", "007.50", "1.", "1.e1", ".e1", "1e1.5", ""]
    strings += [*NAN_SPELLINGS, "NaN\n", "Infinity\u2028", "0\u2028", "0.5\x85", "5\u2029"]
    numbers = [*texts, "1.5", "0.1", "1e2", "1.23e-1", "1E-2", "100.00", "-0.0", "1e-18"]
    numbers += ["0.1000000000000000055511151231257827", "12345678901234567890.5", "1e-19"]
    numbers += ["123456789012345678.123456789012345678", "5", "-5", str(2**63), str(10**40)]
    return [json.dumps(s) for s in strings] + numbers + list(OTHER_JSON)


def _numeric_text(rng: Rng, column: ColumnSpec) -> str:
    precision, scale = decimal_shape(column)
    whole = precision - scale
    sign = rng.choice(("", "", "", "-", "-", "+", "--"))
    whole_count = max(rng.choice((0, 1, whole - 1, whole, whole + 1, rng.randint(0, precision))), 0)
    fraction_count = max(rng.choice((0, 0, scale - 1, scale, scale + 1, rng.randint(0, 8))), 0)
    text = sign + _any_digits(rng, whole_count)
    if rng.random() < 0.7:
        text = sign + (_digits(rng, whole_count) if whole_count else "")
    if fraction_count or rng.random() < 0.1:
        text += "." + _any_digits(rng, fraction_count)
    if rng.random() < 0.2:
        power = rng.choice((0, 1, 2, scale, scale + 1, precision, 99, 9999, 10000))
        text += rng.choice("eE") + rng.choice(("", "+", "-")) + str(power)
    if rng.random() < 0.2:
        return text  # a JSON number, where it is one
    return _jstr(rng, _mutate(rng, text, 0.4))


def numeric_texts(column: ColumnSpec, rng: Rng) -> tuple[list[str], Callable[[], str]]:
    def draw() -> str:
        roll = rng.random()
        if roll < 0.8:
            return _numeric_text(rng, column)
        if roll < 0.9:
            return _jstr(rng, _mutate(rng, rng.choice(NAN_SPELLINGS), 0.5))
        return _other(rng) if roll < 0.97 else _number(rng)

    return _numeric_fixed(column), draw


# ---------------------------------------------------------------------------------------------
# Booleans, text, JSON values and untyped columns: any JSON value.


def boolean_texts(column: ColumnSpec, rng: Rng) -> tuple[list[str], Callable[[], str]]:
    fixed = ['"true"', '"false"', '"True"', '"1"', '"t"', '"yes"', "1", "0", "1.0", "-0"]
    fixed += ["[true]", '{"a": true}', *OTHER_JSON]

    def draw() -> str:
        if rng.random() < 0.3:
            return _jstr(rng, _mutate(rng, rng.choice(("true", "false", "1", "0")), 0.7))
        return _json(rng)

    return fixed, draw


SURROGATE_PAIRS = ("\\ud83d\\ude80", "\\uD83D\\uDE80", "\\ud800\\udc00", "\\udbff\\udfff")


def text_texts(column: ColumnSpec, rng: Rng) -> tuple[list[str], Callable[[], str]]:
    fixed = ['""', '" "', '"\\u0000"', '"\\u001f"', '"\\/"', '"\\b\\f\\n\\r\\t"', '"\\u2028"']
    fixed += [f'"{pair}"' for pair in SURROGATE_PAIRS] + ['"a\\ud83d\\ude80b"', '"\\ufeffx"']
    fixed += [_long(rng, "x"), _long(rng, "\xfc"), _long(rng, "\U0001f680"), *OTHER_JSON]

    def draw() -> str:
        roll = rng.random()
        if roll < 0.7:
            return _jstr(rng, _text(rng, 60))
        if roll < 0.85:
            text = _jstr(rng, _text(rng, 10))
            return _insert(rng, text[1:-1], rng.choice(SURROGATE_PAIRS)).join('""')
        return _json(rng)

    return fixed, draw


def _json_document(rng: Rng) -> str:
    """JSON text for a ``json`` column: a document, or one with more after it, or none."""
    document = _json(rng, 3)
    roll = rng.randrange(12)
    if roll < 4:
        return document
    if roll == 4:
        return rng.choice((" ", "\n", "\t", "\r", "\xa0", "\ufeff")) + document
    if roll == 5:
        ending = (" ", "\n", " {}", "x", "]", "}", ",", "// c", "\x00", "\xa0", " null")
        return document + rng.choice(ending)
    if roll == 6:
        depth = rng.choice((10, 100, 500, 2000, 5000))  # not near Python's ~1000 limit
        return "[" * depth + "]" * depth
    if roll == 7:
        special = ("NaN", "Infinity", "-Infinity", "[NaN]", '{"a": Infinity}', "nan", "+1")
        return rng.choice(special)
    if roll == 8:
        return rng.choice(('{"a": 1, "a": 2}', '{"a": {"b": 1, "b": 1}}', '[{"": 0, "": 1}]'))
    if roll == 9:
        count = rng.choice((999, 1000, 1001, 4300, 4301))
        return rng.choice(("", "-", "[")) + _digits(rng, count) + rng.choice(("", ".5", "e5"))
    if roll == 10:
        return rng.choice(('"\\ud800"', '["\\udfff"]', '{"\\ud83d": 1}', '"\\ud83d\\ude80"'))
    return rng.choice(("{'a': 1}", "[1,]", '{"a" 1}', "{a: 1}", "tRUE", "", "01", "1.", ".5"))


def json_texts(column: ColumnSpec, rng: Rng) -> tuple[list[str], Callable[[], str]]:
    fixed = [json.dumps(t) for t in ("", " ", "{}", "[]", "null", "0", '"x"', "{} {}", "[] x")]
    fixed += [json.dumps(t) for t in ("\ufeff{}", "{}\n", "\n{}", "NaN", '{"a":1,"a":2}')]
    fixed += ['{"b": 1, "a": [1, 2]}', '{"\\u00fc": "\\u6771"}', "[1.50, 1e2, -0.0]", "5"]
    fixed += ["true", '"x"', "[]", "{}", _long(rng, "[1]")]

    def draw() -> str:
        roll = rng.random()
        if roll < 0.65:
            return _jstr(rng, _json_document(rng))
        if roll < 0.9:
            if rng.random() < 0.5:
                return "[" + ", ".join(_json(rng) for _ in range(rng.randrange(4))) + "]"
            return _json(rng, 3) if rng.random() < 0.5 else '{"k": ' + _json(rng) + "}"
        return _other(rng)

    return fixed, draw


def any_json_texts(column: ColumnSpec, rng: Rng) -> tuple[list[str], Callable[[], str]]:
    """json_value and untyped columns: any JSON value."""
    fixed = [*FLOAT_EDGES, "1.0", "1.50", "-0", '"\\u00fc"', '{"\\u00fc": [1.0, "\\u6771"]}']
    fixed += ['{"b": 1, "a": {"d": null, "c": true}}', "[[[[[]]]]]", "[" * 100 + "]" * 100]
    fixed += ['"{\\"a\\": 1}"', '"\\ud83d\\ude80"', _long(rng, "y"), *OTHER_JSON]
    return fixed, lambda: _json(rng, 3)


# ---------------------------------------------------------------------------------------------
# Bytes: Base64 and \x hex.


def _base64_text(rng: Rng, data: bytes) -> str:
    text = base64.b64encode(data).decode()
    form = rng.randrange(9)
    if form == 1:
        return text.rstrip("=")
    if form == 2:
        return base64.urlsafe_b64encode(data).decode()
    if form == 3:
        return _insert(rng, text, rng.choice((" ", "\n", "\r\n", "\t", "\u2028", "\x85")))
    if form == 4:
        return "\r\n".join(text[i : i + 76] for i in range(0, len(text), 76))
    if form == 5 and text.endswith("="):  # non-zero bits past the last byte
        at = len(text.rstrip("=")) - 1
        alphabet = string.ascii_uppercase + string.ascii_lowercase + string.digits + "+/"
        return text[:at] + alphabet[alphabet.index(text[at]) | 1] + text[at + 1 :]
    if form == 6:
        return text + rng.choice(("=", "==", "A", "A=", "\n", "\r\n", "\u2028", " "))
    if form == 7:
        return _mutate(rng, text, 1.0)
    return text


def _hex_text(rng: Rng, data: bytes) -> str:
    digits = data.hex()
    form = rng.randrange(10)
    if form == 1:
        digits = digits.upper()
    elif form == 2:
        digits = "".join(rng.choice((c.upper(), c)) for c in digits)
    elif form == 3 and digits:
        digits = digits[:-1]  # an odd count
    elif form == 4:
        digits = " ".join(digits[i : i + 2] for i in range(0, len(digits), 2))
    elif form == 5:
        digits = _insert(rng, digits, rng.choice((" ", "\t", "\n", "\r", "\x0b", "\x0c", "\xa0")))
    elif form == 6:
        digits = digits + rng.choice(("\n", "\r\n", "\u2028", "\x85", "g", "0"))
    elif form == 7:
        digits = _foreign_digits(rng, digits)
    prefix = "\\x" if rng.random() < 0.85 else rng.choice(("\\X", "0x", "\\\\x", " \\x", "x"))
    return prefix + digits


def bytea_texts(column: ColumnSpec, rng: Rng) -> tuple[list[str], Callable[[], str]]:
    payloads = ("", "\\x", "=", "==", "A", "AA", "AA=", "AA==", "AAA=", "AAAA", "QQ==", "QR==")
    payloads += ("QUI=", "QUJ=", "\\x0", "\\xg0", "\\x 68", "\\x6 8", "\\x68 ", "\\xABCDEF")
    payloads += ("aGVsbG8=\n", "aGVsbG8\n", "aGVs\nbG8=", "aGVsbG8=\u2028", "\\x68\u2028")
    # Padding after a whole group, which Python's decoder takes and Base64 does not have.
    payloads += ("AAAA=", "AAAA==", "AAAA====", "QUJD=", "QQ===")
    fixed = [json.dumps(p) for p in payloads] + [_long(rng, "QUJD"), *OTHER_JSON]

    def draw() -> str:
        data = rng.randbytes(rng.choice((0, 1, 2, 3, 4, 5, 16, 57, 100)))
        roll = rng.random()
        if roll < 0.5:
            return _jstr(rng, _base64_text(rng, data))
        return _jstr(rng, _hex_text(rng, data)) if roll < 0.95 else _other(rng)

    return fixed, draw


# ---------------------------------------------------------------------------------------------
# Dates, times and timestamps.

YEARS = (0, 1, 2, 999, 1000, 1582, 1900, 1969, 1970, 2000, 2023, 2024, 9999, 10000)
OFFSETS = (
    "",
    "",
    "",
    "Z",
    "Z",
    "z",
    "+00",
    "+02",
    "-05",
    "+0200",
    "-0530",
    "+02:00",
    "-05:30",
    "+23:59",
    "-23:59",
    "+24:00",
    "+12:60",
    "+02:00:30",
    "+2",
    "+020",
    "-00:00",
    "+14:00",
    "+02:00:00.5",
    " +02:00",
    "UTC",
    "+02:",
    "\u221202:00",
)


def _date_text(rng: Rng) -> str:
    year = rng.choice(YEARS)
    month = rng.choice((0, 1, 2, 2, 12, 13, rng.randint(1, 12)))
    day = rng.choice((0, 1, 28, 29, 29, 30, 31, 32, rng.randint(1, 28)))
    form = rng.randrange(12)
    if form == 0:
        return f"{year:04d}{month:02d}{day:02d}"  # basic
    if form == 1:
        return f"{year:04d}-W{rng.randint(0, 54):02d}-{rng.randint(0, 8)}"  # week date
    if form == 2:
        return f"{year:04d}-{rng.randint(0, 367):03d}"  # ordinal
    if form == 3:
        return f"{year}-{month}-{day}"
    if form == 4:
        return f"{year:04d}{rng.choice('/.')}{month:02d}{rng.choice('/.')}{day:02d}"
    return f"{year:04d}-{month:02d}-{day:02d}"


def _clock_text(rng: Rng) -> str:
    hours = rng.choice((0, 1, 12, 23, 23, 24, 25, 99, rng.randint(0, 23)))
    minutes = rng.choice((0, 30, 59, 59, 60, rng.randint(0, 59)))
    seconds = rng.choice((0, 30, 59, 59, 60, 61, rng.randint(0, 59)))
    form = rng.randrange(10)
    if form == 0:
        return f"{hours:02d}"
    if form == 1:
        return f"{hours:02d}:{minutes:02d}"
    if form == 2:
        text = f"{hours:02d}{minutes:02d}{seconds:02d}"  # basic
    elif form == 3:
        text = f"{hours}:{minutes}:{seconds}"
    else:
        text = f"{hours:02d}:{minutes:02d}:{seconds:02d}"
    fraction = rng.choice((None, None, 0, 1, 3, 6, 6, 7, 9, 10, 12))
    if fraction is not None:
        text += rng.choice("...,") + _any_digits(rng, fraction)
    return text


def _numbers_near(edges: Iterable[int], rng: Rng) -> str:
    number = rng.choice(tuple(edges)) + rng.choice((-2, -1, 0, 0, 1, 2, rng.randint(-999, 999)))
    return rng.choice((str(number), str(number), f"{number}.0", _scientific(number, rng)))


DAY_EDGES = (MIN_DAYS, MAX_DAYS, 0, 19737, -(2**31), 2**31 - 1, 999_999_999, -(2**63), 2**63 - 1)
TIME_EDGES = (0, MICROS_PER_DAY, MICROS_PER_DAY // 2, 45296789012, 2**63 - 1, -(2**63))
TIMESTAMP_EDGES = (
    0,
    MIN_MICROS,
    MAX_MICROS,
    TIMESTAMP_POS_INFINITY,
    TIMESTAMP_NEG_INFINITY,
    2**63 - 1,
    -(2**63),
    1705318200000000,
)


def _big(edges: Iterable[int]) -> list[str]:
    return [str(e + d) for e in edges for d in (-1, 0, 1)] + [str(10**38), str(10**39), "1.0"]


def date_texts(column: ColumnSpec, rng: Rng) -> tuple[list[str], Callable[[], str]]:
    payloads = ["2024-02-29", "2023-02-29", "1900-02-29", "2000-02-29", "0000-01-01"]
    payloads += ["0001-01-01", "9999-12-31", "10000-01-01", "-0001-01-01", "2024-01-15x"]
    payloads += ["2024-01-15T10:00:00Z", "2024-01-15 junk", "2024-01-1", " 2024-01-15"]
    payloads += ["2024-01-15\n", "20240115", "2024-015", "2024-W03-1", "2024-W031", ""]
    fixed = [json.dumps(p) for p in payloads] + _big(DAY_EDGES) + list(OTHER_JSON)

    def draw() -> str:
        roll = rng.random()
        if roll < 0.25:
            return _numbers_near(DAY_EDGES, rng)
        if roll < 0.95:
            suffix = rng.choice(("", "", "", "T10:00:00Z", " 10:00", "Z", "x", "\n", "+02:00"))
            return _jstr(rng, _mutate(rng, _date_text(rng) + suffix, 0.4))
        return _other(rng)

    return fixed, draw


def time_texts(column: ColumnSpec, rng: Rng) -> tuple[list[str], Callable[[], str]]:
    payloads = ["00:00:00", "23:59:59.999999", "24:00:00", "23:59:60", "12:34:56.1234567"]
    payloads += ["12:34:56,5", "T12:34:56", "t12:34", "123456", "1234", "12", "12:34:56Z\n"]
    payloads += ["12:00:00\n", "12:00:00\r\n", "12:00:00\u2028", "12:00:00\x85", "12:00:00 "]
    payloads += ["12:00:00+02:00\n", "00:30:00+01:00", "23:30:00-01:00", "12:00:00.000000001"]
    fixed = [json.dumps(p) for p in payloads] + _big(TIME_EDGES) + list(OTHER_JSON)

    def draw() -> str:
        roll = rng.random()
        if roll < 0.25:
            return _numbers_near(TIME_EDGES, rng)
        if roll < 0.95:
            prefix = rng.choice(("", "", "", "", "", "T", "t", " "))
            return _jstr(rng, _mutate(rng, prefix + _clock_text(rng) + rng.choice(OFFSETS), 0.4))
        return _other(rng)

    return fixed, draw


def _timestamp_text(rng: Rng) -> str:
    date = _date_text(rng) if rng.random() < 0.3 else f"{rng.choice(YEARS):04d}-01-15"
    if rng.random() < 0.1:
        return date
    separator = rng.choice(("T", "T", "T", " ", " ", "t", "x", "_", "  ", "T ", "/", "\u3000"))
    return date + separator + _clock_text(rng) + rng.choice(OFFSETS)


def timestamp_texts(column: ColumnSpec, rng: Rng) -> tuple[list[str], Callable[[], str]]:
    payloads = ["2024-02-29T12:00:00Z", "2023-02-29T12:00:00Z", "2016-12-31T23:59:60Z"]
    payloads += ["0001-01-01T00:00:00Z", "0001-01-01T00:00:00+01:00", "0001-01-01T00:30:00-01:00"]
    payloads += ["9999-12-31T23:59:59.999999Z", "9999-12-31T23:59:59.999999-01:00", "10000-01-01"]
    payloads += ["9999-12-31T23:00:00+01:00", "0000-12-31T23:00:00-01:00", "1970-01-01T00:00:00z"]
    payloads += ["2024-01-15T10:30:00Z\n", "\t2024-01-15T10:30:00Z", "2024-01-15T10:30:00Z\u3000"]
    payloads += ["2024-01-15T10:30:00.123456789Z", "2024-01-15T10:30:00.1234567890Z"]
    payloads += ["2024-01-15t10:30:00Z", "2024-01-15 10:30:00", "2024-01-15  10:30:00"]
    payloads += ["20240115T103000Z", "2024-01-15T103000", "2024-01-15T10", "2024-01-15T10Z"]
    fixed = [json.dumps(p) for p in payloads] + _big(TIMESTAMP_EDGES) + list(OTHER_JSON)

    def draw() -> str:
        roll = rng.random()
        if roll < 0.2:
            return _numbers_near(TIMESTAMP_EDGES, rng)
        if roll < 0.95:
            return _jstr(rng, _mutate(rng, _timestamp_text(rng), 0.35))
        return _other(rng)

    return fixed, draw


# YDB's Datetime64: seconds since the epoch; its first and last second in years 1-9999.
SECOND_EDGES = (0, MIN_MICROS // 10**6, MAX_MICROS // 10**6, 1733011200, 2**63 - 1, -(2**63))


def date32_texts(column: ColumnSpec, rng: Rng) -> tuple[list[str], Callable[[], str]]:
    fixed = [*_big(DAY_EDGES), '"2024-01-15"', '"infinity"', *OTHER_JSON]

    def draw() -> str:
        return _numbers_near(DAY_EDGES, rng) if rng.random() < 0.8 else _other(rng)

    return fixed, draw


def datetime64_texts(column: ColumnSpec, rng: Rng) -> tuple[list[str], Callable[[], str]]:
    fixed = [*_big(SECOND_EDGES), '"1733011200"', '"2024-12-01T00:00:00Z"', *OTHER_JSON]

    def draw() -> str:
        if rng.random() < 0.2:
            return _other(rng)
        if rng.random() < 0.5:
            return _numbers_near(SECOND_EDGES, rng)
        return str(rng.randint(MIN_MICROS // 10**6 - 10**6, MAX_MICROS // 10**6 + 10**6))

    return fixed, draw


# ---------------------------------------------------------------------------------------------
# UUIDs and oidvectors.


def _uuid_text(rng: Rng) -> str:
    text = str(uuid.UUID(int=rng.getrandbits(128)))
    form = rng.randrange(12)
    spellings: dict[int, Callable[[], str]] = {
        1: text.upper,
        2: lambda: "".join(rng.choice((c.upper(), c)) for c in text),
        3: lambda: "{" + text + "}",
        4: lambda: text.replace("-", ""),
        5: lambda: "urn:uuid:" + text,
        6: lambda: text + rng.choice(("\n", "\r", "\r\n", "\x85", "\u2028", "\u2029", " ")),
        7: lambda: rng.choice(WHITESPACE) + text,
        8: lambda: _drop(rng, text),
        9: lambda: text[:9] + text[10] + "-" + text[11:],
        10: lambda: _foreign_digits(rng, text),
        11: lambda: _insert(rng, text, rng.choice("gG-x0")),
    }
    return spellings.get(form, lambda: text)()


def uuid_texts(column: ColumnSpec, rng: Rng) -> tuple[list[str], Callable[[], str]]:
    canonical = "0f8fad5b-d9cb-469f-a165-70867728950e"
    payloads = [canonical, canonical.upper(), canonical + "\n", canonical + "\u2029", ""]
    payloads += ["{" + canonical + "}", canonical.replace("-", ""), "00000000-0000-0000-0000-000"]
    fixed = [json.dumps(p) for p in payloads] + list(OTHER_JSON)

    def draw() -> str:
        return _jstr(rng, _uuid_text(rng)) if rng.random() < 0.9 else _other(rng)

    return fixed, draw


OID_ITEMS = ("0", "1", "-1", "-0", "1.0", "-0.0", "1.5", "1e2", '"1"', "null", "true", "[]")
OID_ITEMS += ("[1]", "{}", str(2**63 - 1), str(-(2**63)), str(2**63), str(-(2**63) - 1))
OID_ITEMS += (str(2**64), str(10**38), str(10**40), "4294967295", "4294967296")


def oidvector_texts(column: ColumnSpec, rng: Rng) -> tuple[list[str], Callable[[], str]]:
    fixed = ["[]", "[[]]", "[[1]]", '"[1]"', "[1, [2]]", "[0.0]", *OTHER_JSON]

    def draw() -> str:
        if rng.random() < 0.9:
            items = [rng.choice(OID_ITEMS) for _ in range(rng.randrange(6))]
            return "[" + rng.choice((", ", ",", " , ")).join(items) + "]"
        return _other(rng)

    return fixed, draw


GENERATORS: dict[str, Callable[[ColumnSpec, Rng], tuple[list[str], Callable[[], str]]]] = {
    "smallint": integer_texts,
    "integer": integer_texts,
    "bigint": integer_texts,
    "oid": integer_texts,
    "interval": interval_texts,
    "real": float_texts,
    "double": float_texts,
    "numeric": numeric_texts,
    "boolean": boolean_texts,
    "text": text_texts,
    "bytea": bytea_texts,
    "date": date_texts,
    "time": time_texts,
    "timetz": time_texts,
    "timestamp": timestamp_texts,
    "timestamptz": timestamp_texts,
    "date32": date32_texts,
    "datetime64": datetime64_texts,
    "json": json_texts,
    "json_value": any_json_texts,
    "uuid": uuid_texts,
    "oidvector": oidvector_texts,
    "untyped": any_json_texts,
}


# ---------------------------------------------------------------------------------------------
# Which texts both parsers read as the same JSON value.


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Python reads NaN and Infinity; Spark does not


def _short_number(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def number(text: str) -> Any:
        if len(text) > 1000:
            raise ValueError("a number longer than Spark's JSON reader takes")
        return parse(text)

    return number


def _lone_surrogate(value: Any) -> bool:
    """Whether a string in ``value`` holds a lone UTF-16 surrogate (Spark refuses them)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and any("\ud800" <= c <= "\udfff" for c in item):
            return True
        if isinstance(item, dict):
            stack.extend([*item.keys(), *item.values()])
        elif isinstance(item, list):
            stack.extend(item)
    return False


def is_input(text: str) -> bool:
    """Whether ``text`` is a JSON value that reaches the decoders on both sides: one that Python
    and Spark both parse, to the same value. Texts that only one of the two parsers reads
    (NaN, lone surrogates, numbers of over 1,000 characters) are not values
    of a column, so they are not generated."""
    try:
        value = json.loads(
            text,
            parse_constant=_no_constant,
            parse_int=_short_number(int),
            parse_float=_short_number(float),
        )
    except (ValueError, RecursionError):
        return False
    return not _lone_surrogate(value)


def fuzz_cases(columns: Iterable[ColumnSpec], per_family: int = PER_FAMILY) -> dict[Any, Any]:
    """The texts of each column family: its fixed edge cases, then random ones up to
    ``per_family``; ``null`` first. Deterministic: each family draws from its own seed."""
    cases: dict[ColumnSpec, list[str]] = {}
    for column in columns:
        rng = random.Random(f"{SEED}/{column.pg_type}/{column.precision}/{column.scale}")
        fixed, draw = GENERATORS[column.pg_type](column, rng)
        texts = dict.fromkeys(t for t in ["null", *fixed] if is_input(t))
        for _ in range(per_family * 20):
            if len(texts) >= per_family:
                break
            text = draw()
            if is_input(text):
                texts[text] = None
        cases[column] = list(texts)
    return cases


# ---------------------------------------------------------------------------------------------
# The comparison, as test_values compares.


def _outcome(column: ColumnSpec, value: Any) -> Outcome:
    """The core's outcome for a parsed JSON value (``test_values.core_of_value``)."""
    try:
        return core_of_value(column, value)
    except Exception as err:  # the core raises DecodeError only: anything else is a finding
        return (f"raised {type(err).__name__}", str(err)[:80], None)


def _core(column: ColumnSpec, text: str) -> Outcome:
    try:
        return core(column, text)
    except Exception as err:  # as in _outcome
        return (f"raised {type(err).__name__}", str(err)[:80], None)


def _normal(column: ColumnSpec, outcome: Outcome) -> Outcome:
    kind, value, special = outcome
    try:
        return (kind, normalized(column, value), special)
    except (ValueError, OverflowError, RecursionError) as err:  # year 10000 in UTC; deep JSON
        return (kind, f"not normalizable: {value!r} ({err})", special)


def _same(column: ColumnSpec, want: Outcome, have: Outcome) -> bool:
    return _normal(column, want) == _normal(column, have)


# ---------------------------------------------------------------------------------------------
# The documented differences. Each takes the column, the JSON text, the core's outcome and the
# JVM's (unnormalized) and holds only where the difference is the documented one.

_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def variant_number_by_value(column: ColumnSpec, text: str, want: Outcome, have: Outcome) -> bool:
    """values.py: "Spark's VARIANT stores a number by value, so ``1.0`` is the integer 1".

    Holds only for a bare JSON number with a fraction or an exponent whose value is integral,
    where the JVM's outcome is exactly the core's outcome for the integer it equals.
    (Untyped columns: see ``spark_compact_json``.)
    """
    if column.pg_type == "untyped" or not _JSON_NUMBER.fullmatch(text):
        return False
    if text.lstrip("-").isdigit():
        return False  # an integer: Python and VARIANT read it alike
    exact = Decimal(text)
    if not exact.is_finite() or exact != exact.to_integral_value():
        return False
    return _same(column, _outcome(column, int(exact)), have)


# ISO 8601's extended format, as the vendors write it: ``YYYY-MM-DD``, ``hh:mm[:ss[.f...]]``
# (a full stop or a comma, any number of digits), a ``T`` or a space between, and ``Z``,
# ``±hh``, ``±hhmm`` or ``±hh:mm`` (minutes 00-59). ASCII digits only.
_CLOCK = r"[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:[.,][0-9]+)?)?"
_OFFSET = r"(?:Z|[+-][0-9]{2}(?::?[0-5][0-9])?)"
_DAY = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_ISO_FORMS: dict[str, tuple[Callable[[str], str], re.Pattern[str]]] = {
    # What the core parses of the text: a date's first ten characters, a timestamp stripped.
    "date": (lambda v: v[:10], re.compile(_DAY)),
    "time": (lambda v: v, re.compile(f"{_CLOCK}{_OFFSET}?")),
    "timetz": (lambda v: v, re.compile(f"{_CLOCK}{_OFFSET}?")),
    "timestamp": (str.strip, re.compile(f"{_DAY}(?:[T ]{_CLOCK}{_OFFSET}?)?")),
    "timestamptz": (str.strip, re.compile(f"{_DAY}(?:[T ]{_CLOCK}{_OFFSET}?)?")),
}


def iso_forms_only(column: ColumnSpec, text: str, want: Outcome, have: Outcome) -> bool:
    """values.py: "text forms follow the vendors' documented forms (ISO 8601 dates, times and
    timestamps) rather than every form Python's parsers accept".

    Holds only where the core takes a JSON string of a date or time family that the JVM
    refuses, and the text the core parses is not in ISO 8601's extended format (basic and
    week forms, other separators, a lowercase ``t``, offsets with seconds...). A text in that
    format that the two read differently, or one the JVM takes and the core refuses, is a
    mismatch.
    """
    form = _ISO_FORMS.get(column.pg_type)
    if form is None or want[0] != "ok" or have[0] != "error":
        return False
    value = json.loads(text)
    read, pattern = form
    return isinstance(value, str) and pattern.fullmatch(read(value)) is None


def _tagged(value: Any) -> Any:
    """A parsed JSON value in which a boolean never equals a number."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, dict):
        return {key: _tagged(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_tagged(item) for item in value]
    return value


def spark_compact_json(column: ColumnSpec, text: str, want: Outcome, have: Outcome) -> bool:
    """values.py: "JSON objects stored as text are Spark's compact JSON (non-ASCII characters
    kept as they are)" (and a number written by its VARIANT value): an untyped column keeps a
    non-string value as text spelled otherwise than the core's ``json.dumps``.

    Holds only for an untyped column and a non-string JSON value, where both texts parse to
    the same JSON value (numbers compared as Python reads them, booleans never numbers).
    """
    if column.pg_type != "untyped" or want[0] != "ok" or have[0] != "ok":
        return False
    if isinstance(json.loads(text), str) or not isinstance(have[1], str):
        return False
    return _tagged(json.loads(want[1])) == _tagged(json.loads(have[1]))


# A JSON number token (outside strings or in them: a predicate below only loosens where one is).
_NUMBER_TOKEN = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def _beyond_variant(text: str) -> bool:
    """Whether ``text`` writes a number VARIANT cannot hold as written: one of more than 38
    digits, or of more than 38 after its point (VARIANT's widest decimal; zeros that end a
    fraction count), which it keeps as a DOUBLE, or a number past a double's range, which
    becomes infinite."""
    for token in _NUMBER_TOKEN.findall(text):
        if math.isinf(float(token)):
            return True
        if re.search("[eE]", token):
            continue
        whole, _, fraction = token.lstrip("-").partition(".")
        if len((whole + fraction).lstrip("0")) > 38 or len(fraction) > 38:
            return True
    return False


def variant_double(column: ColumnSpec, text: str, want: Outcome, have: Outcome) -> bool:
    """values.py: "a number written with an exponent is a DOUBLE too, so a numeric column
    takes it rounded to a double's 17 digits (zero below a double's range)", as is one of
    more than 38 digits.

    Holds only for a bare JSON number with an exponent or past 38 digits that its double
    does not write back
    (more digits than the double keeps, or past its range), where the JVM's outcome is exactly
    the core's for that double."""
    if not _JSON_NUMBER.fullmatch(text):
        return False
    if not re.search("[eE]", text) and not _beyond_variant(text):
        return False
    rounded = float(text)
    return Decimal(text) != Decimal(repr(rounded)) and _same(
        column, _outcome(column, rounded), have
    )


def variant_number_range(column: ColumnSpec, text: str, want: Outcome, have: Outcome) -> bool:
    """values.py: "an integer of more than 38 digits is a DOUBLE in a VARIANT, and a number
    past a double's range an infinite one": a date of such an integer is refused (the core
    reads an infinity sentinel), and a JSON value kept as text (json, json_value, untyped)
    holds the double (``1.0E38``; ``"Infinity"``), where the core keeps the digits.

    Holds only for those families, for a text that writes such a number."""
    if column.pg_type == "date":
        return have[0] == "error" and _beyond_variant(text)
    if column.pg_type not in ("json", "json_value", "untyped"):
        return False
    return (
        have[0] == "ok"
        and isinstance(json.loads(text), dict | list | int | float)
        and (_beyond_variant(text))
    )


def spark_number_length(column: ColumnSpec, text: str, want: Outcome, have: Outcome) -> bool:
    """values.py: "a number of more than 1,000 characters is past what Spark's JSON reader
    takes": JSON text in a json column that writes one is refused (quarantined), where the
    core reads it.

    Holds only for a json column's string value that the JVM refuses, with such a number."""
    if column.pg_type != "json" or have[0] != "error" or want[0] != "ok":
        return False
    value = json.loads(text)
    return isinstance(value, str) and any(
        len(token) > 1000 for token in _NUMBER_TOKEN.findall(value)
    )


DOCUMENTED: dict[str, Callable[[ColumnSpec, str, Outcome, Outcome], bool]] = {
    "variant_number_by_value": variant_number_by_value,
    "iso_forms_only": iso_forms_only,
    "spark_compact_json": spark_compact_json,
    "variant_number_range": variant_number_range,
    "variant_double": variant_double,
    "spark_number_length": spark_number_length,
}


def documented(column: ColumnSpec, text: str, want: Outcome, have: Outcome) -> str | None:
    """The name of the documented difference that ``have`` is, if any."""
    for name, holds in DOCUMENTED.items():
        if holds(column, text, want, have):
            return name
    return None


FUZZ = fuzz_cases(CASES)


# ---------------------------------------------------------------------------------------------
# The two Spark passes.

_EPOCH = dt.datetime(1970, 1, 1)


def _collected(column: ColumnSpec, value: Any) -> Any:
    """The value in a form PySpark always collects: a date as days and a timestamp as µs
    since the epoch (PySpark's own conversion fails outside years 1-9999, and for a
    TIMESTAMP within a day of 0001-01-01, where ``datetime.fromtimestamp`` looks a day back)."""
    from pyspark.sql import functions as F

    if column.pg_type in ("date", "date32"):
        return F.unix_date(value)
    if column.pg_type in ("timestamp", "timestamptz", "datetime64"):
        return F.unix_micros(value.cast("timestamp"))  # the session's zone is UTC
    return value


_DATED = ("date", "date32", "timestamp", "timestamptz", "datetime64")


def _python(column: ColumnSpec, value: Any) -> Any:
    """A collected value as ``test_values.cells`` has it; a text where Python has none."""
    if value is None or column.pg_type not in _DATED:
        return value
    days = column.pg_type in ("date", "date32")
    try:
        if days:
            return _EPOCH.date() + dt.timedelta(days=value)
        moment = _EPOCH + dt.timedelta(microseconds=value)
    except OverflowError:
        unit = "days" if days else "µs"
        return f"{value} {unit} from the epoch: outside years 1-9999"
    return moment.replace(tzinfo=dt.UTC) if column.pg_type == "timestamptz" else moment


def decoded(spark: Any, cases: dict[ColumnSpec, list[str]], fast: bool) -> dict[Any, Any]:
    """One Spark pass of :func:`decode_columns` (or :func:`decode_fast`) over every text: per
    (family, row) whether Spark parsed the text, and the decoded parts."""
    from pyspark.sql import functions as F

    frame, specs = case_frame(spark, cases)
    slots = {spec.name: f"v{i}" for i, spec in enumerate(specs)}
    if fast:
        staged, parts, common = decode_fast(frame, specs, slots)
    else:
        staged, parts = decode_columns(frame, specs, slots)
        common = {spec.name: F.lit(False) for spec in specs}
    selected = staged.select(
        "row",
        *(
            F.struct(
                F.col(slots[s.name]).isNull().alias("unparsed"),
                common[s.name].alias("common"),
                _collected(s, parts[s.name].value).alias("value"),
                special_of(parts[s.name]).alias("special"),
                parts[s.name].error.alias("error"),
            ).alias(s.name)
            for s in specs
        ),
    )
    lengths = [len(texts) for texts in cases.values()]
    return {
        (i, row["row"]): row[spec.name]
        for row in selected.collect()
        for i, spec in enumerate(specs)
        if row["row"] < lengths[i]
    }


# ---------------------------------------------------------------------------------------------
# The comparison.


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 90 else f"{text[:80]}... ({len(text)} characters)"


def compare(
    cases: dict[ColumnSpec, list[str]], full: dict[Any, Any], fast: dict[Any, Any]
) -> tuple[list[str], dict[str, int]]:
    """Every text whose JVM outcome (full rules, or common form where it applies) differs
    from the core's other than as documented, one line each; and how many documented
    differences each predicate excused. Each comparison is ``test_values``': outcome, value
    (``normalized``) and special marker."""
    undocumented: list[str] = []
    excused: dict[str, int] = {}
    for i, (column, texts) in enumerate(cases.items()):
        for row, text in enumerate(texts):
            want = _core(column, text)
            cell, quick = full[(i, row)], fast[(i, row)]
            assert quick["special"] is None and quick["error"] is None, (column, text)
            have = (
                "error" if cell["error"] is not None else "ok",
                None if cell["error"] is not None else _python(column, cell["value"]),
                cell["special"],
            )
            taken, value = quick["common"], _python(column, quick["value"])
            if text == "null":
                assert taken and value is None, (column.pg_type, text)
            outcomes = [("full", have)] + ([("common", ("ok", value, None))] if taken else [])
            wrong = ["unparsed"] if cell["unparsed"] else []
            for decoder, outcome in outcomes:
                if _same(column, want, outcome):
                    continue
                name = documented(column, text, want, outcome)
                if name is None:
                    wrong.append(decoder)
                else:
                    excused[name] = excused.get(name, 0) + 1
            if wrong:
                undocumented.append(
                    f"{family_of(column)} {_shown(text)} [{'+'.join(wrong)}]: core {_shown(want)}"
                    f" | full {_shown(have)} | common {_shown(value) if taken else 'not taken'}"
                )
    return undocumented, excused


def test_jvm_decoders_agree_with_the_core_on_fuzzed_values(spark: Any) -> None:
    full = decoded(spark, FUZZ, fast=False)
    fast = decoded(spark, FUZZ, fast=True)
    undocumented, excused = compare(FUZZ, full, fast)
    sizes = {family_of(c): len(t) for c, t in FUZZ.items()}
    assert undocumented == [], (
        f"{len(undocumented)} undocumented mismatches (documented: {excused}; texts per family:"
        f" {sizes}):\n" + "\n".join(undocumented)
    )
