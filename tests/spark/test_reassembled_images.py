"""A reassembled image is read by the rules of an inline one (DSQL: a chunked record's image is
"the same JSON object" split into fragments): its numbers keep every digit, a literal Spark's
and Python's strict readers refuse makes the set fail, a duplicate key takes its last value."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import crc32c
import pytest

from cdc_demo.dsql_stream import write_ndjson
from tests.spark.pipeline import land_dump, live_rows, process

pytestmark = pytest.mark.spark
DDL = "CREATE TABLE public.accounts (id BIGINT PRIMARY KEY, amount NUMERIC(38,20), name TEXT);"
BASE_NS = 1_767_225_600_000_000_000


def source(ts_ns: int) -> dict[str, Any]:
    return {"ts_ns": ts_ns, "schema": "public", "table": "accounts"}


def inline(image_text: str, ts_ns: int) -> str:
    return (
        '{"type": "full", "op": "c", "before": null, "after": '
        + image_text
        + ', "source": '
        + json.dumps(source(ts_ns))
        + "}"
    )


def chunked(image_text: str, ts_ns: int, chunk_id: str, pieces: int = 3) -> list[str]:
    """A chunked change of ``image_text`` (its after image) and its fragments, cut into
    ``pieces`` by characters."""
    size = -(-len(image_text) // pieces)
    parts = [image_text[i : i + size] for i in range(0, len(image_text), size)]
    ref = {
        "chunk_id": chunk_id,
        "total_fragments": len(parts),
        "crc32c": crc32c.crc32c(image_text.encode()),
    }
    main = json.dumps(
        {
            "type": "chunked",
            "op": "c",
            "before": None,
            "after": None,
            "source": source(ts_ns),
            "chunked": {"after": ref},
        }
    )
    fragments = [
        json.dumps({"type": "fragment", "chunk_id": chunk_id, "index": i, "data": part})
        for i, part in enumerate(parts)
    ]
    return [main, *fragments]


def run(tmp_path: Path, deliveries: list[str]) -> tuple[str, dict[str, Any]]:
    write_ndjson(deliveries, str(tmp_path / "dump"), files=1)
    warehouse = str(tmp_path / "warehouse")
    land_dump(warehouse, str(tmp_path / "dump"), "b1")
    return warehouse, process(warehouse, "b1", ddl=DDL)["apply"]


def test_a_reassembled_image_is_read_as_an_inline_one(spark: Any, tmp_path: Path) -> None:
    """In one batch: a number of 38 digits is exact inline and reassembled; ``NaN`` is no JSON
    number, so the inline record is malformed and the reassembled set fails (every record of
    it quarantined with its payload); a duplicate key takes its last value."""
    amount = "123456789012345678.12345678901234567891"
    image = '{"id": %d, "amount": ' + amount + ', "name": "x"}'
    refused = '{"id": 3, "amount": NaN, "name": "x"}'
    twice = '{"id": 4, "amount": 1.5, "name": "first", "name": "last"}'
    deliveries = [
        inline(image % 1, BASE_NS + 1),
        *chunked(image % 2, BASE_NS + 2, "c2"),
        inline(refused, BASE_NS + 3),
        *chunked(refused, BASE_NS + 4, "c3"),
        *chunked(twice, BASE_NS + 5, "c4"),
    ]
    warehouse, stats = run(tmp_path, deliveries)

    rows = {r["id"]: (r["amount"], r["name"]) for r in live_rows(spark, warehouse, "accounts")}
    assert rows == {
        1: (Decimal(amount), "x"),
        2: (Decimal(amount), "x"),
        4: (Decimal("1.5"), "last"),
    }
    quarantine = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine").collect()
    reasons = sorted((r["reason"], bool(r["payload"])) for r in quarantine)
    assert reasons == [("malformed_image", True)] * 4 + [("malformed_json", True)]
    accounting = stats["accounting"]
    assert (accounting["applied"], accounting["quarantined"]) == (9, 5), accounting
    assert accounting["landed"] == 14 and accounting["unprocessed"] == 0
