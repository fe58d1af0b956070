"""Reading the tables of a source at a published cut.

A cut (see :mod:`spark_jobs.cut`) is a point ``T`` of the source's commit time at which every
target table holds exactly the changes committed before ``T``; the apply job publishes each
cut with every table's Delta version. Read the tables at those versions and they are one
state that existed in the source, across tables.

``read_cut`` does it with Spark; :func:`published_cut` reads the newest published cut without
Spark, and :func:`cut_reaching` the cut a task for a time ``H`` reads (for sensors, and for
readers such as the ``deltalake`` package)::

    from deltalake import DeltaTable

    cut = cut_reaching(warehouse, "orders-stream", hour_end)
    for table, where in cut.tables.items():
        frame = DeltaTable(where["location"], version=where["version"]).to_pyarrow_table()
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from airflow_cdc.core.exceptions import (
    CutHistoryUnavailable,
    ResolvedTimestampUnavailable,
    StateUnreadable,
)
from airflow_cdc.core.resolved_state import UNREADABLE
from airflow_cdc.jobs import bookkeeping_location, check_source, check_time, published_cut_path

TIME_TRAVEL_CHECK = (
    "spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration"
)


@dataclass(frozen=True)
class PublishedCut:
    """One published cut: ``at`` (T), the data interval it was taken for, whether ``T`` came
    from a lateness bound (``heuristic``) rather than the source's own resolved timestamps,
    and per table (schema-qualified name) its ``location`` and Delta ``version``."""

    source: str
    at: dt.datetime
    interval_start: dt.datetime | None
    interval_end: dt.datetime
    heuristic: bool
    tables: dict[str, dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly (for XCom)."""
        return {
            "source": self.source,
            "cut_at": self.at.isoformat(),
            "interval_start": None
            if self.interval_start is None
            else self.interval_start.isoformat(),
            "interval_end": self.interval_end.isoformat(),
            "heuristic": self.heuristic,
            "tables": self.tables,
        }


def _time(value: Any, name: str) -> dt.datetime | None:
    if value is None:
        return None
    return check_time(value if isinstance(value, dt.datetime) else str(value), name)


def parse_published(text: str) -> PublishedCut:
    """The cut in the apply job's pointer file (JSON)."""
    return _published(json.loads(text))


def _published(state: dict[str, Any]) -> PublishedCut:
    """The cut in a pointer file's shape (its times ISO 8601 texts or datetimes)."""
    at, end = _time(state["cut_at"], "cut_at"), _time(state["interval_end"], "interval_end")
    if at is None or end is None:
        raise ValueError(f"a published cut names its cut_at and interval_end: {state!r}")
    return PublishedCut(
        source=state["source"],
        at=at,
        interval_start=_time(state.get("interval_start"), "interval_start"),
        interval_end=end,
        heuristic=bool(state["heuristic"]),
        tables=dict(state["tables"]),
    )


def read_published(path: str) -> PublishedCut:
    """The cut in the pointer file at ``path`` (local path or any fsspec URI);
    :class:`~airflow_cdc.core.exceptions.ResolvedTimestampUnavailable` while none is,
    :class:`~airflow_cdc.core.exceptions.StateUnreadable` while it cannot be read."""
    import fsspec

    try:
        with fsspec.open(path, "rt", encoding="utf-8") as handle:
            return parse_published(handle.read())
    except FileNotFoundError as err:
        raise ResolvedTimestampUnavailable(f"no cut has been published at {path!r} yet") from err
    except UNREADABLE as err:
        raise StateUnreadable(f"cannot read the published cut at {path!r} now: {err!r}") from err


def published_cut(warehouse: str, source: str) -> PublishedCut | None:
    """The newest cut published for ``source`` (through fsspec, no Spark); ``None`` if none,
    :class:`~airflow_cdc.core.exceptions.StateUnreadable` while its pointer cannot be read."""
    try:
        return read_published(published_cut_path(warehouse, check_source(source)))
    except StateUnreadable:
        raise
    except ResolvedTimestampUnavailable:
        return None


def cut_history_location(warehouse: str) -> str:
    """The Delta table in which the apply job appends every cut it publishes."""
    return bookkeeping_location(warehouse, "cuts")


def _history_options(location: str) -> dict[str, str] | None:
    from airflow_cdc.storage import delta_rs_storage_options, is_s3

    return delta_rs_storage_options() if is_s3(location) else None


