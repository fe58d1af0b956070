"""Running a job's frames: materialized with their counts, in parallel threads, into Arrow."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, TypeVar

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.util import inheritable_thread_target

from spark_jobs.session import stores_serialized

T = TypeVar("T")
R = TypeVar("R")


def arrow_batch(rows: list[dict[str, Any]], schema: Any) -> Any:
    """``rows`` (dicts; a field a row lacks is null) as an Arrow record batch of ``schema``,
    built column by column: ``RecordBatch.from_pylist`` converts row by row, about five times
    slower (15 against 3 µs a row of 28 fields)."""
    import pyarrow as pa

    columns = {name: [row.get(name) for row in rows] for name in schema.names}
    return pa.RecordBatch.from_pydict(columns, schema=schema)


# Tables an apply (or maintenance) works on at once. Each table's steps are many small Spark
# jobs, and most of a small job's time is the driver planning it: with two at once, one
# table's planning overlaps the other's tasks (measured on 2 cores, warm, DSQL batches of
# about 460 records into two tables: see the README's Benchmark section).
PARALLEL_TABLES = 2


def in_parallel(
    spark: SparkSession, work: Callable[[T], R], items: Sequence[T], workers: int | None = None
) -> list[R]:
    """``work(item)`` for every item, up to ``workers`` (default :data:`PARALLEL_TABLES`) at
    once, in threads of ``spark``'s session, each with a copy of the caller's job properties
    and tags; the results in the items' order. Every item runs to its end; then the first
    failure, in the items' order, is raised."""
    workers = PARALLEL_TABLES if workers is None else workers
    if len(items) <= 1 or workers <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(min(workers, len(items)), thread_name_prefix="airflow-cdc") as pool:
        # Each item its own copy of the job properties: Spark sets them per query in place.
        futures = [pool.submit(inheritable_thread_target(spark)(work), item) for item in items]
        wait(futures)
    return [future.result() for future in futures]


# How a large batch's materialized stages are kept (:func:`spark_jobs.session.fit_storage`):
# serialized blocks in memory (spilled to disk past it), not a Java object per row. A local
# master's tasks run in the driver's heap, where a million rows kept as objects had the
# parallel collector copying them again and again (a quarter of the JVM's CPU); the jobs'
# sessions serialize with Kryo (``spark.serializer`` in
# :func:`airflow_cdc.jobs.delta_spark_conf`).
SERIALIZED = StorageLevel(True, True, False, False, 1)


def materialize(frame: DataFrame) -> DataFrame:
    """``frame`` computed once and kept for the job (``localCheckpoint``), as
    :data:`SERIALIZED` blocks where the job keeps its large stages so."""
    level = SERIALIZED if stores_serialized(frame.sparkSession) else None
    return frame.localCheckpoint(storageLevel=level)


def checkpoint_counting(frame: DataFrame, **metrics: Column) -> tuple[DataFrame, dict[str, Any]]:
    """``frame`` materialized (:func:`materialize`), and ``metrics`` (aggregates, by name) over
    its rows, computed as the checkpoint is written: no query of their own."""
    seen = Observation()
    named = [metric.alias(name) for name, metric in metrics.items()]
    return materialize(frame.observe(seen, *named)), seen.get
