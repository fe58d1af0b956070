"""Generate a Kafka change stream in any of the Kafka-borne formats, with its expected state.

One model of changes to ``shop.items`` (inserts, updates, deletes, in commit order) is encoded
per format as its source would deliver it: keyed messages hashed to partitions, the format's
commit sequence (YDB virtual timestamps, CockroachDB HLC ``updated``, binlog positions, LSNs),
its delete shape, its control messages (resolved markers, heartbeats, tombstones) and, for YDB,
UPDATES-mode records that carry only the changed columns. Delivery is at least once (some
messages again, later) and the dump lists messages out of order. ``expected`` is the state
the table must hold.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from cdc_demo import example_ddl

DDL = example_ddl("kafka_items.sql")
FORMATS = ("ydb", "ydb-debezium", "cockroachdb", "arcion", "cdl", "debezium")
TOPIC = "items"
# Formats whose source guarantees per-key delivery in commit order (YDB: "changes by the same
# primary key are delivered to the same topic partition in the order they took place").
IN_ORDER = frozenset({"ydb"})
COLUMNS = ("name", "qty", "price", "updated_at")
_EPOCH_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


@dataclass(frozen=True)
class Change:
    """One committed change: ``row`` is the full row after it (``None`` for a delete)."""

    ident: int
    op: str
    row: dict[str, Any] | None
    changed: tuple[str, ...]
    commit_us: int
    seq: int


@dataclass
class Stream:
    """Kafka messages as dump lines, plus what the table must hold afterwards."""

    lines: list[str] = field(default_factory=list)
    expected: dict[int, dict[str, Any]] = field(default_factory=dict)
    changes: int = 0


Queue = list[tuple[str | None, str | None]]


def generate(
    fmt: str,
    changes: int,
    keys: int = 0,
    partitions: int = 3,
    seed: int = 7,
    span_us: int | None = None,
    final_marker_us: int | None = None,
) -> Stream:
    """``changes`` changes of about ``keys`` keys, encoded as ``fmt`` messages.

    Commits start at 2026-01-01T00:00Z and spread over ``span_us`` (default: a millisecond
    each). ``final_marker_us`` adds a last resolved marker (for formats that have them) to
    every partition, as a changefeed does once it has moved past the last change.
    """
    if fmt not in ENCODERS:
        raise ValueError(f"format must be one of {sorted(ENCODERS)}, got {fmt!r}")
    rng = random.Random(seed)
    keys = keys or max(10, changes // 4)
    model: dict[int, dict[str, Any]] = {}
    step = max(1000, (span_us or 0) // changes)
    queues: list[Queue] = [[] for _ in range(partitions)]
    for seq in range(1, changes + 1):
        change = _next_change(rng, model, keys, seq, step)
        for key, value in ENCODERS[fmt](change):
            queues[change.ident % partitions].append((key, value))
            if rng.random() < 0.03:  # at-least-once: delivered again, a little later
                queues[change.ident % partitions].append((key, value))
        if seq % 50 == 0:
            _add_markers(fmt, queues, change.commit_us)
    if final_marker_us is not None:
        _add_markers(fmt, queues, final_marker_us)
    stream = Stream(changes=changes, lines=_deliver(fmt, queues, rng))
    stream.expected = {k: dict(v) for k, v in model.items()}
    return stream


def _add_markers(fmt: str, queues: list[Queue], at_us: int) -> None:
    for number, queue in enumerate(queues):
        marker = _marker(fmt, at_us, number)
        if marker is not None:
            queue.append((None, marker))


def _deliver(fmt: str, queues: list[Queue], rng: random.Random) -> list[str]:
    """Dump lines of every partition's messages, in an arrival order that is no commit order."""
    delivered = [
        [
            json.dumps(
                {
                    "topic": TOPIC,
                    "partition": number,
                    "offset": offset,
                    "timestamp": _EPOCH_US // 1000 + offset,
                    "key": key,
                    "value": value,
                }
            )
            for offset, (key, value) in enumerate(queue)
        ]
        for number, queue in enumerate(queues)
    ]
    if fmt in IN_ORDER:
        # YDB delivers a key's changes in commit order: partitions interleave, each in order.
        lines = []
        while any(delivered):
            lines.append(rng.choice([q for q in delivered if q]).pop(0))
        return lines
    lines = [line for queue in delivered for line in queue]
    rng.shuffle(lines)
    return lines


