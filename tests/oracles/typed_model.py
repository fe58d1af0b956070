"""A model of typed changes to one table, for conformance tests of the Kafka-borne formats.

This module shares no code with ``airflow_cdc`` or ``spark_jobs``: it is the oracle. It holds
the table's columns as abstract Python values (``COLUMNS``), the ``Change`` every format's
encoder renders in its own envelope, and the expected table state and ledger counts after
each batch, computed by the README's rules.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

SCHEMA = "shop"
TABLE = "typed"
TOPIC = "typed"

# (column, declared PostgreSQL type, abstract Python type of its values)
COLUMNS: tuple[tuple[str, str, type], ...] = (
    ("c_smallint", "SMALLINT", int),  # -32768..32767
    ("c_int", "INTEGER", int),  # -2**31..2**31-1
    ("c_bigint", "BIGINT", int),  # -2**63..2**63-1
    ("c_real", "REAL", float),  # values exact in float32
    ("c_double", "DOUBLE PRECISION", float),  # finite
    ("c_numeric", "NUMERIC(12, 3)", Decimal),  # exactly 3 fraction digits
    ("c_bool", "BOOLEAN", bool),
    ("c_text", "TEXT", str),
    ("c_bytea", "BYTEA", bytes),
    ("c_date", "DATE", dt.date),
    ("c_ts", "TIMESTAMP", dt.datetime),  # naive, microsecond precision
    ("c_tstz", "TIMESTAMPTZ", dt.datetime),  # aware (any UTC offset), microsecond precision
    ("c_time", "TIME", dt.time),  # naive, microsecond precision
    ("c_timetz", "TIMETZ", dt.time),  # aware (tzinfo a fixed UTC offset), microsecond precision
    ("c_interval", "INTERVAL", dt.timedelta),  # whole microseconds, no months or days
    ("c_json", "JSONB", object),  # a JSON-serializable value: dict, list, str, int, bool, None
    ("c_uuid", "UUID", uuid.UUID),
)
COLUMN_NAMES = tuple(name for name, _, _ in COLUMNS)
DDL = (
    f"CREATE TABLE {SCHEMA}.{TABLE} (\n    id BIGINT PRIMARY KEY,\n"
    + ",\n".join(f"    {name} {pg_type}" for name, pg_type, _ in COLUMNS)
    + "\n);"
)


@dataclass(frozen=True)
class Raw:
    """JSON text written as it is: a number in the source's own notation."""

    text: str


