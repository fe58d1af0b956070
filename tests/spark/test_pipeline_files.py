"""The whole pipeline from NDJSON dumps to Delta tables, on the shared Spark session."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame

from cdc_demo.dsql_stream import differences, envelope, generate, write_ndjson
from spark_jobs import apply, apply_changes, frames, session
from spark_jobs.ledger import current_status
from tests.spark.pipeline import land_dump, live_rows, process

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("mode", ["interpreted", "compiled", "large target", "serialized"])
def test_dump_to_tables_matches_the_generator(
    spark: Any, warehouse: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Either way Spark evaluates the batch (a small batch runs interpreted, a large one
    compiled: :func:`spark_jobs.session.fit_codegen`; the MERGE into a large table runs
    compiled, and the job's setting holds again after it; a large batch keeps its
    materialized stages serialized: :func:`spark_jobs.session.fit_storage`), the tables are
    the generator's."""
    if mode == "compiled":
        monkeypatch.setattr(session, "INTERPRETED_BELOW", 0)
    if mode == "serialized":
        monkeypatch.setattr(session, "SERIALIZED_FROM", 0)
    levels: list[Any] = []
    frame_class = type(spark.range(1))
    checkpoint = frame_class.localCheckpoint

    def recorded_level(frame: DataFrame, eager: bool = True, storageLevel: Any = None) -> Any:
        levels.append(storageLevel)
        return checkpoint(frame, eager, storageLevel)

    monkeypatch.setattr(frame_class, "localCheckpoint", recorded_level)
    merges: list[bool] = []
    if mode == "large target":
        monkeypatch.setattr(apply, "LARGE_TARGET_BYTES", -1)  # even the new, empty tables
        merge = apply.merge

        def recorded(*args: Any, **kwargs: Any) -> None:
            merges.append(spark.conf.get("spark.sql.codegen.wholeStage") == "true")
            merge(*args, **kwargs)

        monkeypatch.setattr(apply, "merge", recorded)
    stream = generate(600, seed=11)
    write_ndjson(stream.deliveries, str(tmp_path / "dump"), files=3)
    landed = land_dump(warehouse, str(tmp_path / "dump"), "b1")
    assert landed["landed"] == len(stream.deliveries)
    stats = process(warehouse, "b1")
    compiled = mode == "compiled"
    assert stats["apply"]["interpreted"] is not compiled
    assert stats["apply"]["serialized"] is (mode == "serialized")
    assert (frames.SERIALIZED in levels) is (mode == "serialized")
    assert spark.conf.get("spark.sql.codegen.wholeStage") == str(compiled).lower()
    if mode == "large target":
        assert merges == [True, True]  # customers, order_items
    for table in ("customers", "order_items"):
        assert differences(stream, table, live_rows(spark, warehouse, table)) == []
    accounting = stats["apply"]["accounting"]
    assert accounting["landed"] == len(stream.deliveries)
    assert accounting["unprocessed"] == 0
    assert accounting["landed"] == sum(
        accounting[s] for s in ("applied", "superseded", "duplicate", "pending", "quarantined")
    )


def _ndjson(tmp_path: Path, name: str, records: list[dict[str, Any]]) -> str:
    import json

    from cdc_demo.dsql_stream import write_ndjson

    directory = tmp_path / name
    write_ndjson([json.dumps(r) for r in records], str(directory), files=1)
    return str(directory)


# Commit times ten minutes ago: recent enough that the resolved timestamp (now) minus the
# tombstone retention (a day) has not passed them.
BASE_NS = time.time_ns() - 600 * 10**9


def _change(op: str, step: int, image: dict[str, Any]) -> dict[str, Any]:
    return envelope(op, "order_items", BASE_NS + step, image, random.Random(step))


ITEMS_DDL = (
    "CREATE TABLE order_items (order_id INT, item_id INT, quantity INT, price NUMERIC(10,2),"
    " PRIMARY KEY (order_id, item_id))"
)


