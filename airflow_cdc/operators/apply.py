"""The operator that turns a landed batch into table state, in one Spark job."""

from __future__ import annotations

import datetime as dt
import json
import logging
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Context

from airflow_cdc.assets import event_extra, partition_key, table_assets
from airflow_cdc.core.columns import MAX_ADDED_COLUMNS, MAX_COLUMNS_PER_RECORD
from airflow_cdc.core.ddl import history_ref, history_tables, parse_tables
from airflow_cdc.core.exceptions import ResolvedTimestampUnavailable
from airflow_cdc.core.formats import parser_for
from airflow_cdc.core.formats.common import (
    MAX_FRAGMENTS,
    MAX_NUMBER_LENGTH,
    MAX_SET_BYTES,
    SET_BYTES_CEILING,
    RecordLimits,
)
from airflow_cdc.cuts import cut_reaching
from airflow_cdc.jobs import (
    CATALOG_NAME,
    MAX_PENDING_WALL_SECONDS,
    bookkeeping_location,
    check_source,
    check_time,
    table_location,
)
from airflow_cdc.lineage import (
    location_inputs,
    location_name,
    location_outputs,
    output_dataset,
    schema_facet,
    version_facet,
)
from airflow_cdc.links import DeltaTableLink, SparkApplicationLink, SparkMasterLink
from airflow_cdc.operators.base import SparkJobOperator, check_waiting, land_again_later
from airflow_cdc.operators.land import Landing, raw_table_outputs
from airflow_cdc.settings import chosen

if TYPE_CHECKING:
    from openlineage.client.event_v2 import InputDataset, OutputDataset


