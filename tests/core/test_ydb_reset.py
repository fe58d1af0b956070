"""YDB's third row operation, ``reset`` (REPLACE INTO), beside ``update`` and ``erase``.

The rules, from the YDB CDC reference (https://ydb.tech/docs/en/concepts/cdc?version=v26.1; the
older seed document names only updates and erases):

* "Replacements: overwriting the values of the specified columns, the values of the unspecified
  columns are replaced by their default values. Query example: REPLACE INTO."
* "reset: Replacement flag. Present if a record matches the replacement operation. In UPDATES
  mode, it also contains the names and values of the columns for which a value is set."
* "The same record may not contain the update, reset and erase fields simultaneously ...
  However, each record contains one of these fields (any operation is either an update, a
  replacement, or an erase)."
* YDB's serializer (ydb/core/tx/datashard/change_record_cdc_serializer.cpp) writes
  ``json["reset"]`` as a map and fills it with the columns only ``if (!hasAnyImage)``: beside
  ``newImage`` / ``oldImage`` it is ``{}``.
"""

from __future__ import annotations

import json

import pytest

from airflow_cdc.core.ddl import parse_tables
from airflow_cdc.core.events import ChangeRecord, Message, TableRef
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats import parser_for
from airflow_cdc.core.rows import decode_row

TABLE = parse_tables(
    "CREATE TABLE t (k1 BIGINT, k2 TEXT, payload TEXT, note TEXT, PRIMARY KEY (k1, k2))"
)[0]
TOPIC = "shop/orders/feed"


def parse(value: dict[str, object], position: str = "00000000000000000001"):
    return parser_for("ydb")(Message(json.dumps(value), None, position, TOPIC))


def change(value: dict[str, object], **kwargs: str) -> ChangeRecord:
    record = parse(value, **kwargs)
    assert isinstance(record, ChangeRecord)
    return record


def format_error(value: dict[str, object]) -> RecordFormatError:
    with pytest.raises(RecordFormatError) as err:
        parse(value)
    return err.value


# --- UPDATES mode ---------------------------------------------------------------------------


def test_reset_in_updates_mode_is_a_whole_row_of_the_named_columns():
    # REPLACE INTO t (k1, k2, payload) VALUES (1, "one", "lorem ipsum"): the record names the
    # columns set; "note" is not named, so it took its default.
    record = change({"key": [1, "one"], "reset": {"payload": "lorem ipsum"}})
    assert record.op == "u" and record.kind == "upsert"
    assert record.after == {"payload": "lorem ipsum"}
    assert record.partial is False
    assert record.before is None
    assert record.key == [1, "one"]
    assert record.table == TableRef("", "orders")
    assert record.chunked == {}
    assert record.commit_ts_us == 0


def test_reset_naming_no_column_still_replaces_the_whole_row():
    # REPLACE INTO t (k1, k2) VALUES (1, "one"): every non-key column takes its default.
    record = change({"key": [1, "one"], "reset": {}})
    assert record.op == "u" and record.after == {} and record.partial is False
    assert record.key == [1, "one"]


def test_reset_nulls_the_columns_it_does_not_name_where_update_keeps_them():
    reset = change({"key": [1, "one"], "reset": {"payload": "lorem ipsum"}})
    row = decode_row(TABLE, reset.kind, reset.before, reset.after, reset.key, reset.partial)
    assert row.values == {"k1": 1, "k2": "one", "payload": "lorem ipsum", "note": None}
    assert row.set_columns is None  # every column is written

    update = change({"key": [1, "one"], "update": {"payload": "lorem ipsum"}})
    row = decode_row(TABLE, update.kind, update.before, update.after, update.key, update.partial)
    assert row.set_columns == ["payload"]  # "note" keeps its value


def test_reset_is_ordered_by_its_virtual_timestamp_like_any_record():
    reset = change({"key": [1, "one"], "reset": {"payload": "a"}, "ts": [1670792400890, 7]})
    later = change({"key": [1, "one"], "update": {"payload": "b"}, "ts": [1670792400890, 8]})
    assert reset.commit_ts_us == 1670792400890 * 1000
    assert reset.sequence < later.sequence


# --- with row images ------------------------------------------------------------------------


