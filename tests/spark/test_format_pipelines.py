"""YDB's UPDATES-mode partial updates from raw messages to the Delta table.

The stream has deletes, at-least-once redeliveries and partitions interleaved in per-key
commit order (YDB's guarantee); its records carry only the changed columns. The table must
equal the generator's model, every landed record must have exactly one outcome, and in-band
markers must set the resolved timestamp. Every format, every declared type, several batches
and exact counts: ``test_typed_streams.py``.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from cdc_demo.change_stream import DDL, generate
from spark_jobs import apply_changes
from spark_jobs.ledger import STATUSES
from tests.spark.pipeline import land_dump, process

pytestmark = pytest.mark.spark
BATCH = "2026-01-01T01:00:00+00:00"


def table_state(spark: Any, warehouse: str) -> dict[int, dict[str, Any]]:
    rows = spark.sql(
        f"SELECT id, name, qty, CAST(price AS STRING) AS price,"
        f" unix_micros(updated_at) AS updated_at FROM delta.`{warehouse}/shop/items`"
        " WHERE NOT _cdc_deleted"
    ).collect()
    return {r["id"]: r.asDict() for r in rows}


def expected_state(expected: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {
        ident: {**row, "price": str(row["price"]) if row["price"] is not None else None}
        for ident, row in expected.items()
    }


def test_partial_updates_end_to_end(spark: Any, tmp_path: Path) -> None:
    fmt = "ydb"
    stream = generate(fmt, changes=400, partitions=3, seed=11)
    dump = tmp_path / "dump"
    dump.mkdir()
    half = len(stream.lines) // 2
    for number, lines in enumerate((stream.lines[:half], stream.lines[half:])):
        (dump / f"part-{number}.ndjson").write_text("\n".join(lines) + "\n", encoding="utf-8")
    warehouse = str(tmp_path / "warehouse")

    landed = land_dump(warehouse, str(dump), BATCH, layout="kafka", fmt=fmt)
    stats = process(warehouse, BATCH, ddl=DDL, fmt=fmt)

    assert landed["landed"] == len(stream.lines)
    assert table_state(spark, warehouse) == expected_state(stream.expected)
    accounting = stats["apply"]["accounting"]
    assert accounting["unprocessed"] == 0 and accounting["quarantined"] == 0
    assert accounting["duplicate"] > 0 and accounting["superseded"] > 0
    assert accounting["landed"] == sum(accounting[k] for k in STATUSES)
    state = json.loads(Path(warehouse, "_cdc", "resolved", "dump.json").read_text())
    assert accounting["control"] > 0
    assert state["resolved_ts"] is not None
    assert state["resolved_ts"] < "2026-01-01T00:00:01"  # commit times, not arrival times


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "killed after its MERGE"])
def test_a_late_partial_update_does_not_overwrite_newer_stored_columns(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash: bool
) -> None:
    """YDB UPDATES mode, one key. Batch 1: an update of ``qty`` (ts 1000), then a reset of
    the whole row (ts 2000). Batch 2: the first update again (redelivered, a later offset)
    and an update of ``name`` (ts 3000). Per key, changes apply in commit order: the row is
    the reset's with the newest name, and the redelivered update is older than the stored
    row (superseded), whose ``qty`` it must not overwrite. A run of batch 2 killed after its
    MERGE, before its ledger, is re-run to the same outcomes: the re-run reads the row as
    it was before the batch."""
    from tests.spark.test_crash_recovery import crash_in_process

    def line(offset: int, doc: dict[str, Any]) -> str:
        value = json.dumps({"key": [1], **doc})
        return json.dumps({"topic": "items/feed", "partition": 0, "offset": offset, "value": value})

    first = line(0, {"update": {"qty": 1}, "ts": [1000, 1]})
    reset = {"name": "a", "qty": 2, "price": None, "updated_at": None}
    dump = tmp_path / "dump"
    dump.mkdir()
    warehouse = str(tmp_path / "warehouse")
    batches = {
        "b1": [first, line(1, {"reset": reset, "ts": [2000, 1]})],
        "b2": [
            line(2, {"update": {"qty": 1}, "ts": [1000, 1]}),
            line(3, {"update": {"name": "b"}, "ts": [3000, 1]}),
        ],
    }
    outcomes = {}
    for batch, lines in batches.items():
        (dump / f"{batch}.ndjson").write_text("\n".join(lines) + "\n", encoding="utf-8")
        land_dump(warehouse, str(dump), batch, layout="kafka", fmt="ydb")
        if crash and batch == "b2":
            args = ["--warehouse", warehouse, "--batch-id", batch, "--source", "dump"]
            args += ["--format", "ydb", "--ddl", DDL]
            crash_in_process(monkeypatch, "apply:after_merge", apply_changes.main, *args)
        outcomes[batch] = process(warehouse, batch, ddl=DDL, fmt="ydb")["apply"]["accounting"]
    rows = spark.sql(
        f"SELECT id, name, qty FROM delta.`{warehouse}/shop/items` WHERE NOT _cdc_deleted"
    ).collect()
    assert [r.asDict() for r in rows] == [{"id": 1, "name": "b", "qty": 2}]
    assert outcomes["b2"]["superseded"] == 1 and outcomes["b2"]["applied"] == 1
    for accounting in outcomes.values():
        assert accounting["landed"] == sum(accounting[k] for k in STATUSES)


def test_a_partial_update_keeps_the_special_values_of_the_columns_it_does_not_set(
    spark: Any, tmp_path: Path
) -> None:
    """YDB UPDATES mode, one key: a reset whose ``price`` is NaN (stored as null, with its
    marker), then an update of ``name``. The row and its history's second version both keep
    the NaN marker of the column the update did not set."""

    def line(offset: int, doc: dict[str, Any]) -> str:
        value = json.dumps({"key": [1], **doc})
        return json.dumps({"topic": "items/feed", "partition": 0, "offset": offset, "value": value})

    reset = {"name": "a", "qty": 2, "price": "NaN", "updated_at": None}
    lines = [
        line(0, {"reset": reset, "ts": [1000, 1]}),
        line(1, {"update": {"name": "b"}, "ts": [2000, 1]}),
    ]
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "b1.ndjson").write_text("\n".join(lines) + "\n", encoding="utf-8")
    warehouse = str(tmp_path / "warehouse")
    land_dump(warehouse, str(dump), "b1", layout="kafka", fmt="ydb")
    stats = process(warehouse, "b1", ddl=DDL, fmt="ydb", options=("--history", "*"))
    assert stats["apply"]["accounting"]["applied"] == 2
    row = spark.read.format("delta").load(f"{warehouse}/shop/items").first()
    assert (row["name"], row["price"], row["_cdc_special_values"]) == ("b", None, {"price": "NaN"})
    history = spark.read.format("delta").load(f"{warehouse}/shop/items__history")
    found = [
        (r["name"], r["price"], r["_cdc_special_values"])
        for r in history.orderBy("__start_at").collect()
    ]
    assert found == [("a", None, {"price": "NaN"}), ("b", None, {"price": "NaN"})]


def test_an_update_without_its_new_image_is_quarantined_not_applied_as_empty(
    spark: Any, tmp_path: Path
) -> None:
    """YDB's Debezium format from a changefeed that writes no new image (UPDATES or
    OLD_IMAGE mode): an update carries the key and no ``after``. Applied, it would null
    every column of the row; it is quarantined, and the row stays as it was."""

    def line(offset: int, op: str, after: dict[str, Any] | None, step: int) -> str:
        source = {"connector": "ydb", "version": "1.0.0", "ts_ms": step, "step": step}
        payload = {"op": op, "after": after, "source": {**source, "txId": 1, "snapshot": False}}
        return json.dumps(
            {
                "topic": "items",
                "partition": 0,
                "offset": offset,
                "key": json.dumps({"payload": {"id": 1}}),
                "value": json.dumps({"payload": payload}),
            }
        )

    row = {"id": 1, "name": "a", "qty": 2, "price": "1.50", "updated_at": None}
    dump = tmp_path / "dump"
    dump.mkdir()
    lines = [line(0, "c", row, 1000), line(1, "u", None, 2000)]
    (dump / "b1.ndjson").write_text("\n".join(lines) + "\n", encoding="utf-8")
    warehouse = str(tmp_path / "warehouse")
    land_dump(warehouse, str(dump), "b1", layout="kafka", fmt="ydb-debezium")
    accounting = process(warehouse, "b1", ddl=DDL, fmt="ydb-debezium")["apply"]["accounting"]
    assert (accounting["applied"], accounting["quarantined"]) == (1, 1)
    reasons = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine").select("reason")
    assert [r[0] for r in reasons.collect()] == ["missing_image"]
    assert table_state(spark, warehouse) == {
        1: {"id": 1, "name": "a", "qty": 2, "price": "1.50", "updated_at": None}
    }


def test_a_message_key_that_is_not_the_primary_key_does_not_rename_the_row(
    spark: Any, tmp_path: Path
) -> None:
    """CockroachDB's ``key_column`` keys the messages by another column ("WITH
    key_column='office', unordered"): here ``qty``. The rows keep their own ``id``; a delete
    with ``diff`` deletes the row its before image names."""

    def line(offset: int, qty: int, after: dict[str, Any] | None, **extra: Any) -> str:
        value = {"after": after, "updated": f"{1_767_225_600_000_000_000 + offset}.0", **extra}
        return json.dumps(
            {
                "topic": "items",
                "partition": 0,
                "offset": offset,
                "key": json.dumps([qty]),
                "value": json.dumps(value),
            }
        )

    def row(ident: int, name: str) -> dict[str, Any]:
        return {"id": ident, "name": name, "qty": 5, "price": "1.50", "updated_at": None}

    dump = tmp_path / "dump"
    dump.mkdir()
    lines = [
        line(0, 5, row(1, "a")),
        line(1, 5, row(2, "b")),
        line(2, 5, None, before=row(1, "a")),
    ]
    (dump / "b1.ndjson").write_text("\n".join(lines) + "\n", encoding="utf-8")
    warehouse = str(tmp_path / "warehouse")
    land_dump(warehouse, str(dump), "b1", layout="kafka", fmt="cockroachdb")
    accounting = process(warehouse, "b1", ddl=DDL, fmt="cockroachdb")["apply"]["accounting"]
    assert table_state(spark, warehouse) == {2: row(2, "b")}
    # Row 1's insert is superseded by its delete in the batch.
    assert (accounting["applied"], accounting["superseded"], accounting["quarantined"]) == (2, 1, 0)


def test_cdl_20_timestamps_written_as_text_are_applied(spark: Any, tmp_path: Path) -> None:
    """Huawei CDL 2.0 types a timestamp column as {"type": "string", "name":
    "com.xxx.cdc.data.timestamp"} (seed 004's sample, whose value is null); the same column
    its 1.0 sample types as Connect's Timestamp. The seed's record, with a value and without."""
    seed = Path(__file__).resolve().parents[2].parent / "shared" / "seeds"
    sample = next(
        json.loads(line)
        for line in (seed / "004_5572f1559f40c1ec.txt").read_text(encoding="utf-8").splitlines()
        if '"message_version":"2.0"' in line
    )

    def line(offset: int, ident: int, time1: str | None) -> str:
        after = {**sample["payload"]["after"], "id": ident, "time1": time1}
        payload = {**sample["payload"], "after": after, "unique": {"id": ident}}
        value = json.dumps({"schema": sample["schema"], "payload": payload})
        return json.dumps({"topic": "cdl", "partition": 0, "offset": offset, "value": value})

    dump = tmp_path / "dump"
    dump.mkdir()
    lines = [line(0, 1, "2024-02-04 12:34:56.789"), line(1, 2, None)]
    (dump / "b1.ndjson").write_text("\n".join(lines) + "\n", encoding="utf-8")
    warehouse = str(tmp_path / "warehouse")
    ddl = "CREATE TABLE public.ct_pg2hudi (id INT PRIMARY KEY, count1 BIGINT, time1 TIMESTAMPTZ)"
    land_dump(warehouse, str(dump), "b1", layout="kafka", fmt="cdl")
    accounting = process(warehouse, "b1", ddl=ddl, fmt="cdl")["apply"]["accounting"]
    assert (accounting["applied"], accounting["quarantined"]) == (2, 0)
    rows = spark.sql(
        f"SELECT id, unix_micros(time1) AS t FROM delta.`{warehouse}/public/ct_pg2hudi`"
    ).collect()
    assert {r["id"]: r["t"] for r in rows} == {1: 1_707_050_096_789_000, 2: None}


def test_ydb_date_types_read_as_its_changefeeds_write_them(spark: Any, tmp_path: Path) -> None:
    """YDB's JSON changefeed writes Date, Datetime and Timestamp as ISO 8601 text in UTC,
    Date32 as days, Datetime64 as seconds, Timestamp64 and Interval64 as microseconds
    (integers: YDB's ``change_record_cdc_serializer.cpp``). Declared by their YDB names, each
    column holds the instant the record names."""
    ddl = """CREATE TABLE shop.events (
        id Int64 PRIMARY KEY, a Date, b Datetime, c Timestamp, d Date32, e Datetime64,
        f Timestamp64, g Interval64
    )"""
    images = [
        {
            "a": "2024-12-01T00:00:00.000000Z",
            "b": "2024-12-01T10:30:00.000000Z",
            "c": "2024-12-01T10:30:00.123456Z",
            "d": 20058,
            "e": 1733049000,
            "f": 1733049000123456,
            "g": 90061000001,
        },
        {"a": None, "b": None, "c": None, "d": -1, "e": -2208988800, "f": -1, "g": -1},
    ]
    lines = [
        json.dumps(
            {
                "topic": "events/feed",
                "partition": 0,
                "offset": offset,
                "value": json.dumps(
                    {"key": [offset + 1], "update": {}, "newImage": image, "ts": [1000, offset]}
                ),
            }
        )
        for offset, image in enumerate(images)
    ]
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "b1.ndjson").write_text("\n".join(lines) + "\n", encoding="utf-8")
    warehouse = str(tmp_path / "warehouse")
    land_dump(warehouse, str(dump), "b1", layout="kafka", fmt="ydb")
    accounting = process(warehouse, "b1", ddl=ddl, fmt="ydb")["apply"]["accounting"]
    assert (accounting["applied"], accounting["quarantined"]) == (2, 0)
    table = spark.read.format("delta").load(f"{warehouse}/shop/events")
    rows = {r["id"]: r.asDict() for r in table.select("id", *"abcdefg").collect()}
    assert rows == {
        1: {
            "id": 1,
            "a": dt.date(2024, 12, 1),
            "b": dt.datetime(2024, 12, 1, 10, 30),
            "c": dt.datetime(2024, 12, 1, 10, 30, 0, 123456),
            "d": dt.date(2024, 12, 1),
            "e": dt.datetime(2024, 12, 1, 10, 30),
            "f": dt.datetime(2024, 12, 1, 10, 30, 0, 123456),
            "g": 90061000001,
        },
        2: {
            "id": 2,
            "a": None,
            "b": None,
            "c": None,
            "d": dt.date(1969, 12, 31),
            "e": dt.datetime(1900, 1, 1),
            "f": dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
            "g": -1,
        },
    }


def test_a_cockroachdb_int_key_past_32_bits_is_applied(spark: Any, tmp_path: Path) -> None:
    """CockroachDB's ``id INT PRIMARY KEY DEFAULT unique_rowid()`` holds 64-bit ids (its INT
    is INT8), and its changefeeds write BYTES as ``\\x`` and hex (``tree.AsJSON``): declared
    as CockroachDB declares them, the rows land whole."""
    ddl = "CREATE TABLE shop.users (id INT PRIMARY KEY, visits INTEGER, avatar BYTES)"
    ids = [1068245690208436225, 1068245690208501761]
    lines = [
        json.dumps(
            {
                "topic": "users",
                "partition": 0,
                "offset": offset,
                "key": json.dumps([ident]),
                "value": json.dumps(
                    {
                        "after": {"id": ident, "visits": 3_000_000_000, "avatar": "\\x6869"},
                        "updated": f"{1_767_225_600_000_000_000 + offset}.0000000000",
                    }
                ),
            }
        )
        for offset, ident in enumerate(ids)
    ]
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "b1.ndjson").write_text("\n".join(lines) + "\n", encoding="utf-8")
    warehouse = str(tmp_path / "warehouse")
    land_dump(warehouse, str(dump), "b1", layout="kafka", fmt="cockroachdb")
    accounting = process(warehouse, "b1", ddl=ddl, fmt="cockroachdb")["apply"]["accounting"]
    assert (accounting["applied"], accounting["quarantined"]) == (2, 0)
    table = spark.read.format("delta").load(f"{warehouse}/shop/users")
    rows = sorted(tuple(r) for r in table.select("id", "visits", "avatar").collect())
    assert rows == [(ident, 3_000_000_000, bytearray(b"hi")) for ident in ids]


def test_a_debezium_date_in_a_timestamp_column_is_its_midnight(spark: Any, tmp_path: Path) -> None:
    """Debezium writes a DATE as ``io.debezium.time.Date``, days since the epoch. Into a
    column the table holds as TIMESTAMP (declared so, or widened from DATE since: a late
    change keeps its old type), the day is its midnight, not that many microseconds."""
    columns = [
        {"field": "id", "type": "int64"},
        {"field": "d", "type": "int32", "name": "io.debezium.time.Date", "optional": True},
    ]
    schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": columns}]}
    lines = []
    for n, days in enumerate([19737, -1]):  # 2024-01-15 and 1969-12-31
        payload = {
            "op": "c",
            "after": {"id": n, "d": days},
            "source": {"schema": "shop", "table": "dated", "lsn": n + 1, "ts_ms": 1},
        }
        value = json.dumps({"schema": schema, "payload": payload})
        lines.append(
            json.dumps(
                {
                    "topic": "dated",
                    "partition": 0,
                    "offset": n,
                    "key": json.dumps({"id": n}),
                    "value": value,
                }
            )
        )
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "part-0.ndjson").write_text("\n".join(lines) + "\n", "utf-8")
    warehouse = str(tmp_path / "warehouse")
    ddl = "CREATE TABLE shop.dated (id BIGINT PRIMARY KEY, d TIMESTAMP)"
    land_dump(warehouse, str(dump), "b1", layout="kafka", fmt="debezium")
    accounting = process(warehouse, "b1", ddl=ddl, fmt="debezium")["apply"]["accounting"]
    assert (accounting["applied"], accounting["quarantined"]) == (2, 0)
    rows = spark.read.format("delta").load(f"{warehouse}/shop/dated").collect()
    assert {r["id"]: r["d"] for r in rows} == {
        0: dt.datetime(2024, 1, 15),
        1: dt.datetime(1969, 12, 31),
    }
