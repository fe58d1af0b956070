"""Airflow assets for the tables a CDC task commits: one per table, named by its location.

An asset's URI is the table's location (``file:///...`` for a local warehouse, ``s3://`` for
``s3a://``), the name OpenLineage gives the same Delta table's dataset, so a downstream DAG
scheduled on it and a lineage backend see one thing. URIs are known when the DAG is parsed:
a warehouse or DDL given as a template has none (the operator declares no outlets then).
"""

from __future__ import annotations

import datetime as dt
from pathlib import PurePosixPath
from typing import Any

from airflow.sdk import Asset

from airflow_cdc.core.ddl import HISTORY_SUFFIX, history_ref, history_tables, parse_tables
from airflow_cdc.jobs import check_location, table_location

# Hadoop's S3 file system schemes; OpenLineage and Airflow name the store ``s3``.
_S3_SCHEMES = ("s3a://", "s3n://")


def location_uri(path: str) -> str:
    """The URI of a table location: an absolute local path becomes ``file://``; a relative
    one, which names no place (:func:`~airflow_cdc.jobs.check_location`), ``ValueError``."""
    check_location(path, "location")
    for scheme in _S3_SCHEMES:
        if path.startswith(scheme):
            return "s3://" + path[len(scheme) :]
    if "://" in path:
        return path
    if path.startswith("file:"):
        path = path[len("file:") :]
    return f"file://{PurePosixPath(path)}"


def is_static(*values: str) -> bool:
    """Whether none of ``values`` is a Jinja template (known when the DAG is parsed)."""
    return not any("{{" in value or "{%" in value for value in values)


def table_assets(
    warehouse: str,
    ddl: str,
    default_schema: str = "public",
    history: bool | str | list[str] = False,
) -> dict[str, Asset]:
    """Each declared table's asset (and each history table's), by qualified table name;
    empty when the warehouse or the DDL is a template."""
    if not is_static(warehouse, ddl):
        return {}
    specs = parse_tables(ddl, default_schema)
    tables = [spec.table for spec in specs]
    tables += [history_ref(spec.table) for spec in history_tables(history, specs, default_schema)]
    return {
        table.qualified: Asset(uri=location_uri(table_location(warehouse, table)))
        for table in tables
    }


def partition_key(interval_start: dt.datetime) -> str:
    """The asset event's partition: the data interval's start in UTC, as Airflow's temporal
    partition mappers read it by default (``%Y-%m-%dT%H:%M:%S``)."""
    return interval_start.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")


# A table's counts in its event: its changes by ledger status, and what the applied ones did
# to its live rows (see spark_jobs.apply.INSERTED).
COUNTS = (
    "changes",
    "applied",
    "superseded",
    "duplicate",
    "quarantined",
    "inserted",
    "updated",
    "deleted",
)


def event_extra(stats: dict[str, Any], table: str, source: str) -> dict[str, Any]:
    """What a table's asset event says: the source and batch, the table's counts, and its
    Delta version: with a consistent cut, the one in the cut that reaches the run's cut time
    (``stats["cut"]["reached"]``, see :meth:`~airflow_cdc.operators.apply.
    ApplyChangesOperator.name_reached_cut`), else in the cut the run published, with the
    cut's time (none for a table the cut does not name); without one, the one the run's
    MERGE committed."""
    extra: dict[str, Any] = {
        "source": source,
        "batch_id": stats.get("batch_id"),
        "job_version": stats.get("job_version"),
    }
    if stats.get("job_versions"):  # a job that ran others inside (land_and_apply)
        extra["job_versions"] = stats["job_versions"]
    counts = (stats.get("tables") or {}).get(table.removesuffix(HISTORY_SUFFIX)) or {}
    if table.endswith(HISTORY_SUFFIX):
        extra["history"] = counts.get("history", {"versions": 0, "reclosed": 0})
    else:
        extra["counts"] = {key: counts.get(key, 0) for key in COUNTS}
        extra["quarantined_by_reason"] = counts.get("quarantined_by_reason", {})
        if counts.get("version") is not None:
            extra["version"] = counts["version"]
    cut = stats.get("cut") or {}
    named = cut.get("reached") or cut.get("published") or {}
    if named:
        extra["cut_at"] = named.get("cut_at")
        # A version the cut does not name is a state past it (or none).
        extra.pop("version", None)
        where = (named.get("tables") or {}).get(table) or {}
        if "version" in where:
            extra["version"] = where["version"]
    return extra
