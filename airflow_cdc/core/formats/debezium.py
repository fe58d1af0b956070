"""Debezium JSON and the formats built on it: Arcion Replicant's JSON CDC, Huawei CDL.

Debezium (schema-included ``{"schema", "payload"}`` or schema-excluded bare payloads):
``op`` c/u/d/r, ``before``/``after`` images, ``source`` metadata. Order per key:

* Postgres: ``source.lsn``, the change's position in the write-ahead log;
* MySQL (and Arcion's MySQL source): binlog ``file`` (its numeric suffix), ``pos``, ``row``;
* otherwise ``source.ts_ms`` and then the Kafka offset.

Snapshot reads (``op`` r, or ``source.snapshot`` true) sort below a streamed change at the
same position, so a snapshot read never overwrites a newer streamed change. A Kafka message
with a null value is a tombstone that follows a delete for log compaction: never a row.

Arcion Replicant (JSON CDC for Kafka): "each message contains a key and a value ... a schema
and a payload"; snapshot events are ``op`` r with ``snapshot`` "true" and no binlog position;
"before": {} and "after": {} are empty images; "whenever a column that uniquely identifies a
record is updated ... Replicant generates delete and insert events"; "for each delete
operation, Replicant generates a tombstone event ... and sets the value to null".

Huawei CDL: ``message_version`` "1.0" is CDL JSON (``DATA_STORE``, ``SEG_OWNER``,
``TABLE_NAME``, ``OPERATION`` INSERT/UPDATE/DELETE, ``data``/``before``,
``transaction.properties`` lsn and txId, ``unique`` the primary key); "2.0" is open-source
Debezium JSON plus ``unique``. A record whose ``message_type`` is not "0" is a heartbeat: it
advances the resolved timestamp to its time and is never applied as a row.

Transaction metadata (Debezium's ``provide.transaction.metadata``): the transaction topic
carries a ``BEGIN`` and an ``END`` event per transaction, ``{"status", "id", "event_count",
"data_collections": [{"data_collection", "event_count"}]}`` (counts on ``END`` only), and each
change event a ``transaction`` block ``{"id", "total_order", "data_collection_order"}``. A
boundary event is a control message; a change keeps its block (:class:`TransactionRef`).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import replace
from typing import Any

from airflow_cdc.core import connect
from airflow_cdc.core.events import (
    HEARTBEAT,
    TOMBSTONE,
    TRANSACTION,
    ChangeRecord,
    Control,
    Message,
    TableRef,
    TransactionBoundary,
    TransactionRef,
)
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats.common import (
    image,
    integer,
    kind,
    load_json,
    load_object,
    optional_integer,
    position_sequence,
    require,
)
from airflow_cdc.core.ordering import sequence_key

OPERATIONS = {"INSERT": "c", "UPDATE": "u", "DELETE": "d"}
BOUNDARIES = ("BEGIN", "END")
_BINLOG_NUMBER = re.compile(r"(\d+)$")


def parse_debezium(message: Message) -> ChangeRecord | Control:
    """Parse one Debezium message (schema-included or not); key from the message key."""
    if message.value is None:
        return Control(TOMBSTONE, "null value: a tombstone after a delete")
    schema, payload = _envelope(load_object(message.value))
    if "op" not in payload and payload.get("status") in BOUNDARIES:
        return _boundary(payload)
    return _change(payload, schema, message, *_message_key(message.key))


def parse_cdl(message: Message) -> ChangeRecord | Control:
    """Parse one Huawei CDL message: CDL JSON (1.0) or open-source Debezium JSON (2.0)."""
    if message.value is None:
        return Control(TOMBSTONE, "null value")
    schema, payload = _envelope(load_object(message.value))
    heartbeat = _heartbeat(payload)
    if heartbeat is not None:
        return heartbeat
    version = payload.get("message_version")
    key = payload.get("unique") if isinstance(payload.get("unique"), dict) else None
    if version == "2.0":
        if key is not None:
            return _change(payload, schema, message, key)
        return _change(payload, schema, message, *_message_key(message.key))
    if version != "1.0":
        raise RecordFormatError("unknown_version", f"message_version {version!r} is not 1.0/2.0")
    operation = require(payload, "OPERATION", str)
    if operation not in OPERATIONS:
        raise RecordFormatError("unknown_operation", f"OPERATION {operation!r}")
    properties = _properties(payload)
    lsn = optional_integer(properties.get("lsn"), "transaction.properties.lsn")
    ts_ms = optional_integer(payload.get("TIMESTAMP"), "TIMESTAMP") or 0
    txid = properties.get("txId")
    return _record(
        TableRef(require(payload, "SEG_OWNER", str), require(payload, "TABLE_NAME", str)),
        OPERATIONS[operation],
        sequence_key(lsn, 1) if lsn is not None else position_sequence(message.position, ts_ms),
        ts_ms,
        schema,
        payload,
        "data",
        txid,
        key,
    )


def _unwrap(doc: Any) -> tuple[Any, Any] | None:
    """(schema, payload) of a JsonConverter envelope ``{"schema", "payload"}``, else None."""
    if isinstance(doc, dict) and "payload" in doc and set(doc) <= {"schema", "payload"}:
        return doc.get("schema"), doc["payload"]
    return None


def _envelope(doc: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(schema, payload) of a JsonConverter envelope, or (None, doc) for a bare payload."""
    if _unwrap(doc) is None:
        return None, doc
    return doc.get("schema"), require(doc, "payload", dict)


