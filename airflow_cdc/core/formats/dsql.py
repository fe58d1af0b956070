"""Aurora DSQL CDC records, as delivered on Kinesis.

Rules from the Aurora DSQL CDC reference ("Understanding CDC records"):

* Every record is a JSON object whose ``type`` is ``full``, ``chunked`` or ``fragment``.
* ``op`` is ``c``, ``u`` or ``d``; "treat any unrecognized op value as an upsert by applying the
  after payload".
* Inserts and updates carry the full row in ``after``; deletes carry the primary key in
  ``before``.
* ``source.ts_ns`` is the commit time in nanoseconds: "use this field to establish a total order
  of transactions", per primary key.
* A ``chunked`` main record replaces an oversized image by ``chunked.before`` /
  ``chunked.after`` entries of ``chunk_id``, ``total_fragments`` and ``crc32c`` (a decimal
  string); each ``fragment`` record carries ``chunk_id``, a zero-based ``index`` and ``data``.
"""

from __future__ import annotations

from typing import Any

from airflow_cdc.core.events import ChangeRecord, ChunkRef, Fragment, Message, TableRef
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats.common import integer as _integer
from airflow_cdc.core.formats.common import kind as _kind
from airflow_cdc.core.formats.common import limits, load_object
from airflow_cdc.core.formats.common import require as _require
from airflow_cdc.core.ordering import sequence_key

RECORD_TYPES = ("full", "chunked", "fragment")
IMAGES = ("before", "after")


def parse_message(message: Message) -> ChangeRecord | Fragment:
    """Parse one delivered message: its value is the Kinesis record's ``Data``."""
    return parse_record(message.value or "")


def parse_record(text: str) -> ChangeRecord | Fragment:
    """Parse one DSQL CDC record (the Kinesis record's ``Data``, as text).

    :raises RecordFormatError: with a stable ``reason`` for the quarantine table.
    """
    doc = load_object(text, strict=True)
    record_type = doc.get("type")
    if record_type == "fragment":
        return _parse_fragment(doc)
    if record_type in ("full", "chunked"):
        return _parse_change(doc, chunked=record_type == "chunked")
    raise RecordFormatError(
        "unknown_record_type", f"type {record_type!r} is not one of {RECORD_TYPES}"
    )


def _parse_fragment(doc: dict[str, Any]) -> Fragment:
    chunk_id = _require(doc, "chunk_id", str)
    index = _require(doc, "index", int)
    if index < 0:
        raise RecordFormatError("invalid_fragment", f"index {index!r} is negative")
    most = limits().fragments
    if index >= most:
        raise RecordFormatError(
            "invalid_fragment", f"index {index} is past the largest set ({most})"
        )
    return Fragment(chunk_id=chunk_id, index=index, data=_require(doc, "data", str))


def _parse_change(doc: dict[str, Any], *, chunked: bool) -> ChangeRecord:
    op = _require(doc, "op", str)
    source = _require(doc, "source", dict)
    ts_ns = _integer(source.get("ts_ns"), "source.ts_ns")
    if ts_ns < 0:
        raise RecordFormatError("missing_field", f"source.ts_ns {ts_ns!r} is negative")
    images = {name: _image(doc.get(name), name) for name in IMAGES}
    refs = _chunk_refs(doc) if chunked else {}
    for name in refs:
        if images[name] is not None:
            raise RecordFormatError("invalid_chunked", f"{name} is both inline and chunked")
    needed = "before" if op == "d" else "after"
    if images[needed] is None and needed not in refs:
        raise RecordFormatError("missing_image", f"op {op!r} needs a {needed} image")
    txid = source.get("txId")
    return ChangeRecord(
        table=TableRef(_require(source, "schema", str), _require(source, "table", str)),
        op=op,
        sequence=sequence_key(ts_ns),
        commit_ts_us=ts_ns // 1000,
        before=images["before"],
        after=images["after"],
        chunked=refs,
        transaction_id=txid if isinstance(txid, str) else None,
    )


def _chunk_refs(doc: dict[str, Any]) -> dict[str, ChunkRef]:
    chunked = _require(doc, "chunked", dict)
    refs: dict[str, ChunkRef] = {}
    for name in IMAGES:
        entry = chunked.get(name)
        if entry is None:
            continue
        if not isinstance(entry, dict):
            raise RecordFormatError("invalid_chunked", f"chunked.{name} is {_kind(entry)}")
        total = _require(entry, "total_fragments", int)
        if total < 1:
            raise RecordFormatError("invalid_chunked", f"chunked.{name}.total_fragments={total}")
        most = limits().fragments
        if total > most:
            raise RecordFormatError(
                "invalid_chunked", f"chunked.{name}.total_fragments={total} is over {most}"
            )
        refs[name] = ChunkRef(
            chunk_id=_require(entry, "chunk_id", str),
            total_fragments=total,
            crc32c=_integer(entry.get("crc32c"), f"chunked.{name}.crc32c"),
        )
    if not refs:
        raise RecordFormatError("invalid_chunked", "chunked names neither before nor after")
    return refs


def _image(value: Any, name: str) -> dict[str, Any] | None:
    if value is None or isinstance(value, dict):
        return value
    raise RecordFormatError(
        "invalid_image", f"{name} must be an object or null, got {_kind(value)}"
    )