def _next_change(
    rng: random.Random, model: dict[int, dict[str, Any]], keys: int, seq: int, step: int
) -> Change:
    ident = rng.randrange(1, keys + 1)
    commit_us = _EPOCH_US + seq * step + rng.randrange(step)
    current = model.get(ident)
    if current is not None and rng.random() < 0.15:
        del model[ident]
        return Change(ident, "d", None, (), commit_us, seq)
    row = dict(current) if current else {}
    changed = (
        COLUMNS
        if current is None
        else tuple(c for c in COLUMNS if c == "updated_at" or rng.random() < 0.5)
    )
    for column in changed:
        row[column] = _value(rng, column, commit_us)
    row["id"] = ident
    model[ident] = row
    return Change(ident, "c" if current is None else "u", dict(row), changed, commit_us, seq)


def _value(rng: random.Random, column: str, commit_us: int) -> Any:
    if column == "name":
        return rng.choice(["apple", "pear", "fig", "kiwi", None, "plum ✓"])
    if column == "qty":
        return rng.randrange(-5, 2**31 - 1) if rng.random() < 0.1 else rng.randrange(100)
    if column == "price":
        return Decimal(rng.randrange(0, 10**8)).scaleb(-2)
    # Microseconds since the epoch, whole milliseconds: Connect's Timestamp carries no more.
    return commit_us // 1000 * 1000


def _iso(micros: int) -> str:
    moment = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)
    return moment.isoformat().replace("+00:00", "Z")


def _plain(row: dict[str, Any], columns: tuple[str, ...] = ("id", *COLUMNS)) -> dict[str, Any]:
    """A row as JSON values: decimals as text, timestamps as ISO 8601."""
    out: dict[str, Any] = {}
    for column in columns:
        value = row.get(column)
        if isinstance(value, Decimal):
            value = str(value)
        elif column == "updated_at" and value is not None:
            value = _iso(value)
        out[column] = value
    return out