def test_reset_beside_new_image_is_the_row_of_the_new_image():
    # NEW_IMAGE mode: "reset": {} is only the flag; newImage is the row after REPLACE INTO.
    record = change(
        {"key": [1, "one"], "reset": {}, "newImage": {"payload": "lorem ipsum", "note": None}}
    )
    assert record.op == "u"
    assert record.after == {"payload": "lorem ipsum", "note": None}
    assert record.before is None
    assert record.partial is False
    assert record.key == [1, "one"]


def test_reset_beside_new_and_old_images_keeps_both():
    record = change(
        {
            "key": [1, "one"],
            "reset": {},
            "newImage": {"payload": "lorem ipsum", "note": None},
            "oldImage": {"payload": "dolor", "note": "kept before"},
        }
    )
    assert record.op == "u"
    assert record.after == {"payload": "lorem ipsum", "note": None}
    assert record.before == {"payload": "dolor", "note": "kept before"}
    assert record.partial is False


def test_reset_with_only_an_old_image_cannot_be_applied():
    err = format_error({"key": [1, "one"], "reset": {}, "oldImage": {"payload": "dolor"}})
    assert err.reason == "no_new_image"
    assert str(err) == (
        "no_new_image: an OLD_IMAGE changefeed's reset record does not carry the row after"
        " the change"
    )


# --- malformed records ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kind"),
    [([], "list"), (["payload"], "list"), ("payload", "str"), (None, "null"), (1, "int")],
)
def test_reset_that_is_not_an_object_is_an_invalid_image(value: object, kind: str):
    err = format_error({"key": [1, "one"], "reset": value})
    assert err.reason == "invalid_image"
    assert str(err) == f"invalid_image: reset must be an object, got {kind}"


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ({"key": [1], "update": {}, "reset": {}}, "update, reset"),
        ({"key": [1], "reset": {}, "erase": {}}, "reset, erase"),
        ({"key": [1], "update": {}, "erase": {}}, "update, erase"),
        ({"key": [1], "update": {}, "reset": {}, "erase": {}}, "update, reset, erase"),
        ({"key": [1]}, "none"),
        ({"key": [1], "replace": {}}, "none"),
    ],
)
def test_a_record_holds_exactly_one_operation(value: dict[str, object], found: str):
    err = format_error(value)
    assert err.reason == "unknown_operation"
    assert str(err) == (
        f"unknown_operation: a record holds exactly one of update, reset, erase; this one"
        f" holds {found}"
    )


# --- update and erase are unchanged ---------------------------------------------------------


def test_update_in_updates_mode_is_still_partial():
    # Seed: "Sample record of an update in UPDATES mode".
    record = change({"key": [1, "one"], "update": {"payload": "lorem ipsum"}})
    assert record.op == "u" and record.partial is True
    assert record.after == {"payload": "lorem ipsum"} and record.before is None
    assert record.key == [1, "one"]


def test_update_beside_new_image_is_still_the_whole_row():
    record = change(
        {
            "key": [1, "one"],
            "update": {},
            "newImage": {"payload": "lorem ipsum", "note": None},
            "oldImage": {"payload": "dolor", "note": None},
        }
    )
    assert record.op == "u" and record.partial is False
    assert record.after == {"payload": "lorem ipsum", "note": None}
    assert record.before == {"payload": "dolor", "note": None}


def test_update_with_only_an_old_image_still_cannot_be_applied():
    err = format_error({"key": [1, "one"], "update": {}, "oldImage": {"payload": "dolor"}})
    assert err.reason == "no_new_image"
    assert str(err) == (
        "no_new_image: an OLD_IMAGE changefeed's update record does not carry the row after"
        " the change"
    )


def test_update_that_is_not_an_object_is_still_an_invalid_image():
    err = format_error({"key": [1, "one"], "update": ["payload"]})
    assert str(err) == "invalid_image: update must be an object, got list"


def test_erase_is_still_a_delete_keyed_by_the_key_array():
    # Seed: "Record of an erase": {"key": [2, "two"], "erase": {}}.
    record = change({"key": [2, "two"], "erase": {}})
    assert record.op == "d" and record.kind == "delete"
    assert record.after is None and record.before is None
    assert record.key == [2, "two"]
    assert record.partial is False
