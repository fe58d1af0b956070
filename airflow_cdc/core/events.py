"""The canonical change event that every source format is parsed into."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

UPSERT = "upsert"
DELETE = "delete"


@dataclass(frozen=True)
class TableRef:
    """A source table, as named by the change records (schema and table name)."""

    schema: str
    name: str

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass(frozen=True)
class ChunkRef:
    """A reference from a chunked main record to the fragments of one image."""

    chunk_id: str
    total_fragments: int
    crc32c: int


@dataclass(frozen=True)
class Fragment:
    """One piece of an oversized image's JSON text."""

    chunk_id: str
    index: int
    data: str


@dataclass(frozen=True)
class ChangeRecord:
    """One change of one row, before any fragment is reassembled.

    ``before`` and ``after`` are the inline images as parsed JSON objects (or ``None``);
    ``chunked`` names the images that still have to be reassembled from fragments.
    ``sequence`` sorts in commit order (see :mod:`airflow_cdc.core.ordering`).
    """

    table: TableRef
    op: str
    sequence: str
    commit_ts_us: int
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    chunked: dict[str, ChunkRef]
    transaction_id: str | None = None

    @property
    def kind(self) -> str:
        """``delete`` for op ``d``; every other op, known or not, is an upsert of ``after``."""
        return DELETE if self.op == "d" else UPSERT
