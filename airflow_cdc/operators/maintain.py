"""The operator that keeps a source's tables compact and bounded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Context

from airflow_cdc.core.ddl import history_ref, parse_tables
from airflow_cdc.jobs import (
    MAX_RETENTION_SECONDS,
    MIN_VACUUM_RETENTION_HOURS,
    bookkeeping_location,
    check_source,
    table_location,
)
from airflow_cdc.lineage import location_inputs, location_outputs
from airflow_cdc.links import DeltaTableLink, SparkApplicationLink, SparkMasterLink
from airflow_cdc.operators.base import SparkJobOperator
from airflow_cdc.settings import chosen

if TYPE_CHECKING:
    from openlineage.client.event_v2 import InputDataset, OutputDataset


class CdcMaintenanceOperator(SparkJobOperator):
    """Expire old bookkeeping, purge old tombstones, compact (OPTIMIZE) and VACUUM a source's
    tables (``maintain`` job): the target tables its DDL declares and its partitions of the
    bookkeeping tables.

    Safe to schedule hourly beside the CDC DAG that writes the tables (conflicting Delta
    commits are retried, on both sides) and safe to backfill (every step is idempotent).
    Rows expired, files before and after, bytes rewritten, tombstones purged and files
    vacuumed go to the task log and XCom.

    :param source: The source whose tables to keep (as named by the landing operator).
    :param ddl: ``CREATE TABLE`` statements of the source's tables (the apply task's).
    :param default_schema: Schema of tables declared without one.
    :param tombstone_retention_seconds: How long past the source's resolved timestamp
        tombstones of deleted rows are kept, in seconds (>= 0); while kept, they stop a late
        older change from bringing a deleted row back. Records not yet decided, and records
        quarantined for a reason a replay fixes, hold them longer (until decided, replayed
        or expired).
    :param vacuum_retention_hours: VACUUM deletes the files removed from a table longer ago
        than this (>= 168, Delta's default safety check); set as each table's
        ``delta.deletedFileRetentionDuration`` when it is not Delta's default of 7 days.
    :param raw_retention_seconds: A landed record whose outcome has been final (applied,
        superseded, duplicate, control) this long leaves ``_cdc/raw``, the quarantine and the
        ledger (>= 0; 7 days by default). Pending and unprocessed records always stay.
    :param quarantine_retention_seconds: A quarantined record that was never replayed is kept
        this long (>= 0; 30 days by default); a replayed one is final like the others.
    :param cut_retention_seconds: Every table version that a consistent cut published this
        recently references stays readable: VACUUM keeps its files and the Delta log is kept
        as long (>= 0; 7 days by default; see :mod:`airflow_cdc.cuts`).
    :param cluster_above_bytes: A target table this large is clustered by its primary key
        (Delta's liquid clustering; OPTIMIZE then clusters the files it rewrites), so that a
        MERGE of a narrow key range skips the files outside it (>= 0; 2 GiB by default:
        below it Delta's 1 GiB files leave a MERGE little to skip).
    """

    operator_extra_links = (SparkApplicationLink(), SparkMasterLink(), DeltaTableLink())

    job = "maintain"
    template_fields: Sequence[str] = (*SparkJobOperator.template_fields, "source", "ddl")
    ui_color = "#f4efe8"

    def __init__(
        self,
        *,
        source: str,
        ddl: str,
        default_schema: str = "public",
        tombstone_retention_seconds: float | None = None,
        vacuum_retention_hours: float | None = None,
        raw_retention_seconds: float | None = None,
        quarantine_retention_seconds: float | None = None,
        cut_retention_seconds: float | None = None,
        cluster_above_bytes: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.ddl = ddl
        self.default_schema = default_schema
        self.tombstone_retention_seconds = chosen(
            tombstone_retention_seconds, "tombstone_retention_seconds"
        )
        self.vacuum_retention_hours = chosen(vacuum_retention_hours, "vacuum_retention_hours")
        self.raw_retention_seconds = chosen(raw_retention_seconds, "raw_retention_seconds")
        self.quarantine_retention_seconds = chosen(
            quarantine_retention_seconds, "quarantine_retention_seconds"
        )
        self.cut_retention_seconds = chosen(cut_retention_seconds, "cut_retention_seconds")
        self.cluster_above_bytes = chosen(cluster_above_bytes, "cluster_above_bytes")

    def kept_locations(self) -> list[str]:
        """What the job compacts and expires: the source's tables (after a run, with the
        history tables it compacted: the job keeps whichever exist) and its bookkeeping."""
        specs = parse_tables(self.ddl, self.default_schema)
        done = (self.run_stats or {}).get("tables") or {}
        tables = []
        for spec in specs:
            tables.append(table_location(self.warehouse, spec.table))
            history = history_ref(spec.table)
            if history.qualified in done:
                tables.append(table_location(self.warehouse, history))
        kept = ("raw", "ledger", "quarantine", "cuts", "pending", "held", "transactions")
        return tables + [bookkeeping_location(self.warehouse, table) for table in kept]

    def lineage_inputs(self) -> list[InputDataset]:
        return location_inputs(self.kept_locations())

    def lineage_outputs(self) -> list[OutputDataset]:
        return location_outputs(self.kept_locations())

    def job_args(self, context: Context) -> list[str]:
        check_source(self.source)
        parse_tables(self.ddl, self.default_schema)
        for name in (
            "tombstone_retention_seconds",
            "raw_retention_seconds",
            "quarantine_retention_seconds",
            "cut_retention_seconds",
        ):
            if not 0 <= getattr(self, name) <= MAX_RETENTION_SECONDS:
                raise ValueError(
                    f"{name} must be >= 0 and <= {MAX_RETENTION_SECONDS:.0f} (a hundred years),"
                    f" got {getattr(self, name)!r}"
                )
        if not self.vacuum_retention_hours >= MIN_VACUUM_RETENTION_HOURS:
            raise ValueError(
                f"vacuum_retention_hours must be >= {MIN_VACUUM_RETENTION_HOURS} (Delta's"
                f" retention safety check), got {self.vacuum_retention_hours!r}"
            )
        above = self.cluster_above_bytes
        if isinstance(above, bool) or not (isinstance(above, int) and above >= 0):
            raise ValueError(
                f"cluster_above_bytes must be a whole number of bytes >= 0,"
                f" got {self.cluster_above_bytes!r}"
            )
        return [
            f"--source={self.source}",
            f"--ddl={self.ddl}",
            f"--default-schema={self.default_schema}",
            f"--tombstone-retention-seconds={self.tombstone_retention_seconds}",
            f"--vacuum-retention-hours={self.vacuum_retention_hours}",
            f"--raw-retention-seconds={self.raw_retention_seconds}",
            f"--quarantine-retention-seconds={self.quarantine_retention_seconds}",
            f"--cut-retention-seconds={self.cut_retention_seconds}",
            f"--cluster-above-bytes={self.cluster_above_bytes}",
        ]
