"""The stored rows a batch's partial updates are weighed against (``resolve.earlier_rows``),
in a table that two sources write, each running a batch of the same id."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.resolve import earlier_rows
from spark_jobs.session import commit_metadata

pytestmark = pytest.mark.spark

SCHEMA = "id BIGINT, _cdc_batch STRING, _cdc_sequence STRING, _cdc_commit_ts TIMESTAMP"
AT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def write(spark: Any, path: str, rows: list[tuple[int, str, str]], **run: str) -> None:
    """The table's whole content as ``rows`` (id, batch, sequence), in one commit of ``run``."""
    frame = spark.createDataFrame([(i, b, s, AT) for i, b, s in rows], SCHEMA)
    with commit_metadata(spark, **run):
        frame.write.format("delta").mode("overwrite").save(path)


def stored(spark: Any, path: str, source: str) -> dict[int, str]:
    found = earlier_rows(spark, path, ["id"], "b1", source)
    assert found is not None
    return {r["_t_0"]: r["_t_seq"] for r in found.collect()}


def test_a_batch_reads_the_table_before_its_own_sources_run_of_it_not_another_sources(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "orders")
    write(spark, path, [(1, "b0", "1"), (2, "b0", "1")], batch_id="b0", source="a")
    # Source a's run of b1 rewrote row 1: a batch reads only rows of earlier batches.
    write(spark, path, [(1, "b1", "3"), (2, "b0", "1")], batch_id="b1", source="a")
    # Source b's first run of b1 reads the table as it is, not as before a's run of b1.
    assert stored(spark, path, "b") == {2: "1"}
    # Its re-run after its MERGE reads the table as its first run did.
    write(spark, path, [(1, "b1", "3"), (2, "b1", "4")], batch_id="b1", source="b")
    assert stored(spark, path, "b") == {2: "1"}
    # Source a's re-run reads the table as before its own first run of b1.
    assert stored(spark, path, "a") == {1: "1", 2: "1"}
