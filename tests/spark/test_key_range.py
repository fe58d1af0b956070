"""The MERGE's key-range bound holds every key of the batch it was computed from.

The oracle is the rows themselves: each row must satisfy the predicate built from the
batch's own minimum and maximum, whatever the first key's type and name, and whatever time
zone the driver's Python runs in (the bound once went through Python's local time: a key in
a daylight-saving fold, or a TIMESTAMP_NTZ key under a zone other than the session's, fell
outside it, and the MERGE inserted a second row for a key it should have matched).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spark_jobs.apply import key_range
from tests.zones import local_zone

pytestmark = pytest.mark.spark

# Per type: the batch's keys, and keys outside their range. New York falls back at 06:00 UTC
# on 2026-11-01: 05:30 and 06:30 UTC are both 01:30 there.
CASES = {
    "timestamp": (
        [
            "timestamp_micros(1793511000000000)",  # 2026-11-01 05:30:00 UTC
            "timestamp_micros(1793514600000001)",  # 2026-11-01 06:30:00.000001 UTC
        ],
        ["timestamp_micros(1793510999999999)", "timestamp_micros(1793514600000002)"],
    ),
    "timestamp_ntz": (
        [
            "TIMESTAMP_NTZ'2026-03-08 02:30:00'",  # no such local time in New York
            "TIMESTAMP_NTZ'0001-01-01 00:00:00'",
            "TIMESTAMP_NTZ'2026-11-01 01:30:00.000001'",
        ],
        ["TIMESTAMP_NTZ'2026-11-01 01:30:00.000002'", "TIMESTAMP_NTZ'9999-12-31 23:59:59'"],
    ),
    "date": (
        ["DATE'0001-01-02'", "DATE'2026-03-08'", "DATE'9999-12-30'"],
        ["DATE'0001-01-01'", "DATE'9999-12-31'"],
    ),
    "decimal": (
        [
            "CAST('-99999999.99' AS DECIMAL(10, 2))",
            "CAST('1.5' AS DECIMAL(10, 2))",
            "CAST('12345678.90' AS DECIMAL(10, 2))",
        ],
        ["CAST('12345678.91' AS DECIMAL(10, 2))"],
    ),
    "bigint": (
        ["-9223372036854775807L", "9223372036854775806L", "0L"],
        ["-9223372036854775808L", "9223372036854775807L"],
    ),
    "string": (["'a.b'", "'zé`'", "'b'"], ["''", "'a'", "'zé`a'", "'~'"]),
}


@pytest.fixture
def new_york() -> Iterator[None]:
    """The driver's Python in New York's time zone (the JVM and the session stay in UTC)."""
    with local_zone("America/New_York"):
        yield


@pytest.mark.parametrize("kind", sorted(CASES))
def test_every_key_of_the_batch_is_inside_its_range(spark: Any, new_york: None, kind: str) -> None:
    keys, beyond = CASES[kind]

    def frame(values: list[str]) -> Any:
        rows = ", ".join(f"({v})" for v in values)
        # A key name holding a dot: the bound names it quoted, not as a struct's field.
        return spark.sql(f"SELECT col1 AS `k.ey` FROM VALUES {rows}").alias("t")

    batch = frame(keys)
    bound = key_range(batch, ["k.ey"], "t")
    assert bound is not None
    assert batch.where(bound).count() == len(keys)
    assert frame(beyond).where(bound).count() == 0


def test_an_empty_batch_has_no_range(spark: Any) -> None:
    empty = spark.sql("SELECT 1L AS id WHERE false")
    assert key_range(empty, ["id"], "t") is None


def test_a_key_of_a_type_without_order_is_not_bounded(spark: Any) -> None:
    batch = spark.sql("SELECT X'00' AS id")
    bound = key_range(batch, ["id"], "t")
    assert bound is not None
    assert batch.alias("t").where(bound).count() == 1
