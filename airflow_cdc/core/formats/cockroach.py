"""CockroachDB changefeed messages (JSON format).

Rules from the CockroachDB changefeed messages reference:

* ``wrapped`` (default): ``after`` holds the row, "or null for DELETEs"; with ``diff`` a
  ``before`` field too; the primary key array is in the message key, or in the value's
  ``key`` field with ``key_in_value`` and on sinks without message keys (cloud storage,
  webhook).
* ``bare``: the row's columns at the top level and "any metadata in a __crdb__ field".
* ``row``: the row "without any additional metadata fields"; ``key_only``: only the key, which
  names a changed row but carries neither its new state nor whether it was deleted: such
  messages are quarantined as ``key_only_envelope``.
* ``updated``: the HLC timestamp ``"<wall nanoseconds>.<logical>"``, compared exactly (never as
  a float); "to compare two different rows for happens-before, compare the updated timestamp".
  Without it, a key's messages are in partition order ("per-key ordering").
* ``{"resolved": "<hlc>"}``: "no (previously unseen) rows with a lower update timestamp will be
  emitted on that partition".
* Deleting a row outputs "the primary key of the deleted row and a null value"; duplicates of
  a message carry the same ``updated`` timestamp.
* Webhook sinks send batches ``{"payload": [...], "length": n}``, split into messages when
  they are landed (see :func:`split_batch`).
"""

from __future__ import annotations

import json
from typing import Any

from airflow_cdc.core.events import RESOLVED, ChangeRecord, Control, Message, TableRef
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats.common import (
    image,
    kind,
    load_json,
    position_sequence,
)
from airflow_cdc.core.ordering import sequence_key

METADATA = "__crdb__"


def parse_hlc(text: Any) -> tuple[int, int]:
    """``"1701102296662969433.0000000000"`` -> (wall ns, logical), exactly."""
    if not isinstance(text, str) or text.count(".") > 1:
        raise RecordFormatError("invalid_timestamp", f"HLC timestamp {text!r} is not text")
    wall, _, logical = text.partition(".")
    if not wall.isdigit() or not (logical.isdigit() or logical == "") or not text.isascii():
        raise RecordFormatError("invalid_timestamp", f"HLC timestamp {text!r} is malformed")
    return int(wall), int(logical or "0")


def parse_message(message: Message) -> ChangeRecord | Control:
    """Parse one changefeed message of any JSON envelope."""
    table = TableRef("", message.topic or "")
    if message.value is None or message.value.strip() == "":
        return _change(table, "d", None, None, None, _message_key(message.key), message)
    doc = load_json(message.value)
    if isinstance(doc, list):
        raise RecordFormatError(
            "key_only_envelope",
            "envelope=key_only names a changed key but carries neither the row nor whether it"
            " was deleted; re-read the row from the source",
        )
    if not isinstance(doc, dict):
        raise RecordFormatError("malformed_json", f"expected a JSON object, got {kind(doc)}")
    if "payload" in doc and isinstance(doc["payload"], list):
        raise RecordFormatError("unsplit_batch", "a webhook batch must be split when landed")
    if "resolved" in doc and "after" not in doc:
        wall, _ = parse_hlc(doc["resolved"])
        return Control(RESOLVED, f"resolved {doc['resolved']}", resolved_us=wall // 1000)
    if "key" in doc and "table" in doc and "value" in doc and isinstance(doc["key"], str):
        # Sinkless changefeed rows: {"key": "[...]", "table": ..., "value": "<json or empty>"}.
        inner = Message(doc["value"] or None, doc["key"], message.position, doc["table"])
        return parse_message(inner)
    topic = doc.get("topic")
    if isinstance(topic, str):
        table = TableRef("", topic)
    if "after" in doc:
        op = "d" if doc["after"] is None else "u"
        return _change(
            table,
            op,
            image(doc.get("before"), "before"),
            image(doc["after"], "after") or ({} if op == "u" else None),
            doc.get("updated"),
            _key(doc.get("key"), message),
            message,
        )
    meta = doc.get(METADATA)
    row = {k: v for k, v in doc.items() if k != METADATA}
    if isinstance(meta, dict):
        if isinstance(meta.get("topic"), str):
            table = TableRef("", meta["topic"])
        key = _key(meta.get("key"), message)
        return _change(table, "u", None, row, meta.get("updated"), key, message)
    return _change(table, "u", None, row, None, _message_key(message.key), message)


def split_batch(doc: Any) -> list[str] | None:
    """The messages of a webhook batch as JSON texts, or ``None`` if ``doc`` is not one.

    :raises RecordFormatError: when ``length`` disagrees with the payload.
    """
    if not (isinstance(doc, dict) and isinstance(doc.get("payload"), list) and "length" in doc):
        return None
    if doc["length"] != len(doc["payload"]):
        raise RecordFormatError(
            "invalid_batch", f"length {doc['length']!r} but {len(doc['payload'])} messages"
        )
    return [json.dumps(m, ensure_ascii=False) for m in doc["payload"]]


def _change(
    table: TableRef,
    op: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    updated: Any,
    key: list[Any] | None,
    message: Message,
) -> ChangeRecord:
    if updated is not None:
        wall, logical = parse_hlc(updated)
        sequence, commit_us = sequence_key(wall, logical), wall // 1000
    else:
        sequence, commit_us = position_sequence(message.position), 0
    return ChangeRecord(
        table=table,
        op=op,
        sequence=sequence,
        commit_ts_us=commit_us,
        before=before,
        after=after,
        chunked={},
        key=key,
    )


def _key(value: Any, message: Message) -> list[Any] | None:
    if value is None:
        return _message_key(message.key)
    if not isinstance(value, list):
        raise RecordFormatError("missing_key", f"key must be an array, got {kind(value)}")
    return value


def _message_key(text: str | None) -> list[Any] | None:
    if text is None:
        return None
    doc = load_json(text)
    if not isinstance(doc, list):
        raise RecordFormatError("missing_key", f"the message key is {kind(doc)}, not an array")
    return doc
