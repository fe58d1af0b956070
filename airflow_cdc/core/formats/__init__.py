"""Parsers for each source's change-record format, one module per format.

A parser turns one delivered :class:`~airflow_cdc.core.events.Message` into a
:class:`~airflow_cdc.core.events.ChangeRecord`, a :class:`~airflow_cdc.core.events.Fragment`
or a :class:`~airflow_cdc.core.events.Control` message, or raises
:class:`~airflow_cdc.core.exceptions.RecordFormatError`: :func:`parser_for` gives each parser
with the errors that a record's content can raise in Python (a number past the integer
digit limit, a position wider than its padding, nesting past the recursion limit) turned into
``RecordFormatError('invalid_record', ...)`` too, so that callers catch that alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from airflow_cdc.core.events import ChangeRecord, Control, Fragment, Message
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats import cockroach, debezium, dsql, ydb
from airflow_cdc.core.formats.common import RecordLimits, bounded
from airflow_cdc.core.types import MAX_MICROS, MIN_MICROS

Parser = Callable[[Message], ChangeRecord | Fragment | Control]
PARSERS: dict[str, Parser] = {
    "dsql": dsql.parse_message,
    "ydb": ydb.parse_json,
    "ydb-debezium": ydb.parse_debezium,
    "cockroachdb": cockroach.parse_message,
    # Arcion Replicant's JSON CDC is Debezium-shaped: key and value, schema and payload.
    "arcion": debezium.parse_debezium,
    "cdl": debezium.parse_cdl,
    "debezium": debezium.parse_debezium,
}
# Formats whose parsers read a Kafka message's key (YDB's JSON carries the key in the value).
MESSAGE_KEYED = frozenset({"debezium", "arcion", "cdl", "ydb-debezium", "cockroachdb"})
# Formats whose streams carry their own resolved timestamps (resolved messages, heartbeats).
IN_BAND_RESOLVED = frozenset({"ydb", "cockroachdb", "cdl"})
# Formats whose json/jsonb columns carry the JSON value itself, where the others (DSQL, Kafka
# Connect's Json) carry JSON text in a string: CockroachDB's changefeeds write a JSONB datum
# as its JSON value, and YDB's (JSON and Debezium-compatible) do so for a Json column.
EMBEDDED_JSON = frozenset({"ydb", "ydb-debezium", "cockroachdb"})
# Formats whose records never name their columns' types (``ChangeRecord.types``, Debezium's
# Connect schema): apply_changes does not look for such types in their changes. A format not
# listed is looked at, whether or not its records name any.
UNTYPED = frozenset({"dsql"})
# Formats whose every change names its schema (DSQL's ``source.schema``): an empty schema
# names no declared table.
NAMES_SCHEMAS = frozenset({"dsql"})
# Formats whose oversized images arrive as chunked records and fragments.
FRAGMENTED = frozenset({"dsql"})


# What a record's content can make Python raise while it is parsed.
# (ArithmeticError: decimal.InvalidOperation, from a Connect Decimal scale of 10**21.)
_CONTENT_ERRORS = (ValueError, TypeError, ArithmeticError, RecursionError)


def parser_for(name: str, record_limits: RecordLimits | None = None) -> Parser:
    """The parser of format ``name``; it raises :class:`RecordFormatError` and nothing else
    for whatever a record holds, and holds records to ``record_limits`` (default
    :class:`~airflow_cdc.core.formats.common.RecordLimits`)."""
    try:
        parser = PARSERS[name]
    except KeyError:
        raise ValueError(f"format must be one of {sorted(PARSERS)}, got {name!r}") from None
    return functools.partial(_checked, parser, record_limits or RecordLimits())


def _checked(
    parser: Parser, record_limits: RecordLimits, message: Message
) -> ChangeRecord | Fragment | Control:
    try:
        with bounded(record_limits):
            parsed = parser(message)
    except RecordFormatError:
        raise
    except _CONTENT_ERRORS as err:
        detail = f"{type(err).__name__}: {str(err)[:1000]}"
        raise RecordFormatError("invalid_record", detail) from err
    if isinstance(parsed, Control):
        _check_time(parsed.resolved_us, "invalid_resolved", f"resolved time ({parsed.detail})")
    elif isinstance(parsed, ChangeRecord):
        _check_time(parsed.commit_ts_us, "invalid_timestamp", "commit time")
    return parsed


def _check_time(micros: int | None, reason: str, what: str) -> None:
    """A time a record names must be one the calendar holds (years 1-9999)."""
    if micros is not None and not MIN_MICROS <= micros <= MAX_MICROS:
        raise RecordFormatError(reason, f"{what}: {micros} µs is outside years 1-9999")


def resolved_marker(fmt: str, message: Message) -> int | None:
    """The resolved timestamp (µs) that ``message`` carries, if ``fmt`` has in-band markers.

    Landing calls this on every message of an in-band format; anything that is not a marker
    (a change, or a bad record that the reassemble step will quarantine) gives ``None``.
    """
    if fmt not in IN_BAND_RESOLVED or message.value is None:
        return None
    if fmt != "cdl" and '"resolved"' not in message.value:
        return None
    try:
        parsed = parser_for(fmt)(message)
    except RecordFormatError:
        return None
    return parsed.resolved_us if isinstance(parsed, Control) else None