def _message_key(text: str | None) -> tuple[dict[str, Any] | None, Any]:
    """(the message key's columns, its Connect schema if it has one)."""
    if text is None:
        return None, None
    doc, schema = load_json(text), None
    wrapped = _unwrap(doc)
    if wrapped is not None:
        schema, doc = wrapped
    if doc is None:
        return None, None
    if not isinstance(doc, dict):
        raise RecordFormatError("missing_key", f"the message key is {kind(doc)}, not an object")
    return doc, schema


def _change(
    payload: dict[str, Any],
    schema: Any,
    message: Message,
    key: dict[str, Any] | None,
    key_schema: Any = None,
) -> ChangeRecord:
    op = require(payload, "op", str)
    source = require(payload, "source", dict)
    if op != "d" and image(payload.get("after"), "after") is None:
        raise RecordFormatError("missing_image", f"op {op!r} needs an after image")
    ts_ms = optional_integer(source.get("ts_ms"), "source.ts_ms") or 0
    sequence = _sequence(source, op, ts_ms, message.position)
    record = _record(
        _table(source),
        op,
        sequence,
        ts_ms,
        schema,
        payload,
        "after",
        source.get("txId"),
        key,
        key_schema,
    )
    transaction = _transaction(payload.get("transaction"))
    return record if transaction is None else replace(record, transaction=transaction)


def _transaction_id(value: Any, name: str) -> str:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise RecordFormatError("bad_transaction", f"{name} must be a non-empty string, got {value!r}")


def _count(value: Any, name: str) -> int:
    try:
        count = integer(value, name)
    except RecordFormatError as err:
        raise RecordFormatError("bad_transaction", str(err)) from err
    if not 0 <= count < 2**63:
        raise RecordFormatError("bad_transaction", f"{name} must fit 0 .. 2**63 - 1, got {count}")
    return count


def _transaction(block: Any) -> TransactionRef | None:
    """A change's ``transaction`` block; ``None`` when the connector sends none (null)."""
    if block is None:
        return None
    if not isinstance(block, dict):
        raise RecordFormatError(
            "bad_transaction", f"transaction must be an object, got {kind(block)}"
        )
    if block.get("properties") is not None and block.get("id") is None:
        return None  # Huawei CDL's transaction properties, not Debezium's metadata
    order = block.get("total_order")
    return TransactionRef(
        _transaction_id(block.get("id"), "transaction.id"),
        None if order is None else _count(order, "transaction.total_order"),
    )


def _boundary(payload: dict[str, Any]) -> Control:
    """A ``BEGIN`` or ``END`` event of the transaction topic."""
    status = payload["status"]
    txid = _transaction_id(payload.get("id"), "id")
    if status == "BEGIN":
        boundary = TransactionBoundary(status, txid)
        return Control(TRANSACTION, f"BEGIN {txid}", transaction=boundary)
    total = _count(payload.get("event_count"), "event_count")
    entries = payload.get("data_collections")
    if entries is not None and not isinstance(entries, list):
        raise RecordFormatError(
            "bad_transaction", f"data_collections must be an array, got {kind(entries)}"
        )
    collections: dict[str, int] = {}
    for entry in entries or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("data_collection"), str):
            raise RecordFormatError(
                "bad_transaction", f"a data_collections entry must name its collection: {entry!r}"
            )
        name = entry["data_collection"]
        collections[name] = collections.get(name, 0) + _count(
            entry.get("event_count"), f"data_collections[{name!r}].event_count"
        )
    if entries and sum(collections.values()) != total:
        raise RecordFormatError(
            "bad_transaction",
            f"event_count {total} is not the sum of the data collections' counts"
            f" ({sum(collections.values())})",
        )
    boundary = TransactionBoundary(status, txid, total, collections)
    return Control(TRANSACTION, f"END {txid}: {total} events", transaction=boundary)


