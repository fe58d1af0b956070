"""Kinesis-layout dump files landed line by line: a file that grows between runs lands each
new line exactly once, and line numbers (the checkpoints) count lines as a text editor does."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from spark_jobs.session import COMMIT_METADATA_CONF
from tests.spark.pipeline import land_dump
from tests.zones import ADELAIDE, local_zone

pytestmark = pytest.mark.spark
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def kinesis_line(n: int) -> str:
    data = base64.b64encode(json.dumps({"n": n}).encode()).decode()
    return json.dumps(
        {
            "ShardId": "shardId-000000000000",
            "SequenceNumber": str(n),
            "ApproximateArrivalTimestamp": (START + dt.timedelta(seconds=n)).isoformat(),
            "Data": data,
        }
    )


def landed(spark: Any, warehouse: str) -> list[tuple[str, str, str]]:
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'record'")
    rows = raw.select("record_id", "batch_id", "data").collect()
    return sorted(
        (r["record_id"].rsplit("#", 1)[1], r["batch_id"], bytes(r["data"]).decode()) for r in rows
    )


def test_a_growing_dump_file_lands_every_line_once(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    dump = tmp_path / "shard-000.ndjson"
    # Lines 2 (empty) and 4 (a tab) are blank: counted, not landed; line 3 ends with CRLF.
    dump.write_text(f"{kinesis_line(1)}\n\n{kinesis_line(3)}\r\n\t\n")
    land_dump(warehouse, str(dump), "b1")
    with dump.open("a") as f:
        f.write(f"{kinesis_line(5)}\n{kinesis_line(6)}\n")
    land_dump(warehouse, str(dump), "b2")
    land_dump(warehouse, str(dump), "b3")  # nothing new

    expected = [
        ("1", "b1", '{"n": 1}'),
        ("3", "b1", '{"n": 3}'),
        ("5", "b2", '{"n": 5}'),
        ("6", "b2", '{"n": 6}'),
    ]
    assert landed(spark, warehouse) == expected
    state = json.loads(Path(warehouse, "_cdc", "resolved", "dump.json").read_text())
    assert state["shards"][str(dump)]["sequence_number"] == "6"


def test_each_landing_commit_names_its_run_and_the_run_finds_it(
    spark: Any, warehouse: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_jobs import landing

    # The raw table's progress rows are read only where the log does not show the commit.
    asked: list[str] = []
    monkeypatch.setattr(landing, "_landed_by_another", lambda *a: asked.append(a[3]) or False)
    dump = tmp_path / "shard-000.ndjson"
    dump.write_text(f"{kinesis_line(1)}\n")
    land_dump(warehouse, str(dump), "b1")
    with dump.open("a") as f:
        f.write(f"{kinesis_line(2)}\n")
    land_dump(warehouse, str(dump), "b2")

    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw")
    runs = {r["batch_id"]: r["land_run"] for r in raw.select("batch_id", "land_run").collect()}
    history = spark.sql(f"DESCRIBE HISTORY delta.`{warehouse}/_cdc/raw`").collect()
    metadata = [json.loads(r["userMetadata"]) for r in history if r["operation"] == "WRITE"]
    assert sorted((m["batch_id"], m["land_run"]) for m in metadata) == sorted(runs.items())
    assert all(m["job"] == "land_files" for m in metadata)
    assert asked == []
    assert landed(spark, warehouse) == [("1", "b1", '{"n": 1}'), ("2", "b2", '{"n": 2}')]
    # The run's name was set for the landing commit alone: the session's metadata is back.
    after = json.loads(spark.conf.get(COMMIT_METADATA_CONF))
    assert after["job"] == "land_files" and "land_run" not in after


def test_line_numbers_do_not_depend_on_the_sessions_split_size(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    dump = tmp_path / "shard-000.ndjson"
    dump.write_text("".join(f"{kinesis_line(n)}\n" for n in range(1, 301)))
    before = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "4096")  # would cut it in 20
    try:
        land_dump(warehouse, str(dump), "b1")
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", before)
    rows = landed(spark, warehouse)
    assert len(rows) == 300
    assert all(json.loads(data)["n"] == int(number) for number, _, data in rows)


def dump_line(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


DATA = base64.b64encode(b'{"type": "full"}').decode()
FULL_GROUPS = base64.b64encode(b'{"type": "full"}  ').decode()  # no padding
# Lines of every form, as the JVM reads them and as FileReader (the layout's specification,
# in Python) reads them.
LINES = [
    dump_line(Data=DATA, PartitionKey="k", ApproximateArrivalTimestamp="2026-01-01T00:00:01Z"),
    dump_line(Data=DATA, ApproximateArrivalTimestamp="2026-01-01T00:00:01.250+02:00"),
    dump_line(Data=DATA, ApproximateArrivalTimestamp="2026-01-01 00:00:02"),
    dump_line(Data=DATA, ApproximateArrivalTimestamp=1767225603),
    dump_line(Data=DATA, ApproximateArrivalTimestamp=1767225603.5),
    dump_line(Data=DATA, PartitionKey=None, ApproximateArrivalTimestamp=None),
    dump_line(Data=""),
    dump_line(Data=DATA, PartitionKey=7),
    # A duplicate key takes its last value.
    b'{"Data": "not base64!", "PartitionKey": "a", "Data": "' + DATA.encode() + b'"}',
    # Bad lines: landed as their text, with the reason.
    dump_line(Data="not base64!"),
    dump_line(Data=DATA[:-1]),
    # Padding after a whole group (Python's decoder takes it), or too much of it.
    *(dump_line(Data=FULL_GROUPS + pad) for pad in ("=", "==", "====")),
    dump_line(Data=DATA + "=="),
    # Base64 of a length that is a multiple of four, then a line terminator (before which
    # Java's "$" also matches): not Base64.
    *(dump_line(Data=DATA[:20] + "ab=" + end) for end in ("\n", "\u2028", "\u0085")),
    dump_line(Data=5),
    dump_line(PartitionKey="k"),
    dump_line(Data=DATA, ApproximateArrivalTimestamp="yesterday"),
    dump_line(Data=DATA, ApproximateArrivalTimestamp=True),
    # Past the years 1-9999 (the last second of 9999 lands).
    dump_line(Data=DATA, ApproximateArrivalTimestamp=1e12),
    dump_line(Data=DATA, ApproximateArrivalTimestamp=-1e12),
    dump_line(Data=DATA, ApproximateArrivalTimestamp=253402300800),
    dump_line(Data=DATA, ApproximateArrivalTimestamp=253402300799),
    # A time written with an offset that puts it past the years 1-9999 in UTC.
    dump_line(Data=DATA, ApproximateArrivalTimestamp="9999-12-31T23:59:59-01:00"),
    dump_line(Data=DATA, ApproximateArrivalTimestamp="0001-01-01T00:59:59+01:00"),
    dump_line(Data=DATA, ApproximateArrivalTimestamp="0001-01-01T01:00:00+01:00"),
    b"[1, 2]",
    b"not json",
    # Literals Python's json module reads and JSON does not have: refused by both readers.
    *(b'{"Data": "' + DATA.encode() + b'", "n": ' + word + b"}" for word in (b"NaN", b"Infinity")),
    b'{"Data": "' + DATA.encode() + b'", "ApproximateArrivalTimestamp": -Infinity}',
    # Nested deeper than either reader goes (Python's recursion limit, Jackson's nesting
    # limit): refused by both, and no failure of the task.
    b'{"Data": "' + DATA.encode() + b'", "n": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    # A number past a double's range is JSON: both readers take it.
    b'{"Data": "' + DATA.encode() + b'", "n": 1e999}',
    # A document, then more: the reader refuses the line, so nothing after it is lost.
    dump_line(Data=DATA) + b" trailing",
    dump_line(Data=DATA) + b" " + dump_line(Data=DATA),
    dump_line(Data=DATA) + b"," + dump_line(Data=DATA),
    dump_line(Data=DATA) + b"}",
    dump_line(Data=DATA) + b"]",
    dump_line(Data=DATA) + b"] " + dump_line(Data=DATA),
    dump_line(Data=DATA) + b',"x"] ' + dump_line(Data=DATA),
]


def test_the_jvm_lands_each_line_as_the_reader_does(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    from spark_jobs.land_files import FileReader
    from spark_jobs.landing import ShardTask
    from spark_jobs.times import to_micros

    dump = tmp_path / "shard-000.ndjson"
    dump.write_bytes(b"\n".join(LINES) + b"\n")
    rows = list(FileReader("dump", "kinesis")(ShardTask(str(dump), None)))[:-1]
    want = {
        row[0]: (
            row[5],
            # Microseconds since the epoch: Spark returns naive times in the local zone.
            None if row[6] is None else to_micros(row[6]),
            bytes(row[7]),
            row[8] is not None,  # the JVM words its reasons in its own way
        )
        for row in rows
    }

    land_dump(warehouse, str(dump), "b1")

    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'record'")
    got = {
        r["record_id"]: (
            r["partition_key"],
            r["arrival_ts"],
            bytes(r["data"]),
            r["envelope_error"] is not None,
        )
        for r in raw.select(
            "record_id",
            "partition_key",
            F.unix_micros("arrival_ts").alias("arrival_ts"),
            "data",
            "envelope_error",
        ).collect()
    }
    assert got == want


def test_a_lone_surrogate_in_a_partition_key_lands_and_fails_nothing(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """A format with in-band markers lands Kinesis-layout lines through the Python reader. A
    partition key holding half a UTF-16 pair (a JSON escape) is no UTF-8 text: the line still
    lands, its key with the surrogate replaced by one U+FFFD (as Java decodes its UTF-8 form,
    ED A0 80, into a string), and the lines around it land as they are. A run that failed
    here would fail again on every retry."""
    dump = tmp_path / "shard-000.ndjson"
    lines = [
        dump_line(Data=DATA, PartitionKey="before"),
        dump_line(Data=DATA, PartitionKey="a\ud800b"),
        dump_line(Data=DATA, PartitionKey="after"),
    ]
    assert b"\\ud800" in lines[1]  # the escape itself is in the line
    dump.write_bytes(b"\n".join(lines) + b"\n")

    stats = land_dump(warehouse, str(dump), "b1", fmt="ydb")

    assert stats["landed"] == 3
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'record'")
    keys = sorted(r["partition_key"] for r in raw.select("partition_key").collect())
    assert keys == sorted(["before", "a\ufffdb", "after"])


def test_checkpoint_horizons_do_not_move_with_the_drivers_time_zone(
    warehouse: str, tmp_path: Path
) -> None:
    """A dump file's horizon is its newest arrival time, whatever zone the driver runs in,
    and a shard a run does not read keeps its horizon (they once left Spark as naive local
    times read back as UTC: east of UTC, each run moved every horizon, and with them the
    resolved timestamp, further into the future)."""
    first, second = tmp_path / "shard-000.ndjson", tmp_path / "shard-001.ndjson"
    first.write_text(f"{kinesis_line(1)}\n{kinesis_line(3)}\n")
    with local_zone(ADELAIDE):
        land_dump(warehouse, str(first), "b1")
        second.write_text(f"{kinesis_line(10)}\n")
        land_dump(warehouse, str(second), "b2")  # the first file is carried forward
        stats = land_dump(warehouse, str(second), "b3")  # and again, nothing new
    state = json.loads(Path(warehouse, "_cdc", "resolved", "dump.json").read_text())
    horizons = {shard: v["horizon_ts"] for shard, v in state["shards"].items()}
    assert horizons == {
        str(first): (START + dt.timedelta(seconds=3)).isoformat(),
        str(second): (START + dt.timedelta(seconds=10)).isoformat(),
    }
    assert dt.datetime.fromisoformat(stats["resolved_ts"]) <= START + dt.timedelta(seconds=10)


def test_a_blocks_commit_metadata_is_undone_when_the_block_fails(spark: Any) -> None:
    from spark_jobs.session import commit_metadata

    before = spark.conf.get(COMMIT_METADATA_CONF, None)
    with pytest.raises(RuntimeError), commit_metadata(spark, land_run="r1") as text:
        assert json.loads(text)["land_run"] == "r1"
        assert spark.conf.get(COMMIT_METADATA_CONF) == text
        raise RuntimeError("the append failed")
    assert spark.conf.get(COMMIT_METADATA_CONF, None) == before


def cockroach_marker(topic: str, partition: int, offset: int, at: dt.datetime) -> str:
    """A CockroachDB resolved message (JSON envelope) as a kafka-layout line."""
    nanos = int((at - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)).total_seconds()) * 10**9
    value = json.dumps({"resolved": f"{nanos}.0000000000"})
    return json.dumps({"topic": topic, "partition": partition, "offset": offset, "value": value})


def cockroach_row(topic: str, partition: int, offset: int, key: int) -> str:
    value = json.dumps({"after": {"id": key}, "key": [key]})
    return json.dumps({"topic": topic, "partition": partition, "offset": offset, "value": value})


def resolved_ts(stats: dict[str, Any]) -> dt.datetime | None:
    value = stats["resolved_ts"]
    return None if value is None else dt.datetime.fromisoformat(value)


def test_a_kafka_dump_is_resolved_by_its_least_resolved_partition(
    warehouse: str, tmp_path: Path
) -> None:
    """Seed (CockroachDB): a resolved timestamp guarantees that no (previously unseen) rows
    with a lower update timestamp will be emitted *on that partition*. A kafka-layout dump
    holds each line's partition: the source is resolved to the least of its partitions'
    newest markers, in whichever files they are (the reader took the newest marker in a file
    for all of it, and the newest file for the source)."""
    hour = dt.timedelta(hours=1)
    nine, ten = START + 9 * hour, START + 10 * hour
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    # One file for both partitions: partition 1 is resolved to nine only.
    both = dumps / "items-a.ndjson"
    both.write_text(
        "\n".join(
            [
                cockroach_row("items", 0, 0, 1),
                cockroach_marker("items", 0, 1, ten),
                cockroach_row("items", 1, 0, 2),
                cockroach_marker("items", 1, 1, nine),
            ]
        )
        + "\n"
    )
    stats = land_dump(warehouse, str(dumps), "b1", layout="kafka", fmt="cockroachdb")
    assert resolved_ts(stats) == nine
    state = json.loads(Path(warehouse, "_cdc", "resolved", "dump.json").read_text())
    horizons = {s: v["horizon_ts"] for s, v in state["shards"].items() if s.startswith("part")}
    assert horizons == {"partition:items/0": ten.isoformat(), "partition:items/1": nine.isoformat()}

    # A file of its own for partition 1, and one for a new partition 2 without a marker yet:
    # the source is not resolved until every partition is.
    one, two = dumps / "items-b.ndjson", dumps / "items-c.ndjson"
    one.write_text(cockroach_marker("items", 1, 2, ten + hour) + "\n")
    two.write_text(cockroach_row("items", 2, 0, 3) + "\n")
    stats = land_dump(warehouse, str(dumps), "b2", layout="kafka", fmt="cockroachdb")
    assert resolved_ts(stats) is None

    # Partition 2's marker arrives in its file; partition 0's older marker in a later file
    # takes nothing back.
    with two.open("a") as f:
        f.write(cockroach_marker("items", 2, 1, ten + 2 * hour) + "\n")
    (dumps / "items-d.ndjson").write_text(cockroach_marker("items", 0, 2, nine) + "\n")
    stats = land_dump(warehouse, str(dumps), "b3", layout="kafka", fmt="cockroachdb")
    assert resolved_ts(stats) == ten  # partition 0's newest marker
    state = json.loads(Path(warehouse, "_cdc", "resolved", "dump.json").read_text())
    assert state["resolved_ts"] == ten.isoformat()


def test_lines_appended_with_older_arrivals_take_no_horizon_back(
    warehouse: str, tmp_path: Path
) -> None:
    dump = tmp_path / "shard-000.ndjson"
    dump.write_text(f"{kinesis_line(1)}\n{kinesis_line(3)}\n")
    land_dump(warehouse, str(dump), "b1")
    with dump.open("a") as f:
        f.write(f"{kinesis_line(2)}\n")
    stats = land_dump(warehouse, str(dump), "b2")
    assert stats["landed"] == 1
    assert stats["shards"][str(dump)]["horizon_ts"] == (START + dt.timedelta(seconds=3)).isoformat()


def test_a_file_name_with_glob_characters_is_read_as_itself(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    # Spark's reader expands glob characters in a path it is given: "part[1]" matched no file
    # (the landing failed on every run), and "a*" matched "ab" too.
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    names = ["part[1].ndjson", "a*.ndjson", "ab.ndjson", "c{d,e}.ndjson", "f?.ndjson", "g\\.ndjson"]
    for offset, name in enumerate(names):
        lines = [kinesis_line(10 * offset), kinesis_line(10 * offset + 1), "no json"]
        (dumps / name).write_text("\n".join(lines) + "\n")  # the last line no JSON: ended?
    stats = land_dump(warehouse, str(dumps), "b1")
    assert stats["landed"] == 3 * len(names)
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'record'")
    got = sorted((r["shard_id"], bytes(r["data"]).decode()) for r in raw.collect())
    want = sorted(
        (str(dumps / name), text)
        for offset, name in enumerate(names)
        for text in (*(json.dumps({"n": 10 * offset + n}) for n in (0, 1)), "no json")
    )
    assert got == want


def test_a_last_line_its_writer_has_not_ended_lands_once_it_is_whole(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    """A file that grows between runs, caught with half a line at its end: the line lands
    once, whole, when its writer has ended it (it landed cut short, quarantined, and was
    checkpointed, so the whole line never landed). A last line that is whole JSON lands with
    no line ending; one that is no JSON and ends its line is a bad line."""
    dump = tmp_path / "shard-000.ndjson"
    dump.write_text(f"{kinesis_line(1)}\n{kinesis_line(2)[:25]}")
    first = land_dump(warehouse, str(dump), "b1")
    assert first["shards"][str(dump)]["lines_behind"] == 1  # in the counts and the log
    with dump.open("a") as f:
        f.write(f"{kinesis_line(2)[25:]}\n{kinesis_line(3)}")
    second = land_dump(warehouse, str(dump), "b2")
    assert "lines_behind" not in second["shards"][str(dump)]
    with dump.open("a") as f:
        f.write("\nnot json\n")
    third = land_dump(warehouse, str(dump), "b3")
    assert (first["landed"], second["landed"], third["landed"]) == (1, 2, 1)
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'record'")
    rows = sorted(
        (int(r["sequence_number"]), r["envelope_error"] is None, bytes(r["data"]))
        for r in raw.collect()
    )
    assert rows == [
        *((n, True, json.dumps({"n": n}).encode()) for n in (1, 2, 3)),
        (4, False, b"not json"),
    ]


def test_an_unended_last_line_that_a_lenient_reader_takes_lands_at_once(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    # Whole, though no RFC 8259 JSON (a NaN literal; Spark's reader refuses it): a bad line,
    # landed now, as the Python reader lands it; cut short, it would be no JSON to any reader.
    dump = tmp_path / "shard-000.ndjson"
    dump.write_text(kinesis_line(1)[:-1] + ', "n": NaN}')
    stats = land_dump(warehouse, str(dump), "b1")
    assert stats["landed"] == 1 and "lines_behind" not in stats["shards"][str(dump)]
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'record'")
    (row,) = raw.collect()
    assert row["envelope_error"].startswith("bad dump line")


@pytest.mark.parametrize("layout", ["kinesis", "kafka"])
def test_an_unended_last_line_lands_as_a_bad_line_once_its_file_has_rested(
    spark: Any, warehouse: str, tmp_path: Path, layout: str
) -> None:
    """A writer that died in the middle of its last line never ends it: once the file has
    not changed for ``--unended-line-seconds``, the line lands as it is (a bad line, which
    the apply quarantines with its text), not held for good. Both readers: the JVM's
    (kinesis layout) and the Python one (kafka layout)."""
    import os

    if layout == "kinesis":
        whole, cut = kinesis_line(1), kinesis_line(2)[:25]
    else:
        messages = [
            json.dumps({"partition": 0, "offset": n, "key": "[1]", "value": '{"n": 1}'})
            for n in (1, 2)
        ]
        whole, cut = messages[0], messages[1][:25]
    dump = tmp_path / "shard-000.ndjson"
    dump.write_text(f"{whole}\n{cut}")
    fmt = None if layout == "kinesis" else "debezium"
    first = land_dump(warehouse, str(dump), "b1", layout=layout, fmt=fmt)
    assert first["landed"] == 1 and first["shards"][str(dump)]["lines_behind"] == 1
    rested = dump.stat().st_mtime - 7200  # written two hours ago
    os.utime(dump, (rested, rested))
    second = land_dump(warehouse, str(dump), "b2", layout=layout, fmt=fmt)
    assert second["landed"] == 1 and "lines_behind" not in second["shards"][str(dump)]
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw")
    rows = raw.where("kind = 'record' AND batch_id = 'b2'").collect()
    assert [(r["sequence_number"], bytes(r["data"])) for r in rows] == [("2", cut.encode())]
    assert rows[0]["envelope_error"].startswith(("bad dump line", "bad Kafka message line"))
    assert land_dump(warehouse, str(dump), "b3", layout=layout, fmt=fmt)["landed"] == 0
