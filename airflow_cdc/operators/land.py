"""Operators that land a source into the raw table, with checkpoints."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import Context

from airflow_cdc.core.formats import IN_BAND_RESOLVED
from airflow_cdc.hooks.kafka import KafkaClusterHook
from airflow_cdc.hooks.kinesis import KinesisStreamHook
from airflow_cdc.jobs import bookkeeping_location, check_location, check_source, check_time
from airflow_cdc.lineage import (
    files_location,
    input_dataset,
    kafka_namespace,
    kinesis_namespace,
    location_inputs,
    location_outputs,
)
from airflow_cdc.operators.base import SparkJobOperator, check_waiting, land_again_later
from airflow_cdc.settings import chosen

if TYPE_CHECKING:
    from openlineage.client.event_v2 import InputDataset, OutputDataset


def check_lateness(seconds: float) -> str:
    """The lateness bound as a job argument; it must be >= 0 seconds."""
    if seconds < 0:
        raise ValueError(f"lateness_seconds must be >= 0, got {seconds!r}")
    return str(seconds)


def check_unended(seconds: float) -> str:
    """How long an unended last line waits for its writer, as a job argument; it must be a
    finite number >= 0 of seconds."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"unended_line_seconds must be >= 0, got {seconds!r}")
    return str(seconds)


def raw_table_outputs(warehouse: str) -> list[OutputDataset]:
    """What every landing writes (OpenLineage): the raw table, ``_cdc/raw``."""
    return location_outputs([bookkeeping_location(warehouse, "raw")])


class Landing:
    """What a landing job reads, and how: its own arguments, environment and inputs.

    A landing operator submits its job alone; :class:`~airflow_cdc.operators.apply.
    LandAndApplyOperator` runs it before the apply, in the same spark-submit. Its fields are
    templated there."""

    job: ClassVar[str]
    template_fields: Sequence[str] = ()
    lateness_seconds: float = 0.0
    record_format: str | None = None

    def job_args(self, record_format: str | None = None) -> list[str]:
        """The job's arguments, each option with its value as one (``--topic=-orders``: see
        :func:`~airflow_cdc.submit.job_spec`); ``record_format``: the records' format, where
        the landing does not name one (formats with in-band resolved markers need it)."""
        raise NotImplementedError

    def job_env(self) -> dict[str, str]:
        return {}

    def lineage_inputs(self) -> list[InputDataset]:
        return []

    def format(self, record_format: str | None = None) -> str | None:
        """The records' format: the landing's own, else ``record_format``."""
        return self.record_format or record_format

    def lateness(self, record_format: str | None = None) -> float:
        """Seconds the job subtracts from its horizon for the resolved timestamp: none for a
        format whose in-band markers are exact."""
        return 0.0 if self.format(record_format) in IN_BAND_RESOLVED else self.lateness_seconds

    def __repr__(self) -> str:  # as the task's rendered fields show it
        fields = ", ".join(f"{k}={v!r}" for k, v in sorted(vars(self).items()))
        return f"{type(self).__name__}({fields})"


