"""Land NDJSON files into the raw Delta table, in one of three layouts.

``kinesis``: each line is a record as the Kinesis API returns it, plus its shard::

    {"ShardId": "shardId-000000000001", "SequenceNumber": "4968...", "PartitionKey": "k",
     "ApproximateArrivalTimestamp": "2026-01-01T00:00:01.250+00:00", "Data": "<base64>"}

``kafka``: each line is a Kafka message; ``key`` and ``value`` are the message's text (or a
JSON value, taken as its text), ``null`` for a null key or value::

    {"topic": "orders", "partition": 0, "offset": 42, "timestamp": 1700000000000,
     "key": "[1]", "value": "{\"after\": {...}}"}

``lines``: each line is one message value, as change-feed sinks write files (CockroachDB's
cloud-storage sink, including its ``.RESOLVED`` files; webhook batches
``{"payload": [...], "length": n}`` are split into their messages, each landed as a record).
Records of a ``lines`` file are ordered by file name, then line.

A file is landed like a shard: from its checkpoint (the last landed line) to its end, one
Spark task per file. A line that is not such a record is still landed, with its text as the
data and the reason in ``envelope_error``, so that the reassemble step quarantines it.

Resolved timestamp: a dump is a complete log up to its newest record, so each file counts as
a closed shard whose horizon is its newest arrival time; for formats with in-band markers
(``--format`` ydb, cockroachdb, cdl), the newest marker in the files instead. A marker
resolves its own partition only: where lines name their partition (a ``kafka`` line's
``partition``, a ``kinesis`` line's ``ShardId``), each partition is an open shard whose
horizon is its newest marker in any file, and the source is resolved to the least of them.
"""

from __future__ import annotations

import binascii
import datetime as dt
import functools
import json
import operator
import re
from collections.abc import Iterator
from typing import Any, TypeGuard
from urllib.parse import urlsplit

import fsspec
from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from airflow_cdc.core import jsontext
from airflow_cdc.core.events import Message
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats import IN_BAND_RESOLVED, resolved_marker
from airflow_cdc.core.formats.cockroach import split_batch
from airflow_cdc.core.ordering import pad_decimal
from airflow_cdc.core.types import MAX_MICROS, MIN_MICROS, padded_base64
from airflow_cdc.jobs import LINES_BEHIND
from spark_jobs.arguments import at_least, base_parser, source_name
from spark_jobs.json_columns import WholeJson, base64_bytes
from spark_jobs.landing import (
    Checkpoint,
    ShardTask,
    add_landing_arguments,
    commit,
    land,
    lateness_us,
    load_checkpoints,
    newest_of,
    progress_row,
    record_row,
    run_name,
)
from spark_jobs.ledger import union_all
from spark_jobs.runs import start, write_stats
from spark_jobs.session import session_conf
from spark_jobs.times import from_micros, to_micros
from spark_jobs.warehouse import RECORD, JobContext

JOB_NAME = "land_files"
JOB_VERSION = "1.2.29"
LAYOUTS = ("kinesis", "kafka", "lines")
LINE_WIDTH = 20
SUFFIXES = (".ndjson", ".jsonl", ".json", ".txt", ".RESOLVED")
# What a line's content can make its reading raise: a line nested deeper than Python's
# recursion limit (a few KB of brackets) is such a line, not a failure of the task, which
# every re-run would meet again after the same checkpoint.
LINE_ERRORS = (ValueError, TypeError, OverflowError, RecursionError)


def parse_line(
    line: str,
) -> tuple[bytes, str | None, dt.datetime | None, str | None, str | None]:
    """(data, partition key, arrival time, envelope error, shard) of one dump line: the
    shard is the line's ``ShardId``, where it names one."""
    try:
        # JSON as RFC 8259 has it, as the JVM's reading of the layout takes it.
        doc = jsontext.loads_rfc8259(line)
        if not isinstance(doc, dict) or not isinstance(doc.get("Data"), str):
            raise ValueError("a line must be an object with a base64 Data field")
        data = padded_base64(doc["Data"])
        arrival = _timestamp(doc.get("ApproximateArrivalTimestamp"))
        partition_key = doc.get("PartitionKey")
        shard = doc.get("ShardId")
        return (
            data,
            str(partition_key) if partition_key is not None else None,
            arrival,
            None,
            shard if isinstance(shard, str) else None,
        )
    except (*LINE_ERRORS, binascii.Error) as err:
        # The line as it was read: bytes that are not UTF-8 came in as lone surrogates.
        text = line.encode("utf-8", "surrogateescape")
        return text, None, None, f"bad dump line: {err}", None


