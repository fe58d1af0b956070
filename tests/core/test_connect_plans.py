"""A Connect schema's plan (its columns' type families) is shared between the records that
carry an equal schema, and only between those."""

from __future__ import annotations

import base64
import json

import pytest

from airflow_cdc.core.events import ChangeRecord, Message
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.formats import parser_for


def envelope(amount_schema: dict[str, object], amount: object) -> str:
    fields = [{"field": "id", "type": "int32"}, {"field": "amount", **amount_schema}]
    image = {"type": "struct", "optional": True, "fields": fields}
    schema = {
        "type": "struct",
        "fields": [{**image, "field": "before"}, {**image, "field": "after"}],
    }
    payload = {
        "op": "c",
        "before": None,
        "after": {"id": 1, "amount": amount},
        "source": {"table": "t", "schema": "public", "lsn": 10, "ts_ms": 1},
    }
    return json.dumps({"schema": schema, "payload": payload})


DECIMAL = "org.apache.kafka.connect.data.Decimal"


def parsed(value: str) -> ChangeRecord:
    record = parser_for("debezium")(Message(value, '{"id": 1}', "0:1", "topic"))
    assert isinstance(record, ChangeRecord)
    return record


def test_records_alternating_between_two_schemas_of_one_column_keep_their_own_types() -> None:
    # The same column names, a Decimal of scale 2 and one of scale 4: the unscaled 1234 is 12.34
    # in one and 0.1234 in the other, whatever order the records come in.
    scale2 = envelope({"type": "bytes", "name": DECIMAL, "parameters": {"scale": "2"}}, "BNI=")
    scale4 = envelope({"type": "bytes", "name": DECIMAL, "parameters": {"scale": "4"}}, "BNI=")
    text = envelope({"type": "string"}, "12.5")
    for _ in range(3):
        for value, family, amount in [
            (scale2, "numeric(38,2)", "12.34"),
            (scale4, "numeric(38,4)", "0.1234"),
            (text, "text", "12.5"),
        ]:
            record = parsed(value)
            assert record.types == {"id": "integer", "amount": family}
            assert record.after == {"id": 1, "amount": amount}


def test_a_schema_with_an_unknown_type_is_refused_every_time() -> None:
    bad = envelope({"type": "int128"}, 5)
    good = envelope({"type": "int64"}, 5)
    for _ in range(2):
        with pytest.raises(RecordFormatError, match="unknown Connect type"):
            parsed(bad)
        assert parsed(good).types == {"id": "integer", "amount": "bigint"}


def test_a_records_types_are_its_own() -> None:
    value = envelope({"type": "int64"}, 5)
    first = parsed(value)
    assert first.types is not None
    first.types["amount"] = "text"  # a consumer that changes its record's types
    assert parsed(value).types == {"id": "integer", "amount": "bigint"}


def test_threads_parsing_many_schemas_at_once_each_get_their_own() -> None:
    import sys
    import threading

    # More schemas (scales 0-29) than the memo keeps, so that threads add plans while others look.
    values = [
        envelope({"type": "bytes", "name": DECIMAL, "parameters": {"scale": str(s)}}, "BNI=")
        for s in range(30)
    ]
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(30):
                for scale, value in enumerate(values):
                    assert parsed(value).types == {
                        "id": "integer",
                        "amount": f"numeric(38,{scale})",
                    }
        except BaseException as err:  # reported below
            failures.append(err)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert failures == []


def test_a_decimal_keeps_every_digit_of_its_unscaled_integer() -> None:
    # 38 digits, past the 28 that Python's default decimal context keeps.
    unscaled = -12345678901234567890123456789012345678
    encoded = base64.b64encode(unscaled.to_bytes(16, "big", signed=True)).decode()
    schema = {"type": "bytes", "name": DECIMAL, "parameters": {"scale": "10"}}
    record = parsed(envelope(schema, encoded))
    assert record.after is not None
    assert record.after["amount"] == "-1234567890123456789012345678.9012345678"


def test_a_decimal_longer_than_python_writes_an_integer_stays_exact() -> None:
    # Python writes no integer of more than 4,300 digits; the decimal is counted otherwise.
    unscaled = 10**5000 + 7
    encoded = base64.b64encode(unscaled.to_bytes(2100, "big", signed=True)).decode()
    schema = {"type": "bytes", "name": DECIMAL, "parameters": {"scale": "2"}}
    record = parsed(envelope(schema, encoded))
    assert record.after is not None
    amount = record.after["amount"]
    assert len(amount) == 5002 and amount.startswith("1000") and amount.endswith("00.07")


NOT_BASE64 = "is not Base64"


@pytest.mark.parametrize(
    ("encoded", "message"),
    [
        ("AAAA=", NOT_BASE64),  # padding after a whole group: Python's decoder takes it
        ("AAAA====", NOT_BASE64),
        ("AQI", NOT_BASE64),  # a last group without its padding
        ("AQ I=", NOT_BASE64),
        ("AQÎ=", NOT_BASE64),  # not ASCII: Python's decoder raises ValueError, not binascii.Error
        ("AQ\u0662=", NOT_BASE64),
        # No bytes: Connect reads them as a BigInteger, which has at least one.
        ("", "no bytes"),
    ],
)
def test_a_decimal_that_is_not_padded_base64_is_a_decode_error(encoded: str, message: str) -> None:
    schema = {"type": "bytes", "name": DECIMAL, "parameters": {"scale": "2"}}
    with pytest.raises(RecordFormatError) as caught:
        parsed(envelope(schema, encoded))
    assert caught.value.reason == "decode_error"
    assert message in str(caught.value)


@pytest.mark.parametrize(("encoded", "message"), [("AAAA=", NOT_BASE64), ("", "no bytes")])
def test_a_variable_scale_decimal_is_held_to_the_same_rule(encoded: str, message: str) -> None:
    schema = {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal"}
    assert parsed(envelope(schema, {"scale": 2, "value": "AQI="})).after == {
        "id": 1,
        "amount": "2.58",
    }
    with pytest.raises(RecordFormatError) as caught:
        parsed(envelope(schema, {"scale": 2, "value": encoded}))
    assert caught.value.reason == "decode_error"
    assert message in str(caught.value)
