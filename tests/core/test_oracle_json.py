"""Hand-worked cases for the oracle's CockroachDB and YDB changefeed encoders.

``tests/oracles/json_encoders.py`` renders the typed model's changes as the vendors' own JSON
serializers do (CockroachDB ``tree.AsJSON`` / ``pkg/util/json``, YDB ``TJsonSerializer::ToJson``
/ ``NJson::WriteJson``). The expected texts here are written out by hand from those sources and
from the vendor documents (seed 001: YDB changefeeds, seed 003: CockroachDB changefeed
messages); the documents' example messages are reproduced exactly. Last, every message of a
generated stream is decoded back, by rules written here, to the model's expected table.
"""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import json
import re
import uuid
from decimal import Decimal
from typing import Any

import pytest

from tests.oracles import json_encoders as je
from tests.oracles import typed_model as tm
from tests.oracles.typed_model import Change

UTC = dt.UTC


def tz(minutes: int) -> dt.timezone:
    return dt.timezone(dt.timedelta(minutes=minutes))


# Every column, non-null, with values that show each rendering rule.
ROW_A: dict[str, Any] = {
    "id": 7,
    "c_smallint": -32768,
    "c_int": 2147483647,
    "c_bigint": -9223372036854775808,
    "c_real": 1024.25,
    "c_double": 0.1,
    "c_numeric": Decimal("-123456789.010"),
    "c_bool": True,
    "c_text": 'quote " and \\ backslash\nline\ttab ✓',
    "c_bytea": b"\x00\xff\x10binary",
    "c_date": dt.date(1901, 12, 14),
    "c_ts": dt.datetime(1969, 7, 20, 20, 17, 40, 500000),
    "c_tstz": dt.datetime(2026, 1, 1, 5, 30, 0, 123456, tzinfo=tz(330)),
    "c_time": dt.time(23, 59, 59, 999999),
    "c_timetz": dt.time(8, 0, tzinfo=tz(-210)),
    "c_interval": dt.timedelta(hours=27, minutes=46, seconds=40, microseconds=500000),
    "c_json": {"b": [True, None, "x"], "a": 1, "é": 2.5},
    "c_uuid": uuid.UUID("550e8400-e29b-41d4-a716-446655440000"),
}
# Edge values and NULLs.
ROW_B: dict[str, Any] = {
    "id": 7,
    "c_smallint": 0,
    "c_int": None,
    "c_bigint": 9223372036854775807,
    "c_real": 500.0,
    "c_double": 1.7976931348623157e308,
    "c_numeric": Decimal("0.000"),
    "c_bool": False,
    "c_text": "",
    "c_bytea": b"",
    "c_date": dt.date(2052, 2, 29),
    "c_ts": dt.datetime(2099, 12, 31, 23, 59, 59),
    "c_tstz": dt.datetime(1901, 12, 13, 12, 45, 52, 1, tzinfo=tz(-480)),
    "c_time": dt.time(0, 0),
    "c_timetz": dt.time(12, 34, 56, 789000, tzinfo=UTC),
    "c_interval": dt.timedelta(seconds=-1, microseconds=-500000),
    "c_json": "a string",
    "c_uuid": None,
}
INSERT = Change(7, "c", ROW_A, None, 1_767_225_601_234_567, 3)
UPDATE = Change(7, "u", ROW_B, ROW_A, 1_767_225_602_000_001, 4)
DELETE = Change(7, "d", None, ROW_B, 1_767_225_603_000_000, 5)


def only(messages: list[tm.Message]) -> tm.Message:
    assert len(messages) == 1
    return messages[0]


def value_of(messages: list[tm.Message]) -> Any:
    """The one message's value, parsed."""
    value = only(messages)[1]
    assert value is not None
    return json.loads(value)


def test_the_two_formats() -> None:
    assert set(je.ENCODERS) == {"cockroachdb", "ydb"}
    assert je.ENCODERS["cockroachdb"].columns == tm.COLUMN_NAMES
    # YDB has no time-of-day type (YQL primitive types): TIME and TIMETZ are not carried.
    assert je.ENCODERS["ydb"].columns == tuple(
        name for name in tm.COLUMN_NAMES if name not in ("c_time", "c_timetz")
    )


