"""JSON numbers that keep their digits through a parse and a dump.

Python reads a JSON number with a fraction or an exponent as a float, which keeps about 17
significant digits: a CockroachDB ``DECIMAL`` of 30 digits, written as a JSON number, would
lose its tail on the way to its column. :class:`JsonNumber` is a float that remembers its
text, and :func:`dump` writes it back as that text.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any


class JsonNumber(float):
    """A JSON number with a fraction or an exponent: a float that keeps its text."""

    text: str

    def __new__(cls, text: str) -> JsonNumber:
        number = super().__new__(cls, text)
        number.text = text
        return number


# One decoder for the common call: ``json.loads`` with an argument builds a decoder per call.
_DECODER = json.JSONDecoder(parse_float=JsonNumber)


def loads(text: str, **kwargs: Any) -> Any:
    """``json.loads`` with fractional numbers read as :class:`JsonNumber`."""
    if not kwargs and isinstance(text, str) and not text.startswith("\ufeff"):
        return _DECODER.decode(text)  # what json.loads does past its checks of the text
    kwargs.setdefault("parse_float", JsonNumber)
    return json.loads(text, **kwargs)


# A placeholder for a number in a dump: the NUL characters are escaped in the dump, and the
# nonce, drawn once per process, cannot be written by the data.
_NONCE = secrets.token_hex(16)
_PLACEHOLDER = re.compile(rf'"\\u0000{_NONCE}(\d+)\\u0000"')


# The encoders of the two dumps the project makes (``json.dumps`` with an argument builds an
# encoder per call): as written, and compact with sorted keys.
_PLAIN = json.JSONEncoder(ensure_ascii=False)
_COMPACT_ARGS: dict[str, Any] = {"separators": (",", ":"), "sort_keys": True}
_COMPACT = json.JSONEncoder(ensure_ascii=False, **_COMPACT_ARGS)


def dump(value: Any, **kwargs: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, **kwargs)``, each :class:`JsonNumber` written as
    the text it was read from."""
    if not _holds_number(value):
        return _encode(value, kwargs)
    numbers: list[str] = []
    # A copy with each JsonNumber replaced by a placeholder, built without recursion: a value
    # may nest as deep as the parser allows.
    holder: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(holder, 0, value)]
    while stack:
        parent, slot, item = stack.pop()
        if isinstance(item, JsonNumber):
            numbers.append(_held_exactly(item.text))
            parent[slot] = f"\0{_NONCE}{len(numbers) - 1}\0"
        elif isinstance(item, dict):
            parent[slot] = mapping = dict.fromkeys(item)
            stack.extend((mapping, key, inner) for key, inner in item.items())
        elif isinstance(item, list):
            parent[slot] = array = [None] * len(item)
            stack.extend((array, index, inner) for index, inner in enumerate(item))
        else:
            parent[slot] = item
    text = _encode(holder[0], kwargs)
    if not numbers:
        return text
    return _PLACEHOLDER.sub(lambda match: numbers[int(match[1])], text)


# Spark holds a JSON number of up to 38 significant digits exactly (a VARIANT's DECIMAL); a
# longer literal it reads as a DOUBLE, rounded to 17.
SPARK_DIGITS = 38


def _held_exactly(text: str) -> str:
    """A number literal as Spark reads it exactly where it can: the zeros that end a fraction
    are no digits of the value, and a literal longer than :data:`SPARK_DIGITS` digits is
    written without them (CockroachDB pads a DECIMAL to its scale:
    ``123456789012345678.1000000000000000000000`` is 40 digits, and 19 without the zeros)."""
    if len(text) <= SPARK_DIGITS or "." not in text or "e" in text or "E" in text:
        return text
    short = text.rstrip("0")
    return short[:-1] if short.endswith(".") else short


def _encode(value: Any, kwargs: dict[str, Any]) -> str:
    """``json.dumps(value, ensure_ascii=False, **kwargs)``, by a shared encoder where
    ``kwargs`` are one of the project's two."""
    if not kwargs:
        return _PLAIN.encode(value)
    if kwargs == _COMPACT_ARGS:
        return _COMPACT.encode(value)
    return json.dumps(value, ensure_ascii=False, **kwargs)


def _holds_number(value: Any) -> bool:
    """Whether ``value`` holds a :class:`JsonNumber` anywhere (looked for without a copy,
    and without recursion)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif isinstance(item, (JsonNumber, dict, list)):
            return True  # a number, or a subclass of a container: the general path
    return False


class NotJson(ValueError):
    """A literal Python's reader takes that JSON text has not (``NaN``, ``Infinity``)."""


def refuse_constant(name: str) -> Any:
    """``parse_constant`` for RFC 8259 JSON text: no ``NaN``, ``Infinity`` or ``-Infinity``
    (Python's reader takes them; PostgreSQL's ``json`` and Spark's reader do not)."""
    raise NotJson(f"{name} is not JSON")


# One decoder for every strict parse, kept here rather than in a job's module: a job run as a
# script pickles the globals its tasks use, and a decoder does not pickle (an imported
# module's globals are not pickled).
_RFC8259 = json.JSONDecoder(parse_constant=refuse_constant)


def loads_rfc8259(text: str) -> Any:
    """``json.loads`` of RFC 8259 JSON text: :class:`NotJson` (a ``ValueError``) for ``NaN``,
    ``Infinity`` and ``-Infinity``, which Python's reader takes."""
    if text.startswith("\ufeff"):
        return json.loads(text, parse_constant=refuse_constant)  # its error for the BOM
    return _RFC8259.decode(text)  # what json.loads does past its checks of the text


def has_lone_surrogate(value: Any) -> bool:
    """Whether a string of a parsed JSON value (a key too) holds half a UTF-16 pair, as the
    escape ``"\\ud800"`` gives: no Unicode text (Spark's reader and PostgreSQL's ``jsonb``
    refuse it; its ``json`` checks only the escape's syntax)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if any("\ud800" <= c <= "\udfff" for c in item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
