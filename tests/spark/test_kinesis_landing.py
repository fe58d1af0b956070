"""Landing from kinesis-local: every shard once, resharding, and the pipeline after it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from cdc_demo import kinesis
from cdc_demo.dsql_stream import TABLES, differences, generate
from spark_jobs import land_kafka, land_kinesis
from spark_jobs.land_kinesis import KinesisShardReader
from spark_jobs.landing import ShardTask
from tests.spark.pipeline import live_rows, process

pytestmark = pytest.mark.spark


def land(warehouse: str, endpoint: str, stream: str, batch: str, *extra: str) -> dict[str, Any]:
    return land_kinesis.main(
        [
            "--warehouse",
            warehouse,
            "--batch-id",
            batch,
            "--stream",
            stream,
            "--endpoint-url",
            endpoint,
            "--lateness-seconds",
            "0",
            *extra,
        ]
    )


def raw_records(spark: Any, warehouse: str) -> Any:
    return spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'record'")


def test_resharding_loses_nothing_and_keeps_order(
    spark: Any, warehouse: str, kinesis_endpoint: str
) -> None:
    stream = generate(450, seed=21)
    client = kinesis.client(kinesis_endpoint)
    kinesis.create_stream(client, "reshard", shards=2)
    third = len(stream.deliveries) // 3
    kinesis.put(client, "reshard", stream.deliveries[:third], seed=1)
    first = land(warehouse, kinesis_endpoint, "reshard", "b1")
    assert first["landed"] == third

    # Split while the stream flows; the second split happens before the next landing, so
    # that run must read the closed parents to their end before their children.
    parent = kinesis.split_first_shard(client, "reshard")
    kinesis.put(client, "reshard", stream.deliveries[third : 2 * third], seed=2)
    second_parent = kinesis.split_first_shard(client, "reshard")
    kinesis.put(client, "reshard", stream.deliveries[2 * third :], seed=3)
    second = land(warehouse, kinesis_endpoint, "reshard", "b2")
    assert second["waves"] >= 2  # children only after their parents ended
    assert second["shards_pending"] == []
    # Per shard: what it landed (the run's total over its shards, each as the raw table
    # has it), and the parents closed.
    per_shard = second["shards"]
    assert sum(done["landed"] for done in per_shard.values()) == second["landed"]
    assert per_shard[parent]["closed"] and per_shard[second_parent]["closed"]
    by_shard = {
        r["shard_id"]: r["count"]
        for r in raw_records(spark, warehouse)
        .where("batch_id = 'b2'")
        .groupBy("shard_id")
        .count()
        .collect()
    }
    assert {s: d["landed"] for s, d in per_shard.items() if d["landed"]} == by_shard
    # Every open shard was read to its tip.
    assert {d["millis_behind_latest"] for d in per_shard.values() if not d["closed"]} == {0}

    records = raw_records(spark, warehouse)
    assert records.count() == len(stream.deliveries)
    assert records.select("record_id").distinct().count() == len(stream.deliveries)
    payloads = sorted(bytes(r["data"]).decode() for r in records.select("data").collect())
    assert payloads == sorted(stream.deliveries)
    shards = {r["shard_id"] for r in records.select("shard_id").distinct().collect()}
    assert {parent, second_parent} <= shards and len(shards) >= 4

    # Nothing more to read: a third run lands nothing and keeps the checkpoints.
    assert land(warehouse, kinesis_endpoint, "reshard", "b3")["landed"] == 0

    for batch in ("b1", "b2"):
        process(warehouse, batch, source="reshard")
    for table in TABLES:
        assert differences(stream, table, live_rows(spark, warehouse, table)) == []


def test_sequence_numbers_are_kept_as_decimal_strings(
    spark: Any, warehouse: str, kinesis_endpoint: str
) -> None:
    client = kinesis.client(kinesis_endpoint)
    kinesis.create_stream(client, "seqs", shards=1)
    kinesis.put(client, "seqs", ['{"type": "full"}'] * 3)
    land(warehouse, kinesis_endpoint, "seqs", "b1")
    rows = raw_records(spark, warehouse).select("sequence_number", "seq_key").collect()
    assert (
        dict(
            spark.read.format("delta")
            .load(f"{warehouse}/_cdc/raw")
            .select("sequence_number")
            .schema.fields[0]
            .jsonValue()
        )["type"]
        == "string"
    )
    for row in rows:
        assert int(row["sequence_number"]) > 2**63  # beyond int64, kept exact
        assert row["seq_key"].lstrip("0") == row["sequence_number"]


def test_a_reader_stopped_by_its_cap_reports_how_far_behind_the_tip_it_is(
    kinesis_endpoint: str,
) -> None:
    """The shard's ``MillisBehindLatest`` (kinesis-local computes it from arrival times)
    rides on the reader's progress row to the driver."""
    client = kinesis.client(kinesis_endpoint)
    kinesis.create_stream(client, "tip", shards=1)
    kinesis.put(client, "tip", ['{"type": "full"}'] * 20)
    time.sleep(1.2)  # the later records arrive a second after the first page's
    kinesis.put(client, "tip", ['{"type": "full"}'] * 5)
    shard = client.list_shards(StreamName="tip")["Shards"][0]["ShardId"]

    def tip(cap: int) -> tuple[int, dict[str, int]]:
        reader = KinesisShardReader("tip", kinesis_endpoint, "us-east-1", cap, page_size=10)
        *records, progress = reader(ShardTask(shard, None))
        return len(records), json.loads(progress[7])

    landed, capped = tip(10)
    assert landed == 10 and capped["millis_behind_latest"] >= 1000
    assert tip(100) == (25, {"millis_behind_latest": 0})


