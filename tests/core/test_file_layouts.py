"""Reading dump files in each layout, without Spark: the rows a landing task yields."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from spark_jobs.land_files import FileReader, list_files
from spark_jobs.landing import ShardTask
from spark_jobs.warehouse import RAW_SCHEMA

FIELDS = [f.name for f in RAW_SCHEMA.fields if f.name not in ("land_seq", "batch_id", "land_run")]


def read(path: Path, layout: str, fmt: str | None) -> list[dict]:
    rows = FileReader("src", layout, fmt)(ShardTask(str(path), None))
    # Reader rows stop before land_seq, batch_id and land_run, and lack the source column.
    return [dict(zip([FIELDS[0], *FIELDS[2:]], row, strict=True)) for row in rows]


def kinesis_line(value: str, **fields: Any) -> str:
    """A kinesis-layout line whose record's Data is ``value``, with ``fields`` beside it."""
    return json.dumps({**fields, "Data": base64.b64encode(value.encode()).decode()})


def test_cockroach_cloud_storage_directory_with_resolved_files(tmp_path: Path) -> None:
    data = tmp_path / "202601010000000000000000000-5c5ab5d1-1-2-00000000-items-1.ndjson"
    data.write_text(
        json.dumps({"after": {"id": 1}, "key": [1], "updated": "1767225600000000000.0000000000"})
        + "\n"
        + json.dumps(
            {
                "payload": [
                    {"after": {"id": 2}, "key": [2], "topic": "items"},
                    {"after": None, "key": [1], "topic": "items"},
                ],
                "length": 2,
            }
        )
        + "\n"
    )
    resolved = tmp_path / "202601010005000000000000000.RESOLVED"
    resolved.write_text(json.dumps({"resolved": "1767225900000000000.0000000000"}) + "\n")
    assert list_files(str(tmp_path)) == [str(data), str(resolved)]

    rows = read(data, "lines", "cockroachdb")
    records = [r for r in rows if r["kind"] == "record"]
    assert [r["record_id"].rsplit("#", 1)[1] for r in records] == ["1", "2.0", "2.1"]
    assert json.loads(bytes(records[2]["data"]))["after"] is None
    # Ordered by file, then line, then place in the batch.
    assert [r["seq_key"] for r in records] == sorted(r["seq_key"] for r in records)
    [progress] = [r for r in rows if r["kind"] == "progress"]
    assert progress["horizon_ts"] is None and progress["shard_closed"]  # no marker in it

    [marker_progress] = [
        r for r in read(resolved, "lines", "cockroachdb") if r["kind"] == "progress"
    ]
    assert marker_progress["horizon_ts"].isoformat() == "2026-01-01T00:05:00+00:00"


def test_kafka_dump_lines_keep_key_topic_offset_and_null_values(tmp_path: Path) -> None:
    dump = tmp_path / "dump.ndjson"
    lines = [
        {"topic": "t", "partition": 0, "offset": 7, "key": "[1]", "value": {"after": None}},
        {"topic": "t", "partition": 0, "offset": 8, "key": "[1]", "value": None},
        {"topic": "t", "partition": 0, "offset": -1, "value": "x"},
        "not json",
    ]
    text = [line if isinstance(line, str) else json.dumps(line) for line in lines]
    dump.write_text("\n".join(text) + "\n")
    records = [r for r in read(dump, "kafka", None) if r["kind"] == "record"]
    first, tombstone, bad_offset, garbage = records
    assert (first["stream"], first["partition_key"], first["seq_key"]) == (
        "t",
        "[1]",
        "00000000000000000007",
    )
    assert json.loads(bytes(first["data"])) == {"after": None}
    assert tombstone["data"] is None and tombstone["envelope_error"] is None
    assert "offset" in bad_offset["envelope_error"]
    assert "bad Kafka message line" in garbage["envelope_error"]


