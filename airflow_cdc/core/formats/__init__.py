"""Parsers for each source's change-record format, one module per format.

A parser turns one delivered :class:`~airflow_cdc.core.events.Message` into a
:class:`~airflow_cdc.core.events.ChangeRecord`, a :class:`~airflow_cdc.core.events.Fragment`
or a :class:`~airflow_cdc.core.events.Control` message, or raises
:class:`~airflow_cdc.core.exceptions.RecordFormatError`.
"""

from __future__ import annotations

from collections.abc import Callable

from airflow_cdc.core.events import ChangeRecord, Control, Fragment, Message
from airflow_cdc.core.formats import cockroach, debezium, dsql, ydb

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
# Formats whose streams carry their own resolved timestamps (resolved messages, heartbeats).
IN_BAND_RESOLVED = frozenset({"ydb", "cockroachdb", "cdl"})


def parser_for(name: str) -> Parser:
    """The parser of format ``name``."""
    try:
        return PARSERS[name]
    except KeyError:
        raise ValueError(f"format must be one of {sorted(PARSERS)}, got {name!r}") from None


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
        parsed = PARSERS[fmt](message)
    except Exception:
        return None
    return parsed.resolved_us if isinstance(parsed, Control) else None
