"""A chunk id names one record: two different chunked records under one chunk id are a
conflict, and both (with every fragment of the chunk id) are quarantined; the same record
delivered twice is one record and a duplicate (DSQL: "A chunk_id is stable across
retries")."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import crc32c
import pytest
from delta.tables import DeltaTable

from cdc_demo.dsql_stream import write_ndjson
from spark_jobs.ledger import current_status
from tests.spark.pipeline import land_dump, process

pytestmark = pytest.mark.spark
DDL = "CREATE TABLE public.accounts (id BIGINT PRIMARY KEY, name TEXT);"
BASE_NS = 1_767_225_600_000_000_000


def source(ts_ns: int) -> dict[str, Any]:
    return {
        "version": "1.0",
        "ts_ms": ts_ns // 1_000_000,
        "ts_ns": ts_ns,
        "txId": "tx",
        "schema": "public",
        "table": "accounts",
        "db": "postgres",
        "cluster": "c1",
    }


def chunked(ts_ns: int, chunk_id: str, before_chunk_id: str | None = None) -> str:
    """A chunked change whose after image (and before image, if named) is in fragments (the
    document's example shape)."""
    refs = {"after": {"chunk_id": chunk_id, "total_fragments": 2, "crc32c": "1"}}
    if before_chunk_id is not None:
        refs["before"] = {"chunk_id": before_chunk_id, "total_fragments": 1, "crc32c": "1"}
    return json.dumps(
        {
            "type": "chunked",
            "op": "c" if before_chunk_id is None else "u",
            "before": None,
            "after": None,
            "source": source(ts_ns),
            "chunked": refs,
            "ts_ms": ts_ns // 1_000_000,
            "ts_ns": ts_ns,
        }
    )


def chunked_set(ts_ns: int, chunk_id: str, pieces: list[str]) -> str:
    """A chunked change whose after image is ``pieces`` in that many fragments, with their
    CRC32C: a set that reassembles."""
    record = json.loads(chunked(ts_ns, chunk_id))
    crc = str(crc32c.crc32c("".join(pieces).encode()))
    record["chunked"]["after"].update(total_fragments=len(pieces), crc32c=crc)
    return json.dumps(record)


def fragment(chunk_id: str, index: int, data: str) -> str:
    return json.dumps({"type": "fragment", "chunk_id": chunk_id, "index": index, "data": data})


def full(ident: int, ts_ns: int) -> str:
    return json.dumps(
        {
            "type": "full",
            "op": "c",
            "before": None,
            "after": {"id": ident, "name": f"n{ident}"},
            "source": source(ts_ns),
            "ts_ms": ts_ns // 1_000_000,
            "ts_ns": ts_ns,
        }
    )


@pytest.mark.parametrize("other_before", [None, "own"], ids=["same ids", "one id shared"])
def test_two_records_under_one_chunk_id_are_quarantined(
    spark: Any, tmp_path: Path, other_before: str | None
) -> None:
    deliveries = [
        chunked(BASE_NS + 1, "shared"),
        # Another record under the same chunk id (with, or without, a chunk id of its own).
        chunked(BASE_NS + 2, "shared", other_before),
        fragment("shared", 0, '{"id": 1, '),
        fragment("shared", 1, '"name": "x"}'),
        full(7, BASE_NS + 3),
    ]
    write_ndjson(deliveries, str(tmp_path / "dump"), files=1)
    warehouse = str(tmp_path / "warehouse")
    land_dump(warehouse, str(tmp_path / "dump"), "b1")
    stats = process(warehouse, "b1", ddl=DDL)

    table = spark.read.format("delta").load(f"{warehouse}/public/accounts")
    assert [r["id"] for r in table.collect()] == [7]
    quarantine = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine").collect()
    assert len(quarantine) == 4
    assert {r["reason"] for r in quarantine} == {"chunk_id_conflict"}
    assert all(r["payload"] and "shared" in r["detail"] for r in quarantine)
    # The parse counted its records by kind as it wrote them: the deliveries above.
    assert stats["apply"]["parsed"] == {"chunked": 2, "fragment": 2, "change": 1}
    accounting = stats["apply"]["accounting"]
    assert accounting["quarantined"] == 4 and accounting["applied"] == 1
    assert accounting["pending"] == 0 and accounting["duplicate"] == 0
    # Nothing of the conflict is left open for the next batch (a run with no open set before
    # or after writes no open-state table).
    if DeltaTable.isDeltaTable(spark, f"{warehouse}/_cdc/pending"):
        pending = spark.read.format("delta").load(f"{warehouse}/_cdc/pending")
        assert pending.where("state = 'open'").count() == 0


def test_the_same_chunked_record_twice_is_a_duplicate(spark: Any, tmp_path: Path) -> None:
    record = chunked(BASE_NS + 1, "again")
    deliveries = [record, record, fragment("again", 0, '{"id": 1, ')]
    write_ndjson(deliveries, str(tmp_path / "dump"), files=1)
    warehouse = str(tmp_path / "warehouse")
    land_dump(warehouse, str(tmp_path / "dump"), "b1")
    stats = process(warehouse, "b1", ddl=DDL)

    assert stats["apply"]["parsed"] == {"chunked": 2, "fragment": 1}
    accounting = stats["apply"]["accounting"]
    # One record waits for its second fragment; its redelivery is a duplicate.
    assert accounting["duplicate"] == 1 and accounting["quarantined"] == 0
    assert accounting["pending"] == 2
    ledger = spark.read.format("delta").load(f"{warehouse}/_cdc/ledger")
    assert current_status(ledger).where("status = 'duplicate'").count() == 1


def test_a_held_chunked_change_quarantined_later_keeps_its_payloads(
    spark: Any, tmp_path: Path
) -> None:
    """A chunked change settles, waits behind a cut, and fails to decode in a later run: its
    records are quarantined with the text they were landed with (the open state's closed
    marker of the settled record has no payload of its own)."""
    hour = 3_600_000_000_000
    pieces = ['{"id": "one", ', '"name": "x"}']  # an id that is no BIGINT
    bad = chunked_set(BASE_NS + hour, "held", pieces)
    deliveries = [bad, *(fragment("held", i, p) for i, p in enumerate(pieces))]
    write_ndjson(deliveries, str(tmp_path / "d1"), files=1)
    warehouse = str(tmp_path / "warehouse")
    land_dump(warehouse, str(tmp_path / "d1"), "b1")

    def run(batch: str, cut_ns: int) -> dict[str, Any]:
        cut = dt.datetime.fromtimestamp(cut_ns / 1e9, dt.UTC).isoformat()
        return process(warehouse, batch, ddl=DDL, options=("--cut-at", cut))["apply"]

    first = run("b1", BASE_NS + hour // 2)
    assert first["accounting"]["pending"] == 3
    write_ndjson([full(7, BASE_NS + 2 * hour)], str(tmp_path / "d2"), files=1)
    land_dump(warehouse, str(tmp_path / "d2"), "b2")
    run("b2", BASE_NS + 3 * hour)

    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'record'")
    landed = {r[0]: r[1] for r in raw.selectExpr("record_id", "CAST(data AS STRING)").collect()}
    quarantine = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine").collect()
    assert sorted(json.loads(r["payload"]).get("type") for r in quarantine) == [
        "chunked",
        "fragment",
        "fragment",
    ]
    assert {r["reason"] for r in quarantine} == {"decode_error"}
    assert all(r["payload"] == landed[r["record_id"]] for r in quarantine)


def test_a_set_s_redelivery_in_a_later_batch_is_a_duplicate_beside_a_waiting_set(
    spark: Any, tmp_path: Path
) -> None:
    """Batch 1 completes set A and leaves set B waiting for its second fragment; batch 2
    brings A's chunked record again (at-least-once: a new record id, the same chunk id) and
    B's last fragment. The settled set's marker must outlive the open rows of its batch: A's
    redelivery is a duplicate (it waited, and was quarantined once its age ran out, when
    the marker went with B's open rows)."""
    pieces = ['{"id": 1, ', '"name": "a"}']
    record_a = chunked_set(BASE_NS + 1, "a", pieces)
    b_pieces = ['{"id": 2, ', '"name": "b"}']
    first = [
        record_a,
        *(fragment("a", i, p) for i, p in enumerate(pieces)),
        chunked_set(BASE_NS + 2, "b", b_pieces),
        fragment("b", 0, b_pieces[0]),
    ]
    warehouse = str(tmp_path / "warehouse")
    write_ndjson(first, str(tmp_path / "d1"), files=1)
    land_dump(warehouse, str(tmp_path / "d1"), "b1")
    one = process(warehouse, "b1", ddl=DDL, max_pending_age=0.5)["apply"]["accounting"]
    assert (one["applied"], one["pending"]) == (3, 2)
    write_ndjson([record_a, fragment("b", 1, b_pieces[1])], str(tmp_path / "d2"), files=1)
    land_dump(warehouse, str(tmp_path / "d2"), "b2")
    two = process(warehouse, "b2", ddl=DDL, max_pending_age=0.5)["apply"]["accounting"]
    assert (two["duplicate"], two["applied"], two["pending"], two["quarantined"]) == (1, 1, 0, 0)
    table = spark.read.format("delta").load(f"{warehouse}/public/accounts")
    assert sorted((r["id"], r["name"]) for r in table.collect()) == [(1, "a"), (2, "b")]


def test_a_chunk_id_past_the_byte_bound_is_quarantined_unread(spark: Any, tmp_path: Path) -> None:
    """A chunk id whose fragments hold more data than ``--max-bytes-per-fragment-set`` (every
    delivery counted) fails its set without gathering it: the chunked record and every
    fragment are quarantined with their payloads; a set within the bound beside it applies."""
    big = ['{"id": 1, "name": "', "x" * 60, '"}']
    small = ['{"id": 2, ', '"name": "b"}']
    records = []
    for ts, chunk_id, pieces in ((BASE_NS + 1, "big", big), (BASE_NS + 2, "small", small)):
        records += [
            chunked_set(ts, chunk_id, pieces),
            *(fragment(chunk_id, i, p) for i, p in enumerate(pieces)),
        ]
    warehouse = str(tmp_path / "warehouse")
    write_ndjson(records, str(tmp_path / "d1"), files=1)
    land_dump(warehouse, str(tmp_path / "d1"), "b1")
    stats = process(warehouse, "b1", ddl=DDL, options=("--max-bytes-per-fragment-set", "64"))
    accounting = stats["apply"]["accounting"]
    assert (accounting["applied"], accounting["quarantined"]) == (3, 4)
    assert accounting["unprocessed"] == 0
    quarantine = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine").collect()
    assert {r["reason"] for r in quarantine} == {"oversized_fragment_set"}
    assert all(r["payload"] for r in quarantine)
    held = len("".join(big))  # ASCII: a byte a character
    assert all(f"hold {held} bytes of data, more than the 64" in r["detail"] for r in quarantine)
    table = spark.read.format("delta").load(f"{warehouse}/public/accounts")
    assert [(r["id"], r["name"]) for r in table.collect()] == [(2, "b")]


@pytest.mark.parametrize("across", [False, True], ids=["one batch", "across batches"])
def test_a_set_s_marker_outlives_a_run_killed_before_its_open_state_commit(
    across: bool, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run that settles sets A and C dies after its ledger commit, before the open
    state's: the markers of the sets it settled were only in that run (the sets arrived in
    its batch), or the open state still holds their open rows (they arrived in an earlier
    batch). Its re-run leaves the markers the dead run would have left, so that A's
    redelivery in the next batch is a duplicate (it waited, and was quarantined once its
    age ran out), as is D's, whose set was reassembled and its change quarantined (its
    table is not declared), and a fragment of C, which failed its CRC32C, is quarantined
    with its set's failure."""
    from spark_jobs import apply_changes
    from tests.spark.test_crash_recovery import crash_in_process

    pieces = ['{"id": 1, ', '"name": "a"}']
    record_a = chunked_set(BASE_NS + 1, "a", pieces)
    record_c = chunked(BASE_NS + 3, "c")  # its CRC32C ("1") is wrong: the set fails
    record_d = json.loads(record_a.replace('"a"', '"d"'))
    record_d["source"]["table"] = "undeclared"
    record_d = json.dumps(record_d)
    sets = [record_a, fragment("a", 0, pieces[0]), record_c, fragment("c", 0, pieces[0])]
    sets += [record_d, fragment("d", 0, pieces[0])]
    rest = [fragment(chunk, 1, pieces[1]) for chunk in "acd"]
    warehouse = str(tmp_path / "warehouse")
    batches = [[*sets, *rest]] if not across else [sets, rest]
    batches.append([record_a, record_d, fragment("c", 0, pieces[0])])  # the redeliveries
    names = [f"b{n}" for n in range(1, len(batches) + 1)]
    for name, lines in zip(names, batches, strict=True):
        write_ndjson(lines, str(tmp_path / name), files=1)
    args = ("--warehouse", warehouse, "--source", "dump", "--ddl", DDL)
    settling, redelivery = names[-2], names[-1]
    for name in names[:-1]:
        land_dump(warehouse, str(tmp_path / name), name)
        if name == settling:
            crash_in_process(
                monkeypatch,
                "apply_changes:before_state",
                apply_changes.main,
                *args,
                *("--batch-id", name, "--max-pending-age-seconds", "0.5"),
            )
        process(warehouse, name, ddl=DDL, max_pending_age=0.5)
    land_dump(warehouse, str(tmp_path / redelivery), redelivery)
    last = process(warehouse, redelivery, ddl=DDL, max_pending_age=0.5)["apply"]["accounting"]
    assert (last["duplicate"], last["quarantined"], last["pending"]) == (2, 1, 0)
    [late] = (
        spark.read.format("delta")
        .load(f"{warehouse}/_cdc/quarantine")
        .where(f"batch_id = '{redelivery}'")
        .collect()
    )
    assert late["reason"] == "fragment_of_failed_set"
    table = spark.read.format("delta").load(f"{warehouse}/public/accounts")
    assert [(r["id"], r["name"]) for r in table.collect()] == [(1, "a")]


def test_a_held_set_s_marker_outlives_a_run_killed_before_its_open_state_commit(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Set H reassembles in batch 1, and its change, committed after the cut, is held. The
    run dies after committing the held change, before the open state: the set's marker was
    only in that run, and the held change's records are pending, not final. Its re-run
    leaves the marker, so that H's redelivery in batch 2 is a duplicate (it waited, and was
    quarantined once its age ran out) while the next cut applies H's change."""
    from spark_jobs import apply_changes
    from tests.spark.test_crash_recovery import crash_in_process

    hour = 3_600_000_000_000
    pieces = ['{"id": 1, ', '"name": "h"}']
    record_h = chunked_set(BASE_NS + hour, "h", pieces)
    warehouse = str(tmp_path / "warehouse")
    write_ndjson(
        [record_h, *(fragment("h", i, p) for i, p in enumerate(pieces))],
        str(tmp_path / "b1"),
        files=1,
    )
    write_ndjson([record_h], str(tmp_path / "b2"), files=1)

    def cut_at(ns: int) -> tuple[str, ...]:
        cut = dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).isoformat()
        return ("--cut-at", cut, "--max-pending-age-seconds", "0.5")

    land_dump(warehouse, str(tmp_path / "b1"), "b1")
    args = ("--warehouse", warehouse, "--source", "dump", "--ddl", DDL, "--batch-id", "b1")
    crash_in_process(
        monkeypatch,
        "apply_changes:before_state",
        apply_changes.main,
        *args,
        *cut_at(BASE_NS + hour // 2),
    )
    first = process(warehouse, "b1", ddl=DDL, options=cut_at(BASE_NS + hour // 2))["apply"]
    assert first["accounting"]["pending"] == 3
    land_dump(warehouse, str(tmp_path / "b2"), "b2")
    two = process(warehouse, "b2", ddl=DDL, options=cut_at(BASE_NS + 2 * hour))["apply"]
    last = two["accounting"]
    assert (last["duplicate"], last["quarantined"], last["pending"]) == (1, 0, 0)
    table = spark.read.format("delta").load(f"{warehouse}/public/accounts")
    assert [(r["id"], r["name"]) for r in table.collect()] == [(1, "h")]


def test_a_fragment_that_differs_from_its_reassembled_set_is_quarantined(
    spark: Any, tmp_path: Path
) -> None:
    """After set A was reassembled (batch 1), batch 2 brings its fragments again: the same
    data at an index is a redelivery (a duplicate); other data at an index, or an index past
    the set's total, contradicts the set the table holds, and is quarantined with its
    payload, as in the set's own batch, not counted as a redelivery."""
    pieces = ['{"id": 1, ', '"name": "a"}']
    record_a = chunked_set(BASE_NS + 1, "a", pieces)
    warehouse = str(tmp_path / "warehouse")
    first = [record_a, *(fragment("a", i, p) for i, p in enumerate(pieces))]
    write_ndjson(first, str(tmp_path / "d1"), files=1)
    land_dump(warehouse, str(tmp_path / "d1"), "b1")
    assert process(warehouse, "b1", ddl=DDL)["apply"]["accounting"]["applied"] == 3
    again = [fragment("a", 0, pieces[0]), fragment("a", 1, '"name": "z"}'), fragment("a", 2, "x")]
    write_ndjson(again, str(tmp_path / "d2"), files=1)
    land_dump(warehouse, str(tmp_path / "d2"), "b2")
    two = process(warehouse, "b2", ddl=DDL)["apply"]["accounting"]
    assert (two["duplicate"], two["quarantined"], two["pending"]) == (1, 2, 0)
    quarantine = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine").collect()
    assert sorted((r["reason"], r["detail"]) for r in quarantine) == [
        (
            "conflicting_fragments",
            "chunk_id a index 1 holds other data than the fragment of that index in its set,"
            " reassembled before it arrived",
        ),
        (
            "fragment_out_of_range",
            "chunk_id a index 2 >= total_fragments 2 of its set, reassembled before it arrived",
        ),
    ]
    assert all(r["payload"] for r in quarantine)
    table = spark.read.format("delta").load(f"{warehouse}/public/accounts")
    assert [(r["id"], r["name"]) for r in table.collect()] == [(1, "a")]
