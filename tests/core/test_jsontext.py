"""JSON numbers keep their digits from a record's text to the text written for Spark."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from airflow_cdc.core import jsontext
from airflow_cdc.core.ddl import parse_tables
from airflow_cdc.core.events import Message
from airflow_cdc.core.formats import parser_for
from airflow_cdc.core.rows import decode_row

WIDE = "12345678901234567890.123456789"  # 29 digits: a float keeps about 17


def test_numbers_are_written_back_as_they_were_read() -> None:
    text = f'{{"a": {WIDE}, "b": [1e400, -0.0, 0.1, 2.50], "c": {{"d": 1E-7}}, "e": 3}}'
    assert jsontext.dump(jsontext.loads(text), separators=(",", ":")) == text.replace(" ", "")
    assert jsontext.loads(text)["a"] == float(WIDE)  # still a float to the parsers


def test_text_that_looks_like_a_placeholder_stays_text() -> None:
    value = {"s": "\u0000 0 \u0000", "n": jsontext.JsonNumber("1.25"), "t": '"\\u0000x0\\u0000"'}
    assert json.loads(jsontext.dump(value)) == {"s": "\u0000 0 \u0000", "n": 1.25, "t": value["t"]}


def test_a_cockroachdb_decimal_keeps_every_digit() -> None:
    # CockroachDB writes DECIMAL as a JSON number; a wide one must not pass through a float.
    [spec] = parse_tables("CREATE TABLE t (id INT PRIMARY KEY, amount NUMERIC(38, 9))")
    value = f'{{"after": {{"id": 1, "amount": {WIDE}}}, "updated": "1.0000000000"}}'
    record = parser_for("cockroachdb")(Message(value, "[1]", "00000000000000000001", "t"))
    assert json.loads(jsontext.dump(record.after), parse_float=Decimal)["amount"] == Decimal(WIDE)
    decoded = decode_row(spec, record.op, record.before, record.after, record.key)
    assert decoded.values["amount"] == Decimal(WIDE)


def test_a_value_nested_as_deep_as_the_parser_reads_is_written_back() -> None:
    text = "[" * 900 + "1.50" + "]" * 900
    assert jsontext.dump(jsontext.loads(text), separators=(",", ":")) == text


def test_kafka_dump_lines_keep_every_digit_and_refuse_lone_surrogates() -> None:
    from spark_jobs.land_files import kafka_line

    line = '{"topic": "t", "offset": 1, "value": {"after": {"amount": ' + WIDE + "}}}"
    assert json.loads(kafka_line(line)["value"], parse_float=Decimal) == {
        "after": {"amount": Decimal(WIDE)}
    }
    with pytest.raises(ValueError, match="lone UTF-16 surrogate"):
        kafka_line('{"topic": "t", "offset": 1, "value": {"s": "\\ud800"}}')
    with pytest.raises(ValueError, match="topic"):
        kafka_line('{"topic": 5, "value": "x"}')


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1, "b": "é", "c": None, "d": True, "e": 0.5, "f": [1, {"g": "h"}]},
        {"z": 1, "a": {"y": [], "b": {}}},
        [],
        "text",
        None,
    ],
)
def test_a_value_without_json_numbers_dumps_as_json_dumps_does(value: object) -> None:
    # Values without a JsonNumber take a path with no copy and a shared encoder.
    assert jsontext.dump(value) == json.dumps(value, ensure_ascii=False)
    compact = {"separators": (",", ":"), "sort_keys": True}
    assert jsontext.dump(value, **compact) == json.dumps(value, ensure_ascii=False, **compact)
    assert jsontext.dump(value, indent=1) == json.dumps(value, ensure_ascii=False, indent=1)


def test_a_json_number_deep_in_a_value_keeps_its_text_with_any_arguments() -> None:
    value = {"b": [{"x": [jsontext.JsonNumber("2.50")]}], "a": 1}
    assert jsontext.dump(value) == '{"b": [{"x": [2.50]}], "a": 1}'
    assert jsontext.dump(value, separators=(",", ":"), sort_keys=True) == (
        '{"a":1,"b":[{"x":[2.50]}]}'
    )


def test_a_json_number_in_a_container_subclass_keeps_its_text() -> None:
    from collections import OrderedDict

    value = OrderedDict(a=[jsontext.JsonNumber("1.50")])
    assert jsontext.dump(value) == '{"a": [1.50]}'


def test_loads_refuses_what_json_loads_refuses_with_its_message() -> None:
    with pytest.raises(json.JSONDecodeError, match="BOM"):
        jsontext.loads('\ufeff{"a": 1}')
    assert jsontext.loads(b'{"a": 1.50}') == {"a": 1.5}


def test_a_number_longer_than_spark_holds_is_written_without_its_ending_zeros() -> None:
    padded = "123456789012345678.1000000000000000000000"  # 40 digits, 19 without the zeros
    doc = jsontext.loads(f'{{"a": {padded}, "b": -1.{"0" * 40}, "c": 0.{"0" * 36}12}}')
    assert jsontext.dump(doc) == f'{{"a": 123456789012345678.1, "b": -1, "c": 0.{"0" * 36}12}}'
    # Shorter literals keep their text, zeros and all.
    assert jsontext.dump(jsontext.loads('{"a": 2.50}')) == '{"a": 2.50}'
