"""Landing from a real Kafka broker (KRaft mode): every partition exactly once, checkpoints
committed with the data, the resolved timestamp the minimum over partitions."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest

from cdc_demo.change_stream import DDL, TOPIC, generate
from cdc_demo.kafka import create_topic, produce
from spark_jobs import land_files, land_kafka
from spark_jobs.warehouse import RECORD, Warehouse
from tests.spark.pipeline import process

pytestmark = [pytest.mark.spark, pytest.mark.kafka]
FIRST, SECOND = "2026-01-01T01:00:00+00:00", "2026-01-01T02:00:00+00:00"


def land(warehouse: str, bootstrap: str, batch: str) -> dict[str, Any]:
    return land_kafka.main(
        [
            "--warehouse", warehouse, "--batch-id", batch, "--bootstrap-servers", bootstrap,
            "--topic", TOPIC, "--source", "feed", "--format", "cockroachdb",
        ]
    )  # fmt: skip


def test_kafka_partitions_land_exactly_once_and_apply(
    spark: Any, tmp_path: Path, kafka_bootstrap: str
) -> None:
    stream = generate("cockroachdb", changes=300, partitions=3, seed=5)
    messages = [json.loads(line) for line in stream.lines]
    create_topic(kafka_bootstrap, TOPIC, 3)
    warehouse = str(tmp_path / "warehouse")
    cut = len(messages) * 3 // 5

    produce(kafka_bootstrap, messages[:cut])
    first = land(warehouse, kafka_bootstrap, FIRST)
    # In a transaction: each partition's last offset is then a commit marker, never delivered.
    produce(kafka_bootstrap, messages[cut:], transactional=True)
    second = land(warehouse, kafka_bootstrap, SECOND)
    again = land(warehouse, kafka_bootstrap, SECOND)

    assert (first["landed"], second["landed"], again["landed"]) == (cut, len(messages) - cut, 0)
    raw = spark.read.format("delta").load(Warehouse(warehouse).raw).where(f"kind = '{RECORD}'")
    rows = raw.select("shard_id", "sequence_number", "record_id").collect()
    assert len({r["record_id"] for r in rows}) == len(messages)
    for partition in range(3):
        offsets = sorted(
            int(r["sequence_number"]) for r in rows if r["shard_id"] == f"items/{partition}"
        )
        sent = sum(1 for m in messages if m["partition"] == partition)
        assert offsets == list(range(sent))  # contiguous: nothing lost, nothing twice

    # Resolved: per partition the newest marker, then the minimum over partitions.
    newest = []
    for partition in range(3):
        markers = [
            int(json.loads(m["value"])["resolved"].split(".")[0]) // 1000
            for m in messages
            if m["partition"] == partition and m["value"] and '"resolved"' in m["value"]
        ]
        newest.append(max(markers))
    state = json.loads(Path(warehouse, "_cdc", "resolved", "feed.json").read_text())
    expected = min(newest)
    assert state["resolved_ts"] is not None
    got = dt.datetime.fromisoformat(state["resolved_ts"]) - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    assert got // dt.timedelta(microseconds=1) == expected

    process(warehouse, FIRST, ddl=DDL, source="feed", fmt="cockroachdb")
    stats = process(warehouse, SECOND, ddl=DDL, source="feed", fmt="cockroachdb")
    table = spark.sql(
        f"SELECT id, name, qty FROM delta.`{warehouse}/shop/items` WHERE NOT _cdc_deleted"
    ).collect()
    assert {r["id"]: (r["name"], r["qty"]) for r in table} == {
        k: (v["name"], v["qty"]) for k, v in stream.expected.items()
    }
    assert stats["apply"]["accounting"]["unprocessed"] == 0


def test_a_capped_run_reports_the_offsets_it_left_behind_the_tip(
    spark: Any, tmp_path: Path, kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic = "lagging"
    create_topic(kafka_bootstrap, topic, 2)
    sent = {0: 12, 1: 3}
    produce(
        kafka_bootstrap,
        [
            {"topic": topic, "partition": p, "key": f"k{i}", "value": f'{{"n": {i}}}'}
            for p, count in sent.items()
            for i in range(count)
        ],
    )
    warehouse = str(tmp_path / "warehouse")

    def run(batch: str, cap: int) -> dict[str, Any]:
        return land_kafka.main(
            [
                *("--warehouse", warehouse, "--batch-id", batch),
                *("--bootstrap-servers", kafka_bootstrap, "--topic", topic),
                *("--max-records-per-partition", str(cap)),
            ]
        )

    caplog.set_level("INFO", logger="airflow_cdc.jobs")
    capped = run("b1", 5)
    # Partition 0 stopped 7 offsets short of its end; partition 1 read to its end.
    assert {s: d["offsets_behind"] for s, d in capped["shards"].items()} == {
        f"{topic}/0": 7,
        f"{topic}/1": 0,
    }
    assert f"{topic}/0: 5 records landed" in caplog.text
    assert "7 offsets behind the tip" in caplog.text
    rest = run("b2", 100)
    assert rest["landed"] == 7
    assert {d["offsets_behind"] for d in rest["shards"].values()} == {0}


class Delivered:
    """A consumed Kafka message, as confluent_kafka's ``Message`` answers the reader."""

    def __init__(
        self, key: bytes | None, value: bytes | None, millis: int = 1_767_225_600_000
    ) -> None:
        self._key, self._value, self._millis = key, value, millis

    def offset(self) -> int:
        return 7

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return 1, self._millis  # TIMESTAMP_CREATE_TIME


