"""Tables every engine reads: delta-rs (the ``deltalake`` package), and DuckDB over its Arrow
stream, read every table the pipeline writes as Spark does, row for row.

The runs give the tables each feature the pipeline turns on: deletion vectors (updates and
deletes of a target and its history), column mapping (a declared name with a space, and one
added to a table that has data), TIMESTAMP_NTZ (a ``timestamp`` column), checkpoints, and the
files ``OPTIMIZE`` compacts. Type widening (a Kafka Connect schema widening a column) is not
here: delta-rs 1.6.6 refuses the ``typeWidening`` reader feature (see the README).
DuckDB's own delta extension downloads from DuckDB's host, so DuckDB reads the tables here
through delta-rs's Arrow stream.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from cdc_demo.dsql_stream import DDL as SHOP_DDL
from cdc_demo.dsql_stream import envelope, generate, write_ndjson
from spark_jobs import maintain
from tests.spark.pipeline import land_dump, process

pytestmark = pytest.mark.spark

START_NS = 1_767_225_600_000_000_000
SPAN_S = 3000
EVENTS_DDL = 'CREATE TABLE public.events (id bigint PRIMARY KEY, "order date" date, note text);'
DDL = f"{SHOP_DDL}\n{EVENTS_DDL}\n"
OPTIONS = ("--history", "public.customers", "--column-mapping")
# Spark's default for the tables it creates: a checkpoint every second commit instead of every
# tenth, so that a short run reads its tables from checkpoints too.
CHECKPOINT_INTERVAL = "spark.databricks.delta.properties.defaults.checkpointInterval"
TABLES = {
    "public/customers",
    "public/customers__history",
    "public/order_items",
    "public/events",
    *(f"_cdc/{t}" for t in ("raw", "ledger", "quarantine", "pending", "held", "cuts")),
}
LIVE = "NOT _cdc_deleted"


def delta_rs_read(path: str, version: int | None = None, predicate: str | None = None) -> Any:
    """The table as delta-rs reads it (its DataFusion scan applies deletion vectors and column
    mapping, which ``to_pyarrow_dataset`` refuses), as a pyarrow table."""
    import pyarrow as pa
    from deltalake import DeltaTable

    table = DeltaTable(path, version=version)
    return pa.RecordBatchReader.from_stream(table.scan(predicate=predicate)).read_all()


def spark_read(spark: Any, path: str, version: int | None = None, where: str | None = None) -> Any:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    frame = reader.load(path)
    return (frame.where(where) if where else frame).toArrow()


def plain(kind: Any) -> Any:
    """``kind`` with Arrow's view and large layouts of strings, binaries and lists as the plain
    ones: delta-rs returns views, Spark plain arrays, of the same values."""
    import pyarrow as pa

    t = pa.types
    if t.is_string_view(kind) or t.is_large_string(kind):
        return pa.string()
    if t.is_binary_view(kind) or t.is_large_binary(kind):
        return pa.binary()
    if t.is_map(kind):
        return pa.map_(plain(kind.key_type), plain(kind.item_type))
    if t.is_list(kind) or t.is_large_list(kind) or t.is_list_view(kind):
        return pa.list_(plain(kind.value_type))
    if t.is_struct(kind):
        return pa.struct([(f.name, plain(f.type)) for f in kind])
    return kind


def columns(table: Any) -> list[tuple[str, Any]]:
    return [(f.name, plain(f.type)) for f in table.schema]


def value(item: Any) -> Any:
    """A Python value compared by what it means: NaN equals NaN, an instant is in UTC whatever
    zone object names it (a naive TIMESTAMP_NTZ stays naive), a map is its entries."""
    if isinstance(item, float) and math.isnan(item):
        return "NaN"
    if isinstance(item, dt.datetime) and item.tzinfo is not None:
        return item.astimezone(dt.UTC)
    if isinstance(item, list | tuple):
        return tuple(value(i) for i in item)
    if isinstance(item, dict):
        return tuple((k, value(v)) for k, v in item.items())
    return item


def rows(table: Any) -> list[str]:
    """The table's rows as a sorted list (a multiset), each the repr of its values."""
    return sorted(repr(tuple(value(v) for v in row.values())) for row in table.to_pylist())


