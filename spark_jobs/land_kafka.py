"""Land every partition of Kafka topics into the raw Delta table, exactly once.

The driver takes each partition's high watermark when the run starts; one Spark task per
partition reads from the offset after its checkpoint up to that watermark with a Kafka
consumer (no consumer group: the checkpoints are the landed progress rows, committed in the
same Delta commit as the records). A record keeps the message's key, value (``null`` for a
null value), topic, partition, offset and timestamp. Offsets after a checkpoint that the
topic's retention removed before the run reached them, before it planned or while it read,
land as one record per gap (:func:`expired_row`) that the apply quarantines as
``expired_before_landing``.

Resolved timestamp: for formats with in-band markers (``--format`` ydb, cockroachdb, cdl) a
partition's horizon is the newest marker landed from it, and the resolved timestamp is the
minimum over partitions ("the resolved timestamp being the minimum over partitions"). For
other formats a partition read to its watermark has the run's start time as horizon, minus
``--lateness-seconds``.

Client settings (``security.protocol``, SASL credentials...) reach the driver in its
environment (``AIRFLOW_CDC_KAFKA_CONFIG``, never a command line); the partition readers carry
them to the executors inside the job's tasks, so they work on a cluster whose executors share
nothing with the driver.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from airflow_cdc.core.events import EXPIRED_PREFIX, Message
from airflow_cdc.core.formats import IN_BAND_RESOLVED, MESSAGE_KEYED, resolved_marker
from airflow_cdc.core.ordering import pad_decimal
from airflow_cdc.core.types import MAX_MICROS
from airflow_cdc.jobs import KAFKA_CONFIG_ENV, OFFSETS_BEHIND
from spark_jobs.arguments import base_parser, landed_source, source_name
from spark_jobs.landing import (
    LOG_ID,
    Checkpoint,
    ShardTask,
    add_landing_arguments,
    land,
    lateness_us,
    load_checkpoints,
    progress_row,
    record_row,
)
from spark_jobs.runs import start, write_stats
from spark_jobs.times import from_micros

log = logging.getLogger("airflow_cdc.jobs")

JOB_NAME = "land_kafka"
JOB_VERSION = "1.1.15"
OFFSET_WIDTH = 20


def client_config() -> dict[str, Any]:
    """The client settings (security protocol, SASL...) the task gave the driver in its
    environment (``AIRFLOW_CDC_KAFKA_CONFIG``). The readers carry them to the executors inside
    the job's tasks: an executor's environment is not the driver's."""
    config = json.loads(os.environ.get(KAFKA_CONFIG_ENV) or "{}")
    if not isinstance(config, dict):
        raise ValueError(f"{KAFKA_CONFIG_ENV} must hold a JSON object of client settings")
    return config


def consumer(bootstrap: str, config: dict[str, Any]) -> Any:
    """A consumer without group offsets, with the client settings ``config``."""
    from confluent_kafka import Consumer

    return Consumer(
        {
            "group.id": "airflow-cdc-landing",  # never committed to: a client's own may do
            **config,
            # What landing's reading relies on, whatever the client settings say.
            "bootstrap.servers": bootstrap,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # An offset the log no longer has is an error, never a silent jump (see
            # KafkaPartitionReader: the skipped offsets land as one quarantined record).
            "auto.offset.reset": "error",
        }
    )


