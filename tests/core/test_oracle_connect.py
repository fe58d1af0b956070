"""Self-tests of the Connect-schema oracle (``tests/oracles/connect_encoders.py``), no Spark.

The expected values below were worked by hand from the vendor documents, not computed with the
encoders' helpers:

* Kafka Connect ``Decimal``: Base64 of ``BigInteger.toByteArray()`` of the unscaled value (the
  minimal big-endian two's complement). 1.500 at scale 3 is 1500 = 0x05DC -> "Bdw="; -0.128
  is -128 = 0x80 (one byte) -> "gA=="; 0.128 is 128 = 0x0080 (a sign byte) -> "AIA=".
* Debezium PostgreSQL ("How Debezium PostgreSQL connectors map data types"): ``Date`` days
  since the epoch, ``MicroTimestamp`` µs since the epoch, ``MicroTime`` µs past midnight,
  ``MicroDuration`` µs, ``ZonedTimestamp`` / ``ZonedTime`` ISO 8601 strings at GMT ('Z',
  ``ISO_OFFSET_DATE_TIME`` / ``ISO_OFFSET_TIME``: fraction digits as needed), ``Json`` the
  server's text, ``Uuid`` the canonical text, ``bytea`` bytes (Base64 in JSON).
* ``float32`` / ``float64`` as Jackson writes them: ``Float.toString`` / ``Double.toString``
  (plain between 1e-3 and 1e7, else ``d.dddE<n>``).
* YDB (``TJsonSerializer::ToJson``): Date32 / Timestamp64 / Interval as JSON integers, Decimal
  as trailing-zero-free text, String as Base64, Json embedded, doubles with 17 significant
  digits (``PREC_NDIGITS``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
import re
import struct
import uuid
from decimal import Decimal
from typing import Any

import pytest

from tests.oracles import connect_encoders as ce
from tests.oracles import typed_model as tm

UTC = dt.UTC
IST = dt.timezone(dt.timedelta(hours=5, minutes=30))
PST = dt.timezone(dt.timedelta(hours=-8))
NST = dt.timezone(dt.timedelta(hours=-3, minutes=-30))

# Two rows of id 7: the insert's row, then the update's.
ROW1: dict[str, Any] = {
    "id": 7,
    "c_smallint": -32768,
    "c_int": 2147483647,
    "c_bigint": -9223372036854775808,
    "c_real": 1024.25,
    "c_double": 0.1,
    "c_numeric": Decimal("1.500"),
    "c_bool": True,
    "c_text": 'quote " and \\ backslash',
    "c_bytea": b"\x00\xff\x10binary",
    "c_date": dt.date(1969, 12, 31),
    "c_ts": dt.datetime(2026, 1, 1, 12, 30, 45, 500000),
    "c_tstz": dt.datetime(2026, 1, 1, 5, 30, 0, 250000, tzinfo=IST),
    "c_time": dt.time(23, 59, 59, 999999),
    "c_timetz": dt.time(1, 0, 0, 120000, tzinfo=IST),
    "c_interval": dt.timedelta(hours=27, minutes=46, seconds=40, microseconds=5),
    "c_json": {"b": [True, None, "x"], "a": 1},
    "c_uuid": uuid.UUID("C96FA758-02B0-87F8-06FA-ADB10A248CFF"),
}
ROW2: dict[str, Any] = {
    "id": 7,
    "c_smallint": None,
    "c_int": 0,
    "c_bigint": 9223372036854775807,
    "c_real": -0.125,
    "c_double": 0.0009765625,
    "c_numeric": Decimal("-0.128"),
    "c_bool": False,
    "c_text": "plum ✓ 😀",
    "c_bytea": b"",
    "c_date": dt.date(2000, 3, 1),
    "c_ts": None,
    "c_tstz": dt.datetime(1901, 12, 13, 20, 45, 52, tzinfo=PST),
    "c_time": dt.time(0, 0),
    "c_timetz": dt.time(23, 30, tzinfo=NST),
    "c_interval": dt.timedelta(microseconds=-1),
    "c_json": "a string",
    "c_uuid": None,
}


def N(text: str) -> tuple[str, str]:
    """A JSON number literal exactly as written (``json.loads(parse_float=...)``)."""
    return ("num", text)


def parse(text: str | None) -> Any:
    assert text is not None
    return json.loads(text, parse_float=N)


def only(row: dict[str, Any], columns: tuple[str, ...]) -> dict[str, Any]:
    return {name: row[name] for name in ("id", *columns)}


def changes(enc: Any) -> list[tm.Change]:
    t0 = tm._EPOCH_US
    r1, r2 = only(ROW1, enc.columns), only(ROW2, enc.columns)
    return [
        tm.Change(7, "c", r1, None, t0 + 1_000_123, 1),
        tm.Change(7, "u", r2, r1, t0 + 2_000_456, 2),
        tm.Change(7, "d", None, r2, t0 + 3_000_789, 3),
    ]


# Hand-derived renderings of ROW1 / ROW2 as Connect JSON (Debezium's PostgreSQL types).
DBZ_ROW1 = {
    "id": 7,
    "c_smallint": -32768,
    "c_int": 2147483647,
    "c_bigint": -9223372036854775808,
    "c_real": N("1024.25"),
    "c_double": N("0.1"),
    "c_numeric": "Bdw=",  # 1500 = 0x05DC
    "c_bool": True,
    "c_text": 'quote " and \\ backslash',
    "c_bytea": "AP8QYmluYXJ5",  # 00 FF 10 | 'bin' | 'ary'
    "c_date": -1,
    "c_ts": 1767270645500000,  # 2026-01-01 = 1767225600 s, + 12:30:45 = 45045 s, + 0.5 s
    "c_tstz": "2026-01-01T00:00:00.25Z",  # 05:30:00.25+05:30
    "c_time": 86399999999,
    "c_timetz": "19:30:00.12Z",  # 01:00:00.12+05:30, back past midnight
    "c_interval": 100000000005,  # 27:46:40 = 100000 s
    "c_json": '{"a": 1, "b": [true, null, "x"]}',  # jsonb: keys by length, then bytes
    "c_uuid": "c96fa758-02b0-87f8-06fa-adb10a248cff",
}
DBZ_ROW2 = {
    "id": 7,
    "c_smallint": None,
    "c_int": 0,
    "c_bigint": 9223372036854775807,
    "c_real": N("-0.125"),
    "c_double": N("9.765625E-4"),  # below 1e-3: Double.toString's computerized notation
    "c_numeric": "gA==",  # -128 = 0x80, one byte
    "c_bool": False,
    "c_text": "plum ✓ 😀",
    "c_bytea": "",
    "c_date": 11017,  # 2000-01-01 = 30 * 365 + 7 leap days = 10957, + 31 + 29
    "c_ts": None,
    "c_tstz": "1901-12-14T04:45:52Z",  # 20:45:52-08:00, the next day at GMT
    "c_time": 0,
    "c_timetz": "03:00:00Z",  # 23:30-03:30, forward past midnight
    "c_interval": -1,
    "c_json": '"a string"',
    "c_uuid": None,
}


# --------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e7, "1.0E7"),
        (9999999.0, "9999999.0"),
        (100.0, "100.0"),
        (0.001, "0.001"),
        (0.000999, "9.99E-4"),
        (-2.5e-300, "-2.5E-300"),
        (1.7976931348623157e308, "1.7976931348623157E308"),
        (5e-324, "4.9E-324"),  # Double.MIN_VALUE: a closer 2-digit decimal wins
        (0.0, "0.0"),
    ],
)
def test_java_double(value: float, text: str) -> None:
    assert ce.java_double(value) == ce.Raw(text)


@pytest.mark.parametrize(
    ("bits", "text"),
    [
        (0x3F800000, "1.0"),
        (0x3DCCCCCD, "0.1"),  # the float nearest 0.1
        (0x00000001, "1.4E-45"),  # Float.MIN_VALUE
        (0x7F7FFFFF, "3.4028235E38"),  # Float.MAX_VALUE
        (0x447A1000, "1000.25"),
    ],
)
def test_java_float(bits: int, text: str) -> None:
    value = struct.unpack(">f", bits.to_bytes(4, "big"))[0]
    assert ce.java_float(value) == ce.Raw(text)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("1.500", "Bdw="),
        ("-0.128", "gA=="),
        ("0.128", "AIA="),
        ("0.127", "fw=="),
        ("-0.129", "/38="),  # -129 = 0xFF7F
        ("0.000", "AA=="),  # BigInteger.ZERO.toByteArray() is one zero byte
        ("999999999.999", "AOjUpQ//"),  # 999999999999 = 0xE8D4A50FFF, + a sign byte
    ],
)
def test_connect_decimal(value: str, text: str) -> None:
    assert ce.connect_decimal(Decimal(value)) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.1, "0.10000000000000001"),
        (1024.25, "1024.25"),
        (123.0, "123"),
        (1e-4, "0.0001"),  # 4 leading zeros still decimal
        (1e-5, "1.0000000000000001e-05"),  # exponential, FixEnd pads the exponent
        (1e17, "1e+17"),  # 18 digits before the point: exponential
        (1e16, "10000000000000000"),
        (-2.5e-300, "-2.5e-300"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (0.0, "0"),
    ],
)
def test_ydb_double(value: float, text: str) -> None:
    assert ce.ydb_double(value) == ce.Raw(text)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("1.500", "1.5"),
        ("2.000", "2"),
        ("0.010", "0.01"),
        ("0.005", "0.005"),
        ("-0.128", "-0.128"),
        ("0.000", "0"),
        ("-999999999.999", "-999999999.999"),
    ],
)
def test_ydb_decimal(value: str, text: str) -> None:
    assert ce.ydb_decimal(Decimal(value)) == text


def test_encoders_and_columns() -> None:
    assert set(ce.ENCODERS) == {"debezium", "arcion", "cdl", "ydb-debezium"}
    for enc in ce.ENCODERS.values():
        assert list(enc.columns) == [n for n in tm.COLUMN_NAMES if n in enc.columns]
    assert ce.ENCODERS["debezium"].columns == tm.COLUMN_NAMES
    assert set(tm.COLUMN_NAMES) - set(ce.ENCODERS["arcion"].columns) == {"c_timetz", "c_interval"}
    assert set(tm.COLUMN_NAMES) - set(ce.ENCODERS["cdl"].columns) == {
        "c_bytea",
        "c_ts",
        "c_tstz",
        "c_time",
        "c_timetz",
        "c_interval",
        "c_uuid",
    }
    assert set(tm.COLUMN_NAMES) - set(ce.ENCODERS["ydb-debezium"].columns) == {
        "c_time",
        "c_timetz",
    }


# --------------------------------------------------------------------------- Debezium


def field_schemas(schema: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    struct_ = next(f for f in schema["fields"] if f["field"] == name)
    return {f["field"]: f for f in struct_["fields"]}


def test_debezium_schema() -> None:
    enc = ce.ENCODERS["debezium"]
    value = parse(enc.change(changes(enc)[0])[0][1])
    fields = field_schemas(value["schema"], "after")
    assert fields == field_schemas(value["schema"], "before")
    plain = {"type": None, "optional": True}
    expected = {
        "id": {"type": "int64", "optional": False, "field": "id"},
        "c_smallint": {**plain, "type": "int16", "field": "c_smallint"},
        "c_int": {**plain, "type": "int32", "field": "c_int"},
        "c_bigint": {**plain, "type": "int64", "field": "c_bigint"},
        "c_real": {**plain, "type": "float32", "field": "c_real"},
        "c_double": {**plain, "type": "float64", "field": "c_double"},
        "c_numeric": {
            "type": "bytes",
            "optional": True,
            "name": "org.apache.kafka.connect.data.Decimal",
            "version": 1,
            "parameters": {"scale": "3", "connect.decimal.precision": "12"},
            "field": "c_numeric",
        },
        "c_bool": {**plain, "type": "boolean", "field": "c_bool"},
        "c_text": {**plain, "type": "string", "field": "c_text"},
        "c_bytea": {**plain, "type": "bytes", "field": "c_bytea"},
    }
    logical = {
        "c_date": ("int32", "io.debezium.time.Date"),
        "c_ts": ("int64", "io.debezium.time.MicroTimestamp"),
        "c_tstz": ("string", "io.debezium.time.ZonedTimestamp"),
        "c_time": ("int64", "io.debezium.time.MicroTime"),
        "c_timetz": ("string", "io.debezium.time.ZonedTime"),
        "c_interval": ("int64", "io.debezium.time.MicroDuration"),
        "c_json": ("string", "io.debezium.data.Json"),
        "c_uuid": ("string", "io.debezium.data.Uuid"),
    }
    for name, (kind, logical_name) in logical.items():
        expected[name] = {
            "type": kind,
            "optional": True,
            "name": logical_name,
            "version": 1,
            "field": name,
        }
    assert fields == expected


def test_debezium_insert_update_delete() -> None:
    enc = ce.ENCODERS["debezium"]
    c, u, d = changes(enc)
    key = {
        "schema": {
            "type": "struct",
            "fields": [{"type": "int64", "optional": False, "field": "id"}],
            "optional": False,
            "name": "dbserver1.shop.typed.Key",
        },
        "payload": {"id": 7},
    }

    [(k, v, ctl)] = enc.change(c)
    assert (parse(k), ctl) == (key, False)
    p = parse(v)["payload"]
    assert (p["op"], p["before"]) == ("c", None)
    for name, expected in DBZ_ROW1.items():
        assert p["after"][name] == expected, name
    assert p["after"] == DBZ_ROW1
    assert (p["source"]["schema"], p["source"]["table"]) == ("shop", "typed")
    assert p["source"]["connector"] == "postgresql"
    assert p["source"]["ts_ms"] == c.commit_us // 1000

    [(k, v, ctl)] = enc.change(u)
    p = parse(v)["payload"]
    assert (parse(k), ctl, p["op"]) == (key, False, "u")
    assert p["before"] == DBZ_ROW1  # REPLICA IDENTITY FULL: the whole old row
    for name, expected in DBZ_ROW2.items():
        assert p["after"][name] == expected, name

    [(k, v, ctl), (k2, v2, ctl2)] = enc.change(d)
    p = parse(v)["payload"]
    assert (parse(k), ctl, p["op"], p["after"]) == (key, False, "d", None)
    assert p["before"] == DBZ_ROW2
    assert (parse(k2), v2, ctl2) == (key, None, True)  # tombstones.on.delete=true

    lsns = [parse(enc.change(x)[0][1])["payload"]["source"]["lsn"] for x in (c, u, d)]
    assert lsns == sorted(set(lsns))
    seq = json.loads(parse(enc.change(u)[0][1])["payload"]["source"]["sequence"])
    assert seq == [str(lsns[0]), str(lsns[1])]
    assert ce.DebeziumEncoder(tombstones=False).change(d)[-1][2] is False


# --------------------------------------------------------------------------- Arcion


def test_arcion_insert_update_delete() -> None:
    enc = ce.ENCODERS["arcion"]
    c, u, d = changes(enc)
    row1 = {n: v for n, v in DBZ_ROW1.items() if n in ("id", *enc.columns)}
    row2 = {n: v for n, v in DBZ_ROW2.items() if n in ("id", *enc.columns)}
    key = {
        "schema": {
            "type": "struct",
            "fields": [{"type": "int64", "optional": False, "field": "id"}],
            "optional": False,
            "name": "KAFKA_Connector.shop.typed.Key",
        },
        "payload": {"id": 7},
    }

    [(k, v, ctl)] = enc.change(c)
    doc = parse(v)
    p = doc["payload"]
    assert (parse(k), ctl, p["op"]) == (key, False, "c")
    assert p["before"] == {}  # seed 002, INSERT event: "before": {}
    for name, expected in row1.items():
        assert p["after"][name] == expected, name
    assert p["after"] == row1
    src = p["source"]
    assert (src["connector"], src["db"], src["schema"], src["table"]) == (
        "MYSQL",
        "shop",
        None,
        "typed",
    )
    assert src["snapshot"] == "false"
    fields = field_schemas(doc["schema"], "after")
    assert fields["c_date"]["name"] == "org.apache.kafka.connect.data.Date"
    assert fields["c_date"]["type"] == "int32"
    assert fields["c_numeric"]["parameters"] == {"scale": "3", "connect.decimal.precision": "12"}
    assert fields["c_int"] == {"type": "int32", "optional": True, "field": "c_int"}
    assert fields["c_text"] == {"type": "string", "optional": True, "field": "c_text"}

    [(k, v, ctl)] = enc.change(u)
    p = parse(v)["payload"]
    assert (p["op"], p["before"], p["after"]) == ("u", row1, row2)  # seed: whole old row

    [(k, v, ctl), (k2, v2, ctl2)] = enc.change(d)
    p = parse(v)["payload"]
    assert (parse(k), ctl, p["op"], p["before"], p["after"]) == (key, False, "d", row2, {})
    assert (parse(k2), v2, ctl2) == (key, None, True)  # the tombstone, same key

    positions = [
        (s["file"], s["pos"], s["row"])
        for s in (parse(enc.change(x)[0][1])["payload"]["source"] for x in (c, u, d))
    ]
    assert positions == sorted(set(positions))
    assert ce.binlog_position(999) < ce.binlog_position(1000) < ce.binlog_position(1001)


# --------------------------------------------------------------------------- CDL


def test_cdl_insert_update_delete() -> None:
    enc = ce.ENCODERS["cdl"]
    c, u, d = changes(enc)
    row1 = {
        "id": 7,
        "c_smallint": -32768,
        "c_int": 2147483647,
        "c_bigint": -9223372036854775808,
        "c_real": N("1024.25"),
        "c_double": N("0.1"),
        "c_numeric": "1.500",  # com.xxx.cdc.data.Decimal: a string
        "c_bool": True,
        "c_text": 'quote " and \\ backslash',
        "c_date": -1,
        "c_json": '{"a": 1, "b": [true, null, "x"]}',
    }
    row2 = {
        "id": 7,
        "c_smallint": None,
        "c_int": 0,
        "c_bigint": 9223372036854775807,
        "c_real": N("-0.125"),
        "c_double": N("9.765625E-4"),
        "c_numeric": "-0.128",
        "c_bool": False,
        "c_text": "plum ✓ 😀",
        "c_date": 11017,
        "c_json": '"a string"',
    }

    [(k, v, ctl)] = enc.change(c)
    doc = parse(v)
    p = doc["payload"]
    assert (k, ctl) == (None, False)
    for name, expected in row1.items():
        assert p["data"][name] == expected, name
    assert p["data"] == row1
    assert p["before"] is None
    assert (p["OPERATION"], p["message_version"], p["message_type"]) == ("INSERT", "1.0", "0")
    assert (p["DATA_STORE"], p["SEG_OWNER"], p["TABLE_NAME"]) == ("POSTGRESQL", "shop", "typed")
    assert p["unique"] == {"id": 7}
    assert p["TIMESTAMP"] == c.commit_us // 1000
    props = {x["name"]: x["value"] for x in p["transaction"]["properties"]}
    assert set(props) == {"lsn", "txId"}
    top = {f["field"]: f for f in doc["schema"]["fields"]}
    assert top["TIMESTAMP"] == {
        "type": "int64",
        "optional": False,
        "name": "org.apache.kafka.connect.data.Timestamp",
        "version": 1,
        "field": "TIMESTAMP",
    }
    fields = field_schemas(doc["schema"], "data")
    assert fields["c_numeric"] == {
        "type": "string",
        "optional": True,
        "name": "com.xxx.cdc.data.Decimal",
        "field": "c_numeric",
    }

    [(k, v, ctl)] = enc.change(u)
    p = parse(v)["payload"]
    assert (p["OPERATION"], p["data"], p["before"]) == ("UPDATE", row2, None)

    [(k, v, ctl)] = enc.change(d)
    p = parse(v)["payload"]
    assert (p["OPERATION"], p["data"], p["before"], p["unique"]) == (
        "DELETE",
        None,
        {"id": 7},
        {"id": 7},
    )

    lsns = [
        {
            x["name"]: x["value"]
            for x in parse(enc.change(ch)[0][1])["payload"]["transaction"]["properties"]
        }["lsn"]
        for ch in (c, u, d)
    ]
    assert lsns == sorted(set(lsns))

    marker = parse(enc.marker(tm._EPOCH_US + 1_999, 2))
    assert marker == {
        "schema": None,
        "payload": {
            "message_type": "1",
            "TIMESTAMP": tm._EPOCH_US // 1000 + 1,  # milliseconds, rounded down
            "HEARTBEAT_IDENTIFIER": "heartbeat-2",
            "message_version": "1.0",
        },
    }
    assert all(ce.ENCODERS[f].marker(0, 0) is None for f in ("debezium", "arcion", "ydb-debezium"))


# --------------------------------------------------------------------------- YDB

YDB_ROW1 = {
    "id": 7,
    "c_smallint": -32768,
    "c_int": 2147483647,
    "c_bigint": -9223372036854775808,
    "c_real": N("1024.25"),
    "c_double": N("0.10000000000000001"),  # 17 significant digits
    "c_numeric": "1.5",  # NDecimal::ToString drops trailing zeros
    "c_bool": True,
    "c_text": 'quote " and \\ backslash',
    "c_bytea": "AP8QYmluYXJ5",
    "c_date": -1,  # Date32: days
    "c_ts": 1767270645500000,  # Timestamp64: µs
    "c_tstz": 1767225600250000,  # the UTC instant 2026-01-01T00:00:00.25Z
    "c_interval": 100000000005,
    "c_json": {"b": [True, None, "x"], "a": 1},  # embedded, not text
    "c_uuid": "c96fa758-02b0-87f8-06fa-adb10a248cff",
}
YDB_ROW2 = {
    "id": 7,
    "c_smallint": None,
    "c_int": 0,
    "c_bigint": 9223372036854775807,
    "c_real": N("-0.125"),
    "c_double": N("0.0009765625"),
    "c_numeric": "-0.128",
    "c_bool": False,
    "c_text": "plum ✓ 😀",
    "c_bytea": "",
    "c_date": 11017,
    "c_ts": None,
    "c_tstz": -2147454848000000,  # 1901-12-13T20:45:52Z = -2**31 s; + 8 h = 28800 s
    "c_interval": -1,
    "c_json": "a string",
    "c_uuid": None,
}


def test_ydb_debezium_insert_update_delete() -> None:
    enc = ce.ENCODERS["ydb-debezium"]
    c, u, d = changes(enc)
    key = {"payload": {"id": 7}}

    [(k, v, ctl)] = enc.change(c)
    doc = parse(v)
    assert set(doc) == {"payload"}  # no schema
    p = doc["payload"]
    assert (parse(k), ctl, p["op"]) == (key, False, "c")
    assert "before" not in p  # NEW_AND_OLD_IMAGES: no old image for an insert
    for name, expected in YDB_ROW1.items():
        assert p["after"][name] == expected, name
    assert p["after"] == YDB_ROW1
    assert p["source"] == {
        "version": "1.0.0",
        "connector": "ydb",
        "ts_ms": c.commit_us // 1000,
        "snapshot": False,
        "step": c.commit_us // 1000,
        "txId": p["source"]["txId"],
    }

    [(k, v, ctl)] = enc.change(u)
    p = parse(v)["payload"]
    assert (p["op"], p["before"], p["after"]) == ("u", YDB_ROW1, YDB_ROW2)

    [(k, v, ctl)] = enc.change(d)
    p = parse(v)["payload"]
    assert (parse(k), ctl, p["op"], p["before"]) == (key, False, "d", YDB_ROW2)
    assert "after" not in p  # NullIfErased: an erase has no new image

    stamps = [
        (s["step"], s["txId"])
        for s in (parse(enc.change(x)[0][1])["payload"]["source"] for x in (c, u, d))
    ]
    assert stamps == sorted(set(stamps))


# --------------------------------------------------------------------------- round trips
# Tiny decoders written from the documents' rules, independent of the encoders' helpers.

ISO_TS = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z")
ISO_TIME = re.compile(r"(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z")


def frac_us(text: str | None) -> int:
    return int((text or "").ljust(6, "0")[:6])


def as_f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def decode_zoned_timestamp(raw: str) -> dt.datetime:
    m = ISO_TS.fullmatch(raw)
    assert m, raw
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    return dt.datetime(y, mo, d, h, mi, s, frac_us(m.group(7)), tzinfo=UTC)


def decode_zoned_time(raw: str) -> dt.time:
    m = ISO_TIME.fullmatch(raw)
    assert m, raw
    h, mi, s = (int(g) for g in m.groups()[:3])
    return dt.time(h, mi, s, frac_us(m.group(4)), tzinfo=UTC)


def decode_uuid(raw: str) -> uuid.UUID:
    assert raw == raw.lower()
    return uuid.UUID(raw)


def days(raw: int) -> dt.date:
    return dt.date(1970, 1, 1) + dt.timedelta(days=raw)


LOGICAL: dict[str, Any] = {
    "io.debezium.time.Date": days,
    "org.apache.kafka.connect.data.Date": days,
    "io.debezium.time.MicroTimestamp": lambda raw: (
        dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=raw)
    ),
    "io.debezium.time.MicroTime": lambda raw: (
        dt.datetime(2000, 1, 1) + dt.timedelta(microseconds=raw)
    ).time(),
    "io.debezium.time.MicroDuration": lambda raw: dt.timedelta(microseconds=raw),
    "io.debezium.time.ZonedTimestamp": decode_zoned_timestamp,
    "io.debezium.time.ZonedTime": decode_zoned_time,
    "io.debezium.data.Json": json.loads,
    "io.debezium.data.Uuid": decode_uuid,
    "com.xxx.cdc.data.Decimal": Decimal,
}


def decode_connect(field: dict[str, Any], raw: Any) -> Any:
    """A Connect JSON value back to an abstract value, by its schema (Connect and Debezium
    documents), numbers given as ``("num", text)``."""
    kind, name = field["type"], field.get("name")
    if name == "org.apache.kafka.connect.data.Decimal":
        unscaled = int.from_bytes(base64.b64decode(raw, validate=True), "big", signed=True)
        return Decimal(unscaled).scaleb(-int(field["parameters"]["scale"]))
    if name is not None:
        return LOGICAL[name](raw)
    if kind == "bytes":
        return base64.b64decode(raw, validate=True)
    if kind in ("float32", "float64"):
        tag, text = raw
        assert tag == "num" and re.fullmatch(r"-?\d+\.\d+(E-?\d+)?", text), raw
        return as_f32(float(text)) if kind == "float32" else float(text)
    return raw


def same(name: str, decoded: Any, value: Any) -> bool:
    if name == "c_timetz":  # compare the instants of the day, at UTC
        off = value.utcoffset()
        us = (value.hour * 3600 + value.minute * 60 + value.second) * 10**6 + value.microsecond
        want = (us - off // dt.timedelta(microseconds=1)) % (86400 * 10**6)
        got = (decoded.hour * 3600 + decoded.minute * 60 + decoded.second) * 10**6
        return decoded.utcoffset() == dt.timedelta(0) and got + decoded.microsecond == want
    if name == "c_real":
        return bool(decoded == value and as_f32(value) == value)
    return bool(decoded == value and type(decoded) is type(value))


def random_rows(columns: tuple[str, ...], count: int = 300) -> list[dict[str, Any]]:
    rng = random.Random(11)
    rows = []
    for i in range(count):
        row = {"id": i + 1}
        for name in columns:
            row[name] = tm._VALUES[name](rng)
        rows.append(row)
    return rows


@pytest.mark.parametrize("fmt", ["debezium", "arcion", "cdl"])
def test_connect_round_trip(fmt: str) -> None:
    enc = ce.ENCODERS[fmt]
    image = "data" if fmt == "cdl" else "after"
    for seq, row in enumerate(random_rows(enc.columns), 1):
        change = tm.Change(row["id"], "c", row, None, tm._EPOCH_US + seq * 1000, seq)
        doc = parse(enc.change(change)[0][1])
        fields = field_schemas(doc["schema"], image)
        after = doc["payload"][image]
        assert set(after) == {"id", *enc.columns}
        for name in enc.columns:
            decoded = decode_connect(fields[name], after[name])
            assert same(name, decoded, row[name]), (fmt, name, row[name], after[name])


def decode_ydb(name: str, raw: Any) -> Any:
    """YDB's ToJson, read back: numbers, Base64, integer days and µs, embedded JSON."""
    if name in ("c_real", "c_double"):
        if isinstance(raw, int):  # a whole double loses its point: "-311" (FixZeros)
            return float(raw)
        tag, text = raw
        assert tag == "num" and re.fullmatch(r"-?\d+(\.\d+)?(e[+-]\d\d+)?", text), raw
        return float(text)
    if name == "c_numeric":
        assert re.fullmatch(r"-?\d+(\.\d*[1-9])?", raw), raw
        return Decimal(raw)
    if name == "c_bytea":
        return base64.b64decode(raw, validate=True)
    if name == "c_date":
        return dt.date(1970, 1, 1) + dt.timedelta(days=raw)
    if name == "c_ts":
        return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=raw)
    if name == "c_tstz":
        return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=raw)
    if name == "c_interval":
        return dt.timedelta(microseconds=raw)
    if name == "c_uuid":
        assert raw == raw.lower()
        return uuid.UUID(raw)
    return raw


