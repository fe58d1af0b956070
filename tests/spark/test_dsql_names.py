"""Aurora DSQL records name their table by ``source.schema`` and ``source.table``: a change
applies only to the declared table it names exactly; anything else is quarantined."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdc_demo.dsql_stream import write_ndjson
from tests.spark.pipeline import land_dump, process

pytestmark = pytest.mark.spark
DDL = "CREATE TABLE public.accounts (id BIGINT PRIMARY KEY, name TEXT);"


def record(schema: str, ident: int, ts_ns: int) -> str:
    """A ``full`` insert as the DSQL document shapes it."""
    return json.dumps(
        {
            "type": "full",
            "op": "c",
            "before": None,
            "after": {"id": ident, "name": f"n{ident}"},
            "source": {
                "version": "1.0",
                "ts_ms": ts_ns // 1_000_000,
                "ts_ns": ts_ns,
                "txId": f"tx{ident}",
                "schema": schema,
                "table": "accounts",
                "db": "postgres",
                "cluster": "c1",
            },
            "ts_ms": ts_ns // 1_000_000,
            "ts_ns": ts_ns,
        }
    )


def test_a_change_naming_no_declared_schema_is_quarantined(spark: Any, tmp_path: Path) -> None:
    base = 1_767_225_600_000_000_000
    write_ndjson(
        [record("public", 1, base), record("", 2, base + 1), record("other", 3, base + 2)],
        str(tmp_path / "dump"),
        files=1,
    )
    warehouse = str(tmp_path / "warehouse")
    land_dump(warehouse, str(tmp_path / "dump"), "b1")
    stats = process(warehouse, "b1", ddl=DDL)

    table = spark.read.format("delta").load(f"{warehouse}/public/accounts")
    assert [r["id"] for r in table.collect()] == [1]
    quarantine = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine")
    reasons = sorted((r["reason"], r["detail"]) for r in quarantine.collect())
    assert reasons == [
        ("undeclared_table", "undeclared_table: .accounts"),
        ("undeclared_table", "undeclared_table: other.accounts"),
    ]
    accounting = stats["apply"]["accounting"]
    assert accounting["applied"] == 1 and accounting["quarantined"] == 2


def test_a_warehouse_path_holding_a_backtick(spark: Any, tmp_path: Path) -> None:
    """Paths reach SQL only quoted: a backtick or a space in the warehouse's path is data."""
    base = 1_767_225_600_000_000_000
    write_ndjson(
        [record("public", 1, base), record("public", 2, base + 1)],
        str(tmp_path / "dump"),
        files=1,
    )
    warehouse = str(tmp_path / "ware`house dir")
    land_dump(warehouse, str(tmp_path / "dump"), "b1")
    stats = process(warehouse, "b1", ddl=DDL, options=("--history", "*"))

    table = spark.read.format("delta").load(f"{warehouse}/public/accounts")
    assert sorted((r["id"], r["name"]) for r in table.collect()) == [(1, "n1"), (2, "n2")]
    history = spark.read.format("delta").load(f"{warehouse}/public/accounts__history")
    assert sorted(r["id"] for r in history.collect()) == [1, 2]
    assert stats["apply"]["accounting"]["applied"] == 2