def test_a_message_key_that_is_not_utf8_is_an_envelope_error() -> None:
    assert land_kafka.message_key(None) == (None, None)
    assert land_kafka.message_key('{"id": "zürich"}'.encode()) == ('{"id": "zürich"}', None)
    # Latin-1 "ü": as U+FFFD, "zürich" and "zärich" would be one key.
    text, error = land_kafka.message_key(b'{"id": "z\xfcrich"}')
    assert text == '{"id": "z\ufffdrich"}'
    assert error is not None and error.startswith("the message key is not UTF-8")

    # Only a format that reads the key refuses the record for it.
    def envelope_error(fmt: str) -> str | None:
        reader = land_kafka.KafkaPartitionReader("b", {}, "s", {}, dt.datetime.now(dt.UTC), fmt, 10)
        row, _ = reader._record("items/0", "items", Delivered(b"\xfc", b"{}"))
        return row[8]

    keyed = envelope_error("debezium")
    assert keyed is not None and keyed.startswith("the message key is not UTF-8")
    assert envelope_error("ydb") is None


def test_a_message_timestamp_past_the_year_9999_is_an_envelope_error() -> None:
    # A producer sets a message's CreateTime, and brokers before Kafka 4.0 take any: read as
    # a time, one past the year 9999 failed the task, and every re-run with it, at the same
    # offset. It is refused as the kafka dump layout refuses it; the record still lands.
    reader = land_kafka.KafkaPartitionReader("b", {}, "s", {}, dt.datetime.now(dt.UTC), "ydb", 10)

    def landed(millis: int) -> tuple[Any, Any]:
        row, _ = reader._record("items/0", "items", Delivered(b"k", b"{}", millis))
        return row[6], row[8]  # arrival_ts, envelope_error

    last = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
    assert landed(last) == (dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC), None)
    for millis in (last + 1, 10**15, 2**63 - 1):
        arrival, error = landed(millis)
        assert arrival is None
        assert error == f"the message timestamp {millis} lies past the year 9999 in UTC"
    assert landed(-1) == (None, None)  # Kafka's "no timestamp"
    dump_line = json.dumps({"value": "{}", "timestamp": 10**15})
    with pytest.raises(ValueError):
        land_files.kafka_line(dump_line)