def _record(
    table: TableRef,
    op: str,
    sequence: str,
    ts_ms: int,
    schema: Any,
    payload: dict[str, Any],
    after_field: str,
    txid: Any,
    key: dict[str, Any] | None,
    key_schema: Any = None,
) -> ChangeRecord:
    """The change of a Debezium-shaped payload whose row image is ``after_field``; ``key``
    (a message key's, of Connect schema ``key_schema``, or CDL's ``unique``) normalized as
    the images are."""
    after_plan = connect.image_plan(schema, after_field)
    before_plan = connect.image_plan(schema, "before")
    types, after = _typed(after_plan, image(payload.get(after_field), after_field))
    _, before = _typed(before_plan, image(payload.get("before"), "before"))
    key = _typed_key(key, key_schema, after_plan[0], before_plan[0])
    return ChangeRecord(
        table=table,
        op=op,
        sequence=sequence,
        commit_ts_us=ts_ms * 1000,
        before=before,
        after=after if op != "d" else None,
        chunked={},
        transaction_id=None if txid is None else str(txid),
        key=key,
        types=types or None,
    )


def _table(source: dict[str, Any]) -> TableRef:
    table = require(source, "table", str)
    schema = source.get("schema") or source.get("db") or ""
    return TableRef(str(schema), table)


def _sequence(source: dict[str, Any], op: str, ts_ms: int, position: str) -> str:
    snapshot = op == "r" or str(source.get("snapshot", "false")).lower() in ("true", "last")
    streamed = 0 if snapshot else 1
    lsn = optional_integer(source.get("lsn"), "source.lsn")
    if lsn is not None:
        return sequence_key(lsn, streamed)
    binlog = source.get("file")
    if isinstance(binlog, str) and _BINLOG_NUMBER.search(binlog):
        number = int(_BINLOG_NUMBER.search(binlog).group(1))  # type: ignore[union-attr]
        pos = optional_integer(source.get("pos"), "source.pos") or 0
        row = optional_integer(source.get("row"), "source.row") or 0
        return sequence_key(number, pos, streamed, row)
    if snapshot and ts_ms == 0:
        # Arcion's snapshot events carry no position at all: below every streamed change.
        return position_sequence(position, 0, 0)
    return position_sequence(position, ts_ms, streamed)


def _typed(
    plan: tuple[dict[str, dict[str, Any]], dict[str, str]], values: dict[str, Any] | None
) -> tuple[dict[str, str], dict[str, Any] | None]:
    """Column type families from an image's plan (:func:`connect.image_plan`), and the
    image's normalized values."""
    fields, families = plan
    if not fields:
        return {}, values
    types = dict(families)
    if values is None:
        return types, None
    normalized = {
        name: connect.normalize(fields[name], value) if name in fields else value
        for name, value in values.items()
    }
    return types, normalized


def _typed_key(
    key: dict[str, Any] | None, key_schema: Any, *images: dict[str, dict[str, Any]]
) -> dict[str, Any] | None:
    """The key's values in the form the decoders read, as :func:`_typed` gives an image's.
    A column the key's own schema names is normalized by it. One it does not name (a key
    written without its schema) is normalized by the first of the images' plans that names
    it, for a key converter encodes each type as the value's does (a Connect ``Timestamp``
    in milliseconds, a ``Decimal`` in Base64), where it can be: a key column that the value's
    schema cannot read (the key converter wrote decimals as numbers) is kept as written, as
    it was before keys were normalized. A key schema that does not plan is not used."""
    if key is None:
        return None
    try:
        own, _ = connect.struct_plan(key_schema)
    except RecordFormatError:
        own = {}
    typed: dict[str, Any] = {}
    for name, value in key.items():
        if name in own:
            typed[name] = connect.normalize(own[name], value)
            continue
        typed[name] = value
        for fields in images:
            if name in fields:
                with contextlib.suppress(RecordFormatError):  # else kept as written
                    typed[name] = connect.normalize(fields[name], value)
                break
    return typed


def _properties(payload: dict[str, Any]) -> dict[str, Any]:
    transaction = payload.get("transaction")
    entries = transaction.get("properties") if isinstance(transaction, dict) else None
    if not isinstance(entries, list):
        return {}
    return {
        e["name"]: e.get("value")
        for e in entries
        if isinstance(e, dict) and isinstance(e.get("name"), str)
    }


def _heartbeat(payload: dict[str, Any]) -> Control | None:
    message_type = payload.get("message_type")
    if message_type is None or str(message_type) == "0":
        return None
    # The database's clock, as changes are placed: CDL 1.0's TIMESTAMP, or 2.0's source.ts_ms
    # ("Timestamp when a database change occurs"). The payload's own ts_ms is when the
    # connector processed the event, later by its lag: as a resolved mark it would claim
    # changes it has not read yet, so a heartbeat with only that time places nothing.
    ts_ms = payload.get("TIMESTAMP")
    if ts_ms is None and isinstance(payload.get("source"), dict):
        ts_ms = payload["source"].get("ts_ms")
    resolved = integer(ts_ms, "heartbeat time") * 1000 if ts_ms is not None else None
    return Control(
        HEARTBEAT,
        f"heartbeat {payload.get('HEARTBEAT_IDENTIFIER')} (message_type {message_type})",
        resolved_us=resolved,
    )
