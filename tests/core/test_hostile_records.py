"""Whatever a record holds, a parser answers with a change, a control message or a
:class:`RecordFormatError` naming the reason, never another exception (issue: one record must
never stop a batch)."""

from __future__ import annotations

import json

import pytest

from airflow_cdc.core.events import Message
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats import parser_for, resolved_marker

HOSTILE = [
    # A YDB virtual timestamp step wider than any sequence padding.
    ("ydb", {"key": [1], "update": {"a": 1}, "ts": [2**70, 1]}, "invalid_record"),
    ("ydb", {"key": [1], "update": {"a": 1}, "ts": [-5, 1]}, "missing_field"),
    # A resolved marker whose time no calendar holds.
    ("ydb", {"resolved": [10**19, 0]}, "invalid_resolved"),
    ("cockroachdb", {"resolved": "1" + "0" * 25 + ".0000000000"}, "invalid_resolved"),
    # A commit time past year 9999 (a step of 10**15 ms).
    ("ydb", {"key": [1], "update": {}, "ts": [10**15, 1]}, "invalid_timestamp"),
    # A step given as text of more digits than Python converts to an integer.
    ("ydb", {"key": [1], "update": {}, "ts": ["9" * 5000, 1]}, "invalid_record"),
]


@pytest.mark.parametrize(("fmt", "doc", "reason"), HOSTILE)
def test_a_hostile_record_is_a_format_error(fmt: str, doc: dict[str, object], reason: str) -> None:
    with pytest.raises(RecordFormatError) as raised:
        parser_for(fmt)(Message(json.dumps(doc), None, "00000000000000000001", "t/feed"))
    assert raised.value.reason == reason


def test_a_number_literal_past_the_length_limit_is_a_format_error() -> None:
    text = '{"key": [1], "update": {"a": ' + "9" * 5000 + '}, "ts": [1, 1]}'
    with pytest.raises(RecordFormatError) as raised:
        parser_for("ydb")(Message(text, None, "00000000000000000001", "t/feed"))
    assert raised.value.reason == "invalid_record"
    assert "5,000 characters is over the limit of 1,000" in str(raised.value)


def test_landing_ignores_markers_it_cannot_place() -> None:
    message = Message(json.dumps({"resolved": [10**19, 0]}), None, "1", "t/feed")
    assert resolved_marker("ydb", message) is None
    good = Message(json.dumps({"resolved": [1_767_225_600_000, 0]}), None, "1", "t/feed")
    assert resolved_marker("ydb", good) == 1_767_225_600_000_000


def test_a_decimal_scale_no_context_holds_is_a_format_error() -> None:
    decimal = {
        "field": "d",
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": str(10**21)},
    }
    after = {"field": "after", "type": "struct", "optional": True, "fields": [decimal]}
    doc = {
        "schema": {"type": "struct", "fields": [after, {"field": "op", "type": "string"}]},
        "payload": {
            "op": "c",
            "before": None,
            "after": {"d": "AQ=="},
            "source": {"db": "d", "schema": "s", "table": "t", "ts_ms": 1, "lsn": 5},
            "ts_ms": 1,
        },
    }
    with pytest.raises(RecordFormatError) as raised:
        parser_for("debezium")(Message(json.dumps(doc), None, "00000000000000000001", "t"))
    assert raised.value.reason == "invalid_record"