@pytest.mark.parametrize("sent_again", [2, 7])
def test_a_topic_deleted_and_created_again_stops_the_landing(
    spark: Any, tmp_path: Path, kafka_bootstrap: str, sent_again: int
) -> None:
    # A topic deleted and created again: its new log reuses the offsets already landed.
    # Read on from the checkpoint, they would never land (their record ids are the landed
    # ones'), whether the new log is still shorter than the checkpoint (2 messages: the run
    # took itself for caught up) or has grown past it (7: it read offsets 5 and 6 only). The
    # checkpoint keeps the topic's id, which the broker gives the new topic afresh.
    from confluent_kafka.admin import AdminClient

    topic = f"recreated-{sent_again}"
    create_topic(kafka_bootstrap, topic, 1)
    message = {"topic": topic, "partition": 0, "key": "k", "value": '{"n": 1}'}
    produce(kafka_bootstrap, [message] * 5)
    warehouse = str(tmp_path / "warehouse")
    args = ["--warehouse", warehouse, "--bootstrap-servers", kafka_bootstrap, "--topic", topic]
    assert land_kafka.main([*args, "--batch-id", "b1"])["landed"] == 5
    produce(kafka_bootstrap, [message])
    assert land_kafka.main([*args, "--batch-id", "b2"])["landed"] == 1  # the same topic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_topics([topic]).values():
        future.result(30)
    deadline = time.monotonic() + 60
    while True:  # the deletion completes in the background
        try:
            create_topic(kafka_bootstrap, topic, 1)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    produce(kafka_bootstrap, [message] * sent_again)
    with pytest.raises(Exception, match="was deleted and created again"):
        land_kafka.main([*args, "--batch-id", "b3"])
    # As a new source it lands from its start.
    again = land_kafka.main([*args, "--batch-id", "b3", "--source", f"{topic}-2"])
    assert again["landed"] == sent_again


def test_offsets_expired_before_landing_are_one_quarantined_record(
    spark: Any, tmp_path: Path, kafka_bootstrap: str
) -> None:
    # Retention removed offsets 10 to 14 of a partition before the landing reached them (the
    # broker's DeleteRecords moves the log's start as retention does). Their changes are
    # lost; the landing says so with one landed record that the apply quarantines, and reads
    # on from the log's start.
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = "expiring"
    stream = generate("cockroachdb", changes=30, partitions=1, seed=3)
    messages = [{**json.loads(line), "topic": topic} for line in stream.lines]
    create_topic(kafka_bootstrap, topic, 1)
    warehouse = str(tmp_path / "warehouse")
    args = ["--warehouse", warehouse, "--bootstrap-servers", kafka_bootstrap, "--topic", topic]
    args += ["--source", "feed", "--format", "cockroachdb"]
    produce(kafka_bootstrap, messages[:10])
    assert land_kafka.main([*args, "--batch-id", FIRST])["landed"] == 10
    produce(kafka_bootstrap, messages[10:20])
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 15)]).values():
        future.result(30)
    assert land_kafka.main([*args, "--batch-id", SECOND])["landed"] == 1 + 5
    assert land_kafka.main([*args, "--batch-id", "2026-01-01T03:00:00+00:00"])["landed"] == 0

    raw = spark.read.format("delta").load(Warehouse(warehouse).raw).where(f"kind = '{RECORD}'")
    offsets = sorted(r["record_id"].rpartition("@")[2] for r in raw.collect())
    assert offsets == sorted([*(str(n) for n in [*range(10), *range(15, 20)]), "10-14"])
    ddl = DDL.replace("items", topic)  # CockroachDB names the table by its topic
    process(warehouse, FIRST, ddl=ddl, source="feed", fmt="cockroachdb")
    stats = process(warehouse, SECOND, ddl=ddl, source="feed", fmt="cockroachdb")["apply"]
    [row] = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine").collect()
    assert (row["record_id"], row["reason"]) == (f"kafka:{topic}/0@10-14", "expired_before_landing")
    assert row["detail"].startswith(
        f"expired_before_landing: offsets 10 to 14 of partition {topic}/0 (5 messages) expired"
    )
    accounting = stats["accounting"]
    assert accounting["landed"] == 6 and accounting["quarantined"] == 1
    assert accounting["unprocessed"] == 0
    assert accounting["landed"] == sum(
        accounting[s]
        for s in ("applied", "superseded", "duplicate", "pending", "quarantined", "control")
    )