# --------------------------------------------------------------------------- CockroachDB
# Seed 003 and pkg/sql/sem/tree AsJSON: keys sorted, ", " and ": " separators (jsonObject.Format);
# INT, FLOAT and DECIMAL as JSON numbers (apd String: 5E+2, 25.00 keeps its scale); BYTES `\x`
# hex; DATE 2006-01-02; TIMESTAMP without zone and TIMESTAMPTZ in UTC with Z, fractions trimmed;
# TIME and TIMETZ 15:04:05.999999 (TIMETZ with its own offset, -07 layout); INTERVAL in the
# POSTGRES style; JSONB embedded; UUID lowercase.

CRDB_INSERT = (
    r'{"after": {"c_bigint": -9223372036854775808, "c_bool": true, '
    r'"c_bytea": "\\x00ff1062696e617279", "c_date": "1901-12-14", "c_double": 0.1, '
    r'"c_int": 2147483647, "c_interval": "27:46:40.5", '
    r'"c_json": {"a": 1, "b": [true, null, "x"], "é": 2.5}, "c_numeric": -123456789.010, '
    r'"c_real": 1024.25, "c_smallint": -32768, '
    r'"c_text": "quote \" and \\ backslash\nline\ttab ✓", "c_time": "23:59:59.999999", '
    r'"c_timetz": "08:00:00-03:30", "c_ts": "1969-07-20T20:17:40.5", '
    r'"c_tstz": "2026-01-01T00:00:00.123456Z", '
    r'"c_uuid": "550e8400-e29b-41d4-a716-446655440000", "id": 7}, '
    r'"updated": "1767225601234567000.0000000003"}'
)
CRDB_UPDATE = (
    r'{"after": {"c_bigint": 9223372036854775807, "c_bool": false, "c_bytea": "\\x", '
    r'"c_date": "2052-02-29", "c_double": 1.7976931348623157E+308, "c_int": null, '
    r'"c_interval": "-00:00:01.5", "c_json": "a string", "c_numeric": 0.000, "c_real": 5E+2, '
    r'"c_smallint": 0, "c_text": "", "c_time": "00:00:00", "c_timetz": "12:34:56.789+00", '
    r'"c_ts": "2099-12-31T23:59:59", "c_tstz": "1901-12-13T20:45:52.000001Z", '
    r'"c_uuid": null, "id": 7}, "updated": "1767225602000001000.0000000004"}'
)


def test_cockroach_insert_update_delete() -> None:
    encoder = je.ENCODERS["cockroachdb"]
    assert only(encoder.change(INSERT)) == ("[7]", CRDB_INSERT, False)
    assert only(encoder.change(UPDATE)) == ("[7]", CRDB_UPDATE, False)
    # "Deleting a row will result in ... the primary key of the deleted row and a null value":
    # [5] {"after": null}, here with `updated`.
    assert only(encoder.change(DELETE)) == (
        "[7]",
        '{"after": null, "updated": "1767225603000000000.0000000005"}',
        False,
    )
    for text in (CRDB_INSERT, CRDB_UPDATE):
        json.loads(text)  # valid JSON


def test_cockroach_resolved_marker() -> None:
    # EncodeResolvedTimestamp: gojson.Marshal({"resolved": "<wall>.<logical>"}), compact.
    marker = je.ENCODERS["cockroachdb"].marker(1_767_225_601_234_567, 2)
    assert marker == '{"resolved":"1767225601234567000.0000000000"}'


def test_cockroach_updated_increases_with_seq() -> None:
    encoder = je.ENCODERS["cockroachdb"]
    stamps = []
    for seq in range(1, 30):
        change = Change(1, "c", {"id": 1}, None, 1_767_225_600_000_000 + seq * 1000 + 999, seq)
        stamps.append(value_of(encoder.change(change))["updated"])
    pairs = [tuple(int(part) for part in stamp.split(".")) for stamp in stamps]
    assert all(a < b for a, b in itertools.pairwise(pairs))
    assert all(re.fullmatch(r"\d{19}\.\d{10}", stamp) for stamp in stamps)


