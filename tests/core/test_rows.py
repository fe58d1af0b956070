from __future__ import annotations

from decimal import Decimal

import pytest

from airflow_cdc.core.ddl import parse_tables
from airflow_cdc.core.events import DELETE, UPSERT
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.rows import decode_row

(SPEC,) = parse_tables(
    "CREATE TABLE order_items (order_id INT, item_id INT, quantity INT, price NUMERIC(10,2), "
    "PRIMARY KEY (order_id, item_id))"
)


def test_upsert_decodes_the_full_after_image() -> None:
    after = {"order_id": 1001, "item_id": 42, "quantity": 5, "price": "29.99", "new_col": 7}
    row = decode_row(SPEC, UPSERT, None, after)
    assert row.values == {"order_id": 1001, "item_id": 42, "quantity": 5, "price": Decimal("29.99")}
    assert row.extra == {"new_col": "7"}
    assert not row.is_delete


def test_delete_is_keyed_by_before_and_nulls_the_rest() -> None:
    row = decode_row(SPEC, DELETE, {"order_id": 1001, "item_id": 42}, None)
    assert row.is_delete
    assert row.values["quantity"] is None
    assert (
        row.key_text == decode_row(SPEC, UPSERT, None, {"order_id": 1001, "item_id": 42}).key_text
    )


def test_missing_key_column() -> None:
    with pytest.raises(RecordFormatError) as info:
        decode_row(SPEC, UPSERT, None, {"order_id": 1, "quantity": 2})
    assert info.value.reason == "missing_key"


def test_special_values_are_recorded() -> None:
    row = decode_row(SPEC, UPSERT, None, {"order_id": 1, "item_id": 2, "price": "NaN"})
    assert row.values["price"] is None
    assert row.special == {"price": "NaN"}


@pytest.mark.parametrize("kind", [UPSERT, DELETE])
def test_a_special_value_in_a_key_column_is_refused(kind: str) -> None:
    """NaN or infinity in a key column: its type stores it only as null (the value goes to
    the special-values map), and a null key matches no row, so each change would insert
    another row and a delete would delete nothing."""
    (temporal,) = parse_tables(
        "CREATE TABLE prices (sku NUMERIC(10,2), valid_to TIMESTAMPTZ, amount INT,"
        " PRIMARY KEY (sku, valid_to))"
    )
    infinity = 9_223_372_036_825_200_000  # DSQL's timestamp +infinity
    image = {"sku": "NaN", "valid_to": infinity, "amount": 1}
    before, after = (image, None) if kind == DELETE else (None, image)
    with pytest.raises(RecordFormatError) as info:
        decode_row(temporal, kind, before, after)
    assert info.value.reason == "special_key"
    assert "sku holds NaN, valid_to holds infinity" in str(info.value)
    fine = {"sku": "1.5", "valid_to": "2026-01-01T00:00:00Z", "amount": 1}
    assert decode_row(temporal, UPSERT, None, fine).values["sku"] == Decimal("1.50")


def test_an_upsert_without_its_image_is_refused_even_with_a_key() -> None:
    """A delete is named by its key alone; an upsert with no ``after`` (a YDB changefeed in
    UPDATES or OLD_IMAGE mode written as Debezium, a CDL UPDATE with null ``data``) would
    otherwise null every other column of the row."""
    key = {"order_id": 1, "item_id": 2}
    assert decode_row(SPEC, DELETE, None, None, key=key).is_delete
    with pytest.raises(RecordFormatError) as info:
        decode_row(SPEC, UPSERT, {"order_id": 1, "item_id": 2, "quantity": 3}, None, key=key)
    assert info.value.reason == "missing_image"


def test_the_rows_own_key_columns_win_over_a_message_key_that_is_not_the_primary_key() -> None:
    """CockroachDB's ``key_column`` option keys the messages by another column ("WITH
    key_column='office', unordered"), so a message key may not be the row's primary key. The
    image is the row: its key columns stand, and the key fills only those it lacks (a delete
    without a before image)."""
    after = {"order_id": 1, "item_id": 2, "quantity": 7}
    row = decode_row(SPEC, UPSERT, None, after, key=[7, 7])
    assert (row.values["order_id"], row.values["item_id"]) == (1, 2)
    deleted = decode_row(SPEC, DELETE, {"order_id": 1, "item_id": 2}, None, key=[7, 7])
    assert (deleted.values["order_id"], deleted.values["item_id"]) == (1, 2)
    update = {"quantity": 3}  # YDB's update: the key columns only in the key
    filled = decode_row(SPEC, UPSERT, None, update, key=[4, 5])
    assert (filled.values["order_id"], filled.values["item_id"]) == (4, 5)
    assert decode_row(SPEC, DELETE, None, None, key=[4, 5]).values["order_id"] == 4
    # A key of another arity (``key_column`` on a two-column key) is not read either...
    assert decode_row(SPEC, UPSERT, None, after, key=[7]).values["item_id"] == 2
    # ...unless the row needs it.
    with pytest.raises(RecordFormatError) as info:
        decode_row(SPEC, UPSERT, None, update, key=[4])
    assert info.value.reason == "key_mismatch"


def test_a_date_typed_value_in_a_column_of_instants_is_its_midnight() -> None:
    """A Connect ``Date`` is days since the epoch; a table that holds the column as
    instants (widened from DATE to TIMESTAMP, or declared so) reads its integers as
    microseconds (seconds for YDB's Datetime64). A late change still typed ``date`` names
    its day's midnight, 2024-01-15 here: 19,737 days after 1970-01-01, not 19,737 µs."""
    import datetime as dt

    (spec,) = parse_tables("CREATE TABLE t (id bigint PRIMARY KEY, d timestamp, s Datetime64)")
    after = {"id": 1, "d": 19737, "s": 19737}
    dated = decode_row(spec, UPSERT, None, after, types={"id": "bigint", "d": "date", "s": "date"})
    midnight = dt.datetime(2024, 1, 15)
    assert (dated.values["d"], dated.values["s"]) == (midnight, midnight)
    # Typed as the column is (or untyped), the integer is in the column's own unit.
    same = decode_row(spec, UPSERT, None, after, types={"d": "timestamp"})
    assert same.values["d"] == dt.datetime(1970, 1, 1, 0, 0, 0, 19737)
