"""Extra links on the operators' task pages: the Delta tables a task writes, and the Spark
master's web UI where the task's Spark connection names a standalone master."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

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
        return location_uri(table_location(operator.warehouse, specs[0].table))


class SparkMasterLink(BaseOperatorLink):
    """The Spark master's web UI, where the task's Spark connection names a standalone
    master (its applications, running and completed, are listed there)."""

    name = "Spark master"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.sdk import BaseHook

        try:
            conn = BaseHook.get_connection(operator.spark_conn_id)
        except Exception:  # an unknown connection has no link, not a failed task page
            return ""
        master = conn.host or ""
        if conn.port and master.startswith("spark://") and ":" not in master[len("spark://") :]:
            master = f"{master}:{conn.port}"
        return master_ui(master)