def test_cockroach_seed_examples() -> None:
    """Seed 003's example messages, rebuilt from typed values."""
    # "INSERT INTO office_dogs VALUES (1, 'Petee');" -> [1] {"after": {"id": 1, "name": "Petee"}}
    assert je.crdb_format([je.crdb_datum("INT", 1)]) == "[1]"
    row = {"name": je.crdb_datum("STRING", "Petee"), "id": je.crdb_datum("INT", 1)}
    assert je.crdb_format({"after": row}) == '{"after": {"id": 1, "name": "Petee"}}'
    # Delete messages: [5] {"after": null}
    assert je.crdb_format({"after": None}) == '{"after": null}'
    # The cloud storage sink's `wrapped` message for movr's vehicles (columns in table order).
    vehicle = {
        "id": je.crdb_datum("UUID", uuid.UUID("68ee1f95-3137-48e2-8ce3-34ac2d18c7c8")),
        "city": je.crdb_datum("STRING", "seattle"),
        "type": je.crdb_datum("STRING", "scooter"),
        "owner_id": je.crdb_datum("UUID", uuid.UUID("570a3d70-a3d7-4c00-8000-000000000011")),
        "creation_time": je.crdb_datum("TIMESTAMP", dt.datetime(2019, 1, 2, 3, 4, 5)),
        "status": je.crdb_datum("STRING", "in_use"),
        "current_location": je.crdb_datum("STRING", "86359 Jeffrey Ranch"),
        "ext": je.crdb_datum("JSONB", {"color": "yellow"}),
    }
    key = [vehicle["city"], vehicle["id"]]
    assert je.crdb_format({"after": vehicle, "key": key}) == (
        '{"after": {"city": "seattle", "creation_time": "2019-01-02T03:04:05", '
        '"current_location": "86359 Jeffrey Ranch", "ext": {"color": "yellow"}, '
        '"id": "68ee1f95-3137-48e2-8ce3-34ac2d18c7c8", '
        '"owner_id": "570a3d70-a3d7-4c00-8000-000000000011", "status": "in_use", '
        '"type": "scooter"}, "key": ["seattle", "68ee1f95-3137-48e2-8ce3-34ac2d18c7c8"]}'
    )

    # `wrapped` and `diff` on movr's rides: DECIMAL(10, 2) 25.00, TIMESTAMP with micros, NULLs.
    def ride(start_address: str) -> dict[str, Any]:
        return {
            "id": je.crdb_datum("UUID", uuid.UUID("f6c02fe0-a4e0-476d-a3b7-91934d15dce2")),
            "city": je.crdb_datum("STRING", "seattle"),
            "vehicle_city": je.crdb_datum("STRING", "seattle"),
            "rider_id": je.crdb_datum("UUID", uuid.UUID("14067022-6e9b-427b-bd74-5ef48e93da1f")),
            "vehicle_id": je.crdb_datum("UUID", uuid.UUID("55555555-5555-4400-8000-000000000005")),
            "start_address": je.crdb_datum("STRING", start_address),
            "end_address": je.crdb_datum("STRING", None),
            "start_time": je.crdb_datum("TIMESTAMP", dt.datetime(2023, 6, 2, 15, 14, 20, 790155)),
            "end_time": je.crdb_datum("TIMESTAMP", None),
            "revenue": je.crdb_datum("DECIMAL", Decimal("25.00")),
        }

    image = (
        '"city": "seattle", "end_address": null, "end_time": null, '
        '"id": "f6c02fe0-a4e0-476d-a3b7-91934d15dce2", "revenue": 25.00, '
        '"rider_id": "14067022-6e9b-427b-bd74-5ef48e93da1f", "start_address": "{}", '
        '"start_time": "2023-06-02T15:14:20.790155", "vehicle_city": "seattle", '
        '"vehicle_id": "55555555-5555-4400-8000-000000000005"'
    )
    message = {
        "after": ride("2 Michael Field"),
        "before": ride("5 Michael Field"),
        "key": ["seattle", "f6c02fe0-a4e0-476d-a3b7-91934d15dce2"],
    }
    assert je.crdb_format(message) == (
        '{"after": {' + image.replace("{}", "2 Michael Field") + "}, "
        '"before": {' + image.replace("{}", "5 Michael Field") + "}, "
        '"key": ["seattle", "f6c02fe0-a4e0-476d-a3b7-91934d15dce2"]}'
    )
    # Per-key ordering, `WITH updated`:
    employee = {"id": 1, "name": "Terry", "office": "new york city"}
    updated = je.crdb_hlc(1701102296662969433, 0)
    assert je.crdb_format({"updated": updated, "key": [1], "after": employee}) == (
        '{"after": {"id": 1, "name": "Terry", "office": "new york city"}, "key": [1], '
        '"updated": "1701102296662969433.0000000000"}'
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        # FormatFloat(f, 'E', -1, 64) parsed by apd, then Text('G'): plain when the exponent
        # is <= 0 and the adjusted exponent >= -6, else d.dddE±n.
        (0.1, "0.1"),
        (1024.25, "1024.25"),
        (-1.5, "-1.5"),
        (0.0, "0"),
        (500.0, "5E+2"),  # 5E+02: coefficient 5, exponent 2 > 0
        (123456789.0, "123456789"),  # 1.23456789E+08: exponent 0
        (1e21, "1E+21"),
        (0.000001, "0.000001"),  # adjusted exponent -6
        (1e-7, "1E-7"),
        (-2.5e-300, "-2.5E-300"),
        (1.7976931348623157e308, "1.7976931348623157E+308"),
    ],
)
def test_cockroach_floats(value: float, text: str) -> None:
    assert je.crdb_datum("FLOAT", value) == je.Raw(text)


