"""A DDL that changes a column's type after its table has rows: a lossless widening (INT to
BIGINT, DATE to TIMESTAMP) widens the table, so the values the new type admits apply; a
narrowing (BIGINT to INT) leaves the table as it is, so no value it holds or admits is lost."""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path
from typing import Any

import pytest

from cdc_demo.dsql_stream import envelope, write_ndjson
from tests.spark.pipeline import land_dump, process

pytestmark = pytest.mark.spark
BASE_NS = 1_767_225_600_000_000_000
BEYOND_INT = 5_000_000_000  # more than a 32-bit integer holds


def ddl(qty_type: str) -> str:
    return f"CREATE TABLE public.stock (id BIGINT PRIMARY KEY, qty {qty_type});"


def record(op: str, ident: int, qty: int, ts_ns: int) -> str:
    """A ``full`` insert or update as the DSQL document shapes it (dates are days and
    timestamps microseconds since the epoch)."""
    return json.dumps(envelope(op, "stock", ts_ns, {"id": ident, "qty": qty}, random.Random(ts_ns)))


def run_batch(tmp_path: Path, batch: str, records: list[str], qty_type: str) -> dict[str, Any]:
    dump = str(tmp_path / f"dump-{batch}")
    write_ndjson(records, dump, files=1)
    warehouse = str(tmp_path / "warehouse")
    land_dump(warehouse, dump, batch)
    return process(warehouse, batch, ddl=ddl(qty_type))["apply"]


def table(spark: Any, tmp_path: Path) -> tuple[str, dict[int, Any]]:
    frame = spark.read.format("delta").load(str(tmp_path / "warehouse" / "public" / "stock"))
    rows = {r["id"]: r["qty"] for r in frame.where("NOT _cdc_deleted").collect()}
    return frame.schema["qty"].dataType.simpleString(), rows


def test_a_ddl_widening_a_column_widens_its_table(spark: Any, tmp_path: Path) -> None:
    first = run_batch(tmp_path, "b1", [record("c", 1, 5, BASE_NS)], "INT")
    assert first["accounting"]["applied"] == 1
    assert table(spark, tmp_path) == ("int", {1: 5})

    second = run_batch(
        tmp_path,
        "b2",
        [record("u", 1, 7, BASE_NS + 1), record("c", 2, BEYOND_INT, BASE_NS + 2)],
        "BIGINT",
    )
    accounting = second["accounting"]
    assert (accounting["applied"], accounting["quarantined"]) == (2, 0)
    assert table(spark, tmp_path) == ("bigint", {1: 7, 2: BEYOND_INT})


def test_a_ddl_narrowing_a_column_keeps_its_table(spark: Any, tmp_path: Path) -> None:
    run_batch(tmp_path, "b1", [record("c", 1, BEYOND_INT, BASE_NS)], "BIGINT")
    second = run_batch(tmp_path, "b2", [record("c", 2, BEYOND_INT + 1, BASE_NS + 1)], "INT")
    accounting = second["accounting"]
    assert (accounting["applied"], accounting["quarantined"]) == (1, 0)
    assert table(spark, tmp_path) == ("bigint", {1: BEYOND_INT, 2: BEYOND_INT + 1})


def test_a_ddl_turning_a_date_into_a_timestamp_widens_its_table(spark: Any, tmp_path: Path) -> None:
    """DATE to TIMESTAMP (TIMESTAMP_NTZ) needs Delta's timestampNtz feature, which a table
    without such a column lacks: the apply turns it on before it widens the column."""
    day = 20_000  # 2024-10-04
    micros = (day + 1) * 86_400_000_000 + 3_600_000_000  # the next day, 01:00
    run_batch(tmp_path, "b1", [record("c", 1, day, BASE_NS)], "DATE")
    assert table(spark, tmp_path) == ("date", {1: dt.date(2024, 10, 4)})

    second = run_batch(tmp_path, "b2", [record("c", 2, micros, BASE_NS + 1)], "TIMESTAMP")
    assert (second["accounting"]["applied"], second["accounting"]["quarantined"]) == (1, 0)
    assert table(spark, tmp_path) == (
        "timestamp_ntz",
        {1: dt.datetime(2024, 10, 4), 2: dt.datetime(2024, 10, 5, 1)},
    )