def write_json(
    value: Any,
    string: Callable[[str], str],
    item: str = ",",
    key: str = ":",
    ordered: Callable[[Any], list[str]] = list,
    number: Callable[[float], str] | None = None,
) -> str:
    """JSON text of ``value`` with a source's string escaping, separators and key order;
    numbers pre-rendered as :class:`Raw` (floats written by ``number``, or refused)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, float) and number is not None:
        return number(value)
    if isinstance(value, str):
        return string(value)
    if isinstance(value, list | tuple):
        return (
            "[" + item.join(write_json(v, string, item, key, ordered, number) for v in value) + "]"
        )
    if isinstance(value, dict):
        pairs = (
            f"{string(k)}{key}{write_json(value[k], string, item, key, ordered, number)}"
            for k in ordered(value)
        )
        return "{" + item.join(pairs) + "}"
    raise TypeError(f"render {type(value).__name__} values to Raw first")


@dataclass(frozen=True)
class Change:
    """One committed change of the model, in commit order.

    ``row`` is the whole row after the change (``None`` for a delete) and ``before`` the whole
    row before it (``None`` for an insert); both map ``"id"`` and every name of ``COLUMNS``
    that the format carries to an abstract value (``None`` for SQL NULL). ``seq`` is the
    1-based commit order and ``commit_us`` the commit time in microseconds since the epoch;
    both strictly increase from one change to the next.
    """

    ident: int
    op: str  # "c" insert, "u" update, "d" delete
    row: dict[str, Any] | None
    before: dict[str, Any] | None
    commit_us: int
    seq: int


# A message as a Kafka dump carries it: (key, value, is_control). key and value are the
# message's key and value text (None for a null key or value); is_control is True for a
# message that changes no row (a resolved marker, a heartbeat, a tombstone).
Message = tuple[str | None, str | None, bool]


class Encoder(Protocol):
    """How one format's source renders the model's changes as Kafka messages."""

    columns: tuple[str, ...]  # the names of COLUMNS this source can carry; others stay NULL

    def change(self, change: Change) -> list[Message]:
        """The messages the source emits for one committed change, in order."""
        ...

    def marker(self, commit_us: int, partition: int) -> str | None:
        """An in-band resolved marker or heartbeat value for a partition whose changes up to
        ``commit_us`` were all emitted, or None when the format has no such message."""
        ...


_EPOCH_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
_UTC = dt.UTC
_OFFSETS = [dt.timezone(dt.timedelta(minutes=m)) for m in (0, 60, 330, -480, -210, 840)]
_TEXTS = ["apple", "", 'quote " and \\ backslash', "line\nbreak\ttab", "plum ✓ 😀", "NULL"]
_JSONS: list[Any] = [
    {"a": 1, "b": [True, None, "x"]},
    [1, 2.5, {"nested": {"deep": "é"}}],
    "a string",
    0,
    {},
]


def _value(rng: Any, name: str) -> Any:
    """A random abstract value of a column, edge values included, NULL now and then."""
    if rng.random() < 0.1:
        return None
    return _VALUES[name](rng)


_VALUES: dict[str, Any] = {
    "c_smallint": lambda r: r.choice([-(2**15), 2**15 - 1, 0, r.randrange(-999, 999)]),
    "c_int": lambda r: r.choice([-(2**31), 2**31 - 1, r.randrange(-(10**6), 10**6)]),
    "c_bigint": lambda r: r.choice([-(2**63), 2**63 - 1, r.randrange(-(10**15), 10**15)]),
    "c_real": lambda r: r.choice([0.0, -1.5, 1024.25, r.randrange(-4000, 4000) / 8]),
    "c_double": lambda r: r.choice(
        [0.1, -2.5e-300, 1.7976931348623157e308, r.randrange(-(10**9), 10**9) / 1024]
    ),
    "c_numeric": lambda r: Decimal(r.randrange(-(10**12) + 1, 10**12)).scaleb(-3),
    "c_bool": lambda r: r.random() < 0.5,
    "c_text": lambda r: r.choice(_TEXTS),
    "c_bytea": lambda r: r.choice(
        [b"", b"\x00\xff\x10binary", bytes(r.randrange(256) for _ in range(5))]
    ),
    "c_date": lambda r: dt.date(1970, 1, 1) + dt.timedelta(days=r.randrange(-30_000, 30_000)),
    "c_ts": lambda r: dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=_instant(r)),
    "c_tstz": lambda r: (
        dt.datetime(1970, 1, 1, tzinfo=_UTC) + dt.timedelta(microseconds=_instant(r))
    ).astimezone(r.choice(_OFFSETS)),
    "c_time": lambda r: _time_of_day(r),
    "c_timetz": lambda r: _time_of_day(r).replace(tzinfo=r.choice(_OFFSETS)),
    "c_interval": lambda r: dt.timedelta(microseconds=r.randrange(-(10**11), 10**11)),
    "c_json": lambda r: r.choice(_JSONS),
    "c_uuid": lambda r: uuid.UUID(int=r.getrandbits(128)),
}


def _instant(rng: Any) -> int:
    """Microseconds since the epoch, from 1901 to 2099, fractions of a second included."""
    return rng.randrange(-(2**31) * 10**6, 4_000_000_000 * 10**6)


def _time_of_day(rng: Any) -> dt.time:
    micros = rng.choice([0, 86_400 * 10**6 - 1, rng.randrange(86_400 * 10**6)])
    return (dt.datetime(2000, 1, 1) + dt.timedelta(microseconds=micros)).time()


@dataclass
class Batch:
    """One batch's dump lines, with the table state and the ledger counts after it."""

    lines: list[str]
    expected: dict[int, dict[str, Any]]  # live rows after the batch, by id: abstract values
    counts: dict[str, int]  # applied, superseded, duplicate, control