def oldest_cut_reaching(history: str, source: str, target: dt.datetime) -> PublishedCut | None:
    """The oldest cut of ``source`` at or past ``target`` in the cut history at ``history``
    (read with delta-rs: the source's cuts at or past ``target``); ``None`` when the history
    holds none (cut retention removed them);
    :class:`~airflow_cdc.core.exceptions.CutHistoryUnavailable` while it cannot be read, or
    does not exist (a published cut is in the history before its pointer file is written:
    a missing history is a wrong location or an unreachable store, not an empty one)."""
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    # DataFusion SQL: the name is a checked source name (no quote can be in it), the time a
    # UTC literal compared as a timestamp.
    since = target.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    predicate = f"source = '{check_source(source)}' AND cut_at >= TIMESTAMP '{since}'"
    try:
        table = DeltaTable(history, storage_options=_history_options(history))
        found = pa.RecordBatchReader.from_stream(table.scan(predicate=predicate)).read_all()
    except (DeltaError, OSError, pa.ArrowException) as err:
        # DeltaError covers a missing table (TableNotFoundError); the data files are read
        # lazily, and their errors come as Arrow's.
        raise CutHistoryUnavailable(f"cannot read the cut history at {history!r}: {err}") from err
    rows = found.to_pylist()
    if not rows:
        return None
    # A run that died between the append and its pointer file appends its cut again when
    # re-run: the later row is the one its pointer names.
    row = min(rows, key=lambda r: (r["cut_at"], -r["published_at"].timestamp()))
    versions, locations = dict(row["tables"]), dict(row["locations"])
    tables = {
        name: {"location": locations[name], "version": int(version)}
        for name, version in sorted(versions.items())
    }
    return _published({**row, "source": source, "tables": tables})


def cut_for(newest: PublishedCut, history: str | None, target: dt.datetime) -> PublishedCut:
    """Of the cuts published up to ``newest`` (which is at or past ``target``), the one a task
    for the time ``target`` reads: the cut at ``target`` where one was published, else the
    oldest past it, the first consistent state that holds every change committed before
    ``target``. The newest cut is the answer only when no history is given or it keeps none
    at or past ``target`` (cut retention removes old cuts; see :mod:`spark_jobs.maintain`).
    :class:`~airflow_cdc.core.exceptions.CutHistoryUnavailable` while the history cannot be
    read."""
    if newest.at <= target or history is None:
        return newest
    found = oldest_cut_reaching(history, newest.source, target)
    return newest if found is None or found.at > newest.at else found


def cut_reaching(warehouse: str, source: str, target: Any) -> PublishedCut | None:
    """The published cut a task for the time ``target`` (ISO 8601 or a datetime) reads (see
    :func:`cut_for`); ``None`` while no cut at or past ``target`` has been published."""
    when = _time(target, "target")
    assert when is not None
    newest = published_cut(warehouse, source)
    if newest is None or newest.at < when:
        return None
    return cut_for(newest, cut_history_location(warehouse), when)


def read_cut(spark: Any, warehouse: str, source: str, at: Any = None) -> dict[str, Any]:
    """Each table of ``source`` as a Spark DataFrame at a published cut: the newest one, or
    the one a task for the time ``at`` (ISO 8601 or a datetime) reads, the same one that
    :func:`cut_reaching`, the sensor and the boundary trigger hand over: the cut at ``at``
    where one was published, else the oldest kept past it. Raises ``LookupError`` when none
    is published (at or past ``at``). Rows deleted in the source are kept as tombstones
    (``_cdc_deleted``): filter ``NOT _cdc_deleted`` for the live rows."""
    from pyspark.sql import functions as F

    check_source(source)
    cuts = spark.read.format("delta").load(cut_history_location(warehouse))
    chosen = cuts.where(F.col("source") == source)
    when = _time(at, "at")
    # A run that died between the append and its pointer file appends its cut again when
    # re-run: of two rows for one cut, the later is the one its pointer names.
    order = [F.col("cut_at").desc(), F.col("published_at").desc()]
    if when is not None:
        chosen = chosen.where(F.col("cut_at") >= F.lit(when).cast("timestamp"))
        order = [F.col("cut_at").asc(), F.col("published_at").desc()]
    row = chosen.orderBy(*order).first()
    if row is None:
        raise LookupError(
            f"no cut of {source!r} published{'' if when is None else f' at or past {when}'}"
        )
    # Delta refuses to travel to a version committed longer ago than the table's
    # deletedFileRetentionDuration, though a quiet table's cut names the version it has had
    # for weeks. A version a kept cut names is readable: the files removed since it (all
    # after the cut) stay as long as the cut does (see spark_jobs.maintain).
    previous = spark.conf.get(TIME_TRAVEL_CHECK, None)
    spark.conf.set(TIME_TRAVEL_CHECK, "false")
    try:
        return {
            table: spark.read.format("delta")
            .option("versionAsOf", int(version))
            .load(row["locations"][table])
            for table, version in sorted(row["tables"].items())
        }
    finally:
        if previous is None:
            spark.conf.unset(TIME_TRAVEL_CHECK)
        else:
            spark.conf.set(TIME_TRAVEL_CHECK, previous)
