"""YDB changefeeds: the JSON format and the Debezium-compatible JSON format.

Rules from the YDB CDC reference (the seed document, and the newer reference at
https://ydb.tech/docs/en/concepts/cdc?version=v26.1 where it says more):

* JSON: ``key`` is "an array of primary key component values. Always present"; ``update``,
  ``reset`` or ``erase`` is the operation flag: "the same record may not contain the update,
  reset and erase fields simultaneously ... However, each record contains one of these fields
  (any operation is either an update, a replacement, or an erase)". "In UPDATES mode, the
  update field ... contains the names and values of updated columns"; ``newImage`` and
  ``oldImage`` are row snapshots; the images (and ``update`` / ``reset`` in UPDATES mode) "do
  not include the columns that are primary key components", so key names come from the
  declared table.
* ``reset`` (newer reference only) is the "Replacement flag. Present if a record matches the
  replacement operation. In UPDATES mode, it also contains the names and values of the columns
  for which a value is set"; a replacement is REPLACE INTO: "overwriting the values of the
  specified columns, the values of the unspecified columns are replaced by their default
  values". So in UPDATES mode it is a whole row (``partial=False``: the columns it does not
  name are written as null), not a partial update. Beside ``newImage`` it is ``{}`` (YDB's
  ``change_record_cdc_serializer.cpp`` fills ``reset``, like ``update``, only when the record
  has no image) and the record is applied like an update with that image.
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

# The row operations of a JSON record: exactly one of them is present.
_OPERATIONS = ("update", "reset", "erase")


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
    flags = [name for name in _OPERATIONS if name in doc]
    if len(flags) != 1:
        raise RecordFormatError(
            "unknown_operation",
            f"a record holds exactly one of {', '.join(_OPERATIONS)}; this one holds"
            f" {', '.join(flags) or 'none'}",
        )
    operation = flags[0]
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
    if operation == "erase":
        return ChangeRecord(op="d", before=old_image, after=None, **common)
    columns = doc[operation]
    if not isinstance(columns, dict):
        raise RecordFormatError(
            "invalid_image", f"{operation} must be an object, got {kind(columns)}"
        )
    if "newImage" in doc:
        return ChangeRecord(op="u", before=old_image, after=new_image or {}, **common)
    if "oldImage" in doc:
        raise RecordFormatError(
            "no_new_image",
            f"an OLD_IMAGE changefeed's {operation} record does not carry the row after the change",
        )
    # UPDATES mode: an update names only the changed columns; a reset (REPLACE INTO) names
    # the columns it sets, and every other column took its default.
    partial = operation == "update"
    return ChangeRecord(op="u", before=None, after=columns, partial=partial, **common)


def parse_debezium(message: Message) -> ChangeRecord:
    """Parse one record of YDB's Debezium-compatible format (key from the message key)."""
    doc = load_object(message.value)
    payload = require(doc, "payload", dict)
    op = require(payload, "op", str)
    source = require(payload, "source", dict)
    step, tx = _virtual_timestamp(
        [source.get("step"), source.get("txId")], "source.step and source.txId"
    )
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
