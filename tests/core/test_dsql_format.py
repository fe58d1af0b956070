"""DSQL record parsing, against the examples of the Aurora DSQL CDC reference."""

from __future__ import annotations

import json

import pytest

from airflow_cdc.core.events import DELETE, UPSERT, ChunkRef, Fragment, TableRef
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats.dsql import parse_record

INSERT = (
    '{ "type": "full", "op": "c", "before": null, "after": {"order_id": 1001, "item_id": 42, '
    '"quantity": 5, "price": "29.99"}, "source": { "version": "1.0", "ts_ms": 1705318200000, '
    '"ts_ns": 1705318200000000000, "txId": "ffthunp5stx6ffs2vyfqoatmfu", "schema": "public", '
    '"table": "order_items", "db": "postgres", "cluster": "kmabugltfmjdaj2siqr2qbxgju" }, '
    '"ts_ms": 1705318200125, "ts_ns": 1705318200125483291 }'
)
DELETE_RECORD = (
    '{ "type": "full", "op": "d", "before": {"order_id": 1001, "item_id": 42}, "after": null, '
    '"source": { "version": "1.0", "ts_ms": 1705318400000, "ts_ns": 1705318400000000000, '
    '"txId": "xyzabc123def456ghi789jklmno", "schema": "public", "table": "order_items", '
    '"db": "postgres", "cluster": "kmabugltfmjdaj2siqr2qbxgju" }, "ts_ms": 1705318400125, '
    '"ts_ns": 1705318400125483291 }'
)
CHUNKED = (
    '{ "type": "chunked", "op": "c", "before": null, "after": null, "source": { "version": '
    '"1.0", "ts_ms": 1705318200000, "ts_ns": 1705318200000000000, "txId": '
    '"ffthunp5stx6ffs2vyfqoatmfu", "schema": "public", "table": "order_items", "db": '
    '"postgres", "cluster": "cluster-id" }, "chunked": { "after": { "chunk_id": "chunk-id", '
    '"total_fragments": 3, "crc32c": "2073618257" } }, "ts_ms": 1705318200125, '
    '"ts_ns": 1705318200125483291 }'
)


def test_insert_example_is_an_upsert_of_the_after_image() -> None:
    record = parse_record(INSERT)
    assert not isinstance(record, Fragment)
    assert record.table == TableRef("public", "order_items")
    assert record.kind == UPSERT
    assert record.after == {"order_id": 1001, "item_id": 42, "quantity": 5, "price": "29.99"}
    # "Use this field [source.ts_ns] to establish a total order of transactions."
    assert record.sequence == "01705318200000000000"
    assert record.commit_ts_us == 1705318200000000
    assert record.transaction_id == "ffthunp5stx6ffs2vyfqoatmfu"


def test_delete_example_is_keyed_by_before() -> None:
    record = parse_record(DELETE_RECORD)
    assert not isinstance(record, Fragment)
    assert record.kind == DELETE
    assert record.before == {"order_id": 1001, "item_id": 42}


@pytest.mark.parametrize("op", ["u", "x", "upsert", "c"])
def test_any_op_but_d_is_an_upsert(op: str) -> None:
    # "treat any unrecognized op value as an upsert by applying the after payload"
    record = parse_record(INSERT.replace('"op": "c"', f'"op": "{op}"'))
    assert not isinstance(record, Fragment)
    assert record.kind == UPSERT


def test_chunked_main_record_names_its_fragments() -> None:
    record = parse_record(CHUNKED)
    assert not isinstance(record, Fragment)
    assert record.after is None
    assert record.chunked == {"after": ChunkRef("chunk-id", 3, 2073618257)}


def test_fragment_example() -> None:
    text = '{ "type": "fragment", "chunk_id": "chunk-id", "index": 0, "data": "partial-JSON-text" }'
    assert parse_record(text) == Fragment("chunk-id", 0, "partial-JSON-text")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{not json", "malformed_json"),
        ("[1, 2]", "malformed_json"),
        ('{"type": "partial"}', "unknown_record_type"),
        ('{"op": "c"}', "unknown_record_type"),
        (INSERT.replace('"ts_ns": 1705318200000000000,', ""), "missing_field"),
        (INSERT.replace('"schema": "public",', ""), "missing_field"),
        (
            INSERT.replace('"after": {', '"other": {').replace('"before": null,', ""),
            "missing_image",
        ),
        (
            DELETE_RECORD.replace('"before": {"order_id": 1001, "item_id": 42}', '"before": null'),
            "missing_image",
        ),
        (CHUNKED.replace('"total_fragments": 3', '"total_fragments": 0'), "invalid_chunked"),
        ('{"type": "fragment", "chunk_id": "c", "index": -1, "data": ""}', "invalid_fragment"),
        ('{"type": "fragment", "chunk_id": "c", "index": true, "data": ""}', "missing_field"),
        ('{"type": "full", "op": "c", "after": [1], "source": {}}', "missing_field"),
    ],
)
def test_bad_records_raise_with_a_stable_reason(text: str, reason: str) -> None:
    with pytest.raises(RecordFormatError) as info:
        parse_record(text)
    assert info.value.reason == reason


def test_unicode_values_survive() -> None:
    doc = json.loads(INSERT)
    doc["after"]["note"] = "zürich 東京 🚀"
    record = parse_record(json.dumps(doc, ensure_ascii=False))
    assert not isinstance(record, Fragment)
    assert record.after is not None and record.after["note"] == "zürich 東京 🚀"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            CHUNKED.replace('"total_fragments": 3', '"total_fragments": 10000000'),
            "invalid_chunked",
        ),
        ('{"type": "fragment", "chunk_id": "c", "index": 10000, "data": "x"}', "invalid_fragment"),
    ],
)
def test_fragment_sets_are_bounded(text: str, reason: str) -> None:
    assert '"total_fragments": 3' in CHUNKED
    with pytest.raises(RecordFormatError) as raised:
        parse_record(text)
    assert raised.value.reason == reason
    # The largest set there may be is still a set.
    largest = CHUNKED.replace('"total_fragments": 3', '"total_fragments": 10000')
    assert parse_record(largest).chunked["after"].total_fragments == 10_000
