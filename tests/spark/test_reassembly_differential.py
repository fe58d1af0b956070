"""A seeded differential test of the JVM reassembly against the core's ``assemble``.

Chunked records of one or two chunked images, each with fragments as a stream may deliver
them: in any order, redelivered, missing, conflicting, past the set, under a wrong CRC32C, over
text that is not one JSON object, with numbers whose digits a float would lose. Each record is
settled by :func:`spark_jobs.reassemble._assemble_sets` in one Spark pass, and compared with
what the core's :func:`~airflow_cdc.core.reassembly.assemble` decides for each of its images,
combined as the module's rules say (each record named once, whatever the images share):
the first failed image (before, then after) fails the record; otherwise any incomplete
image keeps it waiting, or fails it once it has waited too long; otherwise it is complete,
with each image the object the core read.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest

from airflow_cdc.core.events import ChunkRef, Fragment
from airflow_cdc.core.formats.common import MAX_SET_BYTES
from airflow_cdc.core.jsontext import JsonNumber
from airflow_cdc.core.reassembly import COMPLETE, FAILED, assemble, checksum, split
from spark_jobs import reassemble
from spark_jobs.reassemble import STATE_SCHEMA, Clock

pytestmark = pytest.mark.spark
IMAGES = ("before", "after")
WALL = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
WAIT = dt.timedelta(hours=1)


@dataclass
class Case:
    main: dict[str, Any]
    fragments: list[dict[str, Any]] = field(default_factory=list)


def image_text(rng: random.Random) -> str:
    """An image's JSON text as a source writes it (numbers as written, nesting, non-ASCII).
    Its numbers have at most 38 digits: a VARIANT holds a longer one as a double, inline or
    reassembled (``spark_jobs/values.py``)."""
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 25)))
    members = [
        f'"id": {rng.randint(-(2**63), 2**63 - 1)}',
        f'"amount": {rng.randint(0, 10**12)}.{digits}',
        '"note": '
        + json.dumps("grüße 東京 🚀 " * rng.randint(1, 6), ensure_ascii=rng.random() < 0.5),
        '"nested": {"a": [1, 2.50, null, true], "b": "x"}',
        f'"small": {rng.choice(["1e-7", "-0.0", "1E+3", "0"])}',
    ]
    rng.shuffle(members)
    if rng.random() < 0.2:
        members.append('"id": 7')  # a duplicate key: its last value counts
    return "{" + ", ".join(members) + "}"


def broken_text(rng: random.Random) -> str:
    """Text with a valid CRC32C that is not one JSON object."""
    return rng.choice(
        [
            '{"a": NaN}',
            '{"a": 1',
            '{"a": 1} {"b": 2}',
            "[1, 2]",
            '"text"',
            '{"a": "\\ud800"}',
            '{"a": Infinity}',
            "",
        ]
    )


def case(rng: random.Random, number: int) -> Case:
    main: dict[str, Any] = {
        "record_id": f"m{number:04d}",
        "batch_id": "b1",
        "arrival_ts": WALL - 2 * WAIT if rng.random() < 0.15 else WALL,
        "buffered_at": WALL - 2 * WAIT if rng.random() < 0.15 else WALL,
        "rtype": "chunked",
        "state": "open",
    }
    result = Case(main)
    chosen = rng.choice([("after",), ("before",), ("before", "after")])
    for name in IMAGES:
        if name not in chosen:
            main[f"{name}_json"] = '{"inline": 1}' if rng.random() < 0.5 else None
            continue
        if name == "after" and "before" in chosen and rng.random() < 0.1:
            # Both images under one chunk id: one text, its fragments delivered once.
            main.update({f"after_{k}": main[f"before_{k}"] for k in ("chunk_id", "total", "crc")})
            continue
        text = broken_text(rng) if rng.random() < 0.1 else image_text(rng)
        chunk = f"{main['record_id']}-{name}"
        roll = rng.random()
        size = 4 if roll < 0.05 else rng.choice([8, 16, 40])
        pieces = split(text, chunk, size) if text else []
        total = len(pieces) or 1
        crc = checksum(text)
        if rng.random() < 0.08:
            crc = (crc + 1) % 2**32
        main.update({f"{name}_chunk_id": chunk, f"{name}_total": total, f"{name}_crc": crc})
        deliveries = list(pieces)
        if roll < 0.05:
            deliveries = deliveries[:3]  # most missing (past the 20 that a detail names)
        elif roll < 0.15 and len(deliveries) > 1:
            deliveries.remove(rng.choice(deliveries))  # missing
        elif roll < 0.25:
            deliveries += rng.sample(deliveries, min(len(deliveries), 2))  # redelivered
        elif roll < 0.3:
            deliveries.append(Fragment(chunk, rng.randrange(total), "conflict"))
        elif roll < 0.35:
            deliveries.append(Fragment(chunk, total + rng.randrange(3), "past"))
        rng.shuffle(deliveries)
        for piece in deliveries:
            result.fragments.append(
                {
                    "record_id": f"f{number:04d}-{len(result.fragments):03d}",
                    "batch_id": "b1",
                    "arrival_ts": WALL,
                    "rtype": "fragment",
                    "state": "open",
                    "chunk_id": piece.chunk_id,
                    "frag_index": piece.index,
                    "frag_data": piece.data,
                }
            )
    return result


def abbreviated(indexes: tuple[int, ...]) -> str:
    shown = list(indexes[:20])
    return f"{shown}" if len(indexes) <= 20 else f"{shown} and {len(indexes) - 20} more"


def expected(one: Case, expired: str | None, max_bytes: int = MAX_SET_BYTES) -> dict[str, Any]:
    """The settlement the module's rules give, from the core's ``assemble`` of each image."""
    main = one.main
    ids = {f["record_id"]: f for f in one.fragments}
    members = Counter([main["record_id"], *ids])
    images: dict[str, Any] = {
        name: json.loads(main[f"{name}_json"]) if main.get(f"{name}_json") else None
        for name in IMAGES
    }
    missing: list[str] = []
    used: Counter[str] = Counter()
    redelivered: Counter[str] = Counter()
    seen: set[str] = set()
    for name in IMAGES:
        chunk = main.get(f"{name}_chunk_id")
        if chunk is None:
            continue
        ref = ChunkRef(chunk, main[f"{name}_total"], main[f"{name}_crc"])
        mine = sorted(
            (rid, Fragment(f["chunk_id"], f["frag_index"], f["frag_data"]))
            for rid, f in ids.items()
            if f["chunk_id"] == chunk
        )
        assembly = assemble(ref, [f for _, f in mine], max_bytes)
        if assembly.status == FAILED:
            return {
                "outcome": "failed",
                "reason": assembly.reason,
                "detail": f"{name}: {assembly.detail}",
                "members": members,
            }
        if assembly.status != COMPLETE:
            missing.append(f"{name} lacks fragments {abbreviated(assembly.missing)}")
            continue
        images[name] = assembly.image
        if chunk in seen:  # the other image's fragments: each record once
            continue
        seen.add(chunk)
        first: dict[int, str] = {}
        for rid, fragment in mine:
            if fragment.index in first:
                redelivered[rid] += 1
            else:
                first[fragment.index] = rid
        used.update(first.values())
    if missing:
        detail = "; ".join(missing)
        if expired:
            failed = f"{detail}, still after {expired}"
            return {
                "outcome": "failed",
                "reason": "incomplete_fragment_set",
                "detail": failed,
                "members": members,
            }
        return {"outcome": "waiting", "reason": None, "detail": detail, "members": members}
    return {
        "outcome": "complete",
        "reason": None,
        "detail": None,
        "images": {name: comparable(value) for name, value in images.items()},
        "used": used,
        "redelivered": redelivered,
        "members": members,
    }


def comparable(value: Any) -> Any:
    """A JSON value with its fractional numbers as ``Decimal`` (digits as written)."""
    if isinstance(value, JsonNumber):
        return Decimal(value.text)
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def ids(records: list[dict[str, str]]) -> Counter[str]:
    """How often each record is named (each is of batch ``b1``)."""
    assert {r["batch_id"] for r in records} <= {"b1"}
    return Counter(r["record_id"] for r in records)


def state_rows(spark: Any, rows: list[dict[str, Any]]) -> Any:
    names = STATE_SCHEMA.fieldNames()
    return spark.createDataFrame(
        [tuple(row.get(name) for name in names) for row in rows], STATE_SCHEMA
    )


def settle_both(
    spark: Any, cases: list[Case], max_bytes: int = MAX_SET_BYTES
) -> tuple[dict[str, Any], set[tuple[str, str | None]], set[str | None]]:
    """Settle ``cases`` in the JVM and check each against the core: (the settled rows by
    record id, the (outcome, reason) pairs met, the expiries met)."""
    clock = Clock(WALL, WAIT, WALL, WAIT)
    candidates = state_rows(spark, [c.main for c in cases])
    fragments = state_rows(spark, [f for c in cases for f in c.fragments])
    settled = {
        row["record_id"]: row.asDict(recursive=True)
        for row in reassemble._assemble_sets(candidates, fragments, clock, max_bytes).collect()
    }
    assert set(settled) == {c.main["record_id"] for c in cases}
    outcomes: set[tuple[str, str | None]] = set()
    expiries: set[str | None] = set()
    for one in cases:
        waited = None
        if one.main["arrival_ts"] < WALL - WAIT:
            waited = f"{WAIT} of stream time"
        elif one.main["buffered_at"] < WALL - WAIT:
            waited = f"{WAIT} of wall-clock time in the open state"
        want = expected(one, waited, max_bytes)
        expiries.add(waited)
        got = settled[one.main["record_id"]]
        outcomes.add((want["outcome"], want["reason"]))
        context = (one.main, want, got)
        assert (got["outcome"], got["reason"]) == (want["outcome"], want["reason"]), context
        if want["reason"] != "malformed_image":
            assert got["detail"] == want["detail"], context
        assert ids(got["members"]) == want["members"], context
        if want["outcome"] != "complete":
            assert got["used"] == [] and got["redelivered"] == [], context
            continue
        assert ids(got["used"]) == want["used"], context
        assert ids(got["redelivered"]) == want["redelivered"], context
        for name in IMAGES:
            text = got[f"{name}_json"]
            image = None if text is None else json.loads(text, parse_float=Decimal)
            assert image == want["images"][name], (name, context)
    return settled, outcomes, expiries


def test_the_jvm_reassembly_settles_every_set_as_the_core_does(spark: Any) -> None:
    rng = random.Random(20261129)
    cases = [case(rng, number) for number in range(160)]
    settled, outcomes, expiries = settle_both(spark, cases)
    # The draw reached every outcome and every way a set fails.
    assert {reason for outcome, reason in outcomes if outcome == "failed"} == {
        "fragment_out_of_range",
        "conflicting_fragments",
        "crc_mismatch",
        "malformed_image",
        "incomplete_fragment_set",
    }
    assert {"complete", "waiting"} <= {outcome for outcome, _ in outcomes}
    assert len(expiries) == 3
    shared = [c for c in cases if c.main.get("before_chunk_id") == c.main.get("after_chunk_id")]
    assert any(settled[c.main["record_id"]]["outcome"] == "complete" for c in shared)
    assert any(" more" in (row["detail"] or "") for row in settled.values())


def test_a_chunk_id_past_the_byte_bound_fails_its_set_as_the_core_does(spark: Any) -> None:
    """Sets whose chunk id gathered more distinct fragment data than the bound fail unread,
    naming the bytes, with every delivery a member; the rest settle as before."""
    rng = random.Random(20261202)
    cases = [case(rng, number) for number in range(60)]
    delivered = sorted(
        sum(
            len(data.encode("utf-8", "surrogatepass"))
            for _, data in {(f["frag_index"], f["frag_data"]) for f in c.fragments}
        )
        for c in cases
    )
    bound = delivered[len(delivered) // 2]
    settled, outcomes, _ = settle_both(spark, cases, bound)
    oversized = [r for r in settled.values() if r["reason"] == "oversized_fragment_set"]
    assert oversized and any(r["members"][1:] for r in oversized)
    assert {"complete", "waiting"} <= {outcome for outcome, _ in outcomes}
