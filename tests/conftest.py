"""Shared fixtures: one Spark session for the whole run, and warehouses in temp dirs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("AIRFLOW_CDC_CACHE", str(REPO / ".cache"))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from spark_jobs.session import get_session

    session = get_session("airflow-cdc-tests", master="local[2]")
    yield session
    session.stop()


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    return str(tmp_path / "warehouse")
