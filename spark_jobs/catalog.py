"""Tables by name: register each target table in a catalog of the Spark session.

With ``--catalog <name>``, every table the apply job keeps (each declared table and each
history table) is registered as an external Delta table ``<name>.<schema>.<table>`` at its
warehouse location, so that users query ``SELECT ... FROM public.orders``. ``spark_catalog``
is the session catalog: a Hive metastore when the session has one
(``spark.sql.catalogImplementation=hive``); another name is a catalog configured as
``spark.sql.catalog.<name>``.

Registration only names a location: the table's data and schema stay in its Delta log, so a
registered name follows every later commit. It runs after the run's commits and never fails
the run (its changes are already applied); each table ends as one of the outcomes below,
reported in the run's stats. A name that already points at the table is left as it is, so a
re-run registers nothing new; a name that points anywhere else is never replaced.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from airflow_cdc.core.events import TableRef
from airflow_cdc.jobs import CATALOG_NAME
from spark_jobs.delta_tables import table_exists
from spark_jobs.files import hadoop_path_in
from spark_jobs.schemas import quoted

log = logging.getLogger("airflow_cdc.jobs")

SESSION_CATALOG = "spark_catalog"

# What registering a table did (stable codes: the stats and the log share them).
REGISTERED = "registered"  # this run registered the name
PRESENT = "present"  # the name already pointed at the table
NAME_TAKEN = "name_taken"  # the name is another table or a view: left alone
FAILED = "failed"  # the catalog refused (an invalid name, an unreachable metastore)
NOT_CREATED = "not_created"  # no change has reached the table yet: a later run registers it

_DETAIL_HEADER = "# Detailed Table Information"


def catalog_name(value: str) -> str:
    """An argument type: a catalog name (letters, digits, ``_`` and ``-``)."""
    if not CATALOG_NAME.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"catalog must match {CATALOG_NAME.pattern}, got {value!r}"
        )
    return value


def check_catalog(spark: SparkSession, catalog: str) -> None:
    """Raise ``ValueError`` unless ``catalog`` is a catalog of the session that keeps names
    beyond the job: ``spark_catalog`` backed by a metastore, or a configured catalog."""
    if catalog.lower() == SESSION_CATALOG:
        implementation = spark.conf.get("spark.sql.catalogImplementation", "in-memory")
        if implementation == "in-memory":
            raise ValueError(
                f"--catalog {catalog!r}: the session catalog is in-memory here"
                " (spark.sql.catalogImplementation=in-memory), so names registered in it end"
                " with the job; give the job a Hive metastore"
                " (spark.sql.catalogImplementation=hive and its metastore settings)"
            )
        return
    if spark.conf.get(f"spark.sql.catalog.{catalog}", None) is None:
        raise ValueError(
            f"--catalog {catalog!r} names no catalog of the Spark session: configure"
            f" spark.sql.catalog.{catalog}, or register in {SESSION_CATALOG!r}"
        )


def table_name(catalog: str, table: TableRef) -> str:
    """The table's name in ``catalog`` as a SQL identifier, every part quoted (a part stays
    one literal name whatever it holds)."""
    return ".".join(quoted(part) for part in (catalog, table.schema, table.name))


def register_tables(
    spark: SparkSession, catalog: str, tables: dict[TableRef, str]
) -> dict[str, dict[str, Any]]:
    """Register each of ``tables`` (table: location) in ``catalog``; what happened to each,
    by qualified table name."""
    return {
        table.qualified: register(spark, catalog, table, path)
        for table, path in sorted(tables.items(), key=lambda item: item[0].qualified)
    }


def register(spark: SparkSession, catalog: str, table: TableRef, path: str) -> dict[str, Any]:
    """Register the Delta table at ``path`` as ``<catalog>.<schema>.<table>``, unless the name
    exists: ``{"name": ..., "outcome": ...}``, with the ``location`` the name points at when
    it is taken, or the catalog's ``error``. Errors of the catalog are reported, not raised."""
    report: dict[str, Any] = {"name": ".".join((catalog, table.schema, table.name))}
    try:
        if not table_exists(spark, path):
            return {**report, "outcome": NOT_CREATED}
        outcome, location = _register(spark, catalog, table, path)
    except Exception as err:  # the tables are applied: a catalog's failure is reported
        message = str(err).strip().split("\n", 1)[0] or type(err).__name__
        log.warning("%s not registered as %s: %s", path, report["name"], message)
        return {**report, "outcome": FAILED, "error": message}
    if outcome == NAME_TAKEN:
        log.warning(
            "%s not registered: %s already names %s, left as it is",
            path,
            report["name"],
            location or "a view",
        )
        return {**report, "outcome": outcome, "location": location}
    if outcome == REGISTERED:
        log.info("registered %s as %s", path, report["name"])
    return {**report, "outcome": outcome}


def _register(
    spark: SparkSession, catalog: str, table: TableRef, path: str
) -> tuple[str, str | None]:
    name = table_name(catalog, table)
    found = _described(spark, name)
    if found is None:
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quoted(catalog)}.{quoted(table.schema)}")
        try:
            # The location goes as an option, not as a SQL literal: no text of it is parsed.
            spark.catalog.createTable(name, path=path, source="delta")
            return REGISTERED, None
        except AnalysisException as err:
            # Another writer registered the name since it was looked up: look again.
            if err.getCondition() == "TABLE_OR_VIEW_ALREADY_EXISTS":
                found = _described(spark, name)
            if found is None:
                raise
    provider, location = found
    if provider == "delta" and location is not None and _same(spark, location, path):
        return PRESENT, None
    return NAME_TAKEN, location


def _described(spark: SparkSession, name: str) -> tuple[str | None, str | None] | None:
    """(provider, location) of the table ``name``, or None when the catalog has no such name."""
    if not spark.catalog.tableExists(name):
        return None
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()
    # The detailed section follows the columns (a column may be named "Location").
    headers = [r["col_name"] for r in rows]
    start = headers.index(_DETAIL_HEADER) + 1 if _DETAIL_HEADER in headers else len(rows)
    detail = {r["col_name"]: r["data_type"] for r in rows[start:]}
    provider = detail.get("Provider")
    return (provider.lower() if provider else None), detail.get("Location")


def _same(spark: SparkSession, location: str, path: str) -> bool:
    """Whether two locations are one directory, once qualified by their file system."""
    return _qualified(spark, location) == _qualified(spark, path)


def _qualified(spark: SparkSession, path: str) -> str:
    hpath, fs = hadoop_path_in(spark, path)
    return str(fs.makeQualified(hpath).toString())