def test_an_offset_that_is_no_position_is_a_bad_line_not_a_failed_read(tmp_path: Path) -> None:
    # A boolean is no integer, and a position holds at most 20 digits: the reader raised on
    # both (and so failed the landing on every retry) before it refused them as bad lines.
    dump = tmp_path / "part-0.ndjson"
    offsets = [True, 10**20, 10**20 - 1]
    dump.write_text("".join(json.dumps({"offset": o, "value": "v"}) + "\n" for o in offsets))
    boolean, wide, widest = [r for r in read(dump, "kafka", None) if r["kind"] == "record"]
    for bad in (boolean, wide):
        assert "bad Kafka message line: offset" in bad["envelope_error"]
        assert bad["data"] == bytearray(json.dumps(json.loads(bad["data"])).encode())
    assert widest["envelope_error"] is None and widest["seq_key"] == "9" * 20


def test_a_partition_that_is_no_partition_number_is_a_bad_line(tmp_path: Path) -> None:
    # A line's partition names the shard its markers resolve (cockroachdb, ydb, cdl).
    dump = tmp_path / "part-0.ndjson"
    partitions = [True, -1, 2**31, "0", 2**31 - 1]
    dump.write_text(
        "".join(json.dumps({"partition": p, "offset": 1, "value": "v"}) + "\n" for p in partitions)
    )
    rows = [r for r in read(dump, "kafka", "cockroachdb") if r["kind"] == "record"]
    errors = [r["envelope_error"] for r in rows]
    assert all(e.startswith("bad Kafka message line: partition") for e in errors[:-1])
    assert errors[-1] is None


def test_a_kafka_timestamp_that_is_a_boolean_is_a_bad_line(tmp_path: Path) -> None:
    dump = tmp_path / "part-0.ndjson"
    dump.write_text(json.dumps({"offset": 1, "timestamp": True, "value": "v"}) + "\n")
    (bad,) = [r for r in read(dump, "kafka", None) if r["kind"] == "record"]
    assert "is not a time" in bad["envelope_error"] and bad["arrival_ts"] is None


def test_a_bad_kinesis_line_that_is_not_utf8_lands_as_its_bytes(tmp_path: Path) -> None:
    # The reader refused the line, then raised writing it back as UTF-8 (the landing failed
    # on every retry).
    line = b'{"Data": 5, "PartitionKey": "\xff\xfe"}'
    dump = tmp_path / "shard-0.ndjson"
    dump.write_bytes(line + b"\n")
    (bad,) = [r for r in read(dump, "kinesis", "ydb") if r["kind"] == "record"]
    assert bad["envelope_error"].startswith("bad dump line: ")
    assert bytes(bad["data"]) == line


def test_a_line_nested_past_the_recursion_limit_lands_as_a_bad_line(tmp_path: Path) -> None:
    # About 2 KB of brackets: Python's reader raised RecursionError, which failed the task
    # on every retry at the same line. Each layout lands the line as its text instead.
    deep = "[" * 2000 + "]" * 2000
    dump = tmp_path / "part-0.ndjson"
    for layout, line, error in [
        ("kinesis", json.dumps({"Data": "e30="})[:-1] + f', "n": {deep}}}', "bad dump line: "),
        ("kafka", json.dumps({"offset": 1, "value": "v"})[:-1] + f', "n": {deep}}}', "bad Kafka"),
        ("lines", deep, None),  # one message, which the parse quarantines (invalid_record)
    ]:
        dump.write_text(line + "\n")
        (row,) = [r for r in read(dump, layout, "cockroachdb") if r["kind"] == "record"]
        assert bytes(row["data"]) == line.encode()
        if error is None:
            assert row["envelope_error"] is None
        else:
            assert row["envelope_error"].startswith(error)


def test_a_kinesis_layout_dump_of_an_in_band_format_reads_its_markers(tmp_path: Path) -> None:
    # YDB's resolved message ({"resolved": [step, txId]}, the step in milliseconds) as a
    # Kinesis record's Data: the reader sent the format's lines to Python to read markers,
    # then passed none from this layout, and the source's resolved time stayed unknown.
    def line(value: str, at: str) -> str:
        return kinesis_line(value, ApproximateArrivalTimestamp=at) + "\n"

    dump = tmp_path / "shard-0.ndjson"
    dump.write_text(
        line('{"resolved": [1767225600000, 7]}', "2026-01-01T00:00:05Z")
        + line('{"update": {"v": 1}, "key": [1], "ts": [1767225660000, 8]}', "2026-01-01T00:01:05Z")
        + line('{"resolved": [1767225720000, 9]}', "2026-01-01T00:02:05Z")
        + line('{"resolved": [1767225900000, 9]', "2026-01-01T00:05:05Z")  # no JSON: no marker
    )
    [progress] = [r for r in read(dump, "kinesis", "ydb") if r["kind"] == "progress"]
    assert progress["horizon_ts"].isoformat() == "2026-01-01T00:02:00+00:00"


