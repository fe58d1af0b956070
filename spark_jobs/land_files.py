"""Land NDJSON dump files (one delivered Kinesis record per line) into the raw Delta table.

Each line is a record as the Kinesis API returns it, plus its shard::

    {"ShardId": "shardId-000000000001", "SequenceNumber": "4968...", "PartitionKey": "k",
     "ApproximateArrivalTimestamp": "2026-01-01T00:00:01.250+00:00", "Data": "<base64>"}

A file is landed like a shard: from its checkpoint (the last landed line) to its end, one
Spark task per file. A line that is not such a record is still landed, with its text as the
data and the reason in ``envelope_error``, so that the reassemble step quarantines it.

Resolved timestamp: a dump is a complete log up to its newest record, so each file counts as
a closed shard whose horizon is its newest arrival time.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import fsspec

from airflow_cdc.core.ordering import pad_decimal
from spark_jobs.common import base_parser, start, write_stats
from spark_jobs.landing import ShardTask, land, load_checkpoints, progress_row, record_row

JOB_NAME = "land_files"
JOB_VERSION = "1.0.0"
LINE_WIDTH = 20


def parse_line(line: str) -> tuple[bytes, str | None, dt.datetime | None, str | None]:
    """(data, partition key, arrival time, envelope error) of one dump line."""
    try:
        doc = json.loads(line)
        if not isinstance(doc, dict) or not isinstance(doc.get("Data"), str):
            raise ValueError("a line must be an object with a base64 Data field")
        data = base64.b64decode(doc["Data"], validate=True)
        arrival = _timestamp(doc.get("ApproximateArrivalTimestamp"))
        partition_key = doc.get("PartitionKey")
        return data, str(partition_key) if partition_key is not None else None, arrival, None
    except (ValueError, binascii.Error, TypeError, OverflowError) as err:
        return line.encode("utf-8"), None, None, f"bad dump line: {err}"


def _timestamp(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return dt.datetime.fromtimestamp(value, dt.UTC)
    if isinstance(value, str):
        parsed = dt.datetime.fromisoformat(value)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    raise ValueError(f"ApproximateArrivalTimestamp {value!r} is not a time")


class FileReader:
    """Reads one NDJSON file from the line after its checkpoint to its end."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __call__(self, task: ShardTask) -> Iterator[tuple[Any, ...]]:
        start_after = int(task.after_sequence) if task.after_sequence else 0
        last: int | None = None
        newest: dt.datetime | None = None
        with fsspec.open(task.shard_id, "rt", encoding="utf-8", errors="surrogateescape") as f:
            for number, line in enumerate(f, start=1):
                if number <= start_after:
                    continue
                last = number
                text = line.rstrip("\n")
                if not text.strip():
                    continue
                data, partition_key, arrival, error = parse_line(text)
                if arrival is not None and (newest is None or arrival > newest):
                    newest = arrival
                seq = str(number)
                yield record_row(
                    f"file:{task.shard_id}#{number}",
                    self.source,
                    task.shard_id,
                    seq,
                    pad_decimal(seq, LINE_WIDTH),
                    partition_key,
                    arrival,
                    data,
                    error,
                )
        final = str(last) if last is not None else task.after_sequence
        yield progress_row(
            self.source,
            task.shard_id,
            final,
            pad_decimal(final, LINE_WIDTH) if final else None,
            True,
            newest,
        )


def list_files(path: str) -> list[str]:
    """The NDJSON files under ``path`` (a file, a directory or a glob), sorted."""
    fs, _, paths = fsspec.get_fs_token_paths(path)
    found: list[str] = []
    for candidate in paths:
        if fs.isdir(candidate):
            found.extend(p for p in fs.find(candidate) if p.endswith((".ndjson", ".jsonl")))
        else:
            found.append(candidate)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    prefix = "" if protocol == "file" else f"{protocol}://"
    return sorted(prefix + p for p in found)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = base_parser(__doc__)
    parser.add_argument("--path", required=True, help="NDJSON file, directory or glob")
    parser.add_argument("--source", required=True, help="name of the landed source")
    parser.add_argument("--lateness-seconds", type=float, default=300.0)
    args = parser.parse_args(argv)
    ctx = start(JOB_NAME, JOB_VERSION, args)
    checkpoints, land_seq = load_checkpoints(ctx, args.source)
    tasks = []
    for path in list_files(args.path):
        checkpoint = checkpoints.get(path)
        after = checkpoint.sequence_number if checkpoint else None
        # A file that grew since its last landing is read again from its checkpoint.
        tasks.append(ShardTask(path, after, reopen=True))
    stats = land(
        ctx,
        args.source,
        tasks,
        FileReader(args.source),
        checkpoints,
        land_seq,
        int(args.lateness_seconds * 1_000_000),
    )
    write_stats(args.stats_file, stats)
    return stats


if __name__ == "__main__":
    main()
