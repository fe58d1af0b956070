"""CockroachDB changefeed envelopes: which JSON objects are rows, deletes, resolved markers.

Expected outcomes are written from CockroachDB's documentation ("Changefeed Messages",
"Changefeed Message Envelope" and its field reference, "Change Data Capture Queries"), quoted
above each case; the messages are the documents' examples where they give one.
"""

from __future__ import annotations

import json

import pytest

from airflow_cdc.core.events import RESOLVED, ChangeRecord, Control, Message
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats import parser_for, resolved_marker

FORMAT = "cockroachdb"


def message(value: object, key: object = None, topic: str | None = "rides") -> Message:
    text = value if isinstance(value, str) or value is None else json.dumps(value)
    key_text = key if isinstance(key, str) or key is None else json.dumps(key)
    return Message(text, key_text, "00000000000000000007", topic)


def parse(value: object, key: object = None, topic: str | None = "rides"):
    return parser_for(FORMAT)(message(value, key, topic))


def change(value: object, key: object = None, topic: str | None = "rides") -> ChangeRecord:
    record = parse(value, key, topic)
    assert isinstance(record, ChangeRecord)
    return record


def rejected(value: object, key: object = None) -> RecordFormatError:
    with pytest.raises(RecordFormatError) as err:
        parse(value, key)
    return err.value


# --- Resolved timestamps --------------------------------------------------------------------


def test_resolved_inside_crdb_metadata_is_a_resolved_marker():
    # Field reference, __crdb__: "Other metadata like "updated" timestamps or resolved
    # timestamps would also appear inside __crdb__"; the bare envelope and CDC queries (bare by
    # default) send the marker as {"__crdb__": {"resolved": "<hlc>"}}.
    value = {"__crdb__": {"resolved": "1701102330377135318.0000000000"}}
    control = parse(value)
    assert isinstance(control, Control)
    assert control.kind == RESOLVED
    assert control.resolved_us == 1701102330377135  # 1701102330377135318 ns, in µs
    assert control.detail == "resolved 1701102330377135318.0000000000"
    # Landing reads every in-band marker through resolved_marker: the feed's horizon advances.
    assert resolved_marker(FORMAT, message(value)) == 1701102330377135


def test_top_level_resolved_marker_is_unchanged():
    # "resolved, which is emitted for records representing resolved timestamps. These records
    # do not include an after value since they only function as checkpoints."
    value = {"resolved": "1701102330377135318.0000000000"}
    control = parse(value)
    assert isinstance(control, Control)
    assert control.kind == RESOLVED
    assert control.resolved_us == 1701102330377135
    assert control.detail == "resolved 1701102330377135318.0000000000"
    assert resolved_marker(FORMAT, message(value)) == 1701102330377135


def test_bare_resolved_marker_with_columns_is_quarantined():
    # The resolved timestamp "has its own envelope containing a resolved key and a timestamp
    # value as a string": a marker never carries a row.
    err = rejected({"__crdb__": {"resolved": "1701102330377135318.0000000000"}, "id": 1})
    assert err.reason == "invalid_resolved"


def test_a_bare_column_named_resolved_is_a_column_not_a_marker():
    # bare: "the message's top level is the row data" and metadata sits under __crdb__.
    value = {"__crdb__": {"key": [4]}, "id": 4, "resolved": True}
    record = change(value)
    assert record.kind == "upsert"
    assert record.after == {"id": 4, "resolved": True}
    assert resolved_marker(FORMAT, message(value)) is None


# --- Bare envelope rows ---------------------------------------------------------------------


def test_bare_row_with_updated_in_crdb_metadata():
    # CDC queries, "Filter columns" (CREATE CHANGEFEED ... WITH updated AS SELECT name, city):
    # {"__crdb__": {"updated": "1685718676799158675.0000000000"}, "city": "amsterdam", ...}
    record = change(
        {
            "__crdb__": {"updated": "1685718676799158675.0000000000"},
            "city": "amsterdam",
            "name": "Thomas Harris",
        },
        key=["amsterdam", "ae147ae1-47ae-4800-8000-000000000022"],
    )
    assert record.kind == "upsert"
    assert record.after == {"city": "amsterdam", "name": "Thomas Harris"}
    assert record.key == ["amsterdam", "ae147ae1-47ae-4800-8000-000000000022"]
    assert record.commit_ts_us == 1685718676799158  # from __crdb__.updated, not the offset
    assert record.before is None


def test_bare_row_orders_by_its_crdb_updated_timestamp():
    # "To compare two different rows for happens-before, compare the updated timestamp."
    first = change({"__crdb__": {"updated": "1685718676799158675.0000000001"}, "id": 1})
    second = change({"__crdb__": {"updated": "1685718676799158675.0000000002"}, "id": 1})
    assert first.sequence < second.sequence


def test_bare_row_columns_named_like_envelope_fields_stay_columns():
    # __crdb__ "holds the primary key for the row, while the rest of the object are the row's
    # columns at the top level": key, updated, before and topic here are the table's columns.
    record = change(
        {
            "__crdb__": {
                "key": [101],
                "updated": "1701102296662969433.0000000000",
                "topic": "orders",
            },
            "id": 101,
            "key": "k-101",
            "updated": "2024-01-02T03:04:05",
            "before": None,
            "topic": "news",
        }
    )
    assert record.after == {
        "id": 101,
        "key": "k-101",
        "updated": "2024-01-02T03:04:05",
        "before": None,
        "topic": "news",
    }
    assert record.key == [101]
    assert record.table.name == "orders"  # topic_in_value's __crdb__.topic names the table
    assert record.commit_ts_us == 1701102296662969


