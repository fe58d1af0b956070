"""Parsers for each source's change-record format, one module per format.

A parser turns one record's text into a :class:`~airflow_cdc.core.events.ChangeRecord` or a
:class:`~airflow_cdc.core.events.Fragment`, or raises
:class:`~airflow_cdc.core.exceptions.RecordFormatError`.
"""

from __future__ import annotations

from collections.abc import Callable

from airflow_cdc.core.events import ChangeRecord, Fragment
from airflow_cdc.core.formats import dsql

Parser = Callable[[str], ChangeRecord | Fragment]
PARSERS: dict[str, Parser] = {"dsql": dsql.parse_record}


def parser_for(name: str) -> Parser:
    """The parser of format ``name``."""
    try:
        return PARSERS[name]
    except KeyError:
        raise ValueError(f"format must be one of {sorted(PARSERS)}, got {name!r}") from None
