"""The whole pipeline from NDJSON dumps to Delta tables, on the shared Spark session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_cdc.demo.dsql_stream import differences, generate, write_ndjson
from tests.spark.pipeline import land_dump, live_rows, process

pytestmark = pytest.mark.spark


def test_dump_to_tables_matches_the_generator(spark: Any, warehouse: str, tmp_path: Path) -> None:
    stream = generate(600, seed=11)
    write_ndjson(stream.deliveries, str(tmp_path / "dump"), files=3)
    landed = land_dump(warehouse, str(tmp_path / "dump"), "b1")
    assert landed["landed"] == len(stream.deliveries)
    stats = process(warehouse, "b1")
    for table in ("customers", "order_items"):
        assert differences(stream, table, live_rows(spark, warehouse, table)) == []
    accounting = stats["apply"]["accounting"]
    assert accounting["landed"] == len(stream.deliveries)
    assert accounting["unprocessed"] == 0
    assert accounting["landed"] == sum(
        accounting[s] for s in ("applied", "superseded", "duplicate", "pending", "quarantined")
    )
