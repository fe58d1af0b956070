"""The warehouse's layout (target and bookkeeping tables), the raw table's schema, and one
job run's context."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from airflow_cdc.core.events import TableRef
from airflow_cdc.jobs import bookkeeping_location, resolved_state_path, table_location
from spark_jobs.schemas import struct

RAW_SCHEMA = struct(
    "record_id STRING, source STRING, stream STRING, shard_id STRING, sequence_number STRING,"
    " seq_key STRING, partition_key STRING, arrival_ts TIMESTAMP, data BINARY,"
    " envelope_error STRING, kind STRING, shard_closed BOOLEAN, horizon_ts TIMESTAMP,"
    " land_seq BIGINT, batch_id STRING, land_run STRING"
)


RECORD = "record"


PROGRESS = "progress"


@dataclass(frozen=True)
class Warehouse:
    """The layout of one warehouse directory (a local path or any Hadoop file system URI).

    Target tables live at ``<root>/<schema>/<table>``; bookkeeping tables under ``_cdc``.
    """

    root: str

    def path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    @property
    def raw(self) -> str:
        """Landed records and shard checkpoints, partitioned by source and batch."""
        return bookkeeping_location(self.root, "raw")

    @property
    def pending(self) -> str:
        """Open fragment sets, partitioned by source: the only state carried across batches."""
        return bookkeeping_location(self.root, "pending")

    @property
    def held(self) -> str:
        """Changes committed at or after a run's cut, partitioned by source: open state."""
        return bookkeeping_location(self.root, "held")

    @property
    def transactions(self) -> str:
        """The END events of transactions not yet applied whole, partitioned by source: open
        state (Debezium transaction metadata, :mod:`spark_jobs.transactions`)."""
        return bookkeeping_location(self.root, "transactions")

    @property
    def cuts(self) -> str:
        """The published cuts, partitioned by source: one row per cut."""
        return bookkeeping_location(self.root, "cuts")

    @property
    def ledger(self) -> str:
        return bookkeeping_location(self.root, "ledger")

    @property
    def quarantine(self) -> str:
        return bookkeeping_location(self.root, "quarantine")

    def staging(self, source: str, run: str | None = None) -> str:
        """Scratch space of a landing run; ``run=None`` is the source's whole staging area."""
        return bookkeeping_location(self.root, "_staging", source, *([run] if run else []))

    def target(self, table: TableRef) -> str:
        return table_location(self.root, table)

    def resolved_file(self, source: str) -> str:
        return resolved_state_path(self.root, source)


@dataclass(frozen=True)
class JobContext:
    """One run of one job over one batch (an Airflow data interval)."""

    spark: SparkSession
    warehouse: Warehouse
    batch_id: str
    run_id: str
    job: str
    version: str