@pytest.mark.parametrize(
    ("crdb_type", "value", "text"),
    [
        ("INTERVAL", dt.timedelta(0), "00:00:00"),
        ("INTERVAL", dt.timedelta(microseconds=1), "00:00:00.000001"),
        ("INTERVAL", dt.timedelta(microseconds=-1), "-00:00:00.000001"),
        ("INTERVAL", dt.timedelta(hours=-100, seconds=-5), "-100:00:05"),
        ("TIMETZ", dt.time(23, 59, 59, 999999, tzinfo=tz(840)), "23:59:59.999999+14"),
        ("TIMETZ", dt.time(0, 0, 0, 10, tzinfo=tz(330)), "00:00:00.00001+05:30"),
        ("TIMETZ", dt.time(9, 30, tzinfo=tz(-480)), "09:30:00-08"),
        ("TIMETZ", dt.time(9, 30, tzinfo=tz(60)), "09:30:00+01"),
        ("TIME", dt.time(12, 0, 0, 120000), "12:00:00.12"),
        ("TIMESTAMP", dt.datetime(2026, 1, 1, 0, 0, 0, 100), "2026-01-01T00:00:00.0001"),
        ("TIMESTAMPTZ", dt.datetime(2000, 1, 1, 0, 30, tzinfo=tz(60)), "1999-12-31T23:30:00Z"),
        ("DATE", dt.date(2026, 3, 1), "2026-03-01"),
        ("BYTES", bytes(range(0, 256, 51)), "\\x00336699ccff"),
        ("DECIMAL", Decimal("-0.001"), je.Raw("-0.001")),
        ("UUID", uuid.UUID(int=2**128 - 1), "ffffffff-ffff-ffff-ffff-ffffffffffff"),
        ("JSONB", [1, 2.5, {"deep": "é"}], [1, je.Raw("2.5"), {"deep": "é"}]),
    ],
)
def test_cockroach_datums(crdb_type: str, value: Any, text: Any) -> None:
    assert je.crdb_datum(crdb_type, value) == text


def test_cockroach_string_escapes() -> None:
    # encodeJSONString: \\ \" \n \r \t short, other controls \u00xx (lowercase), the rest as is.
    text = 'a"b\\c\n\r\t\x01\x1f\b\f<&>/\u2028é😀\x7f'
    assert je.crdb_format(text) == r'"a\"b\\c\n\r\t\u0001\u001f\u0008\u000c<&>/' + '\u2028é😀\x7f"'


# --------------------------------------------------------------------------- YDB
# Seed 001 and ydb/core/tx/datashard/change_record_cdc_serializer.cpp: compact JSON; key columns
# only in "key"; NEW_IMAGE: "update": {} and the whole row in "newImage"; integers as numbers;
# Float/Double with 17 significant digits; Decimal a string without trailing zeros; Utf8 as is;
# String Base64; Date32 days and Timestamp64 / Interval microseconds as numbers; Json embedded;
# Uuid lowercase.

