"""Operators that turn a landed batch into table state: reassemble, resolve, apply."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context

from airflow_cdc.core.ddl import parse_tables
from airflow_cdc.core.formats import parser_for
from airflow_cdc.operators.base import SparkJobOperator


class ReassembleOperator(SparkJobOperator):
    """Parse the batch's records and reassemble fragmented images.

    :param record_format: Format of the landed records: ``dsql``, ``ydb``, ``ydb-debezium``,
        ``cockroachdb``, ``arcion``, ``cdl`` or ``debezium``.
    :param max_pending_age_seconds: Stream time after which a fragment set that is still
        incomplete is quarantined, in seconds (> 0).
    """

    job = "reassemble"
    template_fields: Sequence[str] = (*SparkJobOperator.template_fields, "record_format")

    def __init__(
        self, *, record_format: str = "dsql", max_pending_age_seconds: float = 3600.0, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.record_format = record_format
        self.max_pending_age_seconds = max_pending_age_seconds

    def job_args(self, context: Context) -> list[str]:
        parser_for(self.record_format)  # an unknown format fails here, naming the known ones
        if self.max_pending_age_seconds <= 0:
            raise ValueError(
                f"max_pending_age_seconds must be > 0, got {self.max_pending_age_seconds!r}"
            )
        return [
            "--format",
            self.record_format,
            "--max-pending-age-seconds",
            str(self.max_pending_age_seconds),
        ]


class _TablesOperator(SparkJobOperator):
    """A job over the declared target tables.

    :param ddl: ``CREATE TABLE`` statements (PostgreSQL) of the tables to maintain; the
        primary key of each is the key changes are ordered and merged by.
    :param default_schema: Schema of tables declared without one.
    """

    template_fields: Sequence[str] = (*SparkJobOperator.template_fields, "ddl")

    def __init__(self, *, ddl: str, default_schema: str = "public", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ddl = ddl
        self.default_schema = default_schema

    def job_args(self, context: Context) -> list[str]:
        parse_tables(self.ddl, self.default_schema)  # fail here, with the DDL error, not in Spark
        return ["--ddl", self.ddl, "--default-schema", self.default_schema]


class ResolveOperator(_TablesOperator):
    """Decode the batch's changes per the declared tables and keep each key's newest."""

    job = "resolve"


class ApplyOperator(_TablesOperator):
    """MERGE the batch's resolved changes into the Delta tables.

    :param resolved_source: Landed source whose resolved timestamp lets tombstones be purged.
    :param tombstone_retention_seconds: How long past the resolved timestamp tombstones are
        kept, in seconds (>= 0).
    """

    job = "apply"
    template_fields: Sequence[str] = (*_TablesOperator.template_fields, "resolved_source")

    def __init__(
        self,
        *,
        resolved_source: str | None = None,
        tombstone_retention_seconds: float = 86400.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.resolved_source = resolved_source
        self.tombstone_retention_seconds = tombstone_retention_seconds

    def job_args(self, context: Context) -> list[str]:
        if self.tombstone_retention_seconds < 0:
            raise ValueError(
                "tombstone_retention_seconds must be >= 0, got "
                f"{self.tombstone_retention_seconds!r}"
            )
        args = [
            *super().job_args(context),
            "--tombstone-retention-seconds",
            str(self.tombstone_retention_seconds),
        ]
        if self.resolved_source:
            args += ["--resolved-source", self.resolved_source]
        return args