class KinesisLanding(Landing):
    """Every shard of a Kinesis stream, from its checkpoint to the tip.

    :param stream: Kinesis stream name.
    :param kinesis_conn_id: Connection of type ``cdc_kinesis`` (endpoint, region, credentials).
    :param lateness_seconds: Bound on commit-to-arrival delay, in seconds (>= 0), subtracted
        from the read horizon to give the resolved timestamp.
    :param max_records_per_shard: Maximum records read from one shard in one run (>= 1).
    """

    job = "land_kinesis"
    template_fields: Sequence[str] = ("stream",)

    def __init__(
        self,
        *,
        stream: str,
        kinesis_conn_id: str = "kinesis_default",
        lateness_seconds: float | None = None,
        max_records_per_shard: int | None = None,
    ) -> None:
        self.stream = stream
        self.kinesis_conn_id = kinesis_conn_id
        self.lateness_seconds = chosen(lateness_seconds, "lateness_seconds")
        self.max_records_per_shard = int(chosen(max_records_per_shard, "max_records_per_shard"))

    def job_args(self, record_format: str | None = None) -> list[str]:
        if self.max_records_per_shard < 1:
            raise ValueError(
                f"max_records_per_shard must be >= 1, got {self.max_records_per_shard!r}"
            )
        settings = KinesisStreamHook(self.kinesis_conn_id).settings()
        args = [
            f"--stream={self.stream}",
            f"--region={settings['region']}",
            f"--lateness-seconds={check_lateness(self.lateness_seconds)}",
            f"--max-records-per-shard={self.max_records_per_shard}",
        ]
        if settings["endpoint_url"]:
            args.append(f"--endpoint-url={settings['endpoint_url']}")
        return args

    def lateness(self, record_format: str | None = None) -> float:
        # The stream carries DSQL records, which have no in-band markers: the job always
        # subtracts the lateness.
        return float(self.lateness_seconds)

    def job_env(self) -> dict[str, str]:
        return KinesisStreamHook(self.kinesis_conn_id).job_environment()

    def lineage_inputs(self) -> list[InputDataset]:
        settings = KinesisStreamHook(self.kinesis_conn_id).settings()
        return [
            input_dataset(
                kinesis_namespace(settings["region"], settings["endpoint_url"]), self.stream
            )
        ]


class KafkaLanding(Landing):
    """Every partition of Kafka topics, from its checkpoint to the high watermark.

    :param topics: Topic names.
    :param kafka_conn_id: Connection of type ``cdc_kafka`` (bootstrap servers, client config).
    :param record_format: Format of the messages; for formats with in-band resolved markers
        (``ydb``, ``cockroachdb``, ``cdl``) the markers give the resolved timestamp.
    :param lateness_seconds: For other formats, the bound on commit-to-arrival delay, in
        seconds (>= 0), subtracted from the read time for the resolved timestamp.
    :param max_records_per_partition: Maximum records read from one partition in one run.
    """

    job = "land_kafka"
    template_fields: Sequence[str] = ("topics", "record_format")

    def __init__(
        self,
        *,
        topics: Sequence[str],
        kafka_conn_id: str = "kafka_default",
        record_format: str | None = None,
        lateness_seconds: float | None = None,
        max_records_per_partition: int | None = None,
    ) -> None:
        self.topics = topics
        self.kafka_conn_id = kafka_conn_id
        self.record_format = record_format
        self.lateness_seconds = chosen(lateness_seconds, "lateness_seconds")
        self.max_records_per_partition = int(
            chosen(max_records_per_partition, "max_records_per_shard")
        )

    def job_args(self, record_format: str | None = None) -> list[str]:
        if isinstance(self.topics, str):  # a string is a sequence of one-letter topics
            raise ValueError(f"topics must be a list of topic names, got {self.topics!r}")
        if not self.topics:
            raise ValueError("topics must name at least one topic")
        if self.max_records_per_partition < 1:
            raise ValueError(
                f"max_records_per_partition must be >= 1, got {self.max_records_per_partition!r}"
            )
        args = [f"--bootstrap-servers={KafkaClusterHook(self.kafka_conn_id).bootstrap_servers()}"]
        args += [f"--topic={topic}" for topic in self.topics]
        args += [
            f"--lateness-seconds={check_lateness(self.lateness_seconds)}",
            f"--max-records-per-partition={self.max_records_per_partition}",
        ]
        if fmt := self.format(record_format):
            args.append(f"--format={fmt}")
        return args

    def job_env(self) -> dict[str, str]:
        return KafkaClusterHook(self.kafka_conn_id).job_environment()

    def lineage_inputs(self) -> list[InputDataset]:
        namespace = kafka_namespace(KafkaClusterHook(self.kafka_conn_id).bootstrap_servers())
        return [input_dataset(namespace, topic) for topic in self.topics]


