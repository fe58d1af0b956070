"""The embedded stack's Airflow settings: SQLite metadata DB, example DAGs, connections."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cdc_demo.kinesis import CREDENTIALS, REGION, REPO

STREAM = "dsql-cdc"


def airflow_env(
    home: Path,
    warehouse: Path,
    kinesis_endpoint: str,
    stream: str = STREAM,
    master: str = "local[2]",
) -> dict[str, str]:
    """Environment for the ``airflow`` CLI (or ``dag.test()``) against the embedded stack."""
    bin_dir = str(Path(sys.executable).parent)
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags_examples"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        # An executor's workers sized to the machine (Airflow's default is 32): each task
        # here is a spark-submit that wants the cores to itself.
        "AIRFLOW__CORE__PARALLELISM": str(max(2, os.cpu_count() or 2)),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": master}),
        "AIRFLOW_CONN_KINESIS_DEFAULT": json.dumps(
            {
                "conn_type": "cdc_kinesis",
                "host": kinesis_endpoint,
                "login": CREDENTIALS["aws_access_key_id"],
                "password": CREDENTIALS["aws_secret_access_key"],
                "extra": {"region_name": REGION},
            }
        ),
        "AIRFLOW_VAR_CDC_WAREHOUSE": str(warehouse),
        "AIRFLOW_VAR_CDC_STREAM": stream,
    }


def migrate(env: dict[str, str]) -> None:
    """Create (or upgrade) the SQLite metadata database."""
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        env={**os.environ, **env},
        check=True,
        capture_output=True,
    )