def test_offsets_that_expire_after_planning_are_one_quarantined_record(
    kafka_bootstrap: str,
) -> None:
    # Retention moves the log's start between the run's planning (its watermarks) and the
    # partition reader's first fetch: the reader must not jump to the new start silently.
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from spark_jobs.landing import ShardTask

    topic = "expiring-while-read"
    create_topic(kafka_bootstrap, topic, 1)
    produce(
        kafka_bootstrap,
        [{"topic": topic, "partition": 0, "key": f"k{i}", "value": "{}"} for i in range(20)],
    )
    watermarks = land_kafka.plan(kafka_bootstrap, {}, [topic])
    assert watermarks == {f"{topic}/0": (0, 20)}
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 15)]).values():
        future.result(30)

    def read(after: str | None) -> tuple[list[tuple[Any, ...]], tuple[Any, ...]]:
        reader = land_kafka.KafkaPartitionReader(
            kafka_bootstrap, {}, "feed", watermarks, dt.datetime.now(dt.UTC), None, 100, 30.0
        )
        *records, progress = reader(ShardTask(f"{topic}/0", after))
        return records, progress

    # Landed up to offset 9: offsets 10 to 14 are lost, and said to be.
    records, progress = read("9")
    assert [r[0] for r in records] == [
        f"kafka:{topic}/0@10-14",
        *(f"kafka:{topic}/0@{n}" for n in range(15, 20)),
    ]
    assert records[0][8].startswith("expired_before_landing: offsets 10 to 14 ")
    assert progress[3] == "19"
    assert json.loads(progress[7])["offsets_behind"] == 0
    # Landed for the first time: landing begins where the log now does.
    records, progress = read(None)
    assert [r[0] for r in records] == [f"kafka:{topic}/0@{n}" for n in range(15, 20)]
    # Capped below the new start: the lost offsets only, and the checkpoint past them.
    reader = land_kafka.KafkaPartitionReader(
        kafka_bootstrap, {}, "feed", watermarks, dt.datetime.now(dt.UTC), None, 2, 30.0
    )
    *records, progress = reader(ShardTask(f"{topic}/0", "9"))
    assert [r[0] for r in records] == [f"kafka:{topic}/0@10-14"]
    assert progress[3] == "14" and json.loads(progress[7])["offsets_behind"] == 5


def test_a_topic_no_longer_landed_holds_the_resolved_time_back_no_more(
    spark: Any, tmp_path: Path, kafka_bootstrap: str
) -> None:
    for topic in ("kept", "dropped"):
        create_topic(kafka_bootstrap, topic, 1)
        produce(kafka_bootstrap, [{"topic": topic, "partition": 0, "key": "k", "value": "{}"}])
    warehouse = str(tmp_path / "warehouse")

    def land(batch: str, *topics: str) -> dt.datetime:
        args = ["--warehouse", warehouse, "--batch-id", batch, "--source", "feed"]
        args += ["--bootstrap-servers", kafka_bootstrap, "--lateness-seconds", "0"]
        stats = land_kafka.main([*args, *(a for t in topics for a in ("--topic", t))])
        return dt.datetime.fromisoformat(stats["resolved_ts"])

    first = land("b1", "kept", "dropped")
    second = land("b2", "kept")  # each partition read to its end: R is the run's start
    assert second > first
    # Landed again, the topic reads on from its checkpoint: its one message is not read twice.
    produce(kafka_bootstrap, [{"topic": "dropped", "partition": 0, "key": "k", "value": "{}"}])
    assert land("b3", "kept", "dropped") > second
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'record'")
    assert sorted(r["shard_id"] for r in raw.collect()) == ["dropped/0", "dropped/0", "kept/0"]