class FilesLanding(Landing):
    """NDJSON files (one delivered record or message per line), each line once.

    :param path: A file, directory or glob of ``.ndjson``/``.jsonl`` (and ``.RESOLVED``) files.
    :param layout: ``kinesis`` (Kinesis records), ``kafka`` (Kafka messages with key, value,
        partition and offset) or ``lines`` (one message value per line, as CockroachDB's
        cloud-storage sink writes).
    :param record_format: Format of the records; formats with in-band resolved markers take
        the resolved timestamp from them.
    :param lateness_seconds: Subtracted from the newest arrival time for the resolved
        timestamp, in seconds (>= 0).
    :param unended_line_seconds: A file's last line with no line ending that is no JSON
        waits for its writer to end it; once the file has not changed for this long, it
        lands as it is, a bad line that is quarantined (``None``: the job's default, an
        hour).
    """

    job = "land_files"
    template_fields: Sequence[str] = ("path",)

    def __init__(
        self,
        *,
        path: str,
        layout: str = "kinesis",
        record_format: str | None = None,
        lateness_seconds: float = 0.0,
        unended_line_seconds: float | None = None,
    ) -> None:
        self.path = path
        self.layout = layout
        self.record_format = record_format
        self.lateness_seconds = lateness_seconds
        self.unended_line_seconds = unended_line_seconds

    def job_args(self, record_format: str | None = None) -> list[str]:
        args = [
            f"--path={check_location(self.path, 'path')}",
            f"--lateness-seconds={check_lateness(self.lateness_seconds)}",
        ]
        if self.layout != "kinesis":
            args.append(f"--layout={self.layout}")
        if fmt := self.format(record_format):
            args.append(f"--format={fmt}")
        if self.unended_line_seconds is not None:
            args.append(f"--unended-line-seconds={check_unended(self.unended_line_seconds)}")
        return args

    def lineage_inputs(self) -> list[InputDataset]:
        # A relative path names no place (and is refused at submission).
        try:
            return location_inputs([files_location(check_location(self.path, "path"))])
        except ValueError:
            return []


