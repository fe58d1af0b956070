"""The operator that turns a landed batch into table state, in one Spark job."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context

from airflow_cdc.core.ddl import parse_tables
from airflow_cdc.core.formats import parser_for
from airflow_cdc.jobs import check_source
from airflow_cdc.operators.base import SparkJobOperator


class ApplyChangesOperator(SparkJobOperator):
    """Parse, reassemble, order and MERGE one landed batch of a source into its Delta tables.

    One spark-submit per batch (``apply_changes`` job): no intermediate tables, one MERGE per
    target table, one ledger append. Tombstones of deleted rows are purged by
    :class:`~airflow_cdc.operators.maintain.CdcMaintenanceOperator`.

    :param source: The landed source (as named by the landing operator).
    :param ddl: ``CREATE TABLE`` statements (PostgreSQL) of the tables to maintain; the
        primary key of each is the key changes are ordered and merged by.
    :param record_format: Format of the landed records: ``dsql``, ``ydb``, ``ydb-debezium``,
        ``cockroachdb``, ``arcion``, ``cdl`` or ``debezium``.
    :param default_schema: Schema of tables declared without one.
    :param max_pending_age_seconds: Stream time after which a fragment set that is still
        incomplete is quarantined, in seconds (> 0).
    :param tombstone_retention_seconds: Deprecated and ignored: tombstones are purged by
        :class:`~airflow_cdc.operators.maintain.CdcMaintenanceOperator`.
    """

    job = "apply_changes"
    template_fields: Sequence[str] = (
        *SparkJobOperator.template_fields,
        "source",
        "ddl",
        "record_format",
    )

    def __init__(
        self,
        *,
        source: str,
        ddl: str,
        record_format: str = "dsql",
        default_schema: str = "public",
        max_pending_age_seconds: float = 3600.0,
        tombstone_retention_seconds: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if tombstone_retention_seconds is not None:
            warnings.warn(
                "ApplyChangesOperator no longer purges tombstones and ignores"
                " tombstone_retention_seconds: schedule CdcMaintenanceOperator"
                " (airflow_cdc.operators.maintain) with it instead",
                DeprecationWarning,
                stacklevel=2,
            )
        self.source = source
        self.ddl = ddl
        self.record_format = record_format
        self.default_schema = default_schema
        self.max_pending_age_seconds = max_pending_age_seconds

    def job_args(self, context: Context) -> list[str]:
        check_source(self.source)
        parser_for(self.record_format)  # an unknown format fails here, naming the known ones
        parse_tables(self.ddl, self.default_schema)  # and a bad DDL, with the DDL error
        if self.max_pending_age_seconds <= 0:
            raise ValueError(
                f"max_pending_age_seconds must be > 0, got {self.max_pending_age_seconds!r}"
            )
        return [
            *("--source", self.source, "--format", self.record_format),
            *("--ddl", self.ddl, "--default-schema", self.default_schema),
            *("--max-pending-age-seconds", str(self.max_pending_age_seconds)),
        ]