def reached_cut(
    stats: dict[str, Any], end: dt.datetime, warehouse: str, source: str
) -> dict[str, Any] | None:
    """The published cut that holds the state as of ``end`` (the rendered cut time the run
    asked for, its data interval's end by default), with its time and each table's version:
    the run's own (or the one it pointed at again) when it reaches ``end``; else, when a cut
    published before the run passed ``end`` (a backfill, or a re-run after a later interval's
    run cut past it), the one a task for ``end`` reads (:func:`airflow_cdc.cuts.cut_reaching`),
    which the run's counts do not name. ``None`` when no published cut reaches ``end``: a run
    blocked, or capped short of it.

    :raises ResolvedTimestampUnavailable: while the published cuts cannot be read."""
    cut = stats.get("cut") or {}
    published = cut.get("published") or {}
    if published.get("cut_at") and check_time(published["cut_at"], "cut_at") >= end:
        return dict(published)
    before = cut.get("published_before")
    if not before or check_time(before, "published_before") < end:
        return None
    found = cut_reaching(warehouse, source, end)
    return None if found is None else found.as_dict()


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
    :param max_pending_wall_seconds: Wall-clock time in the open state after which a fragment
        set that is still incomplete is quarantined however the stream moves, in seconds
        (>= 1; default a day). With ``transactions``, also how long a cut waits for an
        incomplete transaction (its ``END``, or an event its ``END`` counts).
    :param max_columns_per_record: A change whose image has more columns is quarantined
        (``too_many_columns``); default 1,600, PostgreSQL's limit per table.
    :param max_added_columns: Columns the stream may add to a table beyond its DDL; a change
        that would add more is quarantined (``column_limit``); default 200.
    :param column_mapping: Let a stream column whose name Delta stores only with column mapping
        (a space, one of ``,;{}()=``, a tab or newline) be added, turning on the table's
        column mapping (Delta readers then need column mapping support). Without it such a
        change is quarantined (``invalid_column_name``). Declared columns with such names
        always get it.
    :param max_fragments_per_image: A chunked record whose image has more fragments is a bad
        record (quarantined); default 10,000, at most 1,000,000.
    :param max_bytes_per_fragment_set: A fragment set whose chunk id's distinct fragments
        hold more data (UTF-8 bytes; a redelivered fragment counts once) is quarantined
        unread (``oversized_fragment_set``); default and most 256 MiB, twice the largest
        image Spark reads back.
    :param max_number_length: A record holding a JSON number literal of more characters is a
        bad record (quarantined); default and most 1,000, the longest Spark's JSON reader
        reads. Applies to the formats parsed by the core (all but ``dsql``, whose records
        Spark reads itself, with that limit).
    :param consistent_cut: Take a consistent cut (see :mod:`airflow_cdc.cuts`): apply only the
        changes committed before ``cut_at`` (capped by the source's resolved timestamp), hold
        the rest for a later run, and publish the cut with each table's Delta version, so a
        task gated on hour H reads every table as of the same point. Off by default.
    :param cut_at: Where the cut is taken, ISO 8601; default the data interval's end.
    :param interval_start: The data interval's start, recorded with the cut.
    :param transactions: Follow the source's transactions (Debezium's transaction metadata:
        land the connector's transaction topic with the table topics, same source): a
        transaction is applied whole, and a cut never passes one whose ``END`` event or
        events of a declared table have not all arrived. Needs ``consistent_cut``.
    :param history: Tables that also keep a history table (SCD type 2) beside their current
        state: ``True`` for every declared table, or their names (``schema.table``, or ``table``
        in ``default_schema``; a list or one comma-separated string).
        ``<schema>/<table>__history`` holds every version of each row, open from its change's
        commit time (``__start_at``) until the key's next change (``__end_at``, null for the
        current version); a delete is a row of its own (``_cdc_deleted``). A late change takes
        its place in commit order. With ``consistent_cut`` the history holds the changes below
        the cut, and the published cut names its version. Off by default. Pass the same
        ``history`` to the replay of the source's quarantine (:class:`ReplayQuarantineOperator`)
        so that replayed changes enter it too. Turned on for a table with rows, it starts from
        the next change: nothing before is backfilled.
    :param catalog: Register each table (and history table) by name in this catalog of the
        job's Spark session, as an external Delta table ``<catalog>.<schema>.<table>`` at its
        location, so that queries say ``FROM public.orders``: ``spark_catalog`` (the session
        catalog, which must be a Hive metastore: ``spark.sql.catalogImplementation=hive`` and
        its settings in ``spark_conf``) or a catalog configured as ``spark.sql.catalog.<name>``.
        Each run registers the tables not registered yet, after its commits; a name that
        already exists elsewhere is reported in the run's stats and left alone, and a catalog
        error never fails the run. Off (``None``) by default.
    :param partitioned_events: Partition each table's asset event by the data interval (its
        start, ``%Y-%m-%dT%H:%M:%S`` UTC), for downstream DAGs with a partitioned asset
        timetable. Airflow queues no other DAG on a partitioned event, so off by default.
    :param max_active_tis_per_dag: As for any operator; default 1 here, so that the DAG's runs
        (a backfill beside the scheduled runs) apply one batch of the source at a time.
    :param tombstone_retention_seconds: Deprecated and ignored: tombstones are purged by
        :class:`~airflow_cdc.operators.maintain.CdcMaintenanceOperator`.
    """

    operator_extra_links = (SparkApplicationLink(), SparkMasterLink(), DeltaTableLink())

    job = "apply_changes"
    template_fields: Sequence[str] = (
        *SparkJobOperator.template_fields,
        "source",
        "ddl",
        "record_format",
        "cut_at",
        "interval_start",
        "catalog",
    )

    def __init__(
        self,
        *,
        source: str,
        ddl: str,
        record_format: str = "dsql",
        default_schema: str = "public",
        max_pending_age_seconds: float | None = None,
        max_pending_wall_seconds: float = MAX_PENDING_WALL_SECONDS,
        max_columns_per_record: int = MAX_COLUMNS_PER_RECORD,
        max_added_columns: int = MAX_ADDED_COLUMNS,
        column_mapping: bool = False,
        max_fragments_per_image: int = MAX_FRAGMENTS,
        max_number_length: int = MAX_NUMBER_LENGTH,
        max_bytes_per_fragment_set: int = MAX_SET_BYTES,
        consistent_cut: bool = False,
        cut_at: str = "{{ data_interval_end | ts }}",
        interval_start: str = "{{ data_interval_start | ts }}",
        transactions: bool = False,
        history: bool | str | Sequence[str] = False,
        catalog: str | None = None,
        partitioned_events: bool = False,
        tombstone_retention_seconds: float | None = None,
        **kwargs: Any,
    ) -> None:
        # One apply of a source at a time, across the DAG's runs: runs of the same source
        # share its open state and its cuts (see the README, "Many sources, one warehouse").
        kwargs.setdefault("max_active_tis_per_dag", 1)
        history = history if isinstance(history, bool | str) else list(history)
        super().__init__(**kwargs)
        # Each table's asset, when the DAG names the warehouse and the DDL as they are (a
        # bad DDL, history name or warehouse declares none here and fails at submission,
        # saying why). The warehouse is the one SparkJobOperator took: Airflow fills in an
        # argument from default_args only in the __init__ that names it.
        try:
            assets = table_assets(self.warehouse, ddl, default_schema, history)
        except ValueError:  # DdlError among them
            assets = {}
        if "outlets" not in kwargs:
            self.outlets = list(assets.values())
        self.table_assets = assets
        self.partitioned_events = partitioned_events
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
        self.max_pending_age_seconds = chosen(max_pending_age_seconds, "max_pending_age_seconds")
        self.max_pending_wall_seconds = max_pending_wall_seconds
        self.max_columns_per_record = max_columns_per_record
        self.max_added_columns = max_added_columns
        self.column_mapping = column_mapping
        self.max_fragments_per_image = max_fragments_per_image
        self.max_number_length = max_number_length
        self.max_bytes_per_fragment_set = max_bytes_per_fragment_set
        self.consistent_cut = consistent_cut
        self.cut_at = cut_at
        self.interval_start = interval_start
        self.transactions = transactions
        self.history = history
        self.catalog = catalog

    def execute(self, context: Context) -> dict[str, Any]:
        return self.report(super().execute(context), context)

    def report(self, stats: dict[str, Any], context: Context) -> dict[str, Any]:
        """Log what a run did to each table, and put its counts on the tables' asset events."""
        for line in table_lines(stats):
            self.log.info("%s", line)
        for level, line in registration_lines(stats):
            self.log.log(level, "%s", line)
        events = context.get("outlet_events")
        start = context.get("data_interval_start")
        if events is None:
            return stats
        complete = True
        if self.consistent_cut:
            complete = self.name_reached_cut(stats)
            if not complete:
                self.log.warning(
                    "no published cut reaches the run's cut time: its tables' events"
                    " say interval_complete false%s",
                    " and add no partition" if self.partitioned_events else "",
                )
        for table, asset in self.table_assets.items():
            event = events[asset]
            event.extra.update(event_extra(stats, table, self.source))
            if self.consistent_cut:
                event.extra["interval_complete"] = complete
            if self.partitioned_events and start is not None and complete:
                event.add_partitions(partition_key(start))
        return stats

    def name_reached_cut(self, stats: dict[str, Any]) -> bool:
        """Whether a published cut reaches the run's cut time; the cut, as ``stats["cut"]
        ["reached"]``, is the one its tables' events and lineage name (:func:`reached_cut`)."""
        try:
            reached = reached_cut(
                stats, check_time(self.cut_at, "cut_at"), self.warehouse, self.source
            )
        except ResolvedTimestampUnavailable as err:
            # A cut past the run's cut time was published, but which one a task for that time
            # reads is not known now: the events name none rather than another state.
            self.log.warning("cannot read the cut that reaches the run's cut time: %s", err)
            return False
        if reached is None:
            return False
        stats["cut"]["reached"] = reached
        return True

    def bookkeeping_read(self) -> list[str]:
        """The bookkeeping tables a run reads: the batch's landed records and ledger entries,
        the source's open state (and with a cut, its held changes and published cuts)."""
        read = ["raw", "ledger", "pending"]
        if self.consistent_cut:
            read += ["held", "cuts"]
        if self.transactions:
            read.append("transactions")
        return read

    def lineage_inputs(self) -> list[InputDataset]:
        return location_inputs(
            bookkeeping_location(self.warehouse, t) for t in self.bookkeeping_read()
        )

    def lineage_outputs(self) -> list[OutputDataset]:
        """Each declared table with its declared columns (and after a run its Delta version,
        the one its asset event names), each history table, then the bookkeeping tables."""
        specs = parse_tables(self.ddl, self.default_schema, self.record_format)
        outputs: list[OutputDataset] = []
        for spec in specs:
            facets = {"schema": schema_facet(spec)}
            if self.run_stats is not None:
                version = event_extra(self.run_stats, spec.table.qualified, self.source).get(
                    "version"
                )
                if version is not None:
                    facets["version"] = version_facet(version)
            where = location_name(table_location(self.warehouse, spec.table))
            outputs.append(output_dataset(*where, facets))
        kept = history_tables(self.history, specs, self.default_schema)
        written = [table_location(self.warehouse, history_ref(s.table)) for s in kept]
        written += [
            bookkeeping_location(self.warehouse, t) for t in ("ledger", "quarantine", "pending")
        ]
        if self.consistent_cut:
            written += [bookkeeping_location(self.warehouse, t) for t in ("held", "cuts")]
        if self.transactions:
            written.append(bookkeeping_location(self.warehouse, "transactions"))
        return outputs + location_outputs(written)

    def job_args(self, context: Context) -> list[str]:
        check_source(self.source)
        parser_for(self.record_format)  # an unknown format fails here, naming the known ones
        # And a bad DDL, with its error.
        specs = parse_tables(self.ddl, self.default_schema, self.record_format)
        kept = history_tables(self.history, specs, self.default_schema)  # and an unknown name
        if self.max_pending_age_seconds <= 0:
            raise ValueError(
                f"max_pending_age_seconds must be > 0, got {self.max_pending_age_seconds!r}"
            )
        if not self.max_pending_wall_seconds >= 1:
            raise ValueError(
                f"max_pending_wall_seconds must be >= 1, got {self.max_pending_wall_seconds!r}"
            )
        counts = (
            "max_columns_per_record",
            "max_added_columns",
            "max_fragments_per_image",
            "max_number_length",
            "max_bytes_per_fragment_set",
        )
        for name in counts:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        RecordLimits(self.max_fragments_per_image, self.max_number_length)  # and in range
        if self.max_bytes_per_fragment_set > SET_BYTES_CEILING:
            raise ValueError(
                f"max_bytes_per_fragment_set must be at most {SET_BYTES_CEILING:,},"
                f" got {self.max_bytes_per_fragment_set!r}"
            )
        if self.catalog is not None and (
            not isinstance(self.catalog, str) or not CATALOG_NAME.fullmatch(self.catalog)
        ):
            raise ValueError(
                f"catalog must be a catalog name ({CATALOG_NAME.pattern}) or None,"
                f" got {self.catalog!r}"
            )
        cut: list[str] = []
        if self.transactions and not self.consistent_cut:
            raise ValueError("transactions=True needs consistent_cut=True: the cut waits for them")
        if self.consistent_cut:
            for name in ("cut_at", "interval_start"):
                check_time(getattr(self, name), name)
            cut = [f"--cut-at={self.cut_at}", f"--interval-start={self.interval_start}"]
            if self.transactions:
                cut.append("--transactions")
        return [
            f"--source={self.source}",
            f"--format={self.record_format}",
            f"--ddl={self.ddl}",
            f"--default-schema={self.default_schema}",
            f"--max-pending-age-seconds={self.max_pending_age_seconds}",
            f"--max-pending-wall-seconds={self.max_pending_wall_seconds}",
            f"--max-columns-per-record={self.max_columns_per_record}",
            f"--max-added-columns={self.max_added_columns}",
            f"--max-fragments-per-image={self.max_fragments_per_image}",
            f"--max-number-length={self.max_number_length}",
            f"--max-bytes-per-fragment-set={self.max_bytes_per_fragment_set}",
            *(["--column-mapping"] if self.column_mapping else []),
            *cut,
            *([f"--history={','.join(s.table.qualified for s in kept)}"] if kept else []),
            *([f"--catalog={self.catalog}"] if self.catalog is not None else []),
        ]


