"""CockroachDB changefeed messages (JSON format).

Rules from CockroachDB's changefeed references ("Changefeed Messages" and, newer and more
detailed, "Changefeed Message Envelope" with its field reference, v25.2 to v26.1; "Change Data
Capture Queries"):

* ``wrapped`` (default): ``after`` holds the row; "every message for an INSERT or UPDATE has
  an "after" field with the new data" and "for DELETE operations, "after" will be NULL"
  (``[5] {"after": null}``). With ``diff`` a ``before`` field too ("for deletes, "before" is
  the last state of the row"); the primary key array is in the message key, or in the value's
  ``key`` field with ``key_in_value`` and on sinks without message keys (cloud storage,
  webhook); ``topic_in_value`` adds ``topic``, ``mvcc_timestamp`` its field. A JSON object
  made only of these envelope fields but without ``after`` is therefore neither an upsert nor
  a delete, and not a row either: it is quarantined as ``missing_after``. (An object that also
  holds other fields is a row of the ``row`` envelope whose table has a column of that name:
  a wrapped message never carries columns at its top level.)
* ``bare`` "removes the after key from the changefeed message and stores any metadata in a
  crdb field": "the message's top level is the row data, so CockroachDB inserts any needed
  metadata (primary key, topic, timestamps, etc.) under a nested "__crdb__" object. [...]
  Other metadata like "updated" timestamps or resolved timestamps would also appear inside
  __crdb__". Every top-level field but ``__crdb__`` is a column, whatever its name. CDC
  queries use ``bare`` by default; their ``cdc_prev`` "tuple-typed column [...] contains the
  previous state of a row" and is read as the ``before`` image, never as a column. A bare
  message with no column left is quarantined as ``empty_row``.
* ``row``: the row "without any additional metadata fields"; ``key_only``: "only the key and
  no value", which names a changed row but carries neither its new state nor whether it was
  deleted: a key array in the value is quarantined as ``key_only_envelope``. On Kafka its
  value is null, as a ``row`` envelope's delete is ("the primary key of the deleted row and a
  null value"): the two cannot be told apart, and a null or empty value is read as a delete.
* ``enriched``: ``after`` with ``op``, ``ts_ns`` and ``source``; with
  ``enriched_properties=schema`` "a payload field that wraps the entire message except for
  the "schema" fields", which is not read here (``unsupported_envelope``).
* ``updated``: the HLC timestamp ``"<wall nanoseconds>.<logical>"``, compared exactly (never as
  a float); "to compare two different rows for happens-before, compare the updated timestamp".
  Without it, a key's messages are in partition order ("per-key ordering").
* Resolved timestamps: "no (previously unseen) rows with a lower update timestamp will be
  emitted on that partition". The marker "has its own envelope containing a resolved key and
  a timestamp value as a string": ``{"resolved": "<hlc>"}`` in the wrapped envelope, and
  ``{"__crdb__": {"resolved": "<hlc>"}}`` in the bare one (and in CDC queries); both are the
  same :class:`~airflow_cdc.core.events.Control`.
* Deleting a row outputs "the primary key of the deleted row and a null value"; duplicates of
  a message carry the same ``updated`` timestamp.
* Webhook sinks send batches ``{"payload": [...], "length": n}``, split into messages when
  they are landed (see :func:`split_batch`).
"""

from __future__ import annotations

from typing import Any

from airflow_cdc.core import jsontext
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
# CDC queries' previous state of the row, a projected field that is not one of the table's.
PREVIOUS = "cdc_prev"
# Fields a wrapped (or enriched) message carries at its top level, besides ``after``; ``diff``
# names the option that adds ``before``.
ENVELOPE_FIELDS = frozenset(
    {
        "after",
        "before",
        "diff",
        "key",
        "mvcc_timestamp",
        "op",
        "payload",
        "resolved",
        "schema",
        "source",
        "topic",
        "ts_ns",
        "updated",
    }
)


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
    if METADATA in doc:
        # First: a bare message's other fields are columns, whatever their names.
        return _bare(doc, table, message)
    if "payload" in doc and isinstance(doc["payload"], list):
        raise RecordFormatError("unsplit_batch", "a webhook batch must be split when landed")
    if "key" in doc and "table" in doc and "value" in doc and isinstance(doc["key"], str):
        # Sinkless changefeed rows: {"key": "[...]", "table": ..., "value": "<json or empty>"}.
        inner = Message(doc["value"] or None, doc["key"], message.position, doc["table"])
        return parse_message(inner)
    if "after" in doc:
        return _wrapped(doc, table, message)
    if doc and doc.keys() <= ENVELOPE_FIELDS:
        return _without_after(doc)
    # envelope=row, or a CDC query's bare output without metadata: the object is the row.
    return _row(table, doc, None, _message_key(message.key), message)


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
    return [jsontext.dump(m) for m in doc["payload"]]


def _wrapped(doc: dict[str, Any], table: TableRef, message: Message) -> ChangeRecord:
    if isinstance(doc.get("topic"), str):
        table = TableRef("", doc["topic"])
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


def _without_after(doc: dict[str, Any]) -> Control:
    """A message of envelope fields only: a resolved marker, or quarantined."""
    if "resolved" in doc:
        return _resolved(doc["resolved"])
    if isinstance(doc.get("payload"), dict):
        raise RecordFormatError(
            "unsupported_envelope",
            "envelope=enriched with enriched_properties=schema wraps the change in payload,"
            " which is not read; create the changefeed without enriched_properties=schema",
        )
    fields = sorted(doc)
    if "before" in doc:
        what = (
            'before without after is not a delete (a delete carries "after": null; with diff,'
            " before is the deleted row's last state)"
        )
    else:
        what = 'without after this is not a delete (a delete carries "after": null)'
    raise RecordFormatError(
        "missing_after",
        f"a wrapped message with fields {fields}: {what} nor an upsert (every insert or update"
        " carries the new row in after); envelope fields are not a row's columns",
    )


def _bare(doc: dict[str, Any], table: TableRef, message: Message) -> ChangeRecord | Control:
    meta = doc[METADATA]
    if not isinstance(meta, dict):
        raise RecordFormatError(
            "invalid_metadata", f"{METADATA} must be an object, got {kind(meta)}"
        )
    columns = {k: v for k, v in doc.items() if k != METADATA}
    if "resolved" in meta:
        if columns:
            raise RecordFormatError(
                "invalid_resolved",
                f"a resolved message carries no columns, got {sorted(columns)}",
            )
        return _resolved(meta["resolved"])
    if isinstance(meta.get("topic"), str):
        table = TableRef("", meta["topic"])
    return _row(table, columns, meta.get("updated"), _key(meta.get("key"), message), message)


def _row(
    table: TableRef,
    columns: dict[str, Any],
    updated: Any,
    key: list[Any] | None,
    message: Message,
) -> ChangeRecord:
    """An upsert of the row envelope's or the bare envelope's top-level columns."""
    row = {k: v for k, v in columns.items() if k != PREVIOUS}
    if not row:
        raise RecordFormatError(
            "empty_row",
            f"no column to upsert (fields besides {METADATA}: {sorted(columns)}): neither a row"
            " nor a resolved timestamp",
        )
    before = image(columns.get(PREVIOUS), PREVIOUS)
    return _change(table, "u", before, row, updated, key, message)


def _resolved(value: Any) -> Control:
    wall, _ = parse_hlc(value)
    return Control(RESOLVED, f"resolved {value}", resolved_us=wall // 1000)


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
