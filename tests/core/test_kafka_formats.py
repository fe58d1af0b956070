"""The Kafka-borne formats, each envelope variant, with the seed documents' example records."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from airflow_cdc.core.ddl import parse_tables
from airflow_cdc.core.events import (
    HEARTBEAT,
    RESOLVED,
    TOMBSTONE,
    TRANSACTION,
    ChangeRecord,
    Control,
    Message,
    TransactionRef,
)
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats import parser_for
from airflow_cdc.core.formats.cockroach import parse_hlc, split_batch
from airflow_cdc.core.rows import decode_row, type_conflicts


def parse(fmt: str, value: object, key: object = None, position: str = "p1", topic=None):
    text = value if isinstance(value, str) or value is None else json.dumps(value)
    key_text = key if isinstance(key, str) or key is None else json.dumps(key)
    return parser_for(fmt)(Message(text, key_text, position, topic))


def change(fmt: str, value: object, **kwargs) -> ChangeRecord:
    record = parse(fmt, value, **kwargs)
    assert isinstance(record, ChangeRecord)
    return record


# --- YDB JSON -------------------------------------------------------------------------------

YDB_TABLE = parse_tables(
    "CREATE TABLE t (k1 BIGINT, k2 TEXT, payload TEXT, date DATE, PRIMARY KEY (k1, k2))"
)[0]


def test_ydb_updates_mode_holds_only_changed_columns_and_keys_by_position():
    # Seed: "Sample record of an update in UPDATES mode".
    record = change(
        "ydb", {"key": [1, "one"], "update": {"payload": "lorem ipsum", "date": "2022-02-22"}}
    )
    assert record.partial and record.kind == "upsert" and record.key == [1, "one"]
    row = decode_row(YDB_TABLE, record.kind, record.before, record.after, record.key, True)
    assert row.values["k1"] == 1 and row.values["k2"] == "one"
    assert row.set_columns == ["date", "payload"]
    assert str(row.values["date"]) == "2022-02-22"


def test_ydb_erase_is_a_delete_keyed_by_the_key_array():
    # Seed: "Record of an erase": {"key": [2, "two"], "erase": {}}.
    record = change("ydb", {"key": [2, "two"], "erase": {}})
    assert record.kind == "delete"
    row = decode_row(YDB_TABLE, record.kind, record.before, record.after, record.key)
    assert row.is_delete and row.values["k1"] == 2 and row.values["payload"] is None


def test_ydb_new_image_is_a_full_row_and_old_image_alone_cannot_be_applied():
    record = change(
        "ydb",
        {
            "key": [1, 2, 3],
            "update": {},
            "newImage": {"textColumn": "value1", "intColumn": 101, "boolColumn": True},
            "oldImage": {"textColumn": None, "intColumn": 100, "boolColumn": False},
        },
    )
    assert not record.partial and record.after == {
        "textColumn": "value1",
        "intColumn": 101,
        "boolColumn": True,
    }
    with pytest.raises(RecordFormatError) as err:
        parse("ydb", {"key": [1], "update": {}, "oldImage": {"a": 1}})
    assert err.value.reason == "no_new_image"


def test_ydb_virtual_timestamps_order_and_without_them_the_offset_does():
    # Seed: "Record with virtual timestamps" ts [1670792400890, 562949953607163].
    record = change(
        "ydb",
        {
            "key": [1],
            "update": {"created": "2022-12-12T00:00:00.000000Z", "customer": "Name123"},
            "ts": [1670792400890, 562949953607163],
        },
    )
    later = change("ydb", {"key": [1], "update": {}, "ts": [1670792400890, 562949953607164]})
    assert record.sequence < later.sequence
    assert record.commit_ts_us == 1670792400890 * 1000
    first = change("ydb", {"key": [1], "update": {}}, position="00000000000000000009")
    second = change("ydb", {"key": [1], "update": {}}, position="00000000000000000010")
    assert first.sequence < second.sequence


def test_ydb_resolved_message_and_malformed_records():
    control = parse("ydb", {"resolved": [1670792400890, 562949953607163]})
    assert control == Control(RESOLVED, control.detail, 1670792400890 * 1000)
    for bad, reason in [
        ({"key": [1], "update": {}, "erase": {}}, "unknown_operation"),
        ({"update": {}}, "missing_field"),
        ({"key": [1], "update": {}, "ts": [1]}, "missing_field"),
    ]:
        with pytest.raises(RecordFormatError) as err:
            parse("ydb", bad)
        assert err.value.reason == reason


def test_ydb_table_comes_from_the_changefeed_topic():
    assert change("ydb", {"key": [1], "erase": {}}, topic="shop/orders/feed").table.name == "orders"


def test_ydb_key_array_must_match_the_declared_key():
    record = change("ydb", {"key": [1], "erase": {}})
    with pytest.raises(RecordFormatError) as err:
        decode_row(YDB_TABLE, record.kind, record.before, record.after, record.key)
    assert err.value.reason == "key_mismatch"


def test_ydb_debezium_takes_the_key_from_the_message_key():
    value = {
        "payload": {
            "op": "u",
            "after": {"payload": "x"},
            "source": {"connector": "ydb", "version": "1.0.0", "ts_ms": 1, "step": 5, "txId": 7},
        }
    }
    record = change("ydb-debezium", value, key={"payload": {"k1": 1, "k2": "one"}})
    assert (
        record.key == {"k1": 1, "k2": "one"}
        and record.sequence
        < change(
            "ydb-debezium",
            {**value, "payload": {**value["payload"], "source": {"step": 5, "txId": 8}}},
        ).sequence
    )
    deleted = change(
        "ydb-debezium",
        {"payload": {"op": "d", "source": {"step": 6, "txId": 1}}},
        key={"payload": {"k1": 1, "k2": "one"}},
    )
    row = decode_row(YDB_TABLE, deleted.kind, deleted.before, deleted.after, deleted.key)
    assert row.is_delete and row.values["k2"] == "one"


# --- CockroachDB ----------------------------------------------------------------------------

EMPLOYEES = parse_tables("CREATE TABLE employees (id INT PRIMARY KEY, name TEXT, office TEXT)")[0]


def test_crdb_updated_is_compared_exactly_not_as_a_float():
    assert parse_hlc("1701102296662969433.0000000000") == (1701102296662969433, 0)
    a = change(
        "cockroachdb", {"after": {"id": 1}, "key": [1], "updated": "1701102296662969433.0000000001"}
    )
    b = change(
        "cockroachdb", {"after": {"id": 1}, "key": [1], "updated": "1701102296662969433.0000000002"}
    )
    # As floats both are 1.7011022966629694e18: equal. The sequences are not.
    assert float("1701102296662969433.0000000001") == float("1701102296662969433.0000000002")
    assert a.sequence < b.sequence


def test_crdb_wrapped_with_key_in_value_and_the_kafka_key():
    # Seed: the per-key ordering example.
    record = change(
        "cockroachdb",
        {
            "after": {"id": 1, "name": "Terry", "office": "new york city"},
            "key": [1],
            "updated": "1701102296662969433.0000000000",
        },
    )
    row = decode_row(EMPLOYEES, record.kind, record.before, record.after, record.key)
    assert row.values == {"id": 1, "name": "Terry", "office": "new york city"}
    kafka = change("cockroachdb", {"after": {"id": 5, "name": "Robbie"}}, key=[5])
    assert kafka.key == [5]


def test_crdb_wrapped_with_diff_keeps_before():
    record = change(
        "cockroachdb",
        {"after": {"id": 1, "name": "b"}, "before": {"id": 1, "name": "a"}, "key": [1]},
    )
    assert record.before == {"id": 1, "name": "a"} and record.after == {"id": 1, "name": "b"}


def test_crdb_deletes_as_after_null_or_an_empty_value():
    # Seed: "[5] {"after": null}".
    record = change("cockroachdb", {"after": None}, key=[5])
    row = decode_row(EMPLOYEES, record.kind, record.before, record.after, record.key)
    assert row.is_delete and row.values["id"] == 5
    empty = change("cockroachdb", "", key=[6])
    assert empty.kind == "delete" and empty.key == [6]


def test_crdb_bare_row_and_key_only_envelopes():
    # Seed: envelope=bare with "__crdb__": {"key": [...]}.
    bare = change(
        "cockroachdb",
        {
            "__crdb__": {"key": ["washington dc", "cd48e501-e86d-4019-9923-2fc9a964b264"]},
            "city": "washington dc",
            "status": "available",
        },
    )
    assert bare.key == ["washington dc", "cd48e501-e86d-4019-9923-2fc9a964b264"]
    assert "__crdb__" not in bare.after
    row = change("cockroachdb", {"id": 7, "name": "x"}, key=[7], position="00000000000000000003")
    assert row.after == {"id": 7, "name": "x"} and row.key == [7]
    with pytest.raises(RecordFormatError) as err:
        parse("cockroachdb", ["boston", "22222222-2222-4200-8000-000000000002"])
    assert err.value.reason == "key_only_envelope"


def test_crdb_resolved_messages_and_webhook_batches():
    control = parse("cockroachdb", {"resolved": "1701102330377135318.0000000000"})
    assert control.kind == RESOLVED and control.resolved_us == 1701102330377135
    # Seed: the webhook batch example.
    batch = {
        "payload": [
            {"after": {"a": 1, "b": "a"}, "key": [1], "topic": "foo"},
            {"after": {"a": 1, "b": "b"}, "key": [1], "topic": "foo"},
        ],
        "length": 2,
    }
    messages = split_batch(batch)
    assert messages is not None and len(messages) == 2
    assert change("cockroachdb", messages[1]).table.name == "foo"
    with pytest.raises(RecordFormatError):
        split_batch({**batch, "length": 3})
    with pytest.raises(RecordFormatError) as err:
        parse("cockroachdb", batch)
    assert err.value.reason == "unsplit_batch"


def test_crdb_duplicates_share_a_sequence():
    message = {
        "after": {"id": 3, "name": "Ash"},
        "key": [3],
        "updated": "1701102316388801052.0000000000",
    }
    first = change("cockroachdb", message, position="1")
    again = change("cockroachdb", message, position="9")
    assert first.sequence == again.sequence


# --- Arcion ---------------------------------------------------------------------------------

REGION_KEY = {
    "schema": {
        "type": "struct",
        "optional": False,
        "fields": [{"type": "int32", "optional": False, "field": "r_regionkey"}],
    },
    "payload": {"r_regionkey": 1},
}
REGION_FIELDS = [
    {"type": "int32", "optional": False, "field": "r_regionkey"},
    {"type": "string", "optional": False, "field": "r_name"},
    {"type": "string", "optional": True, "field": "r_comment"},
]
REGION_SCHEMA = {
    "type": "struct",
    "fields": [
        {"type": "struct", "optional": True, "field": "before", "fields": REGION_FIELDS},
        {"type": "struct", "optional": True, "field": "after", "fields": REGION_FIELDS},
    ],
}
REGION = parse_tables(
    "CREATE TABLE tpch.region (r_regionkey INT PRIMARY KEY, r_name TEXT, r_comment TEXT)"
)[0]


def arcion(payload: dict) -> dict:
    return {"schema": REGION_SCHEMA, "payload": payload}


def realtime(pos: int) -> dict:
    return {
        "connector": "MYSQL",
        "db": "tpch",
        "schema": None,
        "table": "region",
        "snapshot": "false",
        "file": "mysql-log.000013",
        "pos": pos,
        "row": 1,
        "ts_ms": 1680799780000,
    }


def test_arcion_snapshot_event_never_beats_a_realtime_one():
    snap = change(
        "arcion",
        arcion(
            {
                "before": {},
                "after": {"r_regionkey": 1, "r_name": "AMERICA", "r_comment": "old"},
                "source": {
                    "connector": "MYSQL",
                    "db": "tpch",
                    "table": "region",
                    "snapshot": "true",
                    "ts_ms": None,
                    "file": None,
                    "pos": None,
                    "row": None,
                },
                "op": "r",
            }
        ),
        key=REGION_KEY,
    )
    update = change(
        "arcion",
        arcion(
            {
                "before": {"r_regionkey": 1, "r_name": "AMERICA", "r_comment": "old"},
                "after": {"r_regionkey": 1, "r_name": "AMERICA", "r_comment": "TestReplication"},
                "source": realtime(53709),
                "op": "u",
            }
        ),
        key=REGION_KEY,
        position="0",
    )
    assert snap.before is None  # "before": {} is no image
    assert snap.sequence < update.sequence and snap.table.qualified == "tpch.region"
    assert update.types == {"r_regionkey": "integer", "r_name": "text", "r_comment": "text"}


def test_arcion_delete_with_empty_after_then_a_null_tombstone():
    deleted = change(
        "arcion",
        arcion(
            {
                "before": {"r_regionkey": 1, "r_name": "AMERICA", "r_comment": "TestReplication"},
                "after": {},
                "source": realtime(59647),
                "op": "d",
            }
        ),
        key=REGION_KEY,
    )
    row = decode_row(REGION, deleted.kind, deleted.before, deleted.after, deleted.key)
    assert row.is_delete and row.values["r_regionkey"] == 1
    tombstone = parse("arcion", None, key=REGION_KEY)
    assert isinstance(tombstone, Control) and tombstone.kind == TOMBSTONE


def test_binlog_position_orders_across_files():
    a = change(
        "arcion",
        arcion(
            {
                "after": {"r_regionkey": 1},
                "source": {**realtime(900), "file": "mysql-log.000013"},
                "op": "u",
            }
        ),
    )
    b = change(
        "arcion",
        arcion(
            {
                "after": {"r_regionkey": 1},
                "source": {**realtime(5), "file": "mysql-log.000014"},
                "op": "u",
            }
        ),
    )
    assert a.sequence < b.sequence


# --- Huawei CDL -----------------------------------------------------------------------------

# The seed's two samples, read verbatim: CDL JSON (1.0), then open-source Debezium JSON (2.0).
SEED = Path(__file__).resolve().parents[2].parent / "shared" / "seeds" / "004_5572f1559f40c1ec.txt"
CDL_10, CDL_20 = (
    json.loads(line)
    for line in SEED.read_text(encoding="utf-8").splitlines()
    if line.strip().startswith('{"schema"')
)
CT = parse_tables(
    "CREATE TABLE public.ct_pg2hudi (id INT PRIMARY KEY, count1 BIGINT, time1 TIMESTAMPTZ,"
    ' "decimalNum" NUMERIC(20, 4))'
)[0]


def test_cdl_10_sample_from_the_seed():
    record = change("cdl", CDL_10)
    assert record.table.qualified == "public.ct_pg2hudi" and record.op == "c"
    assert record.key == {"id": 34} and record.transaction_id == "57227595"
    assert record.types["time1"] == "timestamptz" and record.types["decimalNum"] == "numeric"
    row = decode_row(CT, record.kind, record.before, record.after, record.key)
    assert row.values["count1"] == 13


def test_cdl_orders_by_lsn_and_deletes_use_before():
    payload = CDL_10["payload"]
    later = {
        **payload,
        "OPERATION": "DELETE",
        "data": None,
        "before": {"id": 34, "count1": 13},
        "transaction": {"properties": [{"name": "lsn", "value": 163955221009}]},
    }
    deleted = change("cdl", {"schema": CDL_10["schema"], "payload": later})
    assert deleted.kind == "delete" and change("cdl", CDL_10).sequence < deleted.sequence


def test_cdl_heartbeats_advance_the_resolved_timestamp_and_are_never_rows():
    heartbeat = {**CDL_10["payload"], "message_type": "1", "OPERATION": "HEARTBEAT", "data": None}
    control = parse("cdl", {"schema": CDL_10["schema"], "payload": heartbeat})
    assert isinstance(control, Control) and control.kind == HEARTBEAT
    assert control.resolved_us == 1707047996013 * 1000


def test_a_cdl_20_heartbeat_is_placed_on_the_database_clock():
    # Seed, the field table: "source.ts_ms | Timestamp when a database change occurs", while
    # the payload's ts_ms is the "Timestamp when the source connector processes an event",
    # later by the connector's lag (the 2.0 sample: 1707048891235 against 1707048984208).
    heartbeat = {**CDL_20["payload"], "message_type": "1", "after": None}
    control = parse("cdl", {"schema": None, "payload": heartbeat})
    assert isinstance(control, Control) and control.kind == HEARTBEAT
    assert control.resolved_us == 1707048891235 * 1000
    # With only the connector's time, the heartbeat says nothing about the database.
    bare = {"message_type": "1", "message_version": "2.0", "ts_ms": 1707048984208}
    control = parse("cdl", {"schema": None, "payload": bare})
    assert isinstance(control, Control) and control.resolved_us is None


def test_cdl_20_is_debezium_with_unique():
    # Seed: the open-source Debezium JSON sample (message_version 2.0).
    value = CDL_20
    assert value["payload"]["message_version"] == "2.0"
    record = change("cdl", value)
    assert record.key == {"id": 35} and record.table.qualified == "public.ct_pg2hudi"
    assert record.sequence == change("debezium", value).sequence


def test_cdl_20_timestamps_are_text_of_the_column_10_types_as_a_timestamp():
    # Seed: the same column time1 is "org.apache.kafka.connect.data.Timestamp" (int64) in the
    # 1.0 sample and {"type":"string","name":"com.xxx.cdc.data.timestamp"} in the 2.0 one, so
    # a table declared for one takes the other; the 2.0 sample's null is no type conflict.
    assert change("cdl", CDL_10).types["time1"] == change("cdl", CDL_20).types["time1"]
    assert "time1" not in type_conflicts(CT, change("cdl", CDL_20).types)
    after = {**CDL_20["payload"]["after"], "time1": "2024-02-04 12:34:56.789"}
    record = change("cdl", {**CDL_20, "payload": {**CDL_20["payload"], "after": after}})
    row = decode_row(CT, record.kind, record.before, record.after, record.key)
    assert row.values["time1"] == dt.datetime(2024, 2, 4, 12, 34, 56, 789000, tzinfo=dt.UTC)


# --- Debezium and Kafka Connect types -------------------------------------------------------


def test_postgres_orders_by_lsn_and_snapshot_reads_lose_ties():
    base = {
        "before": None,
        "after": {"id": 1},
        "op": "r",
        "source": {
            "connector": "postgresql",
            "schema": "inventory",
            "table": "products",
            "snapshot": "true",
            "lsn": 34078720,
            "ts_ms": 1,
        },
    }
    read = change("debezium", base)
    streamed = change(
        "debezium", {**base, "op": "u", "source": {**base["source"], "snapshot": "false"}}
    )
    later = change(
        "debezium",
        {**base, "op": "u", "source": {**base["source"], "lsn": 34131104, "snapshot": "false"}},
    )
    assert read.sequence < streamed.sequence < later.sequence


def test_connect_logical_types_are_normalized():
    fields = [
        {
            "type": "bytes",
            "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "2"},
            "field": "price",
        },
        {"type": "int32", "name": "io.debezium.time.Date", "field": "day"},
        {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "field": "at"},
        {"type": "int64", "name": "org.apache.kafka.connect.data.Timestamp", "field": "ms"},
        {"type": "struct", "fields": [], "field": "doc"},
    ]
    schema = {"type": "struct", "fields": [{"type": "struct", "field": "after", "fields": fields}]}
    value = {
        "schema": schema,
        "payload": {
            "op": "c",
            "source": {"table": "t", "schema": "s", "lsn": 1},
            "after": {"price": "MDk=", "day": 19000, "at": 5, "ms": 7, "doc": {"b": 1}},
        },
    }
    record = change("debezium", value)
    assert record.after == {"price": "123.45", "day": 19000, "at": 5, "ms": 7000, "doc": '{"b":1}'}
    assert record.types == {
        "price": "numeric(38,2)",
        "day": "date",
        "at": "timestamp",
        "ms": "timestamptz",
        "doc": "json",
    }


def test_type_conflicts_are_reported_and_narrower_values_fit():
    spec = parse_tables("CREATE TABLE t (id INT PRIMARY KEY, age BIGINT)")[0]
    row = decode_row(spec, "upsert", None, {"id": 1, "age": 5}, None, False, {"age": "integer"})
    assert row.values["age"] == 5
    with pytest.raises(RecordFormatError) as err:
        decode_row(spec, "upsert", None, {"id": 1, "age": "x"}, None, False, {"age": "text"})
    assert err.value.reason == "type_conflict" and "age" in str(err.value)


def test_a_null_kafka_value_is_a_tombstone_not_a_keyless_delete():
    record = parse("debezium", None, key={"id": 1})
    assert isinstance(record, Control) and record.kind == TOMBSTONE


# --- Debezium transaction metadata ------------------------------------------------------------
# The examples of Debezium's documentation ("Transaction metadata"): BEGIN and END events on
# the transaction topic, and the ``transaction`` block of each change event.


def test_transaction_boundaries_are_control_messages_that_count_the_events():
    begin = parse("debezium", {"status": "BEGIN", "id": "571", "event_count": None})
    assert isinstance(begin, Control) and begin.kind == TRANSACTION
    assert begin.transaction is not None and begin.transaction.status == "BEGIN"
    end = parse(
        "debezium",
        {
            "schema": {"type": "struct"},
            "payload": {
                "status": "END",
                "id": "571",
                "ts_ms": 1486500577691,
                "event_count": 2,
                "data_collections": [
                    {"data_collection": "s1.a", "event_count": 1},
                    {"data_collection": "s2.a", "event_count": 1},
                ],
            },
        },
    )
    assert isinstance(end, Control) and end.kind == TRANSACTION
    assert end.transaction is not None
    assert (end.transaction.id, end.transaction.event_count) == ("571", 2)
    assert end.transaction.collections == {"s1.a": 1, "s2.a": 1}


def test_a_change_keeps_its_place_in_its_transaction():
    value = {
        "before": None,
        "after": {"pk": "2", "aa": "1"},
        "source": {"schema": "s1", "table": "a", "lsn": 7, "txId": 571},
        "op": "c",
        "ts_ms": "1580390884335",
        "transaction": {"id": "571", "total_order": "1", "data_collection_order": "1"},
    }
    record = change("debezium", value)
    assert record.transaction == TransactionRef("571", 1)
    assert record.transaction_id == "571"
    assert change("debezium", {**value, "transaction": None}).transaction is None


@pytest.mark.parametrize(
    "payload",
    [
        {"status": "END", "id": "9", "event_count": -1, "data_collections": []},
        {"status": "END", "id": "9", "event_count": "two", "data_collections": []},
        {"status": "END", "id": "", "event_count": 0, "data_collections": []},
        {"status": "END", "id": "9", "event_count": 2, "data_collections": {"s.a": 2}},
        {
            "status": "END",
            "id": "9",
            "event_count": 3,
            "data_collections": [{"data_collection": "s.a", "event_count": 1}],
        },
        {"status": "END", "id": "9", "event_count": 1, "data_collections": [{"event_count": 1}]},
    ],
)
def test_a_malformed_transaction_boundary_is_a_bad_record(payload):
    with pytest.raises(RecordFormatError) as err:
        parse("debezium", payload)
    assert err.value.reason == "bad_transaction"


def test_a_malformed_transaction_block_is_a_bad_record():
    value = {
        "after": {"id": 1},
        "source": {"schema": "s", "table": "t", "lsn": 1},
        "op": "c",
        "transaction": {"total_order": 1},
    }
    with pytest.raises(RecordFormatError) as err:
        parse("debezium", value)
    assert err.value.reason == "bad_transaction"


# --- A message key's values, in the form of the image's ----------------------------------------
# A key column of a Connect logical type is encoded in the key as in the value: a MySQL
# DATETIME key (io.debezium.time.Timestamp) in milliseconds, a DECIMAL key in Base64. The key
# names the row, so its values must reach the decoders as the image's do.

CREATED = {"type": "int64", "name": "io.debezium.time.Timestamp", "field": "created"}
PRICE = {
    "type": "bytes",
    "name": "org.apache.kafka.connect.data.Decimal",
    "parameters": {"scale": "2"},
    "field": "price",
}
KEY_FIELDS = [CREATED, PRICE]
KEYED_SCHEMA = {
    "type": "struct",
    "fields": [
        {
            "type": "struct",
            "field": "before",
            "fields": [*KEY_FIELDS, {"type": "string", "field": "n"}],
        },
        {
            "type": "struct",
            "field": "after",
            "fields": [*KEY_FIELDS, {"type": "string", "field": "n"}],
        },
    ],
}
# 2023-11-14T22:13:20Z in milliseconds; -26588.24 as the Base64 of its unscaled two's complement.
KEY_VALUES = {"created": 1_700_000_000_000, "price": "1234"}
NORMALIZED = {"created": 1_700_000_000_000_000, "price": "-26588.24"}


def keyed(op: str = "u") -> dict:
    payload = {
        "op": op,
        "before": {**KEY_VALUES, "n": "a"} if op == "d" else None,
        "after": None if op == "d" else {**KEY_VALUES, "n": "b"},
        "source": {"schema": "s", "table": "t", "lsn": 5},
    }
    return {"schema": KEYED_SCHEMA, "payload": payload}


@pytest.mark.parametrize("op", ["u", "d"])
def test_a_key_with_its_schema_is_normalized_by_it(op):
    key = {"schema": {"type": "struct", "fields": KEY_FIELDS}, "payload": KEY_VALUES}
    record = change("debezium", keyed(op), key=key)
    assert record.key == NORMALIZED
    image = record.before if op == "d" else record.after
    assert image is not None and {k: image[k] for k in NORMALIZED} == NORMALIZED


def test_a_key_without_its_schema_is_normalized_by_the_values_schema():
    for key in (KEY_VALUES, {"schema": None, "payload": KEY_VALUES}):
        assert change("debezium", keyed(), key=key).key == NORMALIZED
    # A column the schemas do not name is kept as it is.
    assert change("debezium", keyed(), key={"other": 7}).key == {"other": 7}
    # Neither side typed: nothing to normalize by.
    bare = {**keyed()["payload"], "after": {"created": 1, "n": "b"}}
    assert change("debezium", bare, key={"created": 1}).key == {"created": 1}


def test_a_decimal_of_a_vast_scale_keeps_its_digits_or_is_refused():
    def value(scale: int, unscaled: str) -> dict:
        fields = [{**PRICE, "parameters": {"scale": str(scale)}}]
        after = {"type": "struct", "field": "after", "fields": fields}
        payload = {"op": "c", "after": {"price": unscaled}, "source": {"table": "t", "lsn": 1}}
        return {"schema": {"type": "struct", "fields": [after]}, "payload": payload}

    # 123456789 (Base64 "B1vNFQ==") at a scale past the default context's exponent limit.
    record = change("debezium", value(1_000_030, "B1vNFQ=="))
    assert record.types == {"price": "text"}
    assert record.after == {"price": "1.23456789E-1000022"}
    with pytest.raises(RecordFormatError) as err:
        parse("debezium", value(10**21, "AQ=="))
    assert err.value.reason == "invalid_record"


def test_a_key_schema_is_read_for_the_columns_it_names_and_the_value_schema_for_the_rest():
    # The value's schema names neither key column's type: only the key's schema can.
    plain = {
        "type": "struct",
        "fields": [
            {"type": "struct", "field": "after", "fields": [{"type": "string", "field": "n"}]}
        ],
    }
    value = {"schema": plain, "payload": {**keyed()["payload"], "after": {"n": "b"}}}
    key = {"schema": {"type": "struct", "fields": KEY_FIELDS}, "payload": KEY_VALUES}
    assert change("debezium", value, key=key).key == NORMALIZED
    # A key schema naming one column: the other is read by the value's schema.
    key = {"schema": {"type": "struct", "fields": [PRICE]}, "payload": KEY_VALUES}
    assert change("debezium", keyed(), key=key).key == NORMALIZED


def test_a_key_the_schemas_cannot_read_is_kept_as_written():
    # A key schema that does not plan is not used; the value's schema reads the key.
    odd = {"schema": {"type": "struct", "fields": [{"field": "x", "type": "int128"}]}}
    assert change("debezium", keyed(), key={**odd, "payload": KEY_VALUES}).key == NORMALIZED
    # A key converter that wrote a decimal as a number: the value's Base64 rule cannot read
    # it, and the number is the value.
    numeric = {"created": 1_700_000_000_000, "price": 12.34}
    assert change("debezium", keyed(), key=numeric).key == {
        "created": 1_700_000_000_000_000,
        "price": 12.34,
    }
    # Text the Decimal rule refuses (over-padded, no bytes, not ASCII) is kept as written too,
    # for the column's decoder to refuse: never a number it does not spell (over-padding and
    # no bytes once read as 0.00).
    for text in ("AAAA=", "", "AQÎ="):
        key = {"created": 1_700_000_000_000, "price": text}
        assert change("debezium", keyed(), key=key).key == {
            "created": 1_700_000_000_000_000,
            "price": text,
        }
