"""Extra links on the operators' task pages: the Delta tables a task writes, and, where the
task's Spark connection names a standalone master, the master's web UI and the page it keeps
for the task's Spark application (running or completed).

A master whose web UI is not at ``http://<master host>:8080`` is named by the connection's
extra, ``{"master-ui": "http://spark-master.internal:8080"}``."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit

from airflow.sdk import BaseOperatorLink

from airflow_cdc.assets import location_uri
from airflow_cdc.core.ddl import parse_tables
from airflow_cdc.core.exceptions import CdcError
from airflow_cdc.jobs import table_location

# A standalone master serves its web UI here unless its ``--webui-port`` says otherwise.
MASTER_UI_PORT = 8080


def master_ui(master: str, port: int = MASTER_UI_PORT) -> str:
    """The web UI of a standalone Spark master (``spark://host:7077``); empty for any other
    master (``local[*]``, ``yarn``, ``k8s://...``), which serves none of its own.

    >>> master_ui("spark://10.0.0.5:7077")
    'http://10.0.0.5:8080'
    >>> master_ui("local[2]")
    ''
    """
    if not master.startswith("spark://"):
        return ""
    host = urlsplit(master.split(",")[0]).hostname
    return f"http://{host}:{port}" if host else ""


class DeltaTableLink(BaseOperatorLink):
    """The location of the first table the task's DDL declares (its other tables lie beside
    it, one directory per schema and table)."""

    name = "Delta table"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        try:
            specs = parse_tables(operator.ddl, operator.default_schema)
        except (CdcError, AttributeError, TypeError, ValueError):
            return ""
        if not specs or not getattr(operator, "warehouse", ""):
            return ""
        try:
            return location_uri(table_location(operator.warehouse, specs[0].table))
        except ValueError:  # a relative warehouse: refused at submission, no link
            return ""


# The Spark connection's extra that names the master's web UI.
MASTER_UI_EXTRA = "master-ui"


def connection_master_ui(conn_id: str) -> str:
    """The web UI of the standalone master the Spark connection ``conn_id`` names (its
    ``master-ui`` extra, else :func:`master_ui` of its host); empty for any other master or
    an unknown connection."""
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception:  # an unknown connection has no link, not a failed task page
        return ""
    master = conn.host or ""
    if conn.port and master.startswith("spark://") and ":" not in master[len("spark://") :]:
        master = f"{master}:{conn.port}"
    if not master.startswith("spark://"):
        return ""
    given = conn.extra_dejson.get(MASTER_UI_EXTRA)
    return str(given).rstrip("/") if given else master_ui(master)


class SparkMasterLink(BaseOperatorLink):
    """The Spark master's web UI, where the task's Spark connection names a standalone
    master (its applications, running and completed, are listed there)."""

    name = "Spark master"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return connection_master_ui(operator.spark_conn_id)


class SparkApplicationLink(BaseOperatorLink):
    """The master's page for the Spark application the task ran (its executors, their logs),
    once the task has run it on a standalone master: the job names its application in its
    counts, and Airflow resolves the link as the task finishes."""

    name = "Spark application"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        stats = getattr(operator, "run_stats", None) or {}
        application = stats.get("application_id")
        ui = connection_master_ui(operator.spark_conn_id) if application else ""
        return f"{ui}/app/?appId={quote(str(application))}" if ui else ""
