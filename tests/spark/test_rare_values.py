"""A batch that mixes values in their common forms with values only the full rules decode.

The apply decodes every change by the common forms first and decodes again, by the full
rules, only the columns of the changes that hold another value (:func:`spark_jobs.resolve.
decode_changes`). Whatever pass a value takes, each change must end as the core's
``decode_row`` says: the same typed values and special markers, or quarantined for the same
reason, naming the same column (the first in the declared order, after any fault of the
change as a whole). The records are written here by hand as the Aurora DSQL document
describes them; the core is the oracle.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from airflow_cdc.core.ddl import parse_tables
from airflow_cdc.core.exceptions import DecodeError, RecordFormatError
from airflow_cdc.core.rows import decode_row
from cdc_demo.dsql_stream import write_ndjson
from spark_jobs import apply_changes
from spark_jobs.times import to_micros
from tests.spark.pipeline import land_dump

pytestmark = pytest.mark.spark

# ``_v3`` is a name a decode pass could give its own columns: a declared column holds it.
DDL = (
    "CREATE TABLE public.t (id numeric(10, 2) PRIMARY KEY, a integer, b numeric(12, 2),"
    " c timestamptz, d date, e text, _v3 integer);"
)
DATE_INFINITY = 2**31 - 1 + 10_957  # DSQL's date +infinity sentinel, in days
ROWS: list[dict[str, Any]] = [
    # Every value in its common form.
    {"id": "1.50", "a": 1, "b": "2.00", "c": 1_700_000_000_000_000, "d": 19_000, "e": "x"},
    # A key, a numeric, a timestamp and a date that only the full rules read, and two
    # columns the DDL does not declare (``y`` in no other change).
    {
        "id": "4.500",
        "a": 2,
        "b": "NaN",
        "c": "2024-01-15T10:30:00+02:00",
        "d": DATE_INFINITY,
        "e": "y",
        "_v3": 3,
        "z": 7,
        "y": "why",
    },
    # Two values that do not decode: the first declared names the change's fault.
    {"id": "6.00", "a": "x", "b": "abc", "c": 1, "d": 1, "e": "z"},
    # A missing key wins over a value that does not decode; and with common values only.
    {"id": None, "a": 1, "b": "abc", "c": 1, "d": 1, "e": "z"},
    {"id": None, "a": 1, "b": "2.00", "c": 1, "d": 1, "e": "z", "_v3": 4},
    # Rare but good values, and a text column given a boolean.
    {"id": "7.00", "a": 3, "b": "1e2", "c": "2024-01-15T10:30:00Z", "d": "2024-02-29", "e": "v"},
    {"id": "8.00", "a": 4, "b": "3.00", "c": 5, "d": "2024-02-29", "e": True},
    # Common again, with the undeclared column.
    {
        "id": "9.00",
        "a": 5,
        "b": "4.00",
        "c": 1_700_000_000_000_001,
        "d": 19_001,
        "e": "w",
        "z": "t",
    },
    # A number whose digits do not fit, beside a rare but good timestamp.
    {"id": "10.00", "a": 6, "b": "123456789012.00", "c": "2024-01-15T10:30:00-05:00", "d": 0},
]


def record(ts_s: int, row: dict[str, Any]) -> str:
    return json.dumps(
        {
            "type": "full",
            "op": "c",
            "before": None,
            "after": row,
            "source": {"ts_ns": ts_s * 1_000_000_000, "schema": "public", "table": "t"},
        }
    )


def expected(row: dict[str, Any]) -> tuple[str, Any]:
    """("applied", (values, special markers, extra)) or ("quarantined", (reason, column))."""
    (spec,) = parse_tables(DDL, "public")
    try:
        decoded = decode_row(spec, "c", None, row)
    except DecodeError as err:
        return "quarantined", (err.reason, err.column)
    except RecordFormatError as err:
        return "quarantined", (err.reason, None)
    return "applied", (decoded.values, decoded.special, decoded.extra)


def test_each_change_decodes_as_the_core_says_whichever_pass_reads_it(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    lines = [record(100 + i, row) for i, row in enumerate(ROWS)]
    write_ndjson(lines, str(tmp_path / "dump"), files=1)
    land_dump(warehouse, str(tmp_path / "dump"), "b1", source="cdc")
    stats = apply_changes.main(
        [
            *("--warehouse", warehouse, "--batch-id", "b1", "--source", "cdc"),
            *("--format", "dsql", "--ddl", DDL),
        ]
    )
    quarantine = {
        r["payload"]: (r["reason"], r["detail"])
        for r in spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine").collect()
    }
    table = spark.read.format("delta").load(f"{warehouse}/public/t")
    rows = {r["id"]: r.asDict() for r in table.selectExpr("*", "unix_micros(c) AS c_us").collect()}
    outcomes = {"applied": 0, "quarantined": 0}
    reasons: dict[str, int] = {}
    for line, row in zip(lines, ROWS, strict=True):
        outcome, facts = expected(row)
        outcomes[outcome] += 1
        if outcome == "quarantined":
            reason, column = facts
            reasons[reason] = reasons.get(reason, 0) + 1
            assert line in quarantine, row
            got_reason, detail = quarantine[line]
            assert got_reason == reason, (row, detail)
            if column is not None:
                assert detail.startswith(f"{reason}: column {column!r}: "), (row, detail)
            continue
        values, special, extra = facts
        got = rows[values["id"]]
        for name in ("id", "a", "b", "d", "e", "_v3"):
            assert got[name] == values[name], (row, name, got[name])
        assert got["c_us"] == (None if values["c"] is None else to_micros(values["c"])), row
        assert dict(got["_cdc_special_values"] or {}) == special, row
        for name, text in extra.items():
            assert got[name] == text, (row, name)
    assert stats["accounting"]["quarantined"] == outcomes["quarantined"]
    # Counted as the two passes were written, in the run's stats as in the ledger.
    assert stats["tables"]["public.t"]["quarantined_by_reason"] == reasons
    assert stats["accounting"]["applied"] == outcomes["applied"]
    assert len(rows) == outcomes["applied"]
    assert all(isinstance(r["id"], Decimal) for r in rows.values())