def assert_same(found: Any, expected: Any, what: str) -> None:
    """delta-rs's read (``found``) has Spark's columns, types and rows."""
    assert columns(found) == columns(expected), what
    assert found.num_rows == expected.num_rows, what
    assert rows(found) == rows(expected), what


def delta_tables(warehouse: str) -> dict[str, str]:
    """Every Delta table under the warehouse, by its path relative to it."""
    root = Path(warehouse)
    return {
        str(log.parent.relative_to(root)): str(log.parent)
        for log in sorted(root.rglob("_delta_log"))
    }


def protocol(path: str) -> dict[str, Any]:
    from deltalake import DeltaTable

    found = DeltaTable(path).protocol()
    return {
        "reader": found.min_reader_version,
        "writer": found.min_writer_version,
        "reader_features": sorted(found.reader_features or []),
        "writer_features": sorted(found.writer_features or []),
    }


def files_with_dvs(path: str, version: int | None = None) -> int:
    """How many data files of the table's version (its newest) have a deletion vector."""
    from deltalake import DeltaTable

    return int(DeltaTable(path, version=version).deletion_vectors().read_all().num_rows)


def deliver(warehouse: str, tmp_path: Path, batch: str, deliveries: list[str]) -> None:
    write_ndjson(deliveries, str(tmp_path / batch), files=2)
    land_dump(warehouse, str(tmp_path / batch), batch)


def apply(warehouse: str, batch: str, *options: str) -> None:
    stats = process(warehouse, batch, ddl=DDL, options=(*OPTIONS, *options))
    assert stats["apply"]["accounting"]["unprocessed"] == 0


def hand_made(batch: int) -> list[str]:
    """Changes the generator does not make: ``events`` (created with column mapping for its
    name with a space: inserted, then updated and one deleted) and, in the second batch, a
    customer with a column ``loyalty tier`` (column mapping turned on for a table with data)."""
    rng = random.Random(batch)
    at = START_NS + batch * 10**9
    records = [
        envelope("c" if batch == 0 else "u", "events", at + n, row, rng)
        for n, row in enumerate(
            {"id": i, "order date": 20455 + i + batch, "note": f"n{i}.{batch}"} for i in range(6)
        )
    ]
    if batch == 1:
        records.append(envelope("d", "events", at + 10, {"id": 1}, rng))
        customer = {"id": 10_001, "name": "Tier 10001", "loyalty tier": "gold"}
        records.append(envelope("c", "customers", at + 11, customer, rng))
    return [json.dumps(r) for r in records]


def run_pipeline(warehouse: str, tmp_path: Path) -> None:
    """A batch, maintenance (tombstones purged, files compacted), then a batch with a cut."""
    stream = generate(600, seed=17, start_ns=START_NS, span_ns=SPAN_S * 10**9)
    half = len(stream.deliveries) // 2
    deliver(warehouse, tmp_path, "b0", stream.deliveries[:half] + hand_made(0))
    apply(warehouse, "b0")
    maintain.main(
        [
            *("--warehouse", warehouse, "--batch-id", "m1", "--source", "dump", "--ddl", DDL),
            *("--tombstone-retention-seconds", "3600"),
        ]
    )
    cut = dt.datetime.fromtimestamp(START_NS / 1e9 + 0.9 * SPAN_S, dt.UTC)
    start = cut - dt.timedelta(hours=1)
    deliver(warehouse, tmp_path, "b1", stream.deliveries[half:] + hand_made(1))
    apply(warehouse, "b1", "--cut-at", cut.isoformat(), "--interval-start", start.isoformat())