def test_a_last_line_its_writer_has_not_ended_waits_for_its_rest(tmp_path: Path) -> None:
    # A file that grows between runs: its writer had written half of line 2. Landed, it
    # was quarantined and checkpointed, and the whole line 2 never landed.
    def line(n: int) -> str:
        return kinesis_line(json.dumps({"n": n}), ApproximateArrivalTimestamp=1767225600 + n)

    dump = tmp_path / "shard-0.ndjson"
    dump.write_text(line(1) + "\n" + line(2)[:20])

    def landed(after: str | None) -> tuple[list[int], str | None]:
        rows = list(FileReader("src", "kinesis", "ydb")(ShardTask(str(dump), after)))
        numbers = [json.loads(bytes(r[7]))["n"] for r in rows[:-1]]
        assert all(r[8] is None for r in rows[:-1])  # no envelope error
        return numbers, rows[-1][3]  # the records' values, the checkpoint

    assert landed(None) == ([1], "1")
    progress = list(FileReader("src", "kinesis", "ydb")(ShardTask(str(dump), None)))[-1]
    assert json.loads(bytes(progress[7])) == {"lines_behind": 1}  # reported with the checkpoint
    with dump.open("a") as f:
        f.write(line(2)[20:] + "\n" + line(3))  # the last line whole JSON, still unended
    assert landed("1") == ([2, 3], "3")
    # A whole line cut short stays a bad line once another follows it.
    dump.write_text(line(1)[:20] + "\n")
    (bad,) = [r for r in read(dump, "kinesis", "ydb") if r["kind"] == "record"]
    assert bad["envelope_error"].startswith("bad dump line")
    # An unended last line any JSON reader takes is whole: a mark of byte order before it, a
    # literal RFC 8259 has not, or nesting too deep to read lands (as a bad line).
    whole = [
        "\ufeff" + line(1),
        line(1)[:-1] + ', "n": NaN}',
        line(1)[:-1] + ', "n": ' + "9" * 5000 + "}",  # past Python's digits for an int
        line(1)[:-1] + ', "t": "a\tb"}',  # a control character in a string
        "[" * 5000 + "]" * 5000,
    ]
    for last in whole:
        dump.write_text(last)
        assert len([r for r in read(dump, "kinesis", "ydb") if r["kind"] == "record"]) == 1


def test_kinesis_layout_markers_resolve_the_shard_each_line_names(tmp_path: Path) -> None:
    # YDB marks each partition (here, each Kinesis shard) apart: one dump of two shards is
    # resolved per shard, each an open shard of the source, not to its newest marker.
    def line(shard: str, value: str) -> str:
        return kinesis_line(value, ShardId=shard) + "\n"

    dump = tmp_path / "dump.ndjson"
    dump.write_text(
        line("shardId-1", '{"resolved": [1767225600000, 7]}')
        + line("shardId-2", '{"resolved": [1767222000000, 7]}')
        + line("shardId-1", '{"resolved": [1767225540000, 6]}')  # older: no step back
    )
    progress = {r["shard_id"]: r for r in read(dump, "kinesis", "ydb") if r["kind"] == "progress"}
    horizons = {s: (p["horizon_ts"], p["shard_closed"]) for s, p in progress.items()}
    assert {s: (h and h.isoformat(), closed) for s, (h, closed) in horizons.items()} == {
        "partition:/shardId-1": ("2026-01-01T00:00:00+00:00", False),
        "partition:/shardId-2": ("2025-12-31T23:00:00+00:00", False),
        str(dump): (None, True),  # a closed file holds nothing back
    }
