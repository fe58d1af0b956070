"""A warehouse written by jobs 1.x: every job (landing, apply, maintenance) stops before
any work, naming the migration step, whichever of the 1.x layout's marks the warehouse has;
a 2.x warehouse's own raw table passes the check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdc_demo.dsql_stream import generate, write_ndjson
from spark_jobs import maintain
from spark_jobs.runs import WarehouseLayoutError, WarehouseLocationError, check_file_system
from tests.spark.pipeline import DDL, land_dump, process

pytestmark = pytest.mark.spark


def raw_table(spark: Any, path: str, partitions: list[str]) -> None:
    frame = spark.createDataFrame(
        [("r1", "dump", "b1", "record")],
        "record_id string, source string, batch_id string, kind string",
    )
    frame.write.format("delta").partitionBy(*partitions).save(path)


@pytest.mark.parametrize(
    "mark",
    ["raw partitioned by batch_id", "_cdc/changes", "_cdc/staged", "_cdc/fragments"],
)
def test_a_1x_warehouse_is_refused_with_the_migration_step(
    spark: Any, warehouse: str, mark: str
) -> None:
    if mark.startswith("raw"):
        raw_table(spark, f"{warehouse}/_cdc/raw", ["batch_id"])
    else:
        raw_table(spark, f"{warehouse}/_cdc/raw", ["source", "batch_id"])
        spark.range(1).write.format("delta").save(f"{warehouse}/{mark}")
    with pytest.raises(WarehouseLayoutError, match="Migration step: point the DAG at a new"):
        process(warehouse, "b1")
    # Nothing was written: the ledger has no table.
    assert not Path(warehouse, "_cdc", "ledger").exists()


def test_landing_and_maintenance_refuse_a_1x_warehouse_too(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """A landing run would otherwise fail on the raw table's partitioning on every retry,
    with Delta's error rather than the migration step."""
    raw_table(spark, f"{warehouse}/_cdc/raw", ["batch_id"])
    write_ndjson(generate(10, seed=4).deliveries, str(tmp_path / "dump"), files=1)
    with pytest.raises(WarehouseLayoutError, match="Migration step"):
        land_dump(warehouse, str(tmp_path / "dump"), "b1")
    argv = ["--warehouse", warehouse, "--batch-id", "m1", "--source", "dump", "--ddl", DDL]
    with pytest.raises(WarehouseLayoutError, match="Migration step"):
        maintain.main(argv)
    assert spark.read.format("delta").load(f"{warehouse}/_cdc/raw").count() == 1


def test_the_2x_layout_passes_the_check(spark: Any, warehouse: str, tmp_path: Path) -> None:
    write_ndjson(generate(40, seed=3).deliveries, str(tmp_path / "dump"), files=1)
    land_dump(warehouse, str(tmp_path / "dump"), "b1")
    stats = process(warehouse, "b1")["apply"]
    assert stats["accounting"]["landed"] > 0 and stats["accounting"]["unprocessed"] == 0


def test_a_plain_path_on_a_cluster_whose_file_system_is_not_local_is_refused(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """With ``fs.defaultFS`` on HDFS, a job given ``/wh`` would write ``hdfs://nn/wh`` while
    the operators and sensors read ``/wh`` here: every job stops before any work, naming both
    ways to say where the warehouse is."""
    write_ndjson(generate(10, seed=4).deliveries, str(tmp_path / "dump"), files=1)
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    before = hadoop.get("fs.defaultFS")
    hadoop.set("fs.defaultFS", "hdfs://nn:8020")
    try:
        with pytest.raises(WarehouseLocationError, match=f"hdfs://nn:8020{warehouse}, or file://"):
            land_dump(warehouse, str(tmp_path / "dump"), "b1")
    finally:
        hadoop.set("fs.defaultFS", before)
    assert not Path(warehouse, "_cdc").exists()
    # A location that names its file system, or a local default one, passes.
    for location, default_fs in (
        ("hdfs://nn:8020/wh", "hdfs://nn:8020"),
        ("file:/wh", "hdfs://nn:8020"),
        ("s3a://lake/wh", "hdfs://nn:8020"),
        ("/wh", "file:///"),
        ("/wh", None),
    ):
        check_file_system(location, default_fs)