def test_ydb_round_trip() -> None:
    enc = ce.ENCODERS["ydb-debezium"]
    for seq, row in enumerate(random_rows(enc.columns), 1):
        change = tm.Change(row["id"], "c", row, None, tm._EPOCH_US + seq * 1000, seq)
        after = json.loads(enc.change(change)[0][1] or "", parse_float=N)["payload"]["after"]
        plain = json.loads(enc.change(change)[0][1] or "")["payload"]["after"]
        assert set(after) == {"id", *enc.columns}
        for name in enc.columns:
            if name == "c_json":  # embedded JSON: compare as JSON values
                assert plain[name] == row[name], (name, row[name], plain[name])
                continue
            decoded = decode_ydb(name, after[name])
            assert same(name, decoded, row[name]), (name, row[name], after[name])


# --------------------------------------------------------------------------- the model


@pytest.mark.parametrize("fmt", sorted(ce.ENCODERS))
def test_generate_lines_parse(fmt: str) -> None:
    if not hasattr(tm, "generate"):
        pytest.skip("typed_model.generate is not there yet")
    enc = ce.ENCODERS[fmt]
    batches = tm.generate(enc, batches=2, changes=60, keys=10)
    controls = 0
    for batch in batches:
        for line in batch.lines:
            record = json.loads(line)
            for part in ("key", "value"):
                if record[part] is not None:
                    json.loads(record[part])
        controls += batch.counts["control"]
    if fmt in ("cdl", "debezium", "arcion"):
        assert controls > 0  # heartbeats, or the tombstones after deletes
