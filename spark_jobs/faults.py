"""Fault injection for the crash and concurrency tests: a job dies, or waits, at a named point."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

log = logging.getLogger("airflow_cdc.jobs")


class SimulatedCrash(BaseException):
    """A job 'dying' at a fault point inside the test process (``AIRFLOW_CDC_FAULT_MODE=raise``):
    no handler catches it, and no job writes on its way out, so the durable state it leaves is
    what a killed process leaves."""


def fault_point(name: str) -> None:
    """Kill the process here when ``AIRFLOW_CDC_FAULT`` names this point (crash tests only;
    with ``AIRFLOW_CDC_FAULT_MODE=raise``, raise :class:`SimulatedCrash` instead).

    ``AIRFLOW_CDC_BARRIER=<point>:<directory>:<parties>`` instead holds the process here until
    ``parties`` processes have reached the point (concurrency tests only: it makes two runs
    race through the same step).
    """
    if os.environ.get("AIRFLOW_CDC_FAULT") == name:
        log.error("fault injection: dying at %s", name)
        if os.environ.get("AIRFLOW_CDC_FAULT_MODE") == "raise":
            raise SimulatedCrash(name)
        os._exit(137)
    barrier = os.environ.get("AIRFLOW_CDC_BARRIER", "")
    # Point names contain colons themselves: match the name, then split the rest.
    if barrier.startswith(f"{name}:"):
        directory, _, parties = barrier[len(name) + 1 :].rpartition(":")
        Path(directory, str(os.getpid())).touch()
        deadline = time.monotonic() + 300
        while len(os.listdir(directory)) < int(parties) and time.monotonic() < deadline:
            time.sleep(0.1)