def test_cdc_prev_is_the_previous_row_not_a_column():
    # CDC queries: "cdc_prev: A tuple-typed column that gives changefeeds access to the
    # previous state of a row" (CREATE CHANGEFEED ... AS SELECT rider_id, vehicle_id, cdc_prev).
    record = change(
        {
            "__crdb__": {"updated": "1701102296662969433.0000000000"},
            "rider_id": "r-1",
            "vehicle_id": "v-2",
            "cdc_prev": {"rider_id": "r-1", "vehicle_id": "v-1"},
        }
    )
    assert record.after == {"rider_id": "r-1", "vehicle_id": "v-2"}
    assert record.before == {"rider_id": "r-1", "vehicle_id": "v-1"}
    # "For newly inserted rows in a table, the cdc_prev column will emit as NULL."
    inserted = change({"rider_id": "r-3", "vehicle_id": "v-3", "cdc_prev": None}, key=["r-3"])
    assert inserted.after == {"rider_id": "r-3", "vehicle_id": "v-3"} and inserted.before is None


def test_bare_messages_without_columns_are_quarantined():
    # Neither a row (no column) nor a resolved marker (no __crdb__.resolved).
    assert rejected({"__crdb__": {"updated": "1701102296662969433.0000000000"}}).reason == (
        "empty_row"
    )
    assert rejected({"cdc_prev": {"id": 1}}, key=[1]).reason == "empty_row"
    assert rejected({}, key=[1]).reason == "empty_row"


def test_crdb_metadata_must_be_an_object():
    assert rejected({"__crdb__": "1701102296662969433.0000000000", "id": 1}).reason == (
        "invalid_metadata"
    )


# --- Messages without after -----------------------------------------------------------------


def test_key_and_updated_without_after_is_not_a_row():
    # "In the default wrapped envelope, every message for an INSERT or UPDATE has an "after"
    # field with the new data"; "For DELETE operations, "after" will be NULL" ([5]
    # {"after": null}). key (key_in_value) and updated are envelope fields, so this is neither
    # an upsert nor a delete, and not a row of the row envelope either.
    err = rejected({"key": [99], "updated": "3.0"})
    assert err.reason == "missing_after"
    assert "['key', 'updated']" in str(err)


def test_before_without_after_is_not_a_delete():
    # before: "For deletes, "before" is the last state of the row" -- next to "after": null,
    # which is what makes the message a delete (CDC queries, "Capture delete messages":
    # {"after": null, "before": {...}}).
    err = rejected({"before": {"id": 99, "name": "x"}, "updated": "3.0"}, key=[99])
    assert err.reason == "missing_after"
    assert "not a delete" in str(err)
    full = {"before": {"id": 99}, "key": [99], "mvcc_timestamp": "3.0", "updated": "3.0"}
    assert rejected(full).reason == "missing_after"


def test_timestamps_alone_are_not_a_row():
    assert rejected({"updated": "1701102296662969433.0000000000"}, key=[1]).reason == (
        "missing_after"
    )
    assert rejected({"mvcc_timestamp": "1701102296662969433.0000000000"}).reason == (
        "missing_after"
    )


def test_enriched_schema_payload_is_named_not_read_as_a_row():
    # enriched_properties=schema: "the envelope will include a payload field that wraps the
    # entire message except for the "schema" fields".
    err = rejected(
        {
            "payload": {"after": {"id": 1}, "op": "c", "ts_ns": 1745353048801146000},
            "schema": {"name": "cockroachdb.envelope", "type": "struct"},
        }
    )
    assert err.reason == "unsupported_envelope"


def test_row_envelope_columns_named_like_envelope_fields_are_a_row():
    # row: "emits the row without any additional metadata fields": an object that also holds
    # other fields is a row, its key, value and topic are columns (a wrapped message never
    # carries columns at its top level), and topic does not rename the table.
    record = change({"key": "a", "value": "b", "topic": "news"}, key=["a"], topic="kv")
    assert record.kind == "upsert"
    assert record.after == {"key": "a", "value": "b", "topic": "news"}
    assert record.key == ["a"]
    assert record.table.name == "kv"


# --- Wrapped upserts and deletes, as before -------------------------------------------------


def test_wrapped_upsert_with_key_in_value_and_updated():
    # Seed: {"after": {"id": 1, "name": "Terry", ...}, "key": [1], "updated": "1701102..."}.
    record = change(
        {
            "after": {"id": 1, "name": "Terry", "office": "new york city"},
            "key": [1],
            "updated": "1701102296662969433.0000000000",
        },
        topic="employees",
    )
    assert record.kind == "upsert"
    assert record.after == {"id": 1, "name": "Terry", "office": "new york city"}
    assert record.before is None
    assert record.key == [1]
    assert record.commit_ts_us == 1701102296662969
    assert record.table.name == "employees"


def test_wrapped_insert_with_diff_has_a_null_before():
    # "For an insert into the table, the "before" field contains null".
    record = change({"after": {"id": 2, "price": 129.5}, "before": None}, key=[2])
    assert record.kind == "upsert"
    assert record.after == {"id": 2, "price": 129.5} and record.before is None


def test_wrapped_deletes():
    # "Deleting a row will result in a changefeed outputting the primary key of the deleted row
    # and a null value": [5] {"after": null}.
    record = change({"after": None}, key=[5])
    assert record.kind == "delete"
    assert record.key == [5] and record.after is None and record.before is None
    # CDC queries, "Capture delete messages" (envelope=wrapped, diff).
    deleted = change(
        {
            "after": None,
            "before": {"city": "washington dc", "id": "49a8c43d", "name": "Tina Jones"},
        },
        key=["washington dc", "49a8c43d"],
        topic="users",
    )
    assert deleted.kind == "delete"
    assert deleted.before == {"city": "washington dc", "id": "49a8c43d", "name": "Tina Jones"}
    assert deleted.key == ["washington dc", "49a8c43d"]