class LandingOperator(SparkJobOperator):
    """A landing job submitted alone: its :class:`Landing`, landing ``source``.

    The task ends once its landing leaves the resolved timestamp at or past
    ``resolved_target`` (by default the data interval's end). Until then it reschedules
    itself, as a sensor in ``reschedule`` mode does, and lands again into the same batch after
    ``poke_interval`` seconds (no sooner than the target plus the landing's lateness), failing
    once ``timeout`` seconds have passed since its first try. So every change committed
    before the interval's end is in this batch or an earlier one when the task ends, which is
    what the apply of this batch reads: a resolved-timestamp sensor alone cannot see to it,
    since a later interval's landing moves the source's resolved timestamp past this one's end
    with changes of this interval that it lands in its own batch.

    :param resolved_target: ISO 8601 time the landing's resolved timestamp must reach, default
        the data interval's end; ``None`` lands once, whatever it reaches (a landing with no
        apply of its batch after it, or one that another task completes).
    :param poke_interval: Seconds between landings while the resolved timestamp is short.
    :param timeout: Seconds after the first try at which a task still short fails.
    """

    source: str | None
    # Whether the job must be told the source (a stream or topic names one by default).
    source_required: ClassVar[bool] = False

    def __init__(
        self,
        *,
        resolved_target: str | None = "{{ data_interval_end | ts }}",
        poke_interval: float = 60.0,
        timeout: float = 6 * 3600.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.resolved_target = resolved_target
        self.poke_interval = poke_interval
        self.timeout = timeout

    def execute(self, context: Context) -> dict[str, Any]:
        if self.resolved_target is None:
            return super().execute(context)
        target = check_time(self.resolved_target, "resolved_target")
        check_waiting(self.poke_interval, self.timeout)
        stats = super().execute(context)
        reached = stats.get("resolved_ts")
        if reached is None or check_time(reached, "resolved_ts") < target:
            waiting = (
                f"the resolved timestamp of batch {self.batch_id} is {reached}, short of"
                f" {target.isoformat()}: landed, and landing again"
            )
            lateness = self.landing().lateness()
            land_again_later(
                self.log, context, waiting, target, lateness, self.poke_interval, self.timeout
            )
        return stats

    def landing(self) -> Landing:
        """The landing the operator's (rendered) fields describe."""
        raise NotImplementedError

    def job_args(self, context: Context) -> list[str]:
        args = self.landing().job_args()
        if self.source or self.source_required:
            args.append(f"--source={check_source(self.source)}")
        return args

    def job_env(self) -> dict[str, str]:
        return self.landing().job_env()

    def lineage_inputs(self) -> list[InputDataset]:
        return self.landing().lineage_inputs()

    def lineage_outputs(self) -> list[OutputDataset]:
        return raw_table_outputs(self.warehouse)


class LandKinesisOperator(LandingOperator):
    """Land every shard of a Kinesis stream from its checkpoint to the tip.

    Takes the arguments of :class:`KinesisLanding`, and:

    :param source: Name of the landed source (default: the stream name); the resolved
        timestamp sensor and the apply step refer to it.
    """

    job = "land_kinesis"
    template_fields: Sequence[str] = (
        *SparkJobOperator.template_fields,
        "stream",
        "source",
        "resolved_target",
    )

    def __init__(
        self,
        *,
        stream: str,
        kinesis_conn_id: str = "kinesis_default",
        source: str | None = None,
        lateness_seconds: float | None = None,
        max_records_per_shard: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.kinesis_conn_id = kinesis_conn_id
        self.source = source
        self.lateness_seconds = chosen(lateness_seconds, "lateness_seconds")
        self.max_records_per_shard = int(chosen(max_records_per_shard, "max_records_per_shard"))

    def landing(self) -> KinesisLanding:
        return KinesisLanding(
            stream=self.stream,
            kinesis_conn_id=self.kinesis_conn_id,
            lateness_seconds=self.lateness_seconds,
            max_records_per_shard=self.max_records_per_shard,
        )


class LandKafkaOperator(LandingOperator):
    """Land every partition of Kafka topics from its checkpoint to the high watermark.

    Takes the arguments of :class:`KafkaLanding`, and:

    :param source: Name of the landed source (default: the first topic).
    """

    job = "land_kafka"
    template_fields: Sequence[str] = (
        *SparkJobOperator.template_fields,
        "topics",
        "source",
        "record_format",
        "resolved_target",
    )

    def __init__(
        self,
        *,
        topics: Sequence[str],
        kafka_conn_id: str = "kafka_default",
        source: str | None = None,
        record_format: str | None = None,
        lateness_seconds: float | None = None,
        max_records_per_partition: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.topics = topics
        self.kafka_conn_id = kafka_conn_id
        self.source = source
        self.record_format = record_format
        self.lateness_seconds = chosen(lateness_seconds, "lateness_seconds")
        self.max_records_per_partition = int(
            chosen(max_records_per_partition, "max_records_per_shard")
        )

    def landing(self) -> KafkaLanding:
        return KafkaLanding(
            topics=self.topics,
            kafka_conn_id=self.kafka_conn_id,
            record_format=self.record_format,
            lateness_seconds=self.lateness_seconds,
            max_records_per_partition=self.max_records_per_partition,
        )


class LandFilesOperator(LandingOperator):
    """Land NDJSON files (one delivered record or message per line), each line once.

    Takes the arguments of :class:`FilesLanding`, and:

    :param source: Name of the landed source.
    """

    job = "land_files"
    template_fields: Sequence[str] = (
        *SparkJobOperator.template_fields,
        "path",
        "source",
        "resolved_target",
    )
    source_required = True

    def __init__(
        self,
        *,
        path: str,
        source: str,
        layout: str = "kinesis",
        record_format: str | None = None,
        lateness_seconds: float = 0.0,
        unended_line_seconds: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.source = source
        self.layout = layout
        self.record_format = record_format
        self.lateness_seconds = lateness_seconds
        self.unended_line_seconds = unended_line_seconds

    def landing(self) -> FilesLanding:
        return FilesLanding(
            path=self.path,
            layout=self.layout,
            record_format=self.record_format,
            lateness_seconds=self.lateness_seconds,
            unended_line_seconds=self.unended_line_seconds,
        )