def shard_id(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


@dataclass
class _Reading:
    """How far a partition reader got: the last offset landed (or passed as expired), the
    newest in-band marker, and whether it reached the end it planned."""

    last: int | None
    caught_up: bool
    marker: int | None = None


class KafkaPartitionReader:
    """Reads one partition from after its checkpoint up to the watermark taken at planning.

    :param watermarks: (low, high) offsets per shard id, taken when the run started.
    :param topic_ids: Each topic's id, kept with its partitions' checkpoints.
    :param max_records: Upper bound on records read from one partition in one run.
    :param config: Client settings (:func:`client_config`); they may hold secrets, so the
        reader never prints them.
    """

    def __init__(
        self,
        bootstrap: str,
        config: dict[str, Any],
        source: str,
        watermarks: dict[str, tuple[int, int]],
        planned_at: dt.datetime,
        fmt: str | None,
        max_records: int,
        timeout: float = 60.0,
        topic_ids: dict[str, str] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self._config = dict(config)
        self.source = source
        self.watermarks = watermarks
        self.topic_ids = topic_ids or {}
        self.planned_at = planned_at
        self.fmt = fmt
        self.max_records = max_records
        self.timeout = timeout

    def __call__(self, task: ShardTask) -> Iterator[tuple[Any, ...]]:
        topic = task.shard_id.rpartition("/")[0]
        low, high = self.watermarks[task.shard_id]
        after = int(task.after_sequence) if task.after_sequence is not None else None
        first = first_offset(task.shard_id, after, low, high)
        reading = _Reading(last=after, caught_up=first >= high)
        lost = expired_offsets(after, low)
        if lost is not None:
            # Retention removed them before they were landed: one landed record stands for
            # them (quarantined: the changes are lost), and the checkpoint moves past them.
            log.warning("%s: offsets %d to %d expired before landing", task.shard_id, *lost)
            yield expired_row(self.source, task.shard_id, topic, *lost)
            reading.last = lost[1]
        stop = min(high, first + self.max_records)
        if first < stop:
            yield from self._read(task.shard_id, first, stop, high, reading)
        if self.fmt in IN_BAND_RESOLVED:
            horizon = from_micros(reading.marker)
        else:
            horizon = self.planned_at if reading.caught_up else None
        last = reading.last
        final = None if last is None else str(last)
        # (the checkpoint, when nothing was read, may lie below the partition's start)
        following = first if last is None else max(first, last + 1)
        behind = 0 if reading.caught_up else max(0, high - following)
        yield progress_row(
            self.source,
            task.shard_id,
            final,
            None if final is None else pad_decimal(final, OFFSET_WIDTH),
            False,
            horizon,
            {OFFSETS_BEHIND: behind, LOG_ID: self.topic_ids.get(topic)},
        )

    def _read(
        self, shard: str, first: int, stop: int, high: int, reading: _Reading
    ) -> Iterator[tuple[Any, ...]]:
        """The records at offsets ``first`` to ``stop`` - 1 of the partition ``shard``
        (``high``: its end at planning), noting in ``reading`` how far it got."""
        from confluent_kafka import KafkaError, TopicPartition

        topic, _, number = shard.rpartition("/")
        client = consumer(self.bootstrap, self._config)
        try:
            client.assign([TopicPartition(topic, int(number), first)])
            deadline = time.monotonic() + self.timeout
            while True:
                message = client.poll(1.0)
                if message is None:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{shard}: nothing after offset {reading.last}")
                    continue
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    # The end: offsets up to the watermark may be transaction markers or
                    # compacted away, and are never delivered.
                    reading.caught_up = True
                    return
                if error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET:
                    # Retention removed the next offsets since the run planned.
                    start = first if reading.last is None else reading.last + 1
                    low = self._log_start(client, topic, int(number), start, error)
                    yield from self._expired_since(shard, start, low, reading)
                    if low >= stop:
                        reading.caught_up = low >= high
                        return
                    client.assign([TopicPartition(topic, int(number), low)])
                    deadline = time.monotonic() + self.timeout
                    continue
                if error is not None:
                    raise RuntimeError(f"{shard}: {error}")
                deadline = time.monotonic() + self.timeout
                offset = message.offset()
                if offset >= stop:
                    reading.caught_up = stop == high
                    return
                row, found = self._record(shard, topic, message)
                if found is not None and (reading.marker is None or found > reading.marker):
                    reading.marker = found
                reading.last = offset
                yield row
                if offset >= stop - 1:
                    reading.caught_up = stop == high
                    return
        finally:
            client.close()

    def _expired_since(
        self, shard: str, start: int, low: int, reading: _Reading
    ) -> Iterator[tuple[Any, ...]]:
        """The record for offsets ``start`` to ``low`` - 1, which retention removed while the
        run read (``low``: where the log now begins). A partition landed for the first time
        and not yet read has none: it begins where its log does, as at planning."""
        if reading.last is not None:
            log.warning("%s: offsets %d to %d expired while landing", shard, start, low - 1)
            yield expired_row(self.source, shard, shard.rpartition("/")[0], start, low - 1)
        reading.last = low - 1

    def _log_start(self, client: Any, topic: str, number: int, position: int, error: Any) -> int:
        """Where the partition's log begins now that reading from ``position`` failed as out
        of range; an error when the log still has ``position`` (the range was its end)."""
        from confluent_kafka import TopicPartition

        low, _ = client.get_watermark_offsets(
            TopicPartition(topic, number), timeout=self.timeout, cached=False
        )
        if low <= position:
            raise RuntimeError(f"{topic}/{number}: offset {position} is out of range: {error}")
        return int(low)

    def _record(self, shard: str, topic: str, message: Any) -> tuple[tuple[Any, ...], int | None]:
        offset = message.offset()
        key = message.key()
        value = message.value()
        key_text, key_error = message_key(key)
        if self.fmt is not None and self.fmt not in MESSAGE_KEYED:
            key_error = None  # a format that never reads the key
        _, millis = message.timestamp()
        arrival, time_error = arrival_time(millis)
        position = pad_decimal(offset, OFFSET_WIDTH)
        row = record_row(
            f"kafka:{shard}@{offset}",
            topic,
            shard,
            str(offset),
            position,
            key_text,
            arrival,
            value,
            key_error or time_error,
        )
        found = None
        if self.fmt in IN_BAND_RESOLVED and value is not None:
            text = value.decode("utf-8", errors="replace")
            found = resolved_marker(self.fmt, Message(text, key_text, position, topic))
        return row, found


def arrival_time(millis: int | None) -> tuple[dt.datetime | None, str | None]:
    """A message's timestamp as its arrival time (none for Kafka's "no timestamp", -1), and
    the envelope error of one past the year 9999 in UTC, which no time here can hold (a
    producer sets it; the ``kafka`` dump layout refuses such a line alike)."""
    if millis is None or millis <= 0:
        return None, None
    if millis * 1000 > MAX_MICROS:
        return None, f"the message timestamp {millis} lies past the year 9999 in UTC"
    return from_micros(millis * 1000), None


def first_offset(shard: str, after: int | None, low: int, high: int) -> int:
    """The offset a partition is read from: the one after its checkpoint ``after``, within
    its log's offsets ``low`` to ``high`` (the watermarks)."""
    if after is not None and after >= high:
        # Landed offsets the log no longer has: read on from its end, the offsets a new log
        # reuses (up to the checkpoint) would never land, and their record ids are the
        # landed ones'.
        raise RuntimeError(
            f"{shard}: the checkpoint (offset {after}) is past the partition's end (offset"
            f" {high}): the topic was deleted and created again, or its log truncated; land"
            " it as a new source (--source) to read it from its start"
        )
    return low if after is None else max(after + 1, low)


def expired_offsets(after: int | None, low: int) -> tuple[int, int] | None:
    """The first and last offsets after the checkpoint ``after`` that the log, which now
    begins at ``low``, no longer has; ``None`` if it has them all. (A partition landed for
    the first time has no such offsets: landing begins where its log does.)"""
    if after is None or after + 1 >= low:
        return None
    return after + 1, low - 1


def expired_row(source: str, shard: str, topic: str, first: int, last: int) -> tuple[Any, ...]:
    """The landed record that stands for the offsets ``first`` to ``last`` of a partition,
    which expired before they were landed: no value, and an envelope error that quarantines
    it as ``expired_before_landing`` (the ledger and the accounting count it, and the
    quarantine says which changes were lost)."""
    count = last - first + 1
    return record_row(
        f"kafka:{shard}@{first}-{last}",
        topic,
        shard,
        str(first),
        pad_decimal(first, OFFSET_WIDTH),
        None,
        None,
        None,
        f"{EXPIRED_PREFIX}offsets {first} to {last} of partition {shard} ({count} messages)"
        f" expired from the topic (its retention) before source {source!r} landed them;"
        " their changes are not in the tables",
    )


def message_key(key: bytes | None) -> tuple[str | None, str | None]:
    """A message key's text, and the envelope error of one that is not UTF-8: its text then
    holds U+FFFD in place of the bytes, and two keys could name one row (the record is
    quarantined as ``bad_envelope``, as a value that is not UTF-8 is, with the key's
    replaced text)."""
    if key is None:
        return None, None
    try:
        return key.decode("utf-8"), None
    except UnicodeDecodeError as err:
        return key.decode("utf-8", errors="replace"), f"the message key is not UTF-8: {err}"


def plan(bootstrap: str, config: dict[str, Any], topics: list[str]) -> dict[str, tuple[int, int]]:
    """(low, high) watermark offsets of every partition of ``topics``."""
    from confluent_kafka import TopicPartition

    client = consumer(bootstrap, config)
    try:
        metadata = client.list_topics(timeout=30)
        marks: dict[str, tuple[int, int]] = {}
        for topic in topics:
            described = metadata.topics.get(topic)
            if described is None or described.error is not None:
                raise ValueError(f"topic {topic!r} does not exist on {bootstrap}")
            for number in sorted(described.partitions):
                low, high = client.get_watermark_offsets(
                    TopicPartition(topic, number), timeout=30, cached=False
                )
                marks[shard_id(topic, number)] = (low, high)
        return marks
    finally:
        client.close()


def topic_ids(bootstrap: str, config: dict[str, Any], topics: list[str]) -> dict[str, str]:
    """Each topic's id (the broker gives a topic a new one when it is created again), where
    the broker gives one."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    # The admin client takes the connection and security settings; consumer ones it ignores.
    admin = AdminClient({**config, "bootstrap.servers": bootstrap})
    described = admin.describe_topics(TopicCollection(list(dict.fromkeys(topics))))
    ids = {}
    for topic, future in described.items():
        found = future.result(30).topic_id
        # A broker without topic ids (before Kafka 2.8, some compatible services) gives
        # the zero id: no id, which a later real one does not contradict.
        if found is not None and (
            found.get_most_significant_bits(),
            found.get_least_significant_bits(),
        ) != (0, 0):
            ids[topic] = str(found)
    return ids


def check_logs(checkpoints: dict[str, Checkpoint], ids: dict[str, str]) -> None:
    """Refuse to read on from a checkpoint of a topic that was deleted and created again
    since (its id changed): the new log reuses the offsets, whose record ids were landed
    already. A checkpoint that names no id (landed before ids were kept) takes the current
    one."""
    for shard, checkpoint in sorted(checkpoints.items()):
        topic = shard.rpartition("/")[0]
        if checkpoint.log_id is not None and topic in ids and checkpoint.log_id != ids[topic]:
            raise RuntimeError(
                f"{shard}: topic {topic!r} was deleted and created again since it was last"
                f" landed (its id was {checkpoint.log_id}, now {ids[topic]}): its offsets"
                " start again, and those already landed would be taken for duplicates; land"
                " it as a new source (--source) to read it from its start"
            )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = base_parser(__doc__)
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", action="append", required=True, help="repeat for several")
    parser.add_argument(
        "--source", type=source_name, help="name of the landed source (default: the first topic)"
    )
    parser.add_argument("--format", help="the records' format, read for in-band markers")
    add_landing_arguments(parser)
    parser.add_argument("--max-records-per-partition", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    source = landed_source(parser, args.source, args.topic[0])
    ctx = start(JOB_NAME, JOB_VERSION, args)
    checkpoints, land_seq = load_checkpoints(ctx, source)
    planned_at = dt.datetime.now(dt.UTC)
    config = client_config()
    watermarks = plan(args.bootstrap_servers, config, args.topic)
    ids = topic_ids(args.bootstrap_servers, config, args.topic)
    check_logs(checkpoints, ids)
    # A partition of a topic no longer landed holds the resolved time back no more (it would
    # for ever); its checkpoint stays, for the topic to be read on from it if landed again.
    checkpoints = {
        s: c if s in watermarks else replace(c, closed=True) for s, c in checkpoints.items()
    }
    tasks = [
        ShardTask(s, checkpoints[s].sequence_number if s in checkpoints else None, reopen=True)
        for s in watermarks
    ]
    reader = KafkaPartitionReader(
        args.bootstrap_servers,
        config,
        source,
        watermarks,
        planned_at,
        args.format,
        args.max_records_per_partition,
        topic_ids=ids,
    )
    lateness = lateness_us(args.format, args.lateness_seconds)
    stats = land(
        ctx, source, tasks, reader, checkpoints, land_seq, lateness, args.stale_staging_seconds
    )
    write_stats(args.stats_file, stats)
    return stats


if __name__ == "__main__":
    main()