def test_late_older_changes_and_new_columns_across_batches(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    first = [
        _change("c", 100, {"order_id": 1, "item_id": 1, "quantity": 1, "price": "1.00"}),
        _change("c", 100, {"order_id": 2, "item_id": 1, "quantity": 1, "price": "1.00"}),
        _change("d", 300, {"order_id": 2, "item_id": 1}),
    ]
    # Batch 2: a column appears ("gift_wrap"), an older update of order 2 arrives late (it
    # must not resurrect the deleted row), and a replay of an old change of order 1.
    second = [
        _change(
            "u",
            400,
            {"order_id": 1, "item_id": 1, "quantity": 5, "price": "2.50", "gift_wrap": True},
        ),
        _change("u", 200, {"order_id": 2, "item_id": 1, "quantity": 9, "price": "9.00"}),
        _change("c", 100, {"order_id": 1, "item_id": 1, "quantity": 1, "price": "1.00"}),
        _change("c", 500, {"order_id": 3, "item_id": 1, "quantity": 7, "price": "3.00"}),
    ]
    for batch, records in (("b1", first), ("b2", second)):
        land_dump(warehouse, _ndjson(tmp_path, batch, records), batch, source="s")
        stats = process(warehouse, batch, ddl=ITEMS_DDL, source="s")
        assert stats["apply"]["accounting"]["unprocessed"] == 0
    table = spark.read.format("delta").load(f"{warehouse}/public/order_items")
    rows = {(r["order_id"], r["item_id"]): r.asDict() for r in table.collect()}
    assert rows[(1, 1)]["quantity"] == 5 and rows[(1, 1)]["gift_wrap"] == "true"
    assert rows[(3, 1)]["gift_wrap"] is None  # the column stays, null where absent
    assert rows[(2, 1)]["_cdc_deleted"] is True  # tombstone kept: resolved is not past it
    assert rows[(2, 1)]["quantity"] is None
    assert stats["apply"]["accounting"] == {
        "landed": 4,
        "applied": 2,
        "superseded": 2,
        "duplicate": 0,
        "pending": 0,
        "quarantined": 0,
        "control": 0,
        "unprocessed": 0,
    }
    # Every commit names the job, its version, the Airflow run and the batch.
    history = spark.sql(f"DESCRIBE HISTORY delta.`{warehouse}/public/order_items`")
    import json

    metadata = [json.loads(r["userMetadata"]) for r in history.collect() if r["userMetadata"]]
    assert {m["job"] for m in metadata} == {"apply_changes"}
    assert {m["batch_id"] for m in metadata} >= {"b1", "b2"}
    assert all(m["job_version"] == apply_changes.JOB_VERSION for m in metadata)


def apply_bad_input(warehouse: str, tmp_path: Path) -> None:
    """Land and apply a small stream with one of each bad input (one set never completes)."""
    stream = generate(80, seed=3)
    write_ndjson(stream.deliveries, str(tmp_path / "dump"), files=1)
    land_dump(warehouse, str(tmp_path / "dump"), "b1")
    process(warehouse, "b1", max_pending_age=3600)


def test_bad_input_is_quarantined_with_reason_and_payload(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    apply_bad_input(warehouse, tmp_path)
    quarantine = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine")
    reasons = {r["reason"] for r in quarantine.select("reason").collect()}
    assert {
        "malformed_json",
        "unknown_record_type",
        "missing_key",
        "decode_error",
        "crc_mismatch",
        "undeclared_table",
    } <= reasons
    assert quarantine.where("payload IS NULL OR payload = ''").count() == 0
    # Each payload is its record's text as landed, whatever stage quarantined it (a bad
    # record at parsing, a change at decoding or for its table, a set at reassembly).
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'record'")
    landed = {
        r["record_id"]: r["text"]
        for r in raw.selectExpr("record_id", "CAST(data AS STRING) AS text").collect()
    }
    kept = {r["record_id"]: r["payload"] for r in quarantine.collect()}
    assert kept and all(kept[record] == landed[record] for record in kept)
    ledger = spark.read.format("delta").load(f"{warehouse}/_cdc/ledger")
    # The set whose last fragment never arrives waits, then expires into quarantine.
    assert current_status(ledger).where("status = 'pending'").count() > 0
    process(warehouse, "b1", max_pending_age=0.000001)
    assert current_status(ledger).where("status = 'pending'").count() == 0
    expired = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine")
    assert expired.where("reason = 'incomplete_fragment_set'").count() > 0


def test_a_stalled_stream_expires_its_sets_by_wall_clock(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    apply_bad_input(warehouse, tmp_path)
    ledger = spark.read.format("delta").load(f"{warehouse}/_cdc/ledger")
    waiting = current_status(ledger).where("status = 'pending'").count()
    assert waiting > 0
    # No new record arrives, so stream time stands still; the wall clock does not.
    time.sleep(1.5)
    process(warehouse, "b1", options=("--max-pending-wall-seconds", "1"))
    assert current_status(ledger).where("status = 'pending'").count() == 0
    quarantine = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine")
    expired = quarantine.where("reason = 'incomplete_fragment_set'").collect()
    assert expired and all("wall-clock" in r["detail"] for r in expired)