YDB_INSERT = (
    r'{"key":[7],"update":{},"newImage":{"c_smallint":-32768,"c_int":2147483647,'
    r'"c_bigint":-9223372036854775808,"c_real":1024.25,"c_double":0.10000000000000001,'
    r'"c_numeric":"-123456789.01","c_bool":true,'
    r'"c_text":"quote \" and \\ backslash\nline\ttab ✓","c_bytea":"AP8QYmluYXJ5",'
    r'"c_date":-24855,"c_ts":-14182939500000,"c_tstz":1767225600123456,'
    r'"c_interval":100000500000,"c_json":{"b":[true,null,"x"],"a":1,"é":2.5},'
    r'"c_uuid":"550e8400-e29b-41d4-a716-446655440000"},"ts":[1767225601234,562949953421315]}'
)
YDB_UPDATE = (
    r'{"key":[7],"update":{},"newImage":{"c_smallint":0,"c_int":null,'
    r'"c_bigint":9223372036854775807,"c_real":500,"c_double":1.7976931348623157e+308,'
    r'"c_numeric":"0","c_bool":false,"c_text":"","c_bytea":"","c_date":30009,'
    r'"c_ts":4102444799000000,"c_tstz":-2147483647999999,"c_interval":-1500000,'
    r'"c_json":"a string","c_uuid":null},"ts":[1767225602000,562949953421316]}'
)


def test_ydb_insert_update_delete() -> None:
    encoder = je.ENCODERS["ydb"]
    assert only(encoder.change(INSERT)) == (None, YDB_INSERT, False)
    assert only(encoder.change(UPDATE)) == (None, YDB_UPDATE, False)
    assert only(encoder.change(DELETE)) == (
        None,
        '{"key":[7],"erase":{},"ts":[1767225603000,562949953421317]}',
        False,
    )
    for text in (YDB_INSERT, YDB_UPDATE):
        assert "id" not in json.loads(text)["newImage"]  # key columns are in "key" only


def test_ydb_resolved_marker() -> None:
    assert je.ENCODERS["ydb"].marker(1_767_225_601_234_567, 0) == '{"resolved":[1767225601234,0]}'


def test_ydb_ts_increases_with_seq() -> None:
    encoder = je.ENCODERS["ydb"]
    stamps = []
    for seq in range(1, 30):
        change = Change(1, "c", {"id": 1}, None, 1_767_225_600_000_000 + seq * 1000 + 999, seq)
        stamps.append(tuple(value_of(encoder.change(change))["ts"]))
    assert all(a < b for a, b in itertools.pairwise(stamps))


def test_ydb_seed_examples() -> None:
    """Seed 001's example records (pretty-printed there; YDB writes them compact)."""
    snapshot = {
        "key": [1, 2, 3],
        "update": {},
        "newImage": {
            "textColumn": je.ydb_datum("Utf8", "value1"),
            "intColumn": je.ydb_datum("Int32", 101),
            "boolColumn": je.ydb_datum("Bool", True),
        },
        "oldImage": {
            "textColumn": je.ydb_datum("Utf8", None),
            "intColumn": je.ydb_datum("Int32", 100),
            "boolColumn": je.ydb_datum("Bool", False),
        },
    }
    text = je.ydb_format(snapshot)
    assert text == (
        '{"key":[1,2,3],"update":{},'
        '"newImage":{"textColumn":"value1","intColumn":101,"boolColumn":true},'
        '"oldImage":{"textColumn":null,"intColumn":100,"boolColumn":false}}'
    )
    assert json.loads(text) == json.loads(
        """{
           "key": [1, 2, 3],
           "update": {},
           "newImage": {"textColumn": "value1", "intColumn": 101, "boolColumn": true},
           "oldImage": {"textColumn": null, "intColumn": 100, "boolColumn": false}
        }"""
    )
    erase = je.ydb_format({"key": [2, je.ydb_datum("Utf8", "two")], "erase": {}})
    assert erase == '{"key":[2,"two"],"erase":{}}'
    # "Record with virtual timestamps": `created` is a Timestamp column.
    stamped = {
        "key": [1],
        "update": {
            "created": je.ydb_datum("Timestamp", dt.datetime(2022, 12, 12)),
            "customer": je.ydb_datum("Utf8", "Name123"),
        },
        "ts": [1670792400890, 562949953607163],
    }
    assert je.ydb_format(stamped) == (
        '{"key":[1],"update":{"created":"2022-12-12T00:00:00.000000Z","customer":"Name123"},'
        '"ts":[1670792400890,562949953607163]}'
    )
    # The UPDATES-mode sample shows "date": "2022-02-22"; ToJson writes a Date column as
    # TInstant::Days(d).ToString(), a whole timestamp. The source is followed here.
    assert je.ydb_datum("Date", dt.date(2022, 2, 22)) == "2022-02-22T00:00:00.000000Z"
    assert je.ydb_datum("Date32", dt.date(2022, 2, 22)) == 19045


