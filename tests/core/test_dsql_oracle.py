"""The demo DSQL generator as an oracle: its fragments and expected values, by hand.

The generator (``cdc_demo.dsql_stream``) is what the Spark end-to-end tests compare the
tables to, so it must not share code with the pipeline. These cases hold it to the Aurora DSQL
CDC document ("Understanding CDC records") and the README's *Types*, with values computed by
hand.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import math
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import crc32c
import pytest

from cdc_demo import dsql_stream
from cdc_demo.dsql_stream import (
    Stream,
    differences,
    envelope,
    expected_row,
    expected_value,
    generate,
)

COLUMNS = {t: cols for t, (cols, _) in dsql_stream._declared(dsql_stream.DDL).items()}


def column(table: str, name: str) -> Any:
    return next(c for c in COLUMNS[table] if c.name == name)


def value(name: str, record_value: Any) -> tuple[Any, str | None]:
    return expected_value(column("customers", name), record_value)


# --- independence ---------------------------------------------------------------------------


def test_the_oracle_imports_nothing_from_the_pipeline() -> None:
    tree = ast.parse(Path(dsql_stream.__file__).read_text(encoding="utf-8"))
    modules = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in modules if m.startswith(("airflow_cdc.core", "spark_jobs"))]
    assert "cdc_demo" in modules  # example_ddl: it only reads the DDL file


def test_the_ddl_is_read_with_its_keys_and_types() -> None:
    tables = dsql_stream._declared(dsql_stream.DDL)
    assert tables["customers"][1] == ("id",)
    assert tables["order_items"][1] == ("order_id", "item_id")
    assert (column("customers", "balance").precision, column("customers", "balance").scale) == (
        12,
        2,
    )
    assert column("customers", "lifetime").scale is None
    assert column("customers", "score").type == "double"
    assert column("order_items", "order_id").type == "integer"
    with pytest.raises(ValueError, match="does not know"):
        dsql_stream._declared("CREATE TABLE t (a timestamp with time zone);")


# --- fragments ------------------------------------------------------------------------------


def test_crc32c_check_value() -> None:
    # The standard CRC-32C (Castagnoli) check value of "123456789" (RFC 3720, B.4).
    assert dsql_stream._crc32c("123456789") == 0xE3069283


def test_fragment_cuts_fall_between_characters() -> None:
    # "data is a segment of the image's JSON text split on UTF-8 character boundaries (each
    # fragment's data value is a valid UTF-8 string on its own)". 'a' 1 byte, 'é' 2, '€' 3,
    # '🚀' 4: at most 4 bytes a piece gives "aé" (3), "€" (3; +4 would be 7), "🚀" (4).
    assert dsql_stream._fragment_texts("aé€🚀", 4) == ["aé", "€", "🚀"]
    assert dsql_stream._fragment_texts("abcdefg", 3) == ["abc", "def", "g"]
    with pytest.raises(ValueError):
        dsql_stream._fragment_texts("🚀", 3)


def test_a_chunked_record_is_what_the_document_describes() -> None:
    image = {"order_id": 1001, "item_id": 42, "note": "grüße aus 東京 🚀 " * 20, "price": "9.99"}
    record = envelope("c", "order_items", 1_705_318_200_000_000_000, image, random.Random(1))
    counts = {"chunked": 0, "fragments": 0}
    delivered = [
        json.loads(t) for t in dsql_stream._deliver(record, random.Random(2), 0, 50, counts)
    ]
    main, fragments = delivered[0], delivered[1:]
    # "A chunked main record replaces the top-level before or after field for the split image
    # with a chunked object [...] chunk_id [...], total_fragments [...], and crc32c (a CRC32C
    # checksum, as a decimal string, over the reassembled image text)."
    assert main["type"] == "chunked" and main["op"] == "c"
    assert main["after"] is None and main["before"] is None
    assert main["source"] == record["source"] and main["ts_ns"] == record["ts_ns"]
    ref = main["chunked"]["after"]
    assert set(main["chunked"]) == {"after"}
    assert ref["total_fragments"] == len(fragments) > 1
    assert isinstance(ref["crc32c"], str) and ref["crc32c"].isdigit()
    # "three fields: chunk_id [...], index is the zero-based position [...], and data"
    for fragment in fragments:
        assert set(fragment) == {"type", "chunk_id", "index", "data"}
        assert fragment["type"] == "fragment" and fragment["chunk_id"] == ref["chunk_id"]
        assert 0 < len(fragment["data"].encode("utf-8")) <= 50
    assert [f["index"] for f in fragments] == list(range(len(fragments)))
    # "sort the fragments by index ascending, and concatenate the data strings. The
    # concatenated result is the original before or after object as JSON text [...] compute
    # CRC32C over the concatenated string and compare the result".
    text = "".join(f["data"] for f in sorted(reversed(fragments), key=lambda f: f["index"]))
    assert json.loads(text) == image
    assert int(ref["crc32c"]) == crc32c.crc32c(text.encode("utf-8"))
    assert counts == {"chunked": 1, "fragments": len(fragments)}


def test_a_delete_chunks_its_before_image() -> None:
    record = envelope("d", "order_items", 1, {"order_id": 1, "item_id": 2}, random.Random(1))
    counts = {"chunked": 0, "fragments": 0}
    main = json.loads(dsql_stream._deliver(record, random.Random(2), 0, 8, counts)[0])
    assert set(main["chunked"]) == {"before"} and main["before"] is None


def test_generated_fragment_sets_reassemble_except_the_broken_ones() -> None:
    stream = generate(200, seed=3, chunk_threshold=800, fragment_bytes=300)
    records = [
        json.loads(t) for t in set(stream.deliveries) if t.startswith("{") and t.endswith("}")
    ]
    fragments: dict[str, dict[int, str]] = {}
    for r in records:
        if r.get("type") == "fragment":
            fragments.setdefault(r["chunk_id"], {})[r["index"]] = r["data"]
    outcomes = {"ok": 0, "crc": 0, "incomplete": 0}
    for r in records:
        if r.get("type") != "chunked":
            continue
        ((_image, ref),) = r["chunked"].items()
        pieces = fragments.get(ref["chunk_id"], {})
        if len(pieces) < ref["total_fragments"]:
            outcomes["incomplete"] += 1
            continue
        text = "".join(pieces[i] for i in range(ref["total_fragments"]))
        if str(crc32c.crc32c(text.encode("utf-8"))) != ref["crc32c"]:
            outcomes["crc"] += 1
            continue
        outcomes["ok"] += 1
        assert isinstance(json.loads(text), dict)
    assert outcomes == {"ok": stream.counts["chunked"] - 2, "crc": 1, "incomplete": 1}


# --- values ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "record_value", "expected"),
    [
        # The document's examples, and what they are by hand.
        ("id", 9223372036854775807, 9223372036854775807),  # bigint
        ("age", 42, 42),  # smallint
        ("visits", 1001, 1001),  # integer
        ("owner_oid", 16384, 16384),  # oid: "JSON number (unsigned)", BIGINT
        ("score", 3.141592653589793, 3.141592653589793),  # double precision
        ("ratio", 0.5, 0.5),  # real
        ("active", True, True),
        ("name", "Hello, world!", "Hello, world!"),
        ("balance", "123.45", Decimal("123.45")),  # "numeric / decimal | JSON string"
        ("lifetime", "202237214451.465621", Decimal("202237214451.465621")),
        ("avatar", "SGVsbG8gV29ybGQh", b"Hello World!"),  # bytea: Base64
        # date 19797: 19797 * 86400 s = 1710460800 s after the epoch = 2024-03-15.
        ("birthday", 19797, dt.date(2024, 3, 15)),
        ("birthday", -1, dt.date(1969, 12, 31)),
        # time 52200123456 µs = 52200 s + 123456 µs = 14 h 30 min + 0.123456 s.
        ("wake_time", 52200123456, "14:30:00.123456"),
        ("wake_time", 0, "00:00:00.000000"),
        ("wake_tz", 52200123456, "14:30:00.123456+00:00"),  # timetz: already UTC
        ("wake_tz", 86_399_999_999, "23:59:59.999999+00:00"),
        # timestamp 1710510600123456 µs: 1710510600 s = 1710460800 s (2024-03-15) + 49800 s
        # (13 h 50 min), + 0.123456 s.
        ("created_at", 1710510600123456, dt.datetime(2024, 3, 15, 13, 50, 0, 123456)),
        (
            "updated_at",
            1710510600123456,
            dt.datetime(2024, 3, 15, 13, 50, 0, 123456, tzinfo=dt.UTC),
        ),
        ("created_at", -1, dt.datetime(1969, 12, 31, 23, 59, 59, 999999)),
        # interval 2802603000000: (1 month x 2,629,800 + 2 days x 86,400) x 10^6 + 3 s.
        ("session_len", 2802603000000, 2802603000000),
        (
            "external_id",
            "550e8400-e29b-41d4-a716-446655440000",
            "550e8400-e29b-41d4-a716-446655440000",
        ),
        ("prefs", '{"key": "value"}', '{"key": "value"}'),  # json: the raw text, kept
        ("tags", [], []),  # oidvector: "JSON empty array"
        ("email", None, None),  # "NULL column values are represented as JSON null"
        ("session_len", None, None),  # an interval overflow: "emits JSON null"
    ],
)
def test_record_values_become_warehouse_values(name: str, record_value: Any, expected: Any) -> None:
    got, marker = value(name, record_value)
    assert marker is None
    assert got == expected and type(got) is type(expected)


def test_timestamptz_is_utc_and_timestamp_is_naive() -> None:
    assert value("updated_at", 0)[0].utcoffset() == dt.timedelta(0)
    assert value("created_at", 0)[0].tzinfo is None


@pytest.mark.parametrize("special", ["NaN", "Infinity", "-Infinity"])
def test_numeric_specials_are_null_with_a_marker(special: str) -> None:
    # Document: numeric "NaN and ±Infinity are serialized as the strings "NaN", "Infinity",
    # "-Infinity"." README: "null in their column and recorded in `_cdc_special_values`
    # (`{"balance": "NaN"}`)".
    assert value("balance", special) == (None, special)
    assert value("lifetime", special) == (None, special)


def test_float_specials_are_values_not_markers() -> None:
    # README: "`real`/`double` to FLOAT/DOUBLE (with NaN and ±Infinity)".
    nan, marker = value("score", "NaN")
    assert math.isnan(nan) and marker is None
    assert value("score", "Infinity") == (math.inf, None)
    assert value("ratio", "-Infinity") == (-math.inf, None)


def test_real_holds_single_precision() -> None:
    assert value("ratio", 0.1)[0] == 0.10000000149011612


def test_timestamp_sentinels_are_null_with_a_marker() -> None:
    # "±Infinity maps to sentinel values: 9223372036825200000 for +infinity and
    # -9223372036832400000 for -infinity." (timestamptz: "Same ±infinity sentinel values")
    for name in ("created_at", "updated_at"):
        assert value(name, 9223372036825200000) == (None, "infinity")
        assert value(name, -9223372036832400000) == (None, "-infinity")


@pytest.mark.parametrize(
    ("name", "record_value"),
    [
        ("balance", "12.345"),  # more scale than numeric(12, 2) holds
        ("balance", "12345678901.00"),  # more than 10 integer digits
        ("balance", 12.5),  # numeric is "Always a string"
        ("visits", "12"),
        ("visits", 2**31),
        ("age", True),
        ("avatar", "not base64!"),
        ("wake_time", 86_400_000_000),
        ("external_id", "550e8400e29b41d4a716446655440000"),
        ("prefs", "{broken"),
        ("score", "nan"),
        ("tags", [1, "2"]),
    ],
)
def test_values_outside_their_type_are_refused(name: str, record_value: Any) -> None:
    with pytest.raises(ValueError):
        value(name, record_value)


def test_a_row_lists_its_markers() -> None:
    image = {"order_id": 5, "item_id": 1, "quantity": 2, "price": "NaN"}
    values, special = expected_row(COLUMNS["order_items"], image)
    assert values == {"order_id": 5, "item_id": 1, "quantity": 2, "price": None}
    assert special == {"price": "NaN"}
    values, special = expected_row(COLUMNS["order_items"], {"order_id": 5, "item_id": 1})
    assert values["price"] is None and special == {}


# --- differences ----------------------------------------------------------------------------


def _row(image: dict[str, Any]) -> dict[str, Any]:
    values, special = expected_row(COLUMNS["customers"], image)
    return values | {"_cdc_special_values": special}


CUSTOMER = {
    "id": 7,
    "name": "Zoë 7",
    "email": None,
    "balance": "NaN",
    "lifetime": "12.5",
    "score": "NaN",
    "ratio": 0.25,
    "active": True,
    "avatar": "AAE=",
    "birthday": 19797,
    "wake_time": 52200123456,
    "wake_tz": 52200123456,
    "created_at": 9223372036825200000,
    "updated_at": 1710510600123456,
    "session_len": 2802603000000,
    "prefs": '{"theme": "dark"}',
    "external_id": "550e8400-e29b-41d4-a716-446655440000",
    "age": 30,
    "visits": 3,
    "tags": [],
    "owner_oid": 16384,
    "bio": "short",
}


def _stream(*images: dict[str, Any]) -> Stream:
    return Stream([], {"customers": {(i["id"],): i for i in images}, "order_items": {}})


def test_a_table_as_spark_returns_it_is_equal() -> None:
    # Spark hands back TIMESTAMP as a naive UTC datetime, BINARY as bytearray, FLOAT rounded.
    row = {
        "id": 7,
        "name": "Zoë 7",
        "email": None,
        "balance": None,
        "lifetime": Decimal("12.500000000000000000"),
        "score": math.nan,
        "ratio": 0.25,
        "active": True,
        "avatar": bytearray(b"\x00\x01"),
        "birthday": dt.date(2024, 3, 15),
        "wake_time": "14:30:00.123456",
        "wake_tz": "14:30:00.123456+00:00",
        "created_at": None,
        "updated_at": dt.datetime(2024, 3, 15, 13, 50, 0, 123456, tzinfo=dt.UTC),
        "session_len": 2802603000000,
        "prefs": '{"theme": "dark"}',
        "external_id": "550e8400-e29b-41d4-a716-446655440000",
        "age": 30,
        "visits": 3,
        "tags": [],
        "owner_oid": 16384,
        "bio": "short",
        "_cdc_special_values": {"balance": "NaN", "created_at": "infinity"},
        "_cdc_op": "c",
    }
    assert differences(_stream(CUSTOMER), "customers", [row]) == []


def test_differences_reports_wrong_missing_and_unexpected_rows() -> None:
    other = CUSTOMER | {"id": 8, "balance": "10.00", "created_at": 0}
    wrong = _row(CUSTOMER) | {"age": 31}
    stranger = _row(CUSTOMER | {"id": 9})
    problems = differences(_stream(CUSTOMER, other), "customers", [wrong, stranger])
    assert problems == [
        "missing row (8,)",
        "unexpected row (9,)",
        "customers(7,).age: expected 30, got 31",
    ]


def test_differences_reports_a_lost_marker_and_a_value_in_its_place() -> None:
    row = _row(CUSTOMER) | {"balance": Decimal(0), "_cdc_special_values": {}}
    problems = differences(_stream(CUSTOMER), "customers", [row])
    assert problems == [
        "customers(7,).balance: expected None, got Decimal('0')",
        "customers(7,) special values: expected {'balance': 'NaN', 'created_at': 'infinity'},"
        " got {}",
    ]


def test_differences_tolerances() -> None:
    row = _row(CUSTOMER)
    # Naive in the local zone, as Spark collects a TIMESTAMP.
    instant = dt.datetime(2024, 3, 15, 13, 50, 0, 123456, tzinfo=dt.UTC)
    row["updated_at"] = instant.astimezone().replace(tzinfo=None)
    row["ratio"] = 0.25 * (1 + 1e-9)
    row["avatar"] = bytearray(row["avatar"])
    assert differences(_stream(CUSTOMER), "customers", [row]) == []
    row["score"] = 1.0  # NaN only equals NaN
    assert differences(_stream(CUSTOMER), "customers", [row]) == [
        "customers(7,).score: expected nan, got 1.0"
    ]


def test_differences_limit() -> None:
    images = [CUSTOMER | {"id": n} for n in range(20)]
    assert len(differences(_stream(*images), "customers", [], limit=5)) == 5


def test_generated_expected_state_is_its_own_fixed_point() -> None:
    stream = generate(300, seed=13)
    for table in dsql_stream.TABLES:
        rows = []
        for image in stream.expected[table].values():
            values, special = expected_row(COLUMNS[table], image)
            rows.append(values | {"_cdc_special_values": special})
        assert differences(stream, table, rows) == []
        assert rows  # the stream writes both tables
