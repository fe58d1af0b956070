"""The provider's defaults in Airflow's configuration: the ``[cdc]`` section.

An operator argument left out takes its value from ``[cdc]`` (``airflow.cfg`` or
``AIRFLOW__CDC__<OPTION>``), else the default below; an argument given wins. This module
imports Airflow only when it reads the configuration, so that the provider info needs none.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_cdc.jobs import (
    CLUSTER_ABOVE_BYTES,
    CUT_RETENTION_SECONDS,
    MIN_VACUUM_RETENTION_HOURS,
    QUARANTINE_RETENTION_SECONDS,
    RAW_RETENTION_SECONDS,
    TOMBSTONE_RETENTION_SECONDS,
)

SECTION = "cdc"


@dataclass(frozen=True)
class Option:
    type: str  # "float" or "integer", as Airflow's configuration documents them
    default: float | int
    description: str


OPTIONS = {
    "lateness_seconds": Option(
        "float",
        300.0,
        "Bound on a change's commit-to-arrival delay, in seconds (>= 0), that the Kinesis and"
        " Kafka landing operators subtract from the read horizon to give the resolved"
        " timestamp (files are landed with 0 unless the operator says otherwise).",
    ),
    "max_records_per_shard": Option(
        "integer",
        1_000_000,
        "Most records a landing run reads from one Kinesis shard or Kafka partition (>= 1).",
    ),
    "max_pending_age_seconds": Option(
        "float",
        3600.0,
        "Stream time, in seconds, after which an incomplete fragment set is quarantined (> 0).",
    ),
    "tombstone_retention_seconds": Option(
        "float",
        TOMBSTONE_RETENTION_SECONDS,
        "How long past the resolved timestamp maintenance keeps the tombstones of deleted"
        " rows, in seconds (>= 0).",
    ),
    "vacuum_retention_hours": Option(
        "float",
        MIN_VACUUM_RETENTION_HOURS,
        "VACUUM deletes the files removed from a table longer ago than this, in hours"
        f" (>= {MIN_VACUUM_RETENTION_HOURS:.0f}, Delta's safety check).",
    ),
    "raw_retention_seconds": Option(
        "float",
        RAW_RETENTION_SECONDS,
        "A landed record whose outcome has been final this long leaves the raw table, the"
        " quarantine and the ledger, in seconds (>= 0).",
    ),
    "quarantine_retention_seconds": Option(
        "float",
        QUARANTINE_RETENTION_SECONDS,
        "A quarantined record never replayed is kept this long, in seconds.",
    ),
    "cut_retention_seconds": Option(
        "float",
        CUT_RETENTION_SECONDS,
        "Every table version a consistent cut published this recently stays readable, in seconds.",
    ),
    "cluster_above_bytes": Option(
        "integer",
        CLUSTER_ABOVE_BYTES,
        "A target table this large is clustered by its primary key by maintenance (bytes).",
    ),
}


def config_section() -> dict[str, object]:
    """The ``config`` entry of the provider info."""
    return {
        SECTION: {
            "description": "Defaults of the airflow-cdc operators; an operator argument wins.",
            "options": {
                name: {
                    "description": option.description,
                    "version_added": "0.1.0",
                    "type": option.type,
                    "example": None,
                    "default": str(option.default),
                }
                for name, option in OPTIONS.items()
            },
        }
    }


def setting(name: str) -> float | int:
    """``[cdc] <name>`` from Airflow's configuration, or its default."""
    option = OPTIONS[name]
    from airflow.configuration import conf

    if option.type == "integer":
        return conf.getint(SECTION, name, fallback=int(option.default))
    return conf.getfloat(SECTION, name, fallback=float(option.default))


def chosen(value: float | int | None, name: str) -> float | int:
    """An operator's argument, or, left out (``None``), the configured default."""
    return setting(name) if value is None else value