@pytest.mark.parametrize(
    ("value", "text"),
    [
        # double-conversion ToPrecision(v, 17), FixZeros, FixEnd
        (0.1, "0.10000000000000001"),  # 0.1000000000000000055511... rounded to 17 digits
        (3.14159, "3.1415899999999999"),  # 3.14158999999999988261...
        (1024.25, "1024.25"),
        (-1.5, "-1.5"),
        (500.0, "500"),
        (0.0, "0"),
        (123456789.0, "123456789"),
        (1e16, "10000000000000000"),  # the point right after the 17th digit: still decimal
        (1e17, "1e+17"),  # past it: exponential
        (0.0001, "0.0001"),  # four zeros before the digits: still decimal
        (2.0**-17, "7.62939453125e-06"),  # exponential; FixEnd pads the one-digit exponent
        (0.00001, "1.0000000000000001e-05"),  # 1.00000000000000008180...e-05
        (-2.5e-300, "-2.5e-300"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
    ],
)
def test_ydb_doubles(value: float, text: str) -> None:
    assert je.ydb_datum("Double", value) == je.Raw(text)
    assert float(text) == value


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal("25.000"), "25"),
        (Decimal("25.500"), "25.5"),
        (Decimal("0.001"), "0.001"),
        (Decimal("-0.010"), "-0.01"),
        (Decimal("0.000"), "0"),
        (Decimal("-123456789.010"), "-123456789.01"),
        (Decimal("999999999.999"), "999999999.999"),
    ],
)
def test_ydb_decimals(value: Decimal, text: str) -> None:
    # NYql::NDecimal::ToString(v, 12, 3): no trailing fraction zeros, "0" for zero.
    assert je.ydb_datum("Decimal(12,3)", value) == text


def test_ydb_narrow_temporal_types() -> None:
    encoder = je.YdbJsonEncoder(wide=False)
    row = {
        **{name: None for name in encoder.columns},
        "id": 1,
        "c_date": dt.date(1970, 1, 2),
        "c_ts": dt.datetime(2105, 12, 31, 23, 59, 59, 999999),
        "c_tstz": dt.datetime(2026, 1, 1, 1, 0, 0, 5, tzinfo=tz(60)),
    }
    image = value_of(encoder.change(Change(1, "c", row, None, 10**15, 1)))["newImage"]
    assert image["c_date"] == "1970-01-02T00:00:00.000000Z"
    assert image["c_ts"] == "2105-12-31T23:59:59.999999Z"
    assert image["c_tstz"] == "2026-01-01T00:00:00.000005Z"
    for name, value in (
        ("c_date", dt.date(1969, 12, 31)),
        ("c_ts", dt.datetime(2106, 1, 1)),
        ("c_tstz", dt.datetime(1970, 1, 1, 0, 59, tzinfo=tz(60))),
    ):
        with pytest.raises(ValueError, match="outside YDB"):
            encoder.change(Change(1, "c", {**row, name: value}, None, 10**15, 1))


def test_ydb_string_escapes() -> None:
    # WriteBareString, HEM_UNSAFE: short escapes, \u00XX uppercase, U+2028/9 escaped, / as is.
    text = 'a"b\\c\n\r\t\x01\x1f\b\f<&>/\u2028\u2029é😀'
    assert je.ydb_format(text) == r'"a\"b\\c\n\r\t\u0001\u001F\b\f<&>/\u2028\u2029' + 'é😀"'
    assert je.ydb_datum("String", b"\xfb\xff") == "+/8="  # standard alphabet, padded


# --------------------------------------------------------------------------- round trip
# Decode every generated message back by the rules above and compare with the model's state.

_EPOCH = dt.datetime(1970, 1, 1)
_INTERVAL = re.compile(r"(-?)(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?")


