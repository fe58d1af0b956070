"""Quarantine replay: records quarantined for a cause the user fixes (here a table missing
from the DDL) go through the pipeline again and end as their new outcome, once. Maintenance
before the replay keeps what it needs; after it, the replayed records expire like any final
record.

The records are written here by hand as the Aurora DSQL document describes them; the
expected tables follow from its rules (per key, the change with the newest ``ts_ns`` wins).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdc_demo.dsql_stream import write_ndjson
from spark_jobs import apply_changes, maintain
from spark_jobs.ledger import STATUSES, accounting
from tests.spark.pipeline import land_dump

pytestmark = pytest.mark.spark

ACCOUNTS = "CREATE TABLE public.accounts (id bigint PRIMARY KEY, balance numeric(12, 2));"
TRANSFERS = "CREATE TABLE public.transfers (id bigint PRIMARY KEY, amount numeric(12, 2));"


def record(ts_s: int, table: str, op: str, row: dict[str, Any]) -> str:
    return json.dumps(
        {
            "type": "full",
            "op": op,
            "before": row if op == "d" else None,
            "after": None if op == "d" else row,
            "source": {"ts_ns": ts_s * 1_000_000_000, "schema": "public", "table": table},
        }
    )


BATCHES = {
    "b1": [
        record(100, "accounts", "c", {"id": 1, "balance": "10.00"}),
        record(110, "transfers", "c", {"id": 1, "amount": "5.00"}),
        record(120, "transfers", "c", {"id": 2, "amount": "7.00"}),
        "{not json",
    ],
    "b2": [
        record(130, "transfers", "u", {"id": 1, "amount": "6.00"}),
        record(105, "transfers", "u", {"id": 2, "amount": "1.00"}),  # older than id 2's insert
        record(140, "accounts", "u", {"id": 1, "balance": "12.00"}),
    ],
}


def apply(warehouse: str, batch: str, ddl: str, *extra: str) -> dict[str, Any]:
    return apply_changes.main(
        [
            *("--warehouse", warehouse, "--batch-id", batch, "--source", "cdc"),
            *("--format", "dsql", "--ddl", ddl, *extra),
        ]
    )


def live(spark: Any, warehouse: str, table: str) -> dict[int, str]:
    rows = spark.read.format("delta").load(f"{warehouse}/public/{table}")
    value = "balance" if table == "accounts" else "amount"
    return {r["id"]: str(r[value]) for r in rows.where("NOT _cdc_deleted").collect()}


def maintenance(warehouse: str, batch: str) -> dict[str, Any]:
    return maintain.main(
        [
            *("--warehouse", warehouse, "--batch-id", batch, "--source", "cdc"),
            *("--ddl", f"{ACCOUNTS} {TRANSFERS}", "--raw-retention-seconds", "0"),
        ]
    )


def batch_accounting(spark: Any, warehouse: str, batch: str) -> dict[str, Any]:
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw")
    records = raw.where(f"source = 'cdc' AND batch_id = '{batch}' AND kind = 'record'")
    return accounting(spark, records, f"{warehouse}/_cdc/ledger", "cdc", batch)


def test_replay_applies_what_a_fixed_ddl_declares_once(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    for batch, lines in BATCHES.items():
        write_ndjson(lines, str(tmp_path / batch), files=1)
        land_dump(warehouse, str(tmp_path / batch), batch, source="cdc")
        apply(warehouse, batch, ACCOUNTS)
    before = {b: batch_accounting(spark, warehouse, b) for b in BATCHES}
    assert [before[b]["quarantined"] for b in BATCHES] == [3, 2]
    assert live(spark, warehouse, "accounts") == {1: "12.00"}

    # A wrong fix: the replayed records of b1 fail again, now with their new reason.
    wrong = "CREATE TABLE public.transfers (id bigint PRIMARY KEY, amount date);"
    failed = apply(
        warehouse, "replay-0", f"{ACCOUNTS} {wrong}", "--replay-batches", "b1", "--replay"
    )
    assert failed["replay"]["batches"] == ["b1"] and failed["replay"]["records"] == 2
    assert batch_accounting(spark, warehouse, "b1") == before["b1"]
    ledger = spark.read.format("delta").load(f"{warehouse}/_cdc/ledger")
    newest = {
        r["record_id"]: r["reason"]
        for r in ledger.where("batch_id = 'b1' AND status = 'quarantined'")
        .orderBy("decided_at")
        .collect()
    }
    assert sorted(newest.values()) == ["decode_error", "decode_error", "malformed_json"]

    # Maintenance (compaction, VACUUM, retention of 0 s) before the right fix: the applied
    # records expire; the quarantined ones, and the raw payloads a replay needs, stay.
    maintenance(warehouse, "m1")
    kept = {b: batch_accounting(spark, warehouse, b) for b in BATCHES}
    for batch, counts in kept.items():
        assert counts["landed"] == counts["quarantined"] == before[batch]["quarantined"]
    assert live(spark, warehouse, "accounts") == {1: "12.00"}

    replayed = apply(warehouse, "replay-1", f"{ACCOUNTS} {TRANSFERS}", "--replay")
    assert replayed["replay"]["batches"] == ["b1", "b2"]
    assert replayed["replay"]["records"] == 4  # the four transfers; the bad JSON is not replayable
    assert live(spark, warehouse, "transfers") == {1: "6.00", 2: "7.00"}
    assert live(spark, warehouse, "accounts") == {1: "12.00"}
    after = {b: batch_accounting(spark, warehouse, b) for b in BATCHES}
    for counts in after.values():
        assert counts["landed"] == sum(counts[s] for s in STATUSES) and not counts["unprocessed"]
    assert after["b1"]["quarantined"] == 1 and after["b2"]["quarantined"] == 0
    assert after["b1"]["superseded"] == 1 and after["b2"]["superseded"] == 1
    assert after["b1"]["applied"] == after["b2"]["applied"] == 1
    assert replayed["accounting"]["landed"] == 4 and replayed["accounting"]["quarantined"] == 0

    again = apply(warehouse, "replay-2", f"{ACCOUNTS} {TRANSFERS}", "--replay")
    assert again["replay"]["records"] == 0  # nothing quarantined for those reasons is left
    assert {b: batch_accounting(spark, warehouse, b) for b in BATCHES} == after
    history = spark.sql(f"DESCRIBE HISTORY delta.`{warehouse}/public/transfers`")
    assert history.where("operation = 'MERGE'").count() == 1

    # Maintenance after the replay: the replayed records are final and expire like the rest;
    # the record that no fix can replay stays quarantined; the tables read as before.
    maintenance(warehouse, "m2")
    final = {b: batch_accounting(spark, warehouse, b) for b in BATCHES}
    assert final["b1"]["landed"] == final["b1"]["quarantined"] == 1
    assert final["b2"]["landed"] == 0
    quarantine = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine")
    assert [r["reason"] for r in quarantine.collect()] == ["malformed_json"]
    assert live(spark, warehouse, "transfers") == {1: "6.00", 2: "7.00"}
    assert live(spark, warehouse, "accounts") == {1: "12.00"}
    assert (
        apply(warehouse, "replay-3", f"{ACCOUNTS} {TRANSFERS}", "--replay")["replay"]["records"]
        == 0
    )
