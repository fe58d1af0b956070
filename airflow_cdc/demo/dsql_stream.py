"""Generate an Aurora DSQL CDC stream with a known expected final state.

The stream has what real streams have: several tables on one stream, inserts (``c``), updates
(``u`` and ``c``), deletes (``d``), an op the reference does not know yet, images over the
chunk threshold split into fragments, at-least-once redeliveries, arrival out of commit order,
and bad input (malformed JSON, an unknown record type, a missing key, an undecodable value,
a CRC mismatch, a fragment set that never completes, a table nobody declared). The generator
applies only the good changes to its model, so ``expected`` is what the tables must hold.
"""

from __future__ import annotations

import base64
import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from airflow_cdc.core.reassembly import checksum, split
from airflow_cdc.demo import example_ddl

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
    fragments = split(image_text, chunk_id, fragment_bytes)
    main = dict(record, type="chunked")
    main[image_name] = None
    main["chunked"] = {
        image_name: {
            "chunk_id": chunk_id,
            "total_fragments": len(fragments),
            "crc32c": str(checksum(image_text)),
        }
    }
    counts["chunked"] += 1
    counts["fragments"] += len(fragments)
    return [json.dumps(main, ensure_ascii=False)] + [
        json.dumps(
            {"type": "fragment", "chunk_id": f.chunk_id, "index": f.index, "data": f.data},
            ensure_ascii=False,
        )
        for f in fragments
    ]


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
            main["chunked"]["after"]["crc32c"] = str((checksum("x") + 1) % 2**32)
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

    ``rows`` are the target's live rows as dicts (for example ``Row.asDict()``); expected
    images are decoded with the same DDL, so both sides compare as typed values.
    """
    from airflow_cdc.core.ddl import parse_tables
    from airflow_cdc.core.events import UPSERT
    from airflow_cdc.core.rows import decode_row

    spec = next(s for s in parse_tables(DDL) if s.table.name == table)
    keys = spec.primary_key
    expected = {}
    for image in stream.expected[table].values():
        decoded = decode_row(spec, UPSERT, None, image)
        expected[tuple(decoded.values[k] for k in keys)] = (decoded.values, decoded.special)
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


def _same(want: Any, got: Any) -> bool:
    import datetime as dt
    import math

    if isinstance(want, float) and isinstance(got, float) and math.isnan(want):
        return math.isnan(got)
    if isinstance(want, dt.datetime) and want.tzinfo is not None:
        want = want.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(got, dt.datetime) and got.tzinfo is not None:
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
    import datetime as dt
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
