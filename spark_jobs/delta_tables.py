"""Delta tables' commits: the conflicts a concurrent writer causes, retrying them, and the
versions a run committed; a table's partition columns."""

from __future__ import annotations

import itertools
import json
import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from delta.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    ConcurrentWriteException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)
from delta.tables import DeltaTable
from pyspark.sql import Row, SparkSession

from spark_jobs.schemas import quoted
from spark_jobs.session import COMMIT_METADATA_CONF

log = logging.getLogger("airflow_cdc.jobs")
T = TypeVar("T")


# What a Delta commit raises when a concurrent writer committed first (delta-spark's Python
# classes do not share a base).
COMMIT_CONFLICTS = (
    DeltaConcurrentModificationException,
    ConcurrentWriteException,
    MetadataChangedException,
    ProtocolChangedException,
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    ConcurrentDeleteDeleteException,
    ConcurrentTransactionException,
)


CONFLICT_ATTEMPTS = 4


def retry_on_conflict(step: Callable[[], T], what: str, attempts: int = CONFLICT_ATTEMPTS) -> T:
    """Run the Delta transaction ``step``; when a concurrent writer committed first (Delta's
    conflict exceptions only), run it again on the new snapshot after a growing, jittered
    pause, up to ``attempts`` times in all. Only for steps that are safe to repeat (guarded
    MERGE, OPTIMIZE, DELETE)."""
    for attempt in range(1, attempts + 1):
        try:
            return step()
        except COMMIT_CONFLICTS as err:
            if attempt == attempts:
                raise
            pause = min(30.0, 2.0**attempt) * random.uniform(0.5, 1.5)
            log.warning(
                "%s met a concurrent commit (%s), attempt %d of %d: retrying in %.1fs",
                what,
                type(err).__name__,
                attempt,
                attempts,
                pause,
            )
            time.sleep(pause)
    raise AssertionError("unreachable")


def table_exists(spark: SparkSession, path: str) -> bool:
    return DeltaTable.isDeltaTable(spark, path)


# Where DESCRIBE TABLE starts listing a partitioned table's partition columns.
PARTITION_HEADER = "# Partition Information"


def partition_columns(spark: SparkSession, path: str) -> list[str]:
    """The table's partition columns (none when there is no table), from its metadata:
    ``DeltaTable.detail()`` would also size every file, a job over the whole table."""
    if not table_exists(spark, path):
        return []
    names = [r["col_name"] for r in spark.sql(f"DESCRIBE TABLE delta.{quoted(path)}").collect()]
    if PARTITION_HEADER not in names:
        return []
    # The header's row, then one "# col_name" row, then the columns up to the next section.
    listed = names[names.index(PARTITION_HEADER) + 2 :]
    return list(itertools.takewhile(lambda n: n and not n.startswith("#"), listed))


def table_version(spark: SparkSession, path: str) -> int | None:
    """The Delta table's newest version (None when it has no commit)."""
    row = DeltaTable.forPath(spark, path).history(1).select("version").first()
    return None if row is None else int(row[0])


# How far back :func:`committed_version` and :func:`commit_with` look for this run's commit.
RECENT_COMMITS = 20


def committed_version(spark: SparkSession, path: str, operation: str) -> int | None:
    """The version of this run's newest ``operation`` commit to the table (a commit carries
    the run's metadata, :func:`spark_jobs.session.set_commit_metadata`), among its last few;
    else its newest version. A commit another writer makes after it (a compaction) is not
    taken for it."""
    mine = spark.conf.get(COMMIT_METADATA_CONF, None)
    recent = _recent_commits(spark, path)
    ours = None if mine is None else _newest(recent, operation, mine)
    return ours if ours is not None else max((int(r[0]) for r in recent), default=None)


def version_before_batch(
    spark: SparkSession, path: str, batch_id: str, source: str | None = None
) -> int | None:
    """The table's version before the first of its last few commits that a run of
    ``batch_id`` made (their metadata names the batch, :func:`spark_jobs.session.
    set_commit_metadata`), of ``source`` where given (a commit that names another source is
    another source's run of a batch of the same id; one that names none is from before
    apply_changes 2.8.17): what a re-run of the batch reads the table as; ``None`` when no
    such run has committed to it lately (-1: such a run created it)."""
    mine = []
    for version, _, metadata in _recent_commits(spark, path):
        try:
            fields = json.loads(metadata) if metadata else {}
        except ValueError:
            continue
        if not isinstance(fields, dict) or fields.get("batch_id") != batch_id:
            continue
        if source is None or fields.get("source", source) == source:
            mine.append(int(version))
    return min(mine) - 1 if mine else None


def commit_with(spark: SparkSession, path: str, operation: str, metadata: str) -> int | None:
    """The version of the newest of the table's last few ``operation`` commits whose metadata
    is ``metadata`` (:func:`spark_jobs.session.commit_metadata`), if one is."""
    return _newest(_recent_commits(spark, path), operation, metadata)


def _newest(recent: list[Row], operation: str, metadata: str) -> int | None:
    """The newest version among ``recent`` commits of ``operation`` carrying ``metadata``."""
    return max((int(r[0]) for r in recent if (r[1], r[2]) == (operation, metadata)), default=None)


def _recent_commits(spark: SparkSession, path: str) -> list[Row]:
    """(version, operation, userMetadata) of the table's last :data:`RECENT_COMMITS` commits:
    a few rows of the log's commit infos, collected as they are (no Spark job runs)."""
    return (
        DeltaTable.forPath(spark, path)
        .history(RECENT_COMMITS)
        .select("version", "operation", "userMetadata")
        .collect()
    )
