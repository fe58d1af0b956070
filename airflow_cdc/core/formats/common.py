"""Helpers that every JSON format parser shares: strict field access with stable reasons."""

from __future__ import annotations

import contextvars
import functools
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from airflow_cdc.core import jsontext
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.jsontext import JsonNumber
from airflow_cdc.core.ordering import sequence_key

# The most fragments one image may have. A Kinesis record holds up to 1 MiB and a DSQL row far
# less than this many of them; a larger count is a bad record, and buffering for it would hold
# every later fragment of its chunk_id until the set expires.
MAX_FRAGMENTS = 10_000
# The most distinct fragment data (UTF-8 bytes; a redelivered fragment counts once) one
# chunk_id may gather: a set is reassembled in one row of one task, which holds its data a
# few times over, and an image Spark can read back holds at most 128 MiB (a VARIANT's
# bound), so a set past this can never succeed, and gathering it could fail every retry of
# the job. Such a set fails as ``oversized_fragment_set``. It is also the most it may be set
# to: lower, never higher.
MAX_SET_BYTES = 256 * 2**20
SET_BYTES_CEILING = MAX_SET_BYTES
# The longest JSON number literal (characters: digits, sign, point, exponent): Spark's JSON
# reader (Jackson's ``StreamReadConstraints.maxNumberLength``) reads no longer one, and a
# record whose image Spark cannot read back would lose the image.
MAX_NUMBER_LENGTH = 1_000
# The widest setting of MAX_FRAGMENTS: a fragment's index must stay far inside a Spark INT.
FRAGMENTS_CEILING = 1_000_000


@dataclass(frozen=True)
class RecordLimits:
    """Bounds on what one record may hold; past one, the record is a bad record."""

    fragments: int = MAX_FRAGMENTS  # fragments of one image (DSQL ``total_fragments``)
    number_length: int = MAX_NUMBER_LENGTH  # characters of one JSON number literal

    def __post_init__(self) -> None:
        if not 1 <= self.fragments <= FRAGMENTS_CEILING:
            raise ValueError(
                f"fragments per image must be 1 to {FRAGMENTS_CEILING:,}, got {self.fragments!r}"
            )
        if not 1 <= self.number_length <= MAX_NUMBER_LENGTH:
            raise ValueError(
                f"characters per number must be 1 to {MAX_NUMBER_LENGTH:,}"
                f" (Spark's JSON reader's limit), got {self.number_length!r}"
            )


_DEFAULT_LIMITS = RecordLimits()
_LIMITS: contextvars.ContextVar[RecordLimits | None] = contextvars.ContextVar(
    "record_limits", default=None
)


def limits() -> RecordLimits:
    """The bounds of the record being parsed (see :func:`bounded`)."""
    return _LIMITS.get() or _DEFAULT_LIMITS


@contextmanager
def bounded(record_limits: RecordLimits) -> Iterator[None]:
    """Parse the records of this block under ``record_limits``."""
    token = _LIMITS.set(record_limits)
    try:
        yield
    finally:
        _LIMITS.reset(token)


def load_json(text: str | None, strict: bool = False) -> Any:
    """Parse a message's JSON text; ``malformed_json`` when it is not JSON, ``invalid_record``
    when a number literal is longer than the limits allow. With ``strict``, only RFC 8259
    JSON text: no ``NaN`` or ``Infinity`` literal and no lone UTF-16 surrogate escape
    (``"\\ud800"``), which Python's reader takes and a JVM parser refuses."""
    if text is None:
        raise RecordFormatError("malformed_json", "the message has no value")
    most = limits().number_length
    hooks: dict[str, Any] = {"parse_constant": jsontext.refuse_constant} if strict else {}
    try:
        if len(text) <= most or _long_run(most).search(text) is None:
            doc = jsontext.loads(text, **hooks)  # no literal can be too long: no length hook
        else:
            doc = jsontext.loads(
                text,
                parse_int=lambda s: int(_length(s, most)),
                parse_float=lambda s: JsonNumber(_length(s, most)),
                **hooks,
            )
    except (json.JSONDecodeError, jsontext.NotJson, RecursionError) as err:
        raise RecordFormatError("malformed_json", str(err)) from err
    if strict and "\\u" in text and jsontext.has_lone_surrogate(doc):
        raise RecordFormatError("malformed_json", "a string holds a lone UTF-16 surrogate")
    return doc


@functools.lru_cache(maxsize=8)
def _long_run(most: int) -> re.Pattern[str]:
    """A run of number characters longer than ``most``: where a literal could be too long."""
    return re.compile(f"[-+.0-9eE]{{{most + 1},}}")


def _length(literal: str, most: int) -> str:
    if len(literal) > most:
        raise RecordFormatError(
            "invalid_record",
            f"a number of {len(literal):,} characters is over the limit of {most:,}",
        )
    return literal


def load_object(text: str | None, strict: bool = False) -> dict[str, Any]:
    """A message's JSON object (``strict``: see :func:`load_json`)."""
    doc = load_json(text, strict)
    if not isinstance(doc, dict):
        raise RecordFormatError("malformed_json", f"expected a JSON object, got {kind(doc)}")
    return doc


def require(doc: dict[str, Any], field: str, expected: type) -> Any:
    value = doc.get(field)
    if expected is int and isinstance(value, bool):
        value = None
    if not isinstance(value, expected):
        raise RecordFormatError(
            "missing_field", f"{field} must be {expected.__name__}, got {kind(value)}"
        )
    return value


def integer(value: Any, name: str) -> int:
    """An integer given as a JSON number or as a decimal string."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.removeprefix("-").isdigit() and value.isascii():
        return int(value)
    raise RecordFormatError("missing_field", f"{name} must be an integer, got {value!r}")


def optional_integer(value: Any, name: str) -> int | None:
    return None if value is None else integer(value, name)


def image(value: Any, name: str) -> dict[str, Any] | None:
    """A row image: an object, or ``None`` for null (and for the empty object ``{}``)."""
    if value is None or isinstance(value, dict):
        return value or None
    raise RecordFormatError("invalid_image", f"{name} must be an object or null, got {kind(value)}")


# The sequence prefix of a record that carries no commit position at all (a CockroachDB
# message without ``updated``, a YDB record without ``ts``): only its place in its partition
# orders it, among the messages of its key (see spark_jobs.resolve.place_unordered).
UNORDERED = sequence_key(0) + "~"
# Between the sequence key of the change a record without a commit position follows and its
# position, once placed (spark_jobs.resolve.place_unordered): "~" sorts after every digit,
# so the record comes after every change of that commit time (a redelivery of the change it
# follows too), and before any later one.
PLACED = "~~"


def position_sequence(position: str, *parts: int) -> str:
    """Sequence of a record ordered by ``parts`` (if any), then by its place in its partition."""
    return f"{sequence_key(*parts)}~{position}" if parts else UNORDERED + position


def kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