def test_delta_rs_and_duckdb_read_every_table_as_spark_does(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """Every table of a run (targets, the history, the bookkeeping), at its newest version,
    every version of a target, and a predicate over the deletion vectors: delta-rs reads what
    Spark reads, and DuckDB over delta-rs's stream aggregates what Spark aggregates."""
    import duckdb
    from deltalake import DeltaTable

    spark.conf.set(CHECKPOINT_INTERVAL, "2")
    try:
        run_pipeline(warehouse, tmp_path)
    finally:
        spark.conf.unset(CHECKPOINT_INTERVAL)
    tables = delta_tables(warehouse)
    assert set(tables) >= TABLES

    # The run did give the tables the features this test is about.
    features = {f for path in tables.values() for f in protocol(path)["reader_features"]}
    assert features >= {"deletionVectors", "columnMapping", "timestampNtz"}
    targets = {name: path for name, path in tables.items() if name.startswith("public/")}
    with_dvs = [name for name, path in targets.items() if files_with_dvs(path)]
    assert with_dvs, "no target has a deletion vector at its newest version"
    checkpointed = {n for n, p in targets.items() if any(Path(p, "_delta_log").glob("*.parquet"))}
    assert checkpointed, "no target has a checkpoint"
    customers = targets["public/customers"]
    assert "loyalty tier" in [f.name for f in DeltaTable(customers).schema().fields]

    for name, path in tables.items():
        assert_same(delta_rs_read(path), spark_read(spark, path), name)
    for name, path in targets.items():
        live = delta_rs_read(path, predicate=LIVE)
        assert_same(live, spark_read(spark, path, where=LIVE), f"{name} WHERE {LIVE}")
        assert live.num_rows > 0

    # Every version of the customers and their history: before and after the tombstones' purge
    # (deletion vectors), the compaction, the checkpoints and the column mapping.
    newest = DeltaTable(customers).version()
    assert any(files_with_dvs(customers, v) for v in range(newest)), "no older DV to read"
    for name in ("public/customers", "public/customers__history"):
        path = targets[name]
        for version in range(DeltaTable(path).version() + 1):
            old = spark_read(spark, path, version=version)
            assert_same(delta_rs_read(path, version=version), old, f"{name}@{version}")

    query = (
        "SELECT count(*) AS live, count(DISTINCT id) AS ids, sum(balance) AS balance,"
        " sum(visits) AS visits, count(email) AS emails, max(`loyalty tier`) AS tier"
        " FROM customers WHERE NOT _cdc_deleted"
    )
    spark.read.format("delta").load(customers).createOrReplaceTempView("customers")
    try:
        expected = spark.sql(query).first()
    finally:
        spark.catalog.dropTempView("customers")
    with duckdb.connect() as con:
        con.register("customers", delta_rs_read(customers))
        found = con.execute(query.replace("`", '"')).fetchall()
    assert found == [tuple(expected)]
    assert expected["live"] > 0 and expected["tier"] == "gold"


def test_a_predicate_over_deletion_vectors_in_a_file_of_many_row_groups(
    spark: Any, tmp_path: Path
) -> None:
    """A compacted file of many row groups with a deletion vector, as a large target has after
    ``OPTIMIZE`` and a MERGE: delta-rs's predicate pushdown must not shift the deleted
    positions onto other rows (delta-io/delta-rs#4692), nor DuckDB's filter over its stream."""
    import duckdb
    import pyarrow.parquet as pq

    path = str(tmp_path / "t")
    # Spark passes its session conf to the Parquet writer: row groups of 64 KiB, not 128 MiB.
    spark.conf.set("parquet.block.size", str(64 * 1024))
    try:
        frame = spark.range(0, 200_000, numPartitions=1).selectExpr("id", "id % 7 AS k")
        frame.write.format("delta").option("delta.enableDeletionVectors", "true").save(path)
    finally:
        spark.conf.unset("parquet.block.size")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 1000 < 3 AND id < 100000")
    [data] = Path(path).glob("*.parquet")
    assert pq.ParquetFile(data).num_row_groups > 10
    assert files_with_dvs(path) == 1

    for predicate in ("id >= 150000", "id < 50000", "id > 99990 AND id < 100010", "k = 3"):
        expected = spark_read(spark, path, where=predicate)
        assert_same(delta_rs_read(path, predicate=predicate), expected, predicate)
        with duckdb.connect() as con:
            con.register("t", delta_rs_read(path))
            [(count,)] = con.execute(f"SELECT count(*) FROM t WHERE {predicate}").fetchall()
        assert count == expected.num_rows