def _dumps(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def _ydb(change: Change) -> list[tuple[str | None, str | None]]:
    ts = [change.commit_us // 1000, change.seq]
    if change.op == "d":
        return [(None, _dumps({"key": [change.ident], "erase": {}, "ts": ts}))]
    # UPDATES mode: only the changed columns, never the key.
    update = _plain(change.row or {}, change.changed)
    return [(None, _dumps({"key": [change.ident], "update": update, "ts": ts}))]


def _ydb_debezium(change: Change) -> list[tuple[str | None, str | None]]:
    payload = {
        "op": change.op,
        "after": None if change.row is None else _plain(change.row, COLUMNS),
        "source": {
            "connector": "ydb",
            "version": "1.0.0",
            "ts_ms": change.commit_us // 1000,
            "step": change.commit_us // 1000,
            "txId": change.seq,
            "snapshot": False,
        },
    }
    return [(_dumps({"payload": {"id": change.ident}}), _dumps({"payload": payload}))]


def _cockroach(change: Change) -> list[tuple[str | None, str | None]]:
    updated = f"{change.commit_us * 1000}.{change.seq % 7:010d}"
    after = None if change.row is None else _plain(change.row)
    if after is not None:
        after["price"] = float(after["price"])  # CockroachDB writes DECIMAL as a JSON number
    return [(_dumps([change.ident]), _dumps({"after": after, "updated": updated}))]


_TIMESTAMP = {"type": "int64", "optional": True, "name": "org.apache.kafka.connect.data.Timestamp"}
_DECIMAL = {
    "type": "bytes",
    "optional": True,
    "name": "org.apache.kafka.connect.data.Decimal",
    "parameters": {"scale": "2", "connect.decimal.precision": "10"},
}
_ITEM_FIELDS = [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {"type": "int32", "optional": True, "field": "qty"},
    {**_DECIMAL, "field": "price"},
    {**_TIMESTAMP, "field": "updated_at"},
]
_KEY_SCHEMA = {"type": "struct", "optional": False, "fields": [_ITEM_FIELDS[0]]}


def _connect_row(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A row in Kafka Connect's JSON: decimals as Base64 bytes, timestamps in milliseconds."""
    if row is None:
        return None
    price = row["price"]
    unscaled = int(price.scaleb(2)) if price is not None else None
    return {
        "id": row["id"],
        "name": row["name"],
        "qty": row["qty"],
        "price": None
        if unscaled is None
        else base64.b64encode(unscaled.to_bytes(8, "big", signed=True)).decode(),
        "updated_at": row["updated_at"] // 1000 if row["updated_at"] is not None else None,
    }


def _envelope_schema(source: dict[str, Any]) -> dict[str, Any]:
    value = {"type": "struct", "optional": True, "fields": _ITEM_FIELDS}
    return {
        "type": "struct",
        "optional": False,
        "fields": [
            {**value, "field": "before"},
            {**value, "field": "after"},
            source,
            {"type": "string", "optional": False, "field": "op"},
        ],
    }


_SOURCE_FIELD = {"type": "struct", "optional": False, "field": "source", "fields": []}


def _arcion(change: Change) -> list[tuple[str | None, str | None]]:
    key = _dumps({"schema": _KEY_SCHEMA, "payload": {"id": change.ident}})
    after = _connect_row(change.row) or {}
    before = {"id": change.ident} if change.op != "c" else {}
    source = {
        "connector": "MYSQL",
        "db": "shop",
        "schema": None,
        "table": "items",
        "snapshot": "false",
        "file": f"mysql-log.{13 + change.seq // 1000:06d}",
        "pos": 4 + (change.seq % 1000) * 100,
        "row": 1,
        "ts_ms": change.commit_us // 1000,
    }
    payload = {"before": before, "after": after, "source": source, "op": change.op}
    value = _dumps({"schema": _envelope_schema(_SOURCE_FIELD), "payload": payload})
    messages: list[tuple[str | None, str | None]] = [(key, value)]
    if change.op == "d":
        messages.append((key, None))  # the tombstone that follows every delete
    return messages


def _cdl(change: Change) -> list[tuple[str | None, str | None]]:
    value = {"type": "struct", "optional": True, "fields": _ITEM_FIELDS}
    schema = {
        "type": "struct",
        "fields": [{**value, "field": "data"}, {**value, "field": "before"}],
        "optional": False,
        "name": "shop.items",
    }
    row = _connect_row(change.row)
    payload = {
        "DATA_STORE": "POSTGRESQL",
        "SEG_OWNER": "shop",
        "TABLE_NAME": "items",
        "TIMESTAMP": change.commit_us // 1000,
        "OPERATION": {"c": "INSERT", "u": "UPDATE", "d": "DELETE"}[change.op],
        "LOB_COLUMNS": None,
        "transaction": {
            "properties": [
                {"name": "lsn", "value": 160_000_000_000 + change.seq * 64},
                {"name": "txId", "value": 57_000_000 + change.seq},
            ]
        },
        "unique": {"id": change.ident},
        "data": row,
        "before": {"id": change.ident} if change.op == "d" else None,
        "message_version": "1.0",
        "message_type": "0",
        "HEARTBEAT_IDENTIFIER": "279fb050-0143-45c1-b184-50bc48c2461c",
    }
    return [(None, _dumps({"schema": schema, "payload": payload}))]


def _debezium(change: Change) -> list[tuple[str | None, str | None]]:
    row = _connect_row(change.row)
    if row is not None:
        row["updated_at"] = _iso(change.row["updated_at"]) if change.row else None
    fields = [
        *_ITEM_FIELDS[:4],
        {
            "type": "string",
            "optional": True,
            "name": "io.debezium.time.ZonedTimestamp",
            "field": "updated_at",
        },
    ]
    value = {"type": "struct", "optional": True, "fields": fields}
    schema = {
        "type": "struct",
        "fields": [{**value, "field": "before"}, {**value, "field": "after"}, _SOURCE_FIELD],
    }
    payload = {
        "before": {"id": change.ident} if change.op == "d" else None,
        "after": row,
        "source": {
            "connector": "postgresql",
            "schema": "shop",
            "table": "items",
            "snapshot": "false",
            "lsn": 34_000_000 + change.seq * 8,
            "txId": 600 + change.seq,
            "ts_ms": change.commit_us // 1000,
        },
        "op": change.op,
    }
    key = _dumps({"schema": _KEY_SCHEMA, "payload": {"id": change.ident}})
    return [(key, _dumps({"schema": schema, "payload": payload}))]


def _marker(fmt: str, commit_us: int, partition: int) -> str | None:
    """A format's in-band resolved marker, for every partition now and then."""
    if fmt == "ydb":
        return _dumps({"resolved": [commit_us // 1000, 0]})
    if fmt == "cockroachdb":
        return _dumps({"resolved": f"{commit_us * 1000}.0000000000"})
    if fmt == "cdl":
        payload = {
            "message_type": "1",
            "TIMESTAMP": commit_us // 1000,
            "HEARTBEAT_IDENTIFIER": f"heartbeat-{partition}",
            "message_version": "1.0",
        }
        return _dumps({"schema": None, "payload": payload})
    return None


ENCODERS: dict[str, Callable[[Change], list[tuple[str | None, str | None]]]] = {
    "ydb": _ydb,
    "ydb-debezium": _ydb_debezium,
    "cockroachdb": _cockroach,
    "arcion": _arcion,
    "cdl": _cdl,
    "debezium": _debezium,
}