def _timestamp(value: Any) -> dt.datetime | None:
    """An arrival time: seconds since the epoch, or ISO 8601 text (UTC without an offset),
    at an instant of the years 1-9999 in UTC (as the JVM's reading of the layout has it: a
    time written with an offset can lie past them)."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return dt.datetime.fromtimestamp(value, dt.UTC)
    if isinstance(value, str):
        parsed = dt.datetime.fromisoformat(value)
        parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
        if not MIN_MICROS <= to_micros(parsed) <= MAX_MICROS:
            raise ValueError(f"{value!r} lies outside the years 1-9999 in UTC")
        return parsed
    raise ValueError(f"ApproximateArrivalTimestamp {value!r} is not a time")


def _is_integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(value: Any) -> str | None:
    text = value if value is None or isinstance(value, str) else jsontext.dump(value)
    if text is not None:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ValueError(f"a field holds a lone UTF-16 surrogate at {err.start}") from err
    return text


def kafka_line(line: str, partitioned: bool = False) -> dict[str, Any]:
    """The fields of one ``kafka`` layout line; its ``partition`` where it is a partition
    number (``partitioned``: where the line's markers resolve it, else ``ValueError``).

    :raises ValueError: when the line is not such a message.
    """
    doc = jsontext.loads(line)
    if not isinstance(doc, dict) or "value" not in doc:
        raise ValueError("a line must be an object with a value field")
    offset = doc.get("offset")
    if offset is not None and (not _is_integer(offset) or not 0 <= offset < 10**LINE_WIDTH):
        raise ValueError(f"offset {offset!r} is not a non-negative integer of at most 20 digits")
    timestamp = doc.get("timestamp")
    topic = doc.get("topic")
    if topic is not None and not isinstance(topic, str):
        raise ValueError(f"topic {topic!r} is not text")
    partition = doc.get("partition")
    if partition is not None and (not _is_integer(partition) or not 0 <= partition < 2**31):
        if partitioned:
            raise ValueError(f"partition {partition!r} is not a partition number")
        partition = None
    return {
        "topic": _text(topic),
        "partition": partition,
        "key": _text(doc.get("key")),
        "value": _text(doc["value"]),
        "offset": offset,
        "arrival": _timestamp(timestamp / 1000 if _is_integer(timestamp) else timestamp),
    }


# How long after its file last changed a last line that partial_line holds waits for its
# writer to end it (the landing jobs' --unended-line-seconds).
UNENDED_LINE_SECONDS = 3600.0


class FileReader:
    """Reads one NDJSON file from the line after its checkpoint to its end."""

    def __init__(
        self,
        source: str,
        layout: str = "kinesis",
        fmt: str | None = None,
        unended_seconds: float = UNENDED_LINE_SECONDS,
    ) -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.source = source
        self.layout = layout
        self.fmt = fmt
        self.unended_seconds = unended_seconds

    def __call__(self, task: ShardTask) -> Iterator[tuple[Any, ...]]:
        start_after = int(task.after_sequence) if task.after_sequence else 0
        last: int | None = None
        latest: dt.datetime | None = None  # the newest arrival read
        marker: int | None = None
        # A kafka-layout line's partition, if it names one: its newest marker (None where
        # its messages came with no marker).
        partitions: dict[str, int | None] = {}
        held = 0  # lines left for a later run (at most the last)
        with fsspec.open(task.shard_id, "rt", encoding="utf-8", errors="surrogateescape") as f:
            for number, line in enumerate(f, start=1):
                if number <= start_after:
                    continue
                text = line.rstrip("\n")
                if partial_line(line) and not abandoned(task.shard_id, self.unended_seconds):
                    held = 1
                    break
                last = number
                if not text.strip():
                    continue
                for row, arrival, message, partition in self._records(task.shard_id, number, text):
                    if arrival is not None and (latest is None or arrival > latest):
                        latest = arrival
                    found = resolved_marker(self.fmt, message) if self.fmt and message else None
                    if partition is not None:
                        partitions[partition] = newest_of(partitions.get(partition), found)
                    else:
                        marker = newest_of(marker, found)
                    yield row
        final = str(last) if last is not None else task.after_sequence
        in_band = self.fmt in IN_BAND_RESOLVED
        horizon = from_micros(marker) if in_band else latest
        if in_band:
            # A marker resolves its own partition only ("no (previously unseen) rows with a
            # lower update timestamp will be emitted on that partition", CockroachDB; YDB and
            # CDL mark each partition alike): each partition is an open shard of the source,
            # whatever files its lines are in. Its horizon, its newest marker in any of them,
            # only moves forward (landing.land), and the source's resolved time is the least
            # over partitions (a closed file then holds nothing back).
            for partition, newest_marker in sorted(partitions.items()):
                yield progress_row(
                    self.source, partition, None, None, False, from_micros(newest_marker)
                )
        yield progress_row(
            self.source,
            task.shard_id,
            final,
            pad_decimal(final, LINE_WIDTH) if final else None,
            True,
            horizon,
            {LINES_BEHIND: held} if held else None,
        )

    def _records(
        self, path: str, number: int, text: str
    ) -> Iterator[tuple[tuple[Any, ...], dt.datetime | None, Message | None, str | None]]:
        """Each record of a line: its raw row, arrival time, message (to read markers in),
        and the partition a kafka-layout line names (:func:`partition_shard`)."""
        line_key = pad_decimal(number, LINE_WIDTH)
        record_id = f"file:{path}#{number}"
        if self.layout == "kinesis":
            data, partition_key, arrival, error, shard = parse_line(text)
            row = record_row(
                record_id,
                self.source,
                path,
                str(number),
                line_key,
                partition_key,
                arrival,
                data,
                error,
            )
            # A record's Data is the message: a marker of an in-band format is read from it,
            # and resolves the Kinesis shard it came from.
            text = data.decode("utf-8", errors="replace")
            message = None if error else Message(text, partition_key, line_key)
            yield row, arrival, message, None if shard is None else partition_shard(None, shard)
            return
        if self.layout == "kafka":
            try:
                doc = kafka_line(text, partitioned=self.fmt in IN_BAND_RESOLVED)
            except LINE_ERRORS as err:
                row = record_row(
                    record_id,
                    None,
                    path,
                    str(number),
                    line_key,
                    None,
                    None,
                    text.encode("utf-8", "surrogateescape"),
                    f"bad Kafka message line: {err}",
                )
                yield row, None, None, None
                return
            offset = doc["offset"]
            position = pad_decimal(offset, LINE_WIDTH) if offset is not None else line_key
            value = doc["value"]
            row = record_row(
                record_id,
                doc["topic"],
                path,
                str(number),
                position,
                doc["key"],
                doc["arrival"],
                None if value is None else value.encode("utf-8", "surrogateescape"),
            )
            message = Message(value, doc["key"], position, doc["topic"])
            partition = doc["partition"]
            shard = None if partition is None else partition_shard(doc["topic"], partition)
            yield row, doc["arrival"], message, shard
            return
        for row, arrival, line_message in self._lines(path, number, text, record_id, line_key):
            yield row, arrival, line_message, None

    def _lines(
        self, path: str, number: int, text: str, record_id: str, line_key: str
    ) -> Iterator[tuple[tuple[Any, ...], dt.datetime | None, Message | None]]:
        try:
            messages = split_batch(jsontext.loads(text))
        except (*LINE_ERRORS, RecordFormatError):
            messages = None  # not a batch (or not JSON): one message, parsed later
        position = f"{path}#{line_key}"
        if messages is None:
            row = record_row(
                record_id,
                None,
                path,
                str(number),
                position,
                None,
                None,
                text.encode("utf-8", "surrogateescape"),
            )
            yield row, None, Message(text, None, position)
            return
        for index, message in enumerate(messages):
            sub = f"{position}.{index:06d}"
            row = record_row(
                f"{record_id}.{index}",
                None,
                path,
                str(number),
                sub,
                None,
                None,
                # A lone surrogate stays in the bytes: parsing quarantines them (invalid_utf8).
                message.encode("utf-8", "surrogatepass"),
            )
            yield row, None, Message(message, None, sub)


# Where a partition's markers are checkpointed: a shard of the source that no file is.
PARTITION_SHARD = "partition:"


def partition_shard(topic: str | None, partition: int | str) -> str:
    """The shard id of a Kafka partition named by kafka-layout lines (or of the Kinesis shard
    kinesis-layout lines name, with no topic)."""
    return f"{PARTITION_SHARD}{topic or ''}/{partition}"


def partial_line(line: str) -> bool:
    """Whether ``line``, as a file reader returned it, may be a line its writer has not ended
    yet: a last line with no line ending that no JSON reader takes (a line cut short is no
    JSON; read leniently, a line refused for what it holds, not for its end, is whole).
    Landed, it would be checkpointed as it is, and its rest never read. A line that is
    JSON lands as the file's last line, ended or not."""
    if line.endswith(("\n", "\r")):
        return False
    try:
        # Nothing but its end refused: control characters in strings, integers of any length.
        json.loads(line.removeprefix("\ufeff"), strict=False, parse_int=len)
    except RecursionError:
        return False  # nested too deep to read: no line cut short, a bad line
    except ValueError:
        return True
    return False


def file_now(path: str) -> tuple[Any, str]:
    """The file system of the file at ``path`` (the path itself, never a pattern) and its
    path there, with what the listing cached of it dropped: its size and time now."""
    fs, found = fsspec.core.url_to_fs(path)
    fs.invalidate_cache(found)
    return fs, found


def abandoned(path: str, seconds: float) -> bool:
    """Whether the file at ``path`` has not changed for ``seconds``: a writer that left its
    last line unended that long has stopped (it died in the middle of the line), and the
    line lands as it is, a bad line that the apply quarantines, rather than waiting for
    good. ``False`` where the file system does not say when the file changed."""
    fs, found = file_now(path)
    try:
        changed = fs.modified(found)
    except (NotImplementedError, OSError):
        return False
    if changed.tzinfo is None:  # a file system that gives naive times gives them in UTC
        changed = changed.replace(tzinfo=dt.UTC)
    return (dt.datetime.now(dt.UTC) - changed).total_seconds() >= seconds


def _lines_at(numbers: dict[str, int]) -> Column:
    """The numbered lines at ``numbers`` (a line number per file)."""
    return functools.reduce(
        operator.or_,
        ((F.col("shard_id") == s) & (F.col("_number") == n) for s, n in numbers.items()),
    )


def ended(path: str, size: int) -> bool:
    """Whether the file at ``path`` ends a line at ``size`` bytes and has not grown past them:
    then the read that listed it at that size read its last line whole. (A reader reads on
    past the size it listed to end the line it is in, so a file that grew may have been read
    to a line cut short anywhere.)"""
    fs, found = file_now(path)
    if size <= 0 or fs.size(found) != size:
        return False
    with fs.open(found, "rb") as f:
        f.seek(size - 1)
        return f.read(1) in (b"\n", b"\r")


def list_files(path: str) -> list[str]:
    """The NDJSON files under ``path`` (a file, a directory or a glob), sorted."""
    fs, _, paths = fsspec.get_fs_token_paths(path)
    found: list[str] = []
    for candidate in paths:
        if fs.isdir(candidate):
            found.extend(p for p in fs.find(candidate) if p.endswith(SUFFIXES))
        else:
            found.append(candidate)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    # The caller's own scheme (s3a://, not the s3:// fsspec names it), which Spark reads.
    scheme = urlsplit(path).scheme if "://" in path else protocol
    prefix = "" if protocol == "file" else f"{scheme}://"
    return sorted(prefix + p for p in found)


# Conf that makes a file one Spark partition, read by one line reader from its start.
WHOLE_FILES = {
    "spark.sql.files.maxPartitionBytes": str(2**62),
    "spark.sql.files.minPartitionNum": "1",
}
# Columns of numbered dump lines that are not raw table columns.
LINE_COLUMNS = ("_number", "_block", "_blank", "_json", "_size")


def numbered_lines(ctx: JobContext, tasks: list[ShardTask]) -> DataFrame:
    """Every line of the tasks' files after their checkpoints: ``shard_id``, ``number``
    (1-based; blank lines count, ``\\n``, ``\\r\\n`` and ``\\r`` end a line, a final line
    ending adds none), ``block`` (where the file's Spark partition starts) and ``line``.

    Each file must be read as one partition (run the plan under :data:`WHOLE_FILES`): a
    line's number is then its index in the partition. :func:`check_numbering` verifies it.
    """
    reads = [
        ctx.spark.read.text(literal_path(task.shard_id))
        .select(
            F.lit(task.shard_id).alias("shard_id"),
            (F.monotonically_increasing_id() + 1).alias("number"),
            F.col("_metadata.file_block_start").alias("block"),
            F.col("_metadata.file_size").alias("size"),
            F.col("value").alias("line"),
        )
        .where(F.col("number") > int(task.after_sequence or 0))
        for task in tasks
    ]
    return union_all(reads)


def check_numbering(summary: dict[str, Row], tasks: list[ShardTask]) -> None:
    """Fail, before anything commits, unless every file was read whole from its first line
    (its lines after the checkpoint numbered without a gap)."""
    for task in tasks:
        row = summary.get(task.shard_id)
        if row is None:
            continue
        after = int(task.after_sequence or 0)
        if row["blocks"] != 0 or row["lines"] != row["last"] - after:
            raise RuntimeError(
                f"{task.shard_id} was not read as one partition from its first line"
                f" ({row['lines']} lines after line {after}, the last numbered {row['last']});"
                " nothing was landed"
            )


# What Hadoop expands in a path it is given to read: its glob characters, and the escape.
_GLOB_CHARACTERS = re.compile(r"([{}\[\]*?\\])")


def literal_path(path: str) -> str:
    """A listed file's path as Spark reads it literally: a reader expands glob characters in
    a path it is given, so a file named ``part[1].ndjson`` was no file to it, and one named
    ``a*.ndjson`` was every file it matched (each landing its lines as the one shard)."""
    return _GLOB_CHARACTERS.sub(r"\\\1", path)


def kinesis_dump_records(ctx: JobContext, source: str, tasks: list[ShardTask]) -> DataFrame:
    """The records of Kinesis-layout dump files after their checkpoints, read and decoded in
    the JVM (the rules of :func:`parse_line`): raw table rows plus :data:`LINE_COLUMNS`, one
    row per line (blank ones are marked ``_blank`` and land nothing)."""
    numbered = numbered_lines(ctx, tasks)
    # Each part once, in its own projection: Spark would otherwise copy the extraction of the
    # (large) Data text into every rule and output that reads it. Each field is read straight
    # from the parsed line, Data as bytes then text: the document or Data taken out as a
    # VARIANT first would copy the Data text again.
    whole = WholeJson()
    lines = F.col("_lines")
    fields = numbered.select("*", whole.wrapped(F.col("line")).alias("_lines"))
    fields = fields.select("*", whole.whole(lines).alias("_whole"))
    fields = fields.select(
        "*",
        *(
            F.when(F.col("_whole"), column).alias(name)
            for name, column in (
                ("_object", whole.is_object_at(lines)),
                # Only a JSON string casts to bytes (JSON has no binary values).
                ("_data_bytes", whole.at(lines, "$.Data", "binary")),
                ("_arrival", whole.at(lines, "$.ApproximateArrivalTimestamp", "variant")),
                ("_partition", whole.at(lines, "$.PartitionKey", "variant")),
            )
        ),
    )
    fields = fields.select(
        "*",
        F.col("_data_bytes").cast("string").alias("_data_text"),
        F.schema_of_variant("_arrival").alias("_arrival_kind"),
        F.schema_of_variant("_partition").alias("_partition_kind"),
    )
    fields = fields.select("*", base64_bytes(F.col("_data_text")).alias("_data"))
    data_text, arrival, arrival_kind = (
        F.col("_data_text"),
        F.col("_arrival"),
        F.col("_arrival_kind"),
    )
    arrival_text = F.try_variant_get(arrival, "$", "string")
    number_seconds = F.when(
        arrival_kind.rlike("^(TINYINT|SMALLINT|INT|BIGINT|DECIMAL.*|DOUBLE)$"),
        F.try_variant_get(arrival, "$", "decimal(38,6)"),
    )
    micros = F.coalesce(
        (number_seconds * 1_000_000).try_cast("bigint"),
        F.unix_micros(F.when(arrival_kind == "STRING", F.try_to_timestamp(arrival_text))),
    )
    # A time the calendar holds (years 1-9999), as Python's datetime does.
    arrival_ts = F.when(micros.between(MIN_MICROS, MAX_MICROS), F.timestamp_micros(micros))
    fields = fields.select("*", arrival_ts.alias("_arrival_ts"))
    error = (
        F.when(
            ~F.coalesce(F.col("_object"), F.lit(False)) | data_text.isNull(),
            F.lit("bad dump line: a line must be an object with a base64 Data field"),
        )
        .when(F.col("_data").isNull(), F.lit("bad dump line: Data is not Base64"))
        .when(
            arrival.isNotNull() & (arrival_kind != "VOID") & F.col("_arrival_ts").isNull(),
            F.lit("bad dump line: ApproximateArrivalTimestamp is not a time"),
        )
    )
    fields = fields.select("*", error.alias("_error"))
    good = F.col("_error").isNull()
    partition, partition_kind = F.col("_partition"), F.col("_partition_kind")
    return fields.select(
        F.concat(F.lit("file:"), "shard_id", F.lit("#"), F.col("number").cast("string")).alias(
            "record_id"
        ),
        F.lit(source).alias("source"),
        F.lit(source).alias("stream"),
        "shard_id",
        F.col("number").cast("string").alias("sequence_number"),
        F.lpad(F.col("number").cast("string"), LINE_WIDTH, "0").alias("seq_key"),
        F.when(
            good & (partition_kind != "VOID"),
            F.when(
                partition_kind == "STRING", F.try_variant_get(partition, "$", "string")
            ).otherwise(F.to_json(partition)),
        ).alias("partition_key"),
        F.when(good, F.col("_arrival_ts")).alias("arrival_ts"),
        F.when(good, F.col("_data")).otherwise(F.encode("line", "utf-8")).alias("data"),
        F.col("_error").alias("envelope_error"),
        F.lit(RECORD).alias("kind"),
        F.lit(None).cast("boolean").alias("shard_closed"),
        F.lit(None).cast("timestamp").alias("horizon_ts"),
        F.col("number").alias("_number"),
        F.col("block").alias("_block"),
        (~F.col("line").rlike(r"\S")).alias("_blank"),
        F.coalesce(F.col("_whole"), F.lit(False)).alias("_json"),
        F.col("size").alias("_size"),
    )


def land_kinesis_dumps(
    ctx: JobContext,
    source: str,
    tasks: list[ShardTask],
    checkpoints: dict[str, Checkpoint],
    land_seq: int,
    lateness: int,
    unended_seconds: float = UNENDED_LINE_SECONDS,
) -> dict[str, Any]:
    """Land Kinesis-layout dumps without Python per record: read, decode and commit in the
    JVM, with one progress row per file (its last line, its newest arrival)."""
    run = run_name(ctx)
    if not tasks:
        return commit(ctx, source, tasks, None, dict(checkpoints), land_seq, lateness, run)
    with session_conf(ctx.spark, WHOLE_FILES):
        lines = kinesis_dump_records(ctx, source, tasks).localCheckpoint()
    summary = {
        r["shard_id"]: r
        for r in lines.groupBy("shard_id")
        .agg(
            F.max("_number").alias("last"),
            F.count(F.lit(1)).alias("lines"),
            F.max("_block").alias("blocks"),
            F.count_if(~F.col("_blank")).alias("records"),
            # As microseconds: a collected TIMESTAMP is naive in the driver's local zone.
            F.unix_micros(F.max(F.when(~F.col("_blank"), F.col("arrival_ts")))).alias("newest"),
            # The last line: whether it is a JSON document, and a record; the file's size
            # as the read listed it.
            F.max_by("_json", "_number").alias("last_json"),
            F.max_by(~F.col("_blank"), "_number").alias("last_record"),
            F.max("_size").alias("size"),
        )
        .collect()
    }
    check_numbering(summary, tasks)
    counted = {shard: int(row["records"]) for shard, row in summary.items()}
    # A last line the JVM read no JSON from, in a file that does not end it: the reader's
    # own rule (partial_line) decides on its text.
    unended = {
        shard: row["last"]
        for shard, row in summary.items()
        if not row["last_json"] and not ended(shard, row["size"])
    }
    held: dict[str, int] = {}
    if unended:
        for line in lines.where(_lines_at(unended)).select("shard_id", "data").collect():
            text = bytes(line["data"]).decode("utf-8", errors="replace")
            if partial_line(text) and not abandoned(line["shard_id"], unended_seconds):
                held[line["shard_id"]] = unended[line["shard_id"]]
                counted[line["shard_id"]] -= int(summary[line["shard_id"]]["last_record"])
    records = lines.where(~F.col("_blank"))
    if held:
        records = records.where(~_lines_at(held))
    records = records.drop(*LINE_COLUMNS)
    progress = dict(checkpoints)
    for task in tasks:
        found = summary.get(task.shard_id)
        # A file without new lines (or that shrank) keeps its checkpoint.
        final = str(found["last"]) if found is not None else task.after_sequence
        if task.shard_id in held:
            last = held[task.shard_id] - 1
            final = str(last) if last else task.after_sequence
        horizon = found["newest"] if found is not None else None
        before = checkpoints.get(task.shard_id)
        if before is not None:  # lines appended with older arrivals take nothing back
            horizon = newest_of(before.horizon_us, horizon)
        progress[task.shard_id] = Checkpoint(task.shard_id, final, True, horizon)
    staged = records.select(
        "*",
        F.lit(land_seq).cast("bigint").alias("land_seq"),
        F.lit(ctx.batch_id).alias("batch_id"),
        F.lit(run).alias("land_run"),
    )
    tips = {shard: {LINES_BEHIND: 1} for shard in held}
    stats = commit(
        ctx, source, tasks, staged, progress, land_seq, lateness, run, tips, counted=counted
    )
    stats.update(waves=1, shards_pending=[])
    return stats


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = base_parser(__doc__)
    parser.add_argument("--path", required=True, help="NDJSON file, directory or glob")
    parser.add_argument(
        "--source", required=True, type=source_name, help="name of the landed source"
    )
    add_landing_arguments(parser)
    parser.add_argument("--layout", choices=LAYOUTS, default="kinesis")
    parser.add_argument(
        "--format", help="the records' format, read for in-band resolved timestamps"
    )
    parser.add_argument(
        "--unended-line-seconds",
        type=at_least(0.0, "seconds"),
        default=UNENDED_LINE_SECONDS,
        help="a file's last line with no line ending that is no JSON waits for its writer"
        " to end it; once the file has not changed for this long, it lands as it is (a bad"
        " line, quarantined)",
    )
    args = parser.parse_args(argv)
    ctx = start(JOB_NAME, JOB_VERSION, args)
    checkpoints, land_seq = load_checkpoints(ctx, args.source)
    tasks = []
    for path in list_files(args.path):
        checkpoint = checkpoints.get(path)
        after = checkpoint.sequence_number if checkpoint else None
        # A file that grew since its last landing is read again from its checkpoint.
        tasks.append(ShardTask(path, after, reopen=True))
    lateness = lateness_us(args.format, args.lateness_seconds)
    if args.layout == "kinesis" and args.format not in IN_BAND_RESOLVED:
        stats = land_kinesis_dumps(
            ctx, args.source, tasks, checkpoints, land_seq, lateness, args.unended_line_seconds
        )
    else:
        reader = FileReader(args.source, args.layout, args.format, args.unended_line_seconds)
        stats = land(
            ctx,
            args.source,
            tasks,
            reader,
            checkpoints,
            land_seq,
            lateness,
            args.stale_staging_seconds,
        )
    write_stats(args.stats_file, stats)
    return stats


if __name__ == "__main__":
    main()
