"""The canonical change event that every source format is parsed into."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The warehouse directory of the jobs' bookkeeping (``raw``, ``ledger``, ``cuts``...), beside
# one directory per declared schema: no declared schema may take it.
BOOKKEEPING_SCHEMA = "_cdc"

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
class TransactionRef:
    """Where a change sits in its source transaction (Debezium's ``transaction`` block, present
    when the connector provides transaction metadata): the transaction's ``id`` and the change's
    ``total_order``, its 1-based place among all the transaction's events."""

    id: str
    order: int | None = None


@dataclass(frozen=True)
class ChangeRecord:
    """One change of one row, before any fragment is reassembled.

    ``before`` and ``after`` are the inline images as parsed JSON objects (or ``None``);
    ``chunked`` names the images that still have to be reassembled from fragments.
    ``sequence`` sorts in commit order (see :mod:`airflow_cdc.core.ordering`).
    ``key`` is the primary key when the record carries it apart from the images: by column
    name (a Kafka message key's payload) or by position in the declared key (YDB's and
    CockroachDB's key arrays). ``partial`` marks an ``after`` image that holds only the changed
    columns (YDB's UPDATES mode). ``types`` are column types that the record's own schema
    declares (Kafka Connect), as type families of :mod:`airflow_cdc.core.types`.
    ``transaction`` places the change in its transaction where the source says so (Debezium's
    transaction metadata); ``transaction_id`` is the source's own transaction number, if any.
    """

    table: TableRef
    op: str
    sequence: str
    commit_ts_us: int
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    chunked: dict[str, ChunkRef]
    transaction_id: str | None = None
    key: dict[str, Any] | list[Any] | None = None
    partial: bool = False
    types: dict[str, str] | None = None
    transaction: TransactionRef | None = None

    @property
    def kind(self) -> str:
        """``delete`` for op ``d``; every other op, known or not, is an upsert of ``after``."""
        return DELETE if self.op == "d" else UPSERT


@dataclass(frozen=True)
class Message:
    """One delivered message, as a parser sees it.

    ``value`` and ``key`` are the message's value and key as text (``None`` for a Kafka null);
    ``position`` sorts in delivery order within the message's partition (the partition offset),
    the fallback order of formats whose records carry no commit sequence. ``topic`` names the
    table for formats whose records do not.
    """

    value: str | None
    key: str | None = None
    position: str = ""
    topic: str | None = None


# The quarantine reason of a landed record that stands for messages the source no longer had
# when the landing reached them (a Kafka topic's retention removed them): its envelope error
# is this prefix and what was lost. Every other envelope error is ``bad_envelope``.
EXPIRED_BEFORE_LANDING = "expired_before_landing"
EXPIRED_PREFIX = f"{EXPIRED_BEFORE_LANDING}: "


def envelope_failure(error: str) -> tuple[str, str]:
    """The quarantine reason of a landed record whose envelope error is ``error``, and what
    the reason's detail says."""
    if error.startswith(EXPIRED_PREFIX):
        return EXPIRED_BEFORE_LANDING, error.removeprefix(EXPIRED_PREFIX)
    return "bad_envelope", error


# What a control message does.
RESOLVED = "resolved"
HEARTBEAT = "heartbeat"
TOMBSTONE = "tombstone"
TRANSACTION = "transaction"


@dataclass(frozen=True)
class TransactionBoundary:
    """A transaction metadata event (Debezium's transaction topic): ``BEGIN`` or ``END`` of the
    transaction ``id``. An ``END`` counts the events the transaction emitted: ``event_count`` in
    all, and per data collection (``schema.table``, or ``database.schema.table`` where the
    source names databases) in ``collections``."""

    status: str
    id: str
    event_count: int | None = None
    collections: dict[str, int] | None = None


@dataclass(frozen=True)
class Control:
    """A message that changes no row: a resolved-timestamp marker, a heartbeat, a tombstone.

    ``resolved_us`` is the time (microseconds since the epoch) before which the source
    guarantees every change has been delivered, where the message says so.
    """

    kind: str
    detail: str
    resolved_us: int | None = None
    transaction: TransactionBoundary | None = None