class LandAndApplyOperator(ApplyChangesOperator):
    """Land a source, then apply its batch, in one spark-submit (``land_and_apply`` job).

    It does the work of a landing operator, a
    :class:`~airflow_cdc.sensors.resolved.ResolvedTimestampSensor` and an
    :class:`ApplyChangesOperator` in one task, and a batch pays one spark-submit, one JVM start
    and one Delta start-up instead of two. Each step is its own job inside (``land_*`` and
    ``apply_changes``, at their versions, with their commits), so a warehouse can move between
    this operator and the three tasks at any batch.

    The run lands first. If the landing leaves the source's resolved timestamp at or past
    ``resolved_target`` (by default the data interval's end, what the sensor waits for), it
    applies the batch. Otherwise it applies nothing and the task reschedules itself, as a
    sensor in ``reschedule`` mode does: it lands again after ``poke_interval`` seconds (and
    no sooner than the target plus the landing's lateness, before which the resolved
    timestamp cannot reach it), and fails once ``timeout`` seconds have passed since its
    first try. A live stream is therefore landed about twice per batch: once at the
    interval's end, once when its lateness has passed.

    The landing connection's credentials, if it has keys, are the whole job's: the apply
    writes the warehouse with them, as the landing already writes the raw table. Where the
    Kinesis key must not reach the warehouse, keep the three tasks.

    Takes every argument of :class:`ApplyChangesOperator`, and:

    :param land: What to land, and how: a :class:`~airflow_cdc.operators.land.KinesisLanding`,
        :class:`~airflow_cdc.operators.land.KafkaLanding` or
        :class:`~airflow_cdc.operators.land.FilesLanding` (its fields are templated). A
        landing that names no ``record_format`` lands in this operator's.
    :param resolved_target: ISO 8601 time the resolved timestamp must reach before the batch
        is applied; default the data interval's end.
    :param poke_interval: Seconds between landings while the resolved timestamp is short.
    :param timeout: Seconds after the first try at which a task still short fails.
    """

    job = "land_and_apply"
    template_fields: Sequence[str] = (
        *ApplyChangesOperator.template_fields,
        "land",
        "resolved_target",
    )

    def __init__(
        self,
        *,
        land: Landing,
        resolved_target: str = "{{ data_interval_end | ts }}",
        poke_interval: float = 60.0,
        timeout: float = 6 * 3600.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.land = land
        self.resolved_target = resolved_target
        self.poke_interval = poke_interval
        self.timeout = timeout

    def execute(self, context: Context) -> dict[str, Any]:
        stats = SparkJobOperator.execute(self, context)
        if "waiting" in stats:
            self.wait(context, stats)
        return self.report(stats, context)

    def wait(self, context: Context, stats: dict[str, Any]) -> None:
        """Land again later, or fail once the task has waited ``timeout`` seconds
        (:func:`~airflow_cdc.operators.base.land_again_later`)."""
        land_again_later(
            self.log,
            context,
            stats["waiting"],
            check_time(self.resolved_target, "resolved_target"),
            self.land.lateness(self.record_format),
            self.poke_interval,
            self.timeout,
        )

    def job_args(self, context: Context) -> list[str]:
        if not isinstance(self.land, Landing):
            raise TypeError(
                "land must be a KinesisLanding, KafkaLanding or FilesLanding"
                f" (airflow_cdc.operators.land), got {self.land!r}"
            )
        check_time(self.resolved_target, "resolved_target")
        check_waiting(self.poke_interval, self.timeout)
        apply = super().job_args(context)
        return [
            f"--source={check_source(self.source)}",
            f"--land-job={self.land.job}",
            f"--land-args={json.dumps(self.land.job_args(self.record_format))}",
            f"--apply-args={json.dumps(apply)}",
            f"--resolved-target={self.resolved_target}",
        ]

    def job_env(self) -> dict[str, str]:
        return self.land.job_env()

    def jobs_run(self) -> list[str]:
        inside = [self.land.job] if isinstance(self.land, Landing) else []
        return [self.job, *inside, ApplyChangesOperator.job]

    def lineage_inputs(self) -> list[InputDataset]:
        return [*self.land.lineage_inputs(), *super().lineage_inputs()]

    def lineage_outputs(self) -> list[OutputDataset]:
        return [*super().lineage_outputs(), *raw_table_outputs(self.warehouse)]


class ReplayQuarantineOperator(ApplyChangesOperator):
    """Run a source's quarantined records through the apply job again, after the cause was
    fixed: a table declared in ``ddl`` (``undeclared_table``), a column type changed
    (``type_conflict``, ``decode_error``), a key (``missing_key``, ``key_mismatch``) or a limit
    raised (``column_limit``, ``too_many_columns``, ``invalid_column_name`` with
    ``column_mapping``).

    Each record ends as its new outcome (applied, superseded, duplicate, or quarantined again
    with its new reason): the ledger appends it after the tables' MERGEs, as any apply run
    does, so a record is applied once and every batch's accounting identity holds before and
    after. A replayed change older than a row's newest change supersedes nothing. The replay
    runs outside consistent cuts (nothing is held or published; the next cut includes what it
    applied). Fragments and chunked records (their set was quarantined whole) and changes
    without a commit position stay quarantined.

    Takes every argument of :class:`ApplyChangesOperator` (give it the fixed ``ddl``), and:

    :param reasons: Quarantine reasons to replay; default the ones above.
    :param batches: Landed batches to replay (their ids); default every batch the quarantine
        table holds for the source.
    """

    template_fields: Sequence[str] = (*ApplyChangesOperator.template_fields, "reasons", "batches")

    def __init__(
        self,
        *,
        reasons: Sequence[str] | None = None,
        batches: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.reasons = reasons
        self.batches = batches

    def bookkeeping_read(self) -> list[str]:
        return [*super().bookkeeping_read(), "quarantine"]

    def job_args(self, context: Context) -> list[str]:
        if self.consistent_cut or self.transactions:
            raise ValueError(
                "a replay runs outside consistent cuts: leave consistent_cut and transactions off"
            )
        args = [*super().job_args(context), "--replay"]
        for name, option in (("reasons", "--replay-reasons"), ("batches", "--replay-batches")):
            values = getattr(self, name)
            if values is None:
                continue
            if isinstance(values, str) or not all(
                isinstance(v, str) and v and "," not in v for v in values
            ):
                raise ValueError(f"{name} must be a list of names without commas, got {values!r}")
            if values:
                args.append(f"{option}={','.join(values)}")
        return args


def table_lines(stats: dict[str, Any]) -> list[str]:
    """One log line per table of an apply run: what its changes did, and why any were
    quarantined.
    """
    lines = []
    for table, counts in sorted((stats.get("tables") or {}).items()):
        reasons = counts.get("quarantined_by_reason") or {}
        why = ", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items()))
        lines.append(
            f"{table}: {counts.get('inserted', 0)} inserted, {counts.get('updated', 0)} updated,"
            f" {counts.get('deleted', 0)} deleted; {counts.get('changes', 0)} changes:"
            f" {counts.get('applied', 0)} applied, {counts.get('superseded', 0)} superseded,"
            f" {counts.get('duplicate', 0)} duplicate; {counts.get('quarantined', 0)} quarantined"
            + (f" ({why})" if why else "")
            + (f"; version {counts['version']}" if counts.get("version") is not None else "")
        )
    return lines


def registration_lines(stats: dict[str, Any]) -> list[tuple[int, str]]:
    """(log level, line) for each table an apply run registered by name, or could not."""
    lines = []
    for table, entry in sorted((stats.get("catalog") or {}).items()):
        outcome, name = entry.get("outcome"), entry.get("name")
        if outcome == "registered":
            lines.append((logging.INFO, f"{table}: registered as {name}"))
        elif outcome == "name_taken":
            where = entry.get("location") or "a view"
            lines.append(
                (logging.WARNING, f"{table}: not registered, {name} already names {where}")
            )
        elif outcome == "failed":
            lines.append(
                (logging.WARNING, f"{table}: not registered as {name}: {entry.get('error')}")
            )
    return lines
