"""Keys compare by their decoded value: one row however its key was written.

The oracle is the column types' own rules: ``1.5`` and ``1.50`` are one NUMERIC(10,2) value;
``10:30Z`` and ``11:30+01:00`` are one instant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.spark.pipeline import land_dump, process

pytestmark = pytest.mark.spark
BATCH = "2026-01-01T01:00:00+00:00"
DDL = """
CREATE TABLE shop.prices (
    sku NUMERIC(10, 2),
    at TIMESTAMPTZ,
    amount INT,
    PRIMARY KEY (sku, at)
);
"""


def message(offset: int, key: list[Any], after: dict[str, Any], updated: int) -> str:
    """A CockroachDB changefeed message (``wrapped`` envelope with ``updated``) on Kafka."""
    value = {"after": after, "updated": f"{updated}.0000000000"}
    return json.dumps(
        {
            "topic": "prices",
            "partition": 0,
            "offset": offset,
            "timestamp": 1_767_225_600_000 + offset,
            "key": json.dumps(key),
            "value": json.dumps(value),
        }
    )


def test_one_row_per_typed_key(spark: Any, tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    dump.mkdir()
    lines = [
        # Newest first in arrival: the older change, with its key written differently, loses.
        message(
            0,
            ["1.50", "2026-01-01T11:30:00+01:00"],
            {"sku": "1.50", "at": "2026-01-01T11:30:00+01:00", "amount": 2},
            1_767_225_700_000_000_000,
        ),
        message(
            1,
            [1.5, "2026-01-01T10:30:00Z"],
            {"sku": 1.5, "at": "2026-01-01T10:30:00Z", "amount": 1},
            1_767_225_650_000_000_000,
        ),
        message(
            2,
            [2, "2026-01-01T10:30:00.000000+00:00"],
            {"sku": 2, "at": "2026-01-01T10:30:00.000000+00:00", "amount": 7},
            1_767_225_650_000_000_000,
        ),
    ]
    (dump / "part-0.ndjson").write_text("\n".join(lines) + "\n", encoding="utf-8")
    warehouse = str(tmp_path / "warehouse")

    land_dump(warehouse, str(dump), BATCH, layout="kafka", fmt="cockroachdb")
    stats = process(warehouse, BATCH, ddl=DDL, fmt="cockroachdb")

    rows = spark.sql(
        "SELECT CAST(sku AS STRING) AS sku, unix_micros(at) AS at, amount"
        f" FROM delta.`{warehouse}/shop/prices` WHERE NOT _cdc_deleted ORDER BY sku"
    ).collect()
    at = 1_767_263_400_000_000  # 2026-01-01T10:30:00Z
    assert [r.asDict() for r in rows] == [
        {"sku": "1.50", "at": at, "amount": 2},
        {"sku": "2.00", "at": at, "amount": 7},
    ]
    accounting = stats["apply"]["accounting"]
    assert accounting["applied"] == 2 and accounting["superseded"] == 1
    assert accounting["quarantined"] == 0 and accounting["unprocessed"] == 0


def test_a_key_holding_a_special_value_is_quarantined(spark: Any, tmp_path: Path) -> None:
    """NaN or Infinity in a NUMERIC key column: the column stores it only as null (the value
    goes to ``_cdc_special_values``), and a null key matches no row, so each batch would
    insert another row and the key's delete would delete nothing. Such a change is
    quarantined as ``special_key``; the others apply."""
    dump = tmp_path / "dump"
    dump.mkdir()
    at = "2026-01-01T10:30:00Z"
    base = 1_767_225_650_000_000_000
    lines = [
        message(0, ["NaN", at], {"sku": "NaN", "at": at, "amount": 1}, base),
        message(1, ["NaN", at], {"sku": "NaN", "at": at, "amount": 2}, base + 1),
        message(2, ["Infinity", at], {"sku": "Infinity", "at": at, "amount": 3}, base + 2),
        message(3, [3, at], {"sku": 3, "at": at, "amount": 4}, base + 3),
    ]
    (dump / "part-0.ndjson").write_text("\n".join(lines) + "\n", encoding="utf-8")
    warehouse = str(tmp_path / "warehouse")
    land_dump(warehouse, str(dump), BATCH, layout="kafka", fmt="cockroachdb")
    stats = process(warehouse, BATCH, ddl=DDL, fmt="cockroachdb")

    rows = spark.sql(
        f"SELECT CAST(sku AS STRING) AS sku, amount FROM delta.`{warehouse}/shop/prices`"
    ).collect()
    assert [r.asDict() for r in rows] == [{"sku": "3.00", "amount": 4}]
    quarantine = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine").collect()
    assert sorted((r["reason"], r["detail"].split(":")[1].strip()) for r in quarantine) == [
        ("special_key", "sku holds Infinity"),
        ("special_key", "sku holds NaN"),
        ("special_key", "sku holds NaN"),
    ]
    accounting = stats["apply"]["accounting"]
    assert accounting["applied"] == 1 and accounting["quarantined"] == 3
    assert accounting["unprocessed"] == 0
