"""Generate an Aurora DSQL CDC stream with a known expected final state.

The stream has what real streams have: several tables on one stream, inserts (``c``), updates
(``u`` and ``c``), deletes (``d``), an op the reference does not know yet, images over the
chunk threshold split into fragments, at-least-once redeliveries, arrival out of commit order,
and bad input (malformed JSON, an unknown record type, a missing key, an undecodable value,
a CRC mismatch, a fragment set that never completes, a table nobody declared). The generator
applies only the good changes to its model, so ``expected`` is what the tables must hold.

This module is the tests' oracle, so it shares no code with the pipeline: it builds fragments
and checksums, and decodes the expected images into the warehouse's values, on its own, from
the Aurora DSQL CDC document ("Understanding CDC records") and the README's *Types*.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import random
import re
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import crc32c

from cdc_demo import example_ddl

DDL = example_ddl("dsql_shop.sql")
TABLES = ("customers", "order_items")
_SPECIAL_NUMERIC = ("NaN", "Infinity", "-Infinity")
_TS_INFINITY = (9223372036825200000, -9223372036832400000)


@dataclass
class Stream:
    """Delivered records in arrival order, and the state the tables must end in.

    ``expected`` maps a table name to {key tuple: after image}; ``deliveries`` are record
    texts; ``counts`` tells how many records of each kind the generator made.
    """

    deliveries: list[str]
    expected: dict[str, dict[tuple[Any, ...], dict[str, Any]]]
    counts: dict[str, int] = field(default_factory=dict)


def generate(
    changes: int = 2000,
    *,
    seed: int = 7,
    start_ns: int = 1_767_225_600_000_000_000,
    span_ns: int = 3_000_000_000_000,
    chunk_threshold: int = 3000,
    fragment_bytes: int = 1200,
    duplicate_rate: float = 0.05,
    shuffle_window: int = 40,
    bad_input: bool = True,
    customers: int = 200,
    orders: int = 300,
) -> Stream:
    """Generate ``changes`` changes committed in [start_ns, start_ns + span_ns).

    :param chunk_threshold: Records whose JSON exceeds this many bytes are chunked (DSQL's
        real threshold is 9 MiB; small values exercise reassembly on small data).
    :param fragment_bytes: Maximum UTF-8 bytes of one fragment's data.
    """
    rng = random.Random(seed)
    model: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {t: {} for t in TABLES}
    records: list[list[str]] = []
    counts = {"changes": 0, "chunked": 0, "fragments": 0, "redelivered": 0, "bad": 0}
    step = max(1, span_ns // max(changes, 1))
    for n in range(changes):
        ts_ns = start_ns + n * step + rng.randrange(step)
        table = "customers" if rng.random() < 0.5 else "order_items"
        key, image, op = _change(rng, table, model[table], customers, orders)
        record = envelope(op, table, ts_ns, image, rng)
        if op == "d":
            model[table].pop(key, None)
        else:
            model[table][key] = image
        records.append(_deliver(record, rng, chunk_threshold, fragment_bytes, counts))
        counts["changes"] += 1
    if bad_input:
        records.extend(_bad_records(rng, start_ns, span_ns, fragment_bytes, counts))
    deliveries = [text for group in records for text in group]
    redelivered = [text for text in deliveries if rng.random() < duplicate_rate]
    counts["redelivered"] = len(redelivered)
    deliveries.extend(redelivered)
    deliveries = _out_of_order(deliveries, rng, shuffle_window)
    return Stream(deliveries, model, counts)


def _change(
    rng: random.Random,
    table: str,
    rows: dict[tuple[Any, ...], dict[str, Any]],
    customers: int,
    orders: int,
) -> tuple[tuple[Any, ...], dict[str, Any], str]:
    if table == "customers":
        key: tuple[Any, ...] = (rng.randrange(1, customers + 1),)
    else:
        key = (rng.randrange(1, orders + 1), rng.randrange(1, 6))
    if key in rows and rng.random() < 0.15:
        names = ("id",) if table == "customers" else ("order_id", "item_id")
        return key, dict(zip(names, key, strict=True)), "d"
    image = _customer(rng, key[0]) if table == "customers" else _order_item(rng, key)
    op = "c" if key not in rows else rng.choice(("u", "c", "u"))
    if rng.random() < 0.02:
        op = "x"  # an op the reference does not define yet: an upsert
    return key, image, op


def _customer(rng: random.Random, ident: int) -> dict[str, Any]:
    balance = f"{rng.randrange(-(10**9), 10**9) / 100:.2f}"
    if rng.random() < 0.03:
        balance = rng.choice(_SPECIAL_NUMERIC)
    score: Any = rng.random() * 100
    if rng.random() < 0.03:
        score = rng.choice(("NaN", "Infinity", "-Infinity"))
    created = rng.randrange(0, 1_800_000_000_000_000)
    if rng.random() < 0.02:
        created = rng.choice(_TS_INFINITY)
    big = rng.random() < 0.08
    return {
        "id": ident,
        "name": rng.choice(("Ada", "Grace", "Zoë", "Jürgen", "李雷", "Amélie")) + f" {ident}",
        "email": f"user{ident}@example.com" if rng.random() < 0.9 else None,
        "balance": balance,
        "lifetime": str(rng.randrange(0, 10**12)) + "." + str(rng.randrange(0, 10**6)),
        "score": score,
        "ratio": rng.choice((0.5, 0.25, 1.0, "NaN")),
        "active": rng.random() < 0.7,
        "avatar": base64.b64encode(rng.randbytes(rng.randrange(0, 48))).decode(),
        "birthday": rng.randrange(-20_000, 20_000),
        "wake_time": rng.randrange(0, 86_400_000_000),
        "wake_tz": rng.randrange(0, 86_400_000_000),
        "created_at": created,
        "updated_at": rng.randrange(1_600_000_000_000_000, 1_800_000_000_000_000),
        "session_len": rng.choice((2802603000000, rng.randrange(0, 10**12), None)),
        "prefs": json.dumps({"theme": rng.choice(("dark", "light")), "n": rng.randrange(9)}),
        "external_id": str(uuid.UUID(int=rng.getrandbits(128))),
        "age": rng.randrange(18, 99),
        "visits": rng.randrange(0, 2**31 - 1),
        "tags": [],
        "owner_oid": rng.randrange(0, 2**32),
        "bio": ("Long biography — ünïcödé 🚀 " * rng.randrange(120, 260)) if big else "short",
    }


def _order_item(rng: random.Random, key: tuple[Any, ...]) -> dict[str, Any]:
    return {
        "order_id": key[0],
        "item_id": key[1],
        "quantity": rng.randrange(1, 20),
        "price": f"{rng.randrange(1, 10**6) / 100:.2f}",
    }


def envelope(
    op: str,
    table: str,
    ts_ns: int,
    image: dict[str, Any],
    rng: random.Random,
    schema: str = "public",
) -> dict[str, Any]:
    return {
        "type": "full",
        "op": op,
        "before": image if op == "d" else None,
        "after": None if op == "d" else image,
        "source": {
            "version": "1.0",
            "ts_ms": ts_ns // 1_000_000,
            "ts_ns": ts_ns,
            "txId": f"tx{rng.getrandbits(64):016x}",
            "schema": schema,
            "table": table,
            "db": "postgres",
            "cluster": "demo-cluster",
        },
        "ts_ms": ts_ns // 1_000_000 + 125,
        "ts_ns": ts_ns + 125_483_291,
    }


def _deliver(
    record: dict[str, Any],
    rng: random.Random,
    threshold: int,
    fragment_bytes: int,
    counts: dict[str, int],
) -> list[str]:
    """The record as delivered: itself, or a chunked main record plus its fragments."""
    text = json.dumps(record, ensure_ascii=False)
    if len(text.encode("utf-8")) <= threshold:
        return [text]
    image_name = "before" if record["op"] == "d" else "after"
    image_text = json.dumps(record[image_name], ensure_ascii=False)
    chunk_id = f"chunk-{rng.getrandbits(64):016x}"
    pieces = _fragment_texts(image_text, fragment_bytes)
    # "A chunked main record replaces the top-level before or after field for the split
    # image with a chunked object [...] Each entry under chunked has a chunk_id [...],
    # total_fragments (the number of fragments that make up that image), and crc32c (a CRC32C
    # checksum, as a decimal string, over the reassembled image text)."
    main = dict(record, type="chunked")
    main[image_name] = None
    main["chunked"] = {
        image_name: {
            "chunk_id": chunk_id,
            "total_fragments": len(pieces),
            "crc32c": str(_crc32c(image_text)),
        }
    }
    counts["chunked"] += 1
    counts["fragments"] += len(pieces)
    # "Each fragment is its own Kinesis record with type set to fragment and three fields:
    # chunk_id [...], index is the zero-based position of the fragment within the image, and
    # data is a segment of the image's JSON text".
    return [json.dumps(main, ensure_ascii=False)] + [
        json.dumps(
            {"type": "fragment", "chunk_id": chunk_id, "index": index, "data": data},
            ensure_ascii=False,
        )
        for index, data in enumerate(pieces)
    ]


def _fragment_texts(text: str, max_bytes: int) -> list[str]:
    """``text`` cut into pieces of at most ``max_bytes`` UTF-8 bytes, in order.

    The document: data is "a segment of the image's JSON text split on UTF-8 character
    boundaries (each fragment's data value is a valid UTF-8 string on its own)" and
    "sort the fragments by index ascending, and concatenate the data strings. The
    concatenated result is the original before or after object as JSON text". So a piece
    is plain text (not Base64), a cut never falls inside a character, and the pieces joined
    are the text itself.
    """
    data = text.encode("utf-8")
    pieces = []
    start = 0
    while start < len(data):
        end = min(start + max_bytes, len(data))
        while end < len(data) and data[end] & 0xC0 == 0x80:  # a continuation byte: back up
            end -= 1
        if end == start:
            raise ValueError(f"fragment_bytes={max_bytes} cannot hold one character")
        pieces.append(data[start:end].decode("utf-8"))
        start = end
    return pieces or [""]


def _crc32c(text: str) -> int:
    """The checksum of a chunked image. The document: "compute CRC32C over the concatenated
    string and compare the result to chunked.before.crc32c or chunked.after.crc32c"; a CRC is
    over bytes, and the string's bytes are its UTF-8 encoding (the records are UTF-8 JSON)."""
    return int(crc32c.crc32c(text.encode("utf-8")))


def _bad_records(
    rng: random.Random, start_ns: int, span_ns: int, fragment_bytes: int, counts: dict[str, int]
) -> Iterator[list[str]]:
    """One of each kind of bad input; none of them may change the tables."""
    ts = start_ns + span_ns // 2
    yield ['{"type": "full", "op": "c", "after": {"id": 1']  # malformed JSON
    yield [json.dumps({"type": "partial", "op": "c"})]  # unknown record type
    missing_key = envelope("c", "order_items", ts, {"order_id": 5, "quantity": 1}, rng)
    yield [json.dumps(missing_key)]
    undecodable = envelope(
        "c",
        "order_items",
        ts,
        {"order_id": 10**6, "item_id": 1, "quantity": "many", "price": "1.00"},
        rng,
    )
    yield [json.dumps(undecodable)]
    undeclared = envelope("c", "audit_log", ts, {"id": 1, "what": "login"}, rng)
    yield [json.dumps(undeclared)]
    counts["bad"] += 5
    for broken in ("crc", "incomplete"):
        image = _order_item(rng, (10**6 + len(broken), 1)) | {"note": "x" * 3 * fragment_bytes}
        record = envelope("c", "order_items", ts, image, rng)
        delivered = _deliver(record, rng, 0, fragment_bytes, counts)
        main = json.loads(delivered[0])
        if broken == "crc":
            main["chunked"]["after"]["crc32c"] = str((_crc32c("x") + 1) % 2**32)
            delivered[0] = json.dumps(main)
        else:
            delivered.pop()  # the last fragment never arrives
        counts["bad"] += len(delivered)
        yield delivered


def _out_of_order(deliveries: list[str], rng: random.Random, window: int) -> list[str]:
    """Shuffle within sliding windows: late arrivals, fragments before their main record."""
    result = list(deliveries)
    for start in range(0, len(result), max(window // 2, 1)):
        chunk = result[start : start + window]
        rng.shuffle(chunk)
        result[start : start + window] = chunk
    return result


def differences(
    stream: Stream, table: str, rows: list[dict[str, Any]], limit: int = 10
) -> list[str]:
    """How the live rows of a target table differ from the expected state (empty: equal).

    ``rows`` are the target's live rows as dicts (for example ``Row.asDict()``). Each expected
    image is turned into the values the warehouse must hold by this module's own reading of
    the DDL and of the document's serialization rules (``expected_row``), so both sides
    compare as typed values.
    """
    columns, keys = _declared(DDL)[table]
    expected = {}
    for image in stream.expected[table].values():
        values, special = expected_row(columns, image)
        expected[tuple(values[k] for k in keys)] = (values, special)
    actual = {tuple(r[k] for k in keys): r for r in rows}
    problems = [f"missing row {k}" for k in sorted(set(expected) - set(actual))]
    problems += [f"unexpected row {k}" for k in sorted(set(actual) - set(expected))]
    for key in sorted(set(expected) & set(actual)):
        values, special = expected[key]
        row = actual[key]
        for column, want in values.items():
            if not _same(want, row.get(column)):
                problems.append(
                    f"{table}{key}.{column}: expected {want!r}, got {row.get(column)!r}"
                )
        if (row.get("_cdc_special_values") or {}) != special:
            problems.append(
                f"{table}{key} special values: expected {special}, "
                f"got {row.get('_cdc_special_values')}"
            )
    return problems[:limit]


# --- The oracle's own decoding -------------------------------------------------------------
#
# What a record holds, from the document's "Data type serialization" tables, and what the
# warehouse keeps, from the README's *Types*: "Values a Spark type cannot hold (NaN or
# ±Infinity in a numeric, the ±infinity sentinels of dates and timestamps) are null in their
# column and recorded in `_cdc_special_values` (`{"balance": "NaN"}`)."

_EPOCH = dt.datetime(1970, 1, 1)
_DAY_US = 86_400_000_000
# timestamp / timestamptz: "±Infinity maps to sentinel values: 9223372036825200000 for
# +infinity and -9223372036832400000 for -infinity." Their marker is PostgreSQL's own text for
# them ('infinity', '-infinity'); numeric specials keep the record's text ("NaN", ...).
_TS_MARKERS = {_TS_INFINITY[0]: "infinity", _TS_INFINITY[1]: "-infinity"}
# date: "+infinity and -infinity are represented as sentinel day counts derived from
# epoch-offset arithmetic": PostgreSQL's date infinities are the int32 extremes of days from
# 2000-01-01, which is 10,957 days after the Unix epoch. (The generator never writes them.)
_DATE_MARKERS = {2**31 - 1 + 10_957: "infinity", -(2**31) + 10_957: "-infinity"}
_FLOAT_SPECIALS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_INT_RANGES = {
    "smallint": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
    "oid": (0, 2**32 - 1),  # "JSON number (unsigned)"
    "interval": (-(2**63), 2**63 - 1),  # "JSON number (approximate total microseconds)"
}
_TYPE_NAMES = {
    "smallint": "smallint",
    "int2": "smallint",
    "integer": "integer",
    "int": "integer",
    "int4": "integer",
    "bigint": "bigint",
    "int8": "bigint",
    "oid": "oid",
    "real": "real",
    "float4": "real",
    "double precision": "double",
    "float8": "double",
    "numeric": "numeric",
    "decimal": "numeric",
    "boolean": "boolean",
    "bool": "boolean",
    "text": "text",
    "varchar": "text",
    "character varying": "text",
    "bytea": "bytea",
    "date": "date",
    "time": "time",
    "timetz": "timetz",
    "timestamp": "timestamp",
    "timestamptz": "timestamptz",
    "interval": "interval",
    "json": "json",
    "jsonb": "json",
    "uuid": "uuid",
    "oidvector": "oidvector",
}


@dataclass(frozen=True)
class _Column:
    name: str
    type: str  # a key of the converters below: "numeric", "timestamptz", ...
    precision: int | None = None
    scale: int | None = None


def _declared(ddl: str) -> dict[str, tuple[list[_Column], tuple[str, ...]]]:
    """Each ``CREATE TABLE`` of ``ddl``: its columns and its primary key (a small parser of
    the plain forms the example DDL uses; anything else raises)."""
    text = re.sub(r"--[^\n]*", "", ddl)
    tables = {}
    statements = re.finditer(
        r"create\s+table\s+(?:\w+\.)?(\w+)\s*\((.*?)\)\s*(?:;|\Z)", text, re.I | re.S
    )
    for statement in statements:
        name, body = statement.group(1).lower(), statement.group(2)
        columns: list[_Column] = []
        keys: tuple[str, ...] = ()
        for item in _top_level_items(body):
            constraint = re.fullmatch(r"primary\s+key\s*\(([^)]*)\)", item, re.I)
            if constraint:
                keys = tuple(k.strip().lower() for k in constraint.group(1).split(","))
                continue
            column = re.fullmatch(
                r"(\w+)\s+([a-z][a-z0-9]*(?:\s+(?:precision|varying))?)"
                r"\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?(.*)",
                item,
                re.I | re.S,
            )
            type_name = " ".join(column.group(2).lower().split()) if column else ""
            rest = re.sub(
                r"primary\s+key|not\s+null|null", "", column.group(5) if column else "", flags=re.I
            )
            if not column or type_name not in _TYPE_NAMES or rest.strip():
                raise ValueError(f"the oracle does not know the column {item!r}")
            kind = _TYPE_NAMES[type_name]
            precision = int(column.group(3)) if column.group(3) else None
            scale = int(column.group(4)) if column.group(4) else None
            if kind == "numeric" and precision is not None and scale is None:
                scale = 0
            columns.append(_Column(column.group(1).lower(), kind, precision, scale))
            if re.search(r"primary\s+key", column.group(5), re.I):
                keys = (column.group(1).lower(),)
        tables[name] = (columns, keys)
    return tables


def _top_level_items(body: str) -> list[str]:
    items, depth, current = [], 0, ""
    for char in body:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += char
    return [i for i in [*items, current.strip()] if i]


def expected_row(
    columns: list[_Column], image: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The values a target row holds for ``image`` (a record's after image), and its
    ``_cdc_special_values``. Every declared column is compared; one the image lacks is null."""
    declared = {c.name for c in columns}
    undeclared = sorted(set(image) - declared)
    if undeclared:
        raise ValueError(f"the oracle does not model undeclared columns {undeclared}")
    values: dict[str, Any] = {}
    special: dict[str, str] = {}
    for column in columns:
        value, marker = expected_value(column, image.get(column.name))
        values[column.name] = value
        if marker is not None:
            special[column.name] = marker
    return values, special


def expected_value(column: _Column, value: Any) -> tuple[Any, str | None]:
    """(the value the warehouse holds, its special-value marker or None) for a record value.

    Raises ValueError for a value the generator should never have put in an expected image
    (one the pipeline would rightly quarantine)."""
    # "For any data type, NULL column values are represented as JSON null."
    if value is None:
        return None, None
    if column.type not in _CONVERTERS:
        raise ValueError(f"the oracle has no rule for {column}")
    return _CONVERTERS[column.type](column, value)


def _integer(column: _Column, value: Any) -> tuple[Any, str | None]:
    # smallint / integer / bigint: "JSON number"; oid: "JSON number (unsigned)", README: BIGINT;
    # interval: "JSON number (approximate total microseconds)", README: "a BIGINT of
    # microseconds" (an overflow "emits JSON null", handled above).
    low, high = _INT_RANGES[column.type]
    _expect(_is_int(value) and low <= value <= high, column, value)
    return value, None


def _floating(column: _Column, value: Any) -> tuple[Any, str | None]:
    # "NaN and ±Infinity are serialized as the strings "NaN", "Infinity", "-Infinity"."
    # README: real/double become FLOAT/DOUBLE "(with NaN and ±Infinity)": no marker.
    if isinstance(value, str):
        _expect(value in _FLOAT_SPECIALS, column, value)
        return _FLOAT_SPECIALS[value], None
    _expect(isinstance(value, int | float) and not isinstance(value, bool), column, value)
    number = float(value)
    if column.type == "real":  # FLOAT holds the nearest single-precision value
        number = struct.unpack("<f", struct.pack("<f", number))[0]
    return number, None


def _numeric(column: _Column, value: Any) -> tuple[Any, str | None]:
    # "Always a string to preserve exact precision. NaN and ±Infinity are serialized as the
    # strings "NaN", "Infinity", "-Infinity"." README: DECIMAL(p,s), unconstrained
    # DECIMAL(38,18); a NaN or ±Infinity is null with the marker (`{"balance": "NaN"}`).
    _expect(isinstance(value, str), column, value)
    if value in ("NaN", "Infinity", "-Infinity"):
        return None, value
    shape = re.fullmatch(r"-?(\d+)(?:\.(\d+))?", value)
    _expect(shape is not None, column, value)
    assert shape is not None
    precision = column.precision or 38
    scale = 18 if column.scale is None else column.scale
    fraction = (shape.group(2) or "").rstrip("0")
    _expect(len(fraction) <= scale, column, value)  # a value DECIMAL(p,s) holds exactly
    _expect(len(shape.group(1).lstrip("0")) <= precision - scale, column, value)
    return Decimal(value), None


def _boolean(column: _Column, value: Any) -> tuple[Any, str | None]:
    _expect(isinstance(value, bool), column, value)  # "JSON boolean"
    return value, None


def _text(column: _Column, value: Any) -> tuple[Any, str | None]:
    # varchar/text: "JSON string"; json: "JSON string containing the raw JSON text"; uuid:
    # "standard 8-4-4-4-12 hex format". README: json and uuid (validated) to STRING, as sent.
    _expect(isinstance(value, str), column, value)
    if column.type == "json":
        json.loads(value)
    if column.type == "uuid":
        _expect(
            re.fullmatch(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", value) is not None,
            column,
            value,
        )
    return value, None


def _bytea(column: _Column, value: Any) -> tuple[Any, str | None]:
    # "Aurora DSQL encodes bytea values as Base64 strings." README: BINARY.
    _expect(isinstance(value, str), column, value)
    return base64.b64decode(value, validate=True), None


def _date(column: _Column, value: Any) -> tuple[Any, str | None]:
    # "JSON number (days since Unix epoch)". README: DATE; the infinities null with a marker.
    _expect(_is_int(value), column, value)
    if value in _DATE_MARKERS:
        return None, _DATE_MARKERS[value]
    return (_EPOCH + dt.timedelta(days=value)).date(), None


def _time(column: _Column, value: Any) -> tuple[Any, str | None]:
    # time: "microseconds since midnight"; timetz: the same "UTC [...] wrapped to the range
    # [0, 86400000000)". README: `HH:MM:SS.ffffff` strings, timetz "in UTC, with `+00:00`".
    _expect(_is_int(value) and 0 <= value < _DAY_US, column, value)
    seconds, micros = divmod(value, 1_000_000)
    text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{micros:06d}"
    return text + ("+00:00" if column.type == "timetz" else ""), None


def _timestamp(column: _Column, value: Any) -> tuple[Any, str | None]:
    # "JSON number (microseconds since Unix epoch)"; timestamptz is "Stored and emitted in
    # UTC". README: TIMESTAMP_NTZ / TIMESTAMP; the ±infinity sentinels null with a marker.
    _expect(_is_int(value), column, value)
    if value in _TS_MARKERS:
        return None, _TS_MARKERS[value]
    stamp = _EPOCH + dt.timedelta(microseconds=value)
    return (stamp.replace(tzinfo=dt.UTC) if column.type == "timestamptz" else stamp), None


def _oidvector(column: _Column, value: Any) -> tuple[Any, str | None]:
    # "JSON empty array". README: ARRAY<BIGINT>.
    _expect(isinstance(value, list) and all(_is_int(v) for v in value), column, value)
    return list(value), None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_CONVERTERS = {
    **dict.fromkeys(_INT_RANGES, _integer),
    "real": _floating,
    "double": _floating,
    "numeric": _numeric,
    "boolean": _boolean,
    "text": _text,
    "json": _text,
    "uuid": _text,
    "bytea": _bytea,
    "date": _date,
    "time": _time,
    "timetz": _time,
    "timestamp": _timestamp,
    "timestamptz": _timestamp,
    "oidvector": _oidvector,
}


def _expect(condition: bool, column: _Column, value: Any) -> None:
    if not condition:
        raise ValueError(f"{column.name} ({column.type}): {value!r} is not a value of its type")


def _same(want: Any, got: Any) -> bool:
    if isinstance(want, float) and isinstance(got, float) and math.isnan(want):
        return math.isnan(got)
    if isinstance(want, dt.datetime) and want.tzinfo is not None:
        want = want.astimezone(dt.UTC).replace(tzinfo=None)
        # A TIMESTAMP (timestamptz) collected from Spark is naive in this process's local
        # zone: astimezone reads a naive time as local.
        if isinstance(got, dt.datetime):
            got = got.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(want, bytes) and isinstance(got, bytearray | bytes):
        return want == bytes(got)
    if isinstance(want, float) and isinstance(got, float):
        return want == got or math.isclose(want, got, rel_tol=1e-6)
    return bool(want == got)


def write_ndjson(
    deliveries: list[str], directory: str, files: int = 4, arrival_start_us: int | None = None
) -> list[str]:
    """Write deliveries as NDJSON dump files, one per shard, as ``land_files`` reads them."""
    import os

    os.makedirs(directory, exist_ok=True)
    if arrival_start_us is None:
        arrival_start_us = int(dt.datetime.now(dt.UTC).timestamp() * 1_000_000)
    paths = [os.path.join(directory, f"shard-{n:03d}.ndjson") for n in range(files)]
    handles = [open(p, "w", encoding="utf-8") for p in paths]  # noqa: SIM115
    try:
        for n, text in enumerate(deliveries):
            shard = n % files
            arrival = dt.datetime.fromtimestamp((arrival_start_us + n * 1000) / 1e6, dt.UTC)
            line = {
                "ShardId": f"shardId-{shard:012d}",
                "SequenceNumber": str(49_000_000_000_000_000_000_000_000_000 + n),
                "PartitionKey": str(n),
                "ApproximateArrivalTimestamp": arrival.isoformat(),
                "Data": base64.b64encode(text.encode("utf-8")).decode("ascii"),
            }
            handles[shard].write(json.dumps(line) + "\n")
    finally:
        for handle in handles:
            handle.close()
    return paths