def _interval(text: str) -> dt.timedelta:
    match = _INTERVAL.fullmatch(text)
    assert match, text
    sign, hours, minutes, seconds, fraction = match.groups()
    value = dt.timedelta(
        hours=int(hours),
        minutes=int(minutes),
        seconds=int(seconds),
        microseconds=int((fraction or "0").ljust(6, "0")),
    )
    return -value if sign else value


def _timetz(text: str) -> dt.time:
    match = re.fullmatch(r"(\d\d:\d\d:\d\d(?:\.\d+)?)([+-]\d\d)(?::(\d\d))?", text)
    assert match, text
    clock, hours, minutes = match.groups()
    offset = int(hours) * 60 + (int(minutes or 0) if hours[0] == "+" else -int(minutes or 0))
    return dt.time.fromisoformat(clock).replace(tzinfo=tz(offset))


def _plain_json(value: Any) -> Any:
    """A JSON value parsed with ``parse_float=Decimal`` back to Python's floats."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {key: _plain_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain_json(item) for item in value]
    return value


CRDB_DECODE: dict[str, Any] = {
    "c_smallint": int,
    "c_int": int,
    "c_bigint": int,
    "c_real": float,
    "c_double": float,
    "c_numeric": Decimal,
    "c_bool": bool,
    "c_text": str,
    "c_bytea": lambda s: bytes.fromhex(s.removeprefix("\\x")),
    "c_date": dt.date.fromisoformat,
    "c_ts": dt.datetime.fromisoformat,
    "c_tstz": dt.datetime.fromisoformat,
    "c_time": dt.time.fromisoformat,
    "c_timetz": _timetz,
    "c_interval": _interval,
    "c_json": _plain_json,
    "c_uuid": uuid.UUID,
}
YDB_DECODE: dict[str, Any] = {
    **CRDB_DECODE,
    "c_numeric": Decimal,
    "c_bytea": base64.b64decode,
    "c_date": lambda days: dt.date(1970, 1, 1) + dt.timedelta(days=days),
    "c_ts": lambda micros: _EPOCH + dt.timedelta(microseconds=micros),
    "c_tstz": lambda micros: (_EPOCH + dt.timedelta(microseconds=micros)).replace(tzinfo=UTC),
    "c_interval": lambda micros: dt.timedelta(microseconds=micros),
}


def _same(name: str, got: Any, want: Any) -> bool:
    if name == "c_timetz":  # the source keeps the local time and its offset
        return (got.replace(tzinfo=None), got.utcoffset()) == (
            want.replace(tzinfo=None),
            want.utcoffset(),
        )
    return bool(got == want) and type(got) is type(want)


def _newest(batches: list[tm.Batch], fmt: str) -> dict[int, dict[str, Any] | None]:
    """Per key, the image of its newest change (None for a delete), by the format's sequence."""
    newest: dict[int, tuple[Any, dict[str, Any] | None]] = {}
    for batch in batches:
        for line in batch.lines:
            message = json.loads(line)
            value = json.loads(message["value"], parse_float=Decimal)
            if "resolved" in value:
                continue
            if fmt == "cockroachdb":
                ident = json.loads(message["key"])[0]
                order: Any = tuple(int(part) for part in value["updated"].split("."))
                image = value["after"]
            else:
                ident, order = value["key"][0], tuple(value["ts"])
                image = None if "erase" in value else value["newImage"]
            if ident not in newest or newest[ident][0] < order:
                newest[ident] = (order, image)
    return {ident: image for ident, (_, image) in newest.items()}


@pytest.mark.parametrize("fmt", ["cockroachdb", "ydb"])
def test_generated_stream_decodes_to_the_model(fmt: str) -> None:
    encoder = je.ENCODERS[fmt]
    decode = CRDB_DECODE if fmt == "cockroachdb" else YDB_DECODE
    batches = tm.generate(encoder, batches=3, changes=300, keys=40, seed=11)
    images = _newest(batches, fmt)
    expected = batches[-1].expected
    assert {k for k, image in images.items() if image is not None} == set(expected)
    for ident, row in expected.items():
        image = images[ident]
        assert image is not None
        assert set(image) == set(encoder.columns) | ({"id"} if fmt == "cockroachdb" else set())
        for name in encoder.columns:
            want, got = row[name], image[name]
            if want is None:
                assert got is None, (name, got)
                continue
            decoded = decode[name](got)
            assert _same(name, decoded, want), (fmt, name, got, want)
