"""YDB changefeeds: the JSON format and the Debezium-compatible JSON format.

Rules from the YDB CDC reference:

* JSON: ``key`` is "an array of primary key component values. Always present"; ``update`` or
  ``erase`` is the operation flag ("each record contains one of these fields"); "in UPDATES
  mode, the update field ... contains the names and values of updated columns"; ``newImage``
  and ``oldImage`` are row snapshots; the images "do not include the columns that are primary
  key components", so key names come from the declared table.
* ``ts: [step, txId]`` is the virtual timestamp that orders changes; without it, "changes by
  the same primary key are delivered to the same topic partition in the order they took
  place", so the partition offset orders them.
* ``{"resolved": [step, txId]}`` messages carry the resolved timestamp (``step`` is the
  coordinator time in milliseconds).
* Debezium-compatible JSON: ``payload`` with ``op`` c/u/d/r, ``before``/``after`` and
  ``source.step``/``source.txId``; "the Debezium-compatible primary key of the modified row is
  specified as the message key: {"payload": {<columns>}}".
"""

from __future__ import annotations

from typing import Any

from airflow_cdc.core.events import RESOLVED, ChangeRecord, Control, Message, TableRef
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats.common import (
    image,
    integer,
    kind,
    load_json,
    load_object,
    position_sequence,
    require,
)
from airflow_cdc.core.ordering import sequence_key


def table_of(topic: str | None) -> TableRef:
    """A changefeed's topic is ``<table path>/<changefeed name>``: the table is its parent."""
    parts = [p for p in (topic or "").split("/") if p]
    return TableRef("", parts[-2] if len(parts) >= 2 else (parts[0] if parts else ""))


def parse_json(message: Message) -> ChangeRecord | Control:
    """Parse one record of YDB's JSON changefeed format."""
    doc = load_object(message.value)
    if "resolved" in doc and "key" not in doc:
        step, _ = _virtual_timestamp(doc["resolved"], "resolved")
        return Control(RESOLVED, f"resolved step {step}", resolved_us=step * 1000)
    key = require(doc, "key", list)
    if ("update" in doc) == ("erase" in doc):
        raise RecordFormatError("unknown_operation", "a record holds exactly one of update, erase")
    if "ts" in doc:
        step, tx = _virtual_timestamp(doc["ts"], "ts")
        sequence, commit_us = sequence_key(step, tx), step * 1000
    else:
        sequence, commit_us = position_sequence(message.position), 0
    new_image = image(doc.get("newImage"), "newImage")
    old_image = image(doc.get("oldImage"), "oldImage")
    common = {
        "table": table_of(message.topic),
        "sequence": sequence,
        "commit_ts_us": commit_us,
        "chunked": {},
        "key": key,
    }
    if "erase" in doc:
        return ChangeRecord(op="d", before=old_image, after=None, **common)
    update = doc["update"]
    if not isinstance(update, dict):
        raise RecordFormatError("invalid_image", f"update must be an object, got {kind(update)}")
    if "newImage" in doc:
        return ChangeRecord(op="u", before=old_image, after=new_image or {}, **common)
    if "oldImage" in doc:
        raise RecordFormatError(
            "no_new_image",
            "an OLD_IMAGE changefeed's update record does not carry the row after the change",
        )
    # UPDATES mode: only the changed columns.
    return ChangeRecord(op="u", before=None, after=update, partial=True, **common)


def parse_debezium(message: Message) -> ChangeRecord:
    """Parse one record of YDB's Debezium-compatible format (key from the message key)."""
    doc = load_object(message.value)
    payload = require(doc, "payload", dict)
    op = require(payload, "op", str)
    source = require(payload, "source", dict)
    step = integer(source.get("step"), "source.step")
    tx = integer(source.get("txId"), "source.txId")
    key: dict[str, Any] | None = None
    if message.key is not None:
        key_doc = load_json(message.key)
        key = key_doc.get("payload") if isinstance(key_doc, dict) else None
        if not isinstance(key, dict):
            raise RecordFormatError("missing_key", "the message key has no payload object")
    return ChangeRecord(
        table=table_of(message.topic),
        op=op,
        sequence=sequence_key(step, tx),
        commit_ts_us=step * 1000,
        before=image(payload.get("before"), "before"),
        after=image(payload.get("after"), "after") if op != "d" else None,
        chunked={},
        key=key,
    )


def _virtual_timestamp(value: Any, name: str) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise RecordFormatError("missing_field", f"{name} must be [step, txId], got {value!r}")
    step, tx = (integer(part, name) for part in value)
    if step < 0 or tx < 0:
        raise RecordFormatError("missing_field", f"{name} {value!r} is negative")
    return step, tx