@pytest.mark.parametrize(
    ("named", "given", "error"),
    [
        # Stream names Kinesis takes ([a-zA-Z0-9_.-]+) that are no source: the default
        # source of ".." named the bookkeeping directory, whose stale entries a landing
        # clears.
        ("..", None, "name the source with --source"),
        (".hidden", None, "name the source with --source"),
        ("orders", "../orders", "--source: source must match"),
    ],
)
def test_a_landing_job_refuses_a_source_that_is_no_plain_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], named: str, given: str | None, error: str
) -> None:
    warehouse = tmp_path / "warehouse"
    source = [] if given is None else ["--source", given]
    for main, stream in [
        (land_kinesis.main, ["--stream", named]),
        (land_kafka.main, ["--bootstrap-servers", "127.0.0.1:9", "--topic", named]),
    ]:
        with pytest.raises(SystemExit):
            main(["--warehouse", str(warehouse), "--batch-id", "b", *stream, *source])
        assert error in capsys.readouterr().err
    assert not warehouse.exists()  # refused before any work


def test_an_expired_shard_lands_as_one_quarantined_record_and_no_longer_holds_the_resolved_time(
    spark: Any, warehouse: str, kinesis_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard the last run left open, which resharding closed and retention then removed
    (the listing leaves it out: kinesis-local keeps shards longer than a test runs, so the
    listing here drops it as the stream's would a day later)."""
    stream = generate(120, seed=5)
    half = len(stream.deliveries) // 2
    client = kinesis.client(kinesis_endpoint)
    kinesis.create_stream(client, "expiry", shards=1)
    kinesis.put(client, "expiry", stream.deliveries[:half], seed=1)
    first = land(warehouse, kinesis_endpoint, "expiry", "b1")
    assert first["landed"] == half and first["resolved_ts"] is not None
    # Records after the checkpoint, then the split: the parent expires with them unread.
    lost = half + 10
    kinesis.put(client, "expiry", stream.deliveries[half:lost], seed=2)
    parent = kinesis.split_first_shard(client, "expiry")
    kinesis.put(client, "expiry", stream.deliveries[lost:], seed=3)
    listing = land_kinesis.list_shards

    def after_retention(kinesis_client: Any, name: str) -> list[dict[str, Any]]:
        return [s for s in listing(kinesis_client, name) if s["ShardId"] != parent]

    monkeypatch.setattr(land_kinesis, "list_shards", after_retention)
    time.sleep(0.1)  # the children's read is later than the parent's
    second = land(warehouse, kinesis_endpoint, "expiry", "b2")
    # The parent no longer holds the resolved timestamp at its last read.
    assert second["resolved_ts"] > first["resolved_ts"]
    assert second["shards_expired"] == [parent]
    assert second["shards"][parent] == {**second["shards"][parent], "landed": 1, "closed": True}
    children = len(stream.deliveries) - lost
    assert second["landed"] == children + 1
    # Closed: a later run reads the parent no more.
    third = land(warehouse, kinesis_endpoint, "expiry", "b3")
    assert third["landed"] == 0 and third["shards_expired"] == []
    assert third["resolved_ts"] >= second["resolved_ts"]

    process(warehouse, "b1", source="expiry")
    applied = process(warehouse, "b2", source="expiry")["apply"]["accounting"]
    assert applied["landed"] == children + 1 and applied["unprocessed"] == 0
    quarantine = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine")
    rows = quarantine.where("reason = 'expired_before_landing'").collect()
    assert [r["record_id"].startswith(f"kinesis:expiry/{parent}/expired-") for r in rows] == [True]
    assert parent in rows[0]["detail"] and "retention" in rows[0]["detail"]
    assert rows[0]["batch_id"] == "b2"