def generate(
    encoder: Encoder,
    batches: int = 3,
    changes: int = 150,
    keys: int = 25,
    partitions: int = 3,
    seed: int = 5,
    in_order: bool = False,
) -> list[Batch]:
    """``changes`` changes of ``keys`` keys over ``batches`` batches of Kafka dump lines.

    Each batch delivers the messages of its share of the commits, a key's messages always
    to one partition. Delivery is at least once: some messages come again, in the same batch
    or the next. Unless ``in_order`` (a source that delivers a key's changes in commit order),
    lines are shuffled within a batch and some messages are late: they arrive in the next
    batch. Every batch ends with a resolved marker per partition (where the format has one)
    at the newest commit time whose messages have all arrived.
    """
    rng = random.Random(seed)
    arrivals = _arrivals(_commits(encoder, batches, changes, keys, rng), in_order, rng)
    offsets = [0] * partitions
    target_seq: dict[int, int] = {}
    state: dict[int, dict[str, Any]] = {}
    result = []
    for number, arrival in enumerate(arrivals):
        queues: list[list[str]] = [[] for _ in range(partitions)]
        counts = {"applied": 0, "superseded": 0, "duplicate": 0, "control": 0}
        for change, (key, value, control) in arrival:
            partition = change.ident % partitions
            queues[partition].append(_line(partition, offsets[partition], key, value))
            offsets[partition] += 1
            if control:
                counts["control"] += 1
        _count(arrival, target_seq, state, counts)
        pending = [c.commit_us for a in arrivals[number + 1 :] for c, _ in a]
        horizon = min(pending) - 1 if pending else _EPOCH_US + (changes + 1) * 1000
        for partition, queue in enumerate(queues):
            marker = encoder.marker(horizon, partition)
            if marker is not None:
                queue.append(_line(partition, offsets[partition], None, marker))
                offsets[partition] += 1
                counts["control"] += 1
        if in_order:
            lines = []
            while any(queues):
                lines.append(rng.choice([q for q in queues if q]).pop(0))
        else:
            lines = [line for queue in queues for line in queue]
            rng.shuffle(lines)
        result.append(Batch(lines, {k: dict(v) for k, v in state.items()}, counts))
    return result


def _commits(
    encoder: Encoder, batches: int, changes: int, keys: int, rng: random.Random
) -> list[list[tuple[Change, Message]]]:
    """The model's changes in commit order, as messages, in ``batches`` equal shares."""
    model: dict[int, dict[str, Any]] = {}
    chunks: list[list[tuple[Change, Message]]] = [[] for _ in range(batches)]
    for seq in range(1, changes + 1):
        ident = rng.randrange(1, keys + 1)
        before = model.get(ident)
        row: dict[str, Any] | None
        if before is not None and rng.random() < 0.15:
            op, row = "d", None
            del model[ident]
        else:
            op = "u" if before is not None else "c"
            row = {"id": ident, **{name: _value(rng, name) for name in encoder.columns}}
            model[ident] = row
        change = Change(ident, op, row, before, _EPOCH_US + seq * 1000 + rng.randrange(1000), seq)
        chunk = chunks[(seq - 1) * batches // changes]
        chunk.extend((change, message) for message in encoder.change(change))
    return chunks


def _arrivals(
    chunks: list[list[tuple[Change, Message]]], in_order: bool, rng: random.Random
) -> list[list[tuple[Change, Message]]]:
    """Which batch each message arrives in: its own, or (late, or again) the next."""
    batches = len(chunks)
    arrivals: list[list[tuple[Change, Message]]] = [[] for _ in range(batches)]
    for number, chunk in enumerate(chunks):
        last = number == batches - 1
        for item in chunk:
            late = not in_order and not last and rng.random() < 0.05
            arrivals[number + late].append(item)
            if rng.random() < 0.05:  # at-least-once: the same message again
                arrivals[number + (not last and rng.random() < 0.5)].append(item)
    if in_order:  # a key's messages in commit order within and across batches
        for arrival in arrivals:
            arrival.sort(key=lambda item: item[0].seq)
    return arrivals


def _line(partition: int, offset: int, key: str | None, value: str | None) -> str:
    return json.dumps(
        {
            "topic": TOPIC,
            "partition": partition,
            "offset": offset,
            "timestamp": _EPOCH_US // 1000 + offset,
            "key": key,
            "value": value,
        }
    )


def _count(
    arrival: list[tuple[Change, Message]],
    target_seq: dict[int, int],
    state: dict[int, dict[str, Any]],
    counts: dict[str, int],
) -> None:
    """The README's rules: per key, the newest change of the batch is the candidate (the same
    change again is a duplicate, older ones are superseded); the candidate is applied over a
    lower stored sequence, a duplicate of the stored one, superseded by a higher one."""
    per_key: dict[int, list[Change]] = {}
    for change, (_, _, control) in arrival:
        if not control:
            per_key.setdefault(change.ident, []).append(change)
    for ident, changes in per_key.items():
        newest = max(c.seq for c in changes)
        copies = sum(c.seq == newest for c in changes)
        counts["superseded"] += len(changes) - copies
        counts["duplicate"] += copies - 1
        candidate = next(c for c in changes if c.seq == newest)
        stored = target_seq.get(ident, 0)
        if newest > stored:
            counts["applied"] += 1
            target_seq[ident] = newest
            if candidate.row is None:
                state.pop(ident, None)
            else:
                state[ident] = candidate.row
        else:
            counts["duplicate" if newest == stored else "superseded"] += 1
