"""More hostile single records: each one is a :class:`RecordFormatError` with a specific reason
(or a control message of the right kind), never another exception, and a value the decoders
cannot read is a :class:`DecodeError`.

Complements ``test_hostile_records.py`` (YDB JSON steps, resolved markers, a 10**21 Decimal
scale) and ``test_parser_properties.py`` (arbitrary documents: some RecordFormatError, never
another exception). Here the reason is the point: a quarantined record must say what was wrong.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_cdc.core import formats
from airflow_cdc.core.ddl import ColumnSpec, parse_tables
from airflow_cdc.core.events import HEARTBEAT, UPSERT, ChangeRecord, Control, Message
from airflow_cdc.core.exceptions import DecodeError, RecordFormatError
from airflow_cdc.core.formats import parser_for, resolved_marker
from airflow_cdc.core.formats.common import RecordLimits
from airflow_cdc.core.rows import decode_row
from airflow_cdc.core.types import MAX_MICROS, column_of, decode, spark_type

POSITION = "00000000000000000001"
# The last millisecond the calendar holds (9999-12-31T23:59:59.999Z), and the next one.
LAST_MS = MAX_MICROS // 1000
PAST_MS = LAST_MS + 1


def parse(fmt: str, doc: Any, key: str | None = None, topic: str | None = "t") -> Any:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    return parser_for(fmt)(Message(text, key, POSITION, topic))


def reason_of(fmt: str, doc: Any, key: str | None = None, topic: str | None = "t") -> str:
    with pytest.raises(RecordFormatError) as raised:
        parse(fmt, doc, key, topic)
    assert str(raised.value)
    return raised.value.reason


# --- Debezium -----------------------------------------------------------------------------


def debezium(**source: Any) -> dict[str, Any]:
    """A schema-less Debezium create; ``source`` fields override a Postgres source."""
    base: dict[str, Any] = {"schema": "s", "table": "t", "ts_ms": 1, "lsn": 5}
    base.update(source)
    return {
        "op": "c",
        "before": None,
        "after": {"id": 1},
        "source": {k: v for k, v in base.items() if v is not None},
    }


@pytest.mark.parametrize("lsn", [10**20, "1" * 21, 2**70])
def test_a_debezium_lsn_wider_than_its_sort_key_is_invalid_record(lsn: Any) -> None:
    # Postgres orders by source.lsn, a 64-bit WAL position (at most 20 digits).
    assert reason_of("debezium", debezium(lsn=lsn)) == "invalid_record"


@pytest.mark.parametrize("ts_ms", [10**20, 10**25, "9" * 21])
def test_a_debezium_ts_ms_of_more_than_20_digits_is_invalid_timestamp(ts_ms: Any) -> None:
    # Ordered by lsn; ts_ms is then the commit time only, past year 9999.
    assert reason_of("debezium", debezium(ts_ms=ts_ms)) == "invalid_timestamp"


@pytest.mark.parametrize("ts_ms", [10**20, "9" * 21])
def test_a_debezium_ts_ms_of_more_than_20_digits_without_lsn_is_a_format_error(
    ts_ms: Any,
) -> None:
    # Without lsn (or binlog position) ts_ms orders the record and is its time: it can be
    # neither.
    assert reason_of("debezium", debezium(ts_ms=ts_ms, lsn=None)) in {
        "invalid_timestamp",
        "invalid_record",
    }


@pytest.mark.parametrize("ts_ms", [PAST_MS, 10**15 - 1, 10**15, 10**15 + 1, 10**19, 2**63 - 1])
def test_a_debezium_ts_ms_past_year_9999_is_invalid_timestamp(ts_ms: int) -> None:
    # Huawei CDL's table: "source.ts_ms: Timestamp when a database change occurs" (ms).
    assert reason_of("debezium", debezium(ts_ms=ts_ms)) == "invalid_timestamp"
    assert reason_of("debezium", {"schema": None, "payload": debezium(ts_ms=ts_ms)}) == (
        "invalid_timestamp"
    )


def test_the_last_millisecond_of_year_9999_is_a_commit_time() -> None:
    parsed = parse("debezium", debezium(ts_ms=LAST_MS))
    assert isinstance(parsed, ChangeRecord)
    assert parsed.commit_ts_us == LAST_MS * 1000


# --- Huawei CDL ---------------------------------------------------------------------------


def cdl(timestamp: Any = 1_707_047_996_013, properties: Any = None) -> dict[str, Any]:
    """A CDL JSON 1.0 insert shaped as the vendor's sample."""
    if properties is None:
        properties = [{"name": "lsn", "value": 163955221008}, {"name": "txId", "value": 57227595}]
    return {
        "schema": None,
        "payload": {
            "DATA_STORE": "POSTGRESQL",
            "SEG_OWNER": "public",
            "TABLE_NAME": "ct_pg2hudi",
            "TIMESTAMP": timestamp,
            "OPERATION": "INSERT",
            "LOB_COLUMNS": None,
            "transaction": {"properties": properties},
            "unique": {"id": 34},
            "data": {"count1": 13, "id": 34},
            "before": None,
            "message_version": "1.0",
            "message_type": "0",
        },
    }


@pytest.mark.parametrize("timestamp", [PAST_MS, 10**15 - 1, 10**15, 10**19])
def test_a_cdl_timestamp_past_year_9999_is_invalid_timestamp(timestamp: int) -> None:
    # "TIMESTAMP | source.ts_ms | Timestamp when a database change occurs".
    assert reason_of("cdl", cdl(timestamp)) == "invalid_timestamp"


@pytest.mark.parametrize("ts_ms", [10**15, 10**19])
def test_a_cdl_debezium_ts_ms_past_year_9999_is_invalid_timestamp(ts_ms: int) -> None:
    # "2.0: open-source Debezium JSON".
    payload = {**debezium(ts_ms=ts_ms), "message_version": "2.0", "message_type": "0"}
    assert reason_of("cdl", {"schema": None, "payload": payload}) == "invalid_timestamp"


@pytest.mark.parametrize("timestamp", [10**15, 10**19, 2**64])
def test_a_cdl_heartbeat_past_year_9999_is_invalid_resolved(timestamp: int) -> None:
    heartbeat = {
        "schema": None,
        "payload": {
            "message_type": "1",
            "TIMESTAMP": timestamp,
            "HEARTBEAT_IDENTIFIER": "279fb050-0143-45c1-b184-50bc48c2461c",
            "message_version": "1.0",
        },
    }
    assert reason_of("cdl", heartbeat) == "invalid_resolved"
    # Landing looks for markers in every CDL message: one it cannot place is not a marker.
    message = Message(json.dumps(heartbeat), None, POSITION, "t")
    assert resolved_marker("cdl", message) is None


def test_a_cdl_heartbeat_in_the_calendar_is_a_heartbeat() -> None:
    heartbeat = {"message_type": "1", "TIMESTAMP": LAST_MS, "message_version": "1.0"}
    parsed = parse("cdl", {"schema": None, "payload": heartbeat})
    assert isinstance(parsed, Control) and parsed.kind == HEARTBEAT
    assert parsed.resolved_us == LAST_MS * 1000


@pytest.mark.parametrize("name", [["lsn"], {"lsn": 1}, ["lsn", "txId"]])
def test_a_cdl_property_named_by_a_list_is_not_a_type_error(name: Any) -> None:
    # "transaction.properties.lsn | source.lsn | Log serial number": properties are
    # {"name": <text>, "value": ...} pairs. A pair whose name is not text names no property:
    # either it is skipped (as pairs without a name are, and the lsn pair still orders the
    # record) or the record is quarantined as a field of the wrong type -- never a Python
    # TypeError ("unhashable type") passed off as invalid_record.
    properties = [{"name": name, "value": 7}, {"name": "lsn", "value": 163955221008}]
    try:
        parsed = parse("cdl", cdl(properties=properties))
    except RecordFormatError as err:
        assert err.reason == "missing_field", str(err)
        return
    assert isinstance(parsed, ChangeRecord)
    assert parsed.sequence.startswith("00000000163955221008.")


# --- YDB's Debezium-compatible JSON -------------------------------------------------------


def ydb_debezium(**source: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "connector": "ydb",
        "version": "1.0.0",
        "ts_ms": 1_767_225_600_000,
        "step": 1_767_225_600_000,
        "txId": 281474976710658,
        "snapshot": False,
    }
    base.update(source)
    return {"payload": {"op": "u", "after": {"a": 1}, "source": base}}


@pytest.mark.parametrize("step", [PAST_MS, 10**15, 10**19])
def test_a_ydb_debezium_step_past_year_9999_is_invalid_timestamp(step: int) -> None:
    # "step: Global coordinator time. Part of the virtual timestamp." (milliseconds)
    assert reason_of("ydb-debezium", ydb_debezium(step=step), topic="t/feed") == (
        "invalid_timestamp"
    )


@pytest.mark.parametrize("ts_ms", [10**15, 10**19, 10**25])
def test_a_ydb_debezium_ts_ms_past_year_9999(ts_ms: int) -> None:
    # "ts_ms: Approximate time when the change was applied, in milliseconds"; the commit
    # time and order are the virtual timestamp's (step, txId). Either ts_ms is not read (and
    # the record's time is its step) or the record is quarantined for an impossible time.
    try:
        parsed = parse("ydb-debezium", ydb_debezium(ts_ms=ts_ms), topic="t/feed")
    except RecordFormatError as err:
        assert err.reason == "invalid_timestamp", str(err)
        return
    assert isinstance(parsed, ChangeRecord)
    assert parsed.commit_ts_us == 1_767_225_600_000 * 1000


@pytest.mark.parametrize("step", [-5, "-5", -(2**70)])
def test_a_negative_ydb_debezium_step_is_missing_field(step: Any) -> None:
    # As in YDB's JSON format (``"ts": [-5, 1]`` is ``missing_field``, test_hostile_records):
    # a virtual timestamp is [step, txId] of non-negative coordinator time and transaction id.
    assert reason_of("ydb-debezium", ydb_debezium(step=step), topic="t/feed") == "missing_field"


@pytest.mark.parametrize("tx", [-1, 2**70])
def test_a_ydb_debezium_tx_id_out_of_range_is_a_format_error(tx: int) -> None:
    reason = reason_of("ydb-debezium", ydb_debezium(txId=tx), topic="t/feed")
    assert reason in {"missing_field", "invalid_record"}


# --- CockroachDB --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "updated",
    ["1" * 21 + ".0000000000", "9" * 40 + ".0000000000", "1" * 21, "1" * 21 + "." + "0" * 25],
)
def test_a_cockroach_updated_wall_time_of_more_than_20_digits_is_a_format_error(
    updated: str,
) -> None:
    # "updated": "<wall nanoseconds>.<logical>", e.g. "1701102296662969433.0000000000"; the
    # wall time is a 64-bit count of nanoseconds (19 digits): more than 20 cannot be one, and
    # does not fit the sort key.
    assert reason_of("cockroachdb", {"after": {"id": 1}, "updated": updated}) == "invalid_record"
    bare = {"id": 1, "__crdb__": {"updated": updated, "key": [1]}}
    assert reason_of("cockroachdb", bare) == "invalid_record"


def test_a_cockroach_logical_part_wider_than_the_sort_key_is_a_format_error() -> None:
    updated = "1701102296662969433." + "1" * 21
    assert reason_of("cockroachdb", {"after": {"id": 1}, "updated": updated}) == "invalid_record"


# --- Kafka Connect schemas (Debezium with schemas) ----------------------------------------

DECIMAL = "org.apache.kafka.connect.data.Decimal"


def with_schema(after_fields: Any, after: dict[str, Any], envelope_fields: Any = None) -> dict:
    after_schema = {"field": "after", "type": "struct", "optional": True, "fields": after_fields}
    fields = envelope_fields
    if fields is None:
        fields = [after_schema, {"field": "op", "type": "string", "optional": False}]
    payload = {**debezium(), "after": after}
    return {"schema": {"type": "struct", "optional": False, "fields": fields}, "payload": payload}


@pytest.mark.parametrize("fields", [{"field": "after"}, "after", 5, True])
def test_an_envelope_schema_whose_fields_is_not_a_list_is_invalid_schema(fields: Any) -> None:
    # Connect's JsonConverter: a struct schema's "fields" is an array of field schemas.
    doc = with_schema([], {"id": 1}, envelope_fields=fields)
    assert reason_of("debezium", doc) == "invalid_schema"


@pytest.mark.parametrize("fields", [{"field": "id", "type": "int64"}, "id", 5])
def test_an_image_schema_whose_fields_is_not_a_list_is_invalid_schema(fields: Any) -> None:
    assert reason_of("debezium", with_schema(fields, {"id": 1})) == "invalid_schema"


@pytest.mark.parametrize("connect_type", [["int32"], {"type": "int32"}, ["int32", "null"]])
def test_a_field_type_that_is_not_a_name_is_invalid_schema(connect_type: Any) -> None:
    # As an unknown type name is: "unknown Connect type" (not a TypeError: unhashable type).
    field = {"field": "id", "type": connect_type, "optional": False}
    assert reason_of("debezium", with_schema([field], {"id": 1})) == "invalid_schema"
    assert reason_of("arcion", with_schema([field], {"id": 1})) == "invalid_schema"


@pytest.mark.parametrize("scale", [40, 1000, 10**6, -3, -(10**6)])
@pytest.mark.parametrize("as_text", [True, False])
def test_a_decimal_scale_is_one_a_spark_decimal_holds_or_a_reason(
    scale: int, as_text: bool
) -> None:
    # Connect's Decimal: Base64 of the unscaled integer, "scale" in its parameters (text in
    # JsonConverter's schemas). Spark's DECIMAL(p, s) needs p <= 38 and 0 <= s <= p: either
    # the record is refused when parsed, or the type it declares is one a Delta column holds.
    field = {
        "field": "d",
        "type": "bytes",
        "optional": True,
        "name": DECIMAL,
        "parameters": {"scale": str(scale) if as_text else scale},
    }
    doc = with_schema([{"field": "id", "type": "int64"}, field], {"id": 1, "d": "AQ=="})
    try:
        parsed = parse("debezium", doc)
    except RecordFormatError as err:
        assert err.reason and str(err)
        return
    assert isinstance(parsed, ChangeRecord) and parsed.types is not None
    column = column_of("d", parsed.types["d"])
    if column.pg_type == "numeric" and column.precision is not None:
        scale_of = column.scale or 0
        assert column.precision <= 38, parsed.types
        assert 0 <= scale_of <= column.precision, parsed.types
    spark_type(column)


def test_an_undeclared_int8_column_has_a_type_the_table_can_take() -> None:
    # README: "int8..int64 to TINYINT..BIGINT" and "A column the DDL does not declare is
    # added with its Connect type".
    fields = [{"field": "id", "type": "int64"}, {"field": "tiny", "type": "int8"}]
    parsed = parse("debezium", with_schema(fields, {"id": 1, "tiny": 7}))
    assert isinstance(parsed, ChangeRecord) and parsed.types is not None
    column = column_of("tiny", parsed.types["tiny"])
    assert spark_type(column) in {"TINYINT", "SMALLINT", "INT", "BIGINT"}
    assert decode(column, 7).value == 7
    (spec,) = parse_tables("CREATE TABLE s.t (id BIGINT PRIMARY KEY)")
    row = decode_row(spec, UPSERT, None, parsed.after, types=parsed.types)
    assert row.values == {"id": 1}


# --- resolved_marker ----------------------------------------------------------------------


class ParserBug(Exception):
    """Not a record's fault: a bug in a parser."""


def test_resolved_marker_lets_a_parser_bug_through(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str) -> Any:
        def parser(message: Message) -> Any:
            return 1 // 0

        return parser

    monkeypatch.setattr(formats, "parser_for", broken)
    message = Message(json.dumps({"resolved": [1_767_225_600_000, 0]}), None, "1", "t/feed")
    with pytest.raises(ZeroDivisionError):
        resolved_marker("ydb", message)
    heartbeat = {"payload": {"message_type": "1", "TIMESTAMP": 1}}
    with pytest.raises(ZeroDivisionError):
        resolved_marker("cdl", Message(json.dumps(heartbeat), None, "1", "t"))


def test_resolved_marker_lets_an_error_no_content_causes_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def parser(message: Message) -> Any:
        raise ParserBug("a bug, not a bad record")

    monkeypatch.setitem(formats.PARSERS, "cockroachdb", parser)
    message = Message(json.dumps({"resolved": "1701102296662969433.0000000000"}), None, "1", "t")
    with pytest.raises(ParserBug):
        resolved_marker("cockroachdb", message)


def test_resolved_marker_is_none_for_a_format_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def refusing(name: str) -> Any:
        def parser(message: Message) -> Any:
            raise RecordFormatError("invalid_resolved", "refused")

        return parser

    monkeypatch.setattr(formats, "parser_for", refusing)
    message = Message(json.dumps({"resolved": [1_767_225_600_000, 0]}), None, "1", "t/feed")
    assert resolved_marker("ydb", message) is None


# --- The value decoders -------------------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 100_000 + "1" + "}" * 100_000
LONG_NUMBER = '{"n": ' + "9" * 5000 + "}"
(SPEC,) = parse_tables(
    "CREATE TABLE docs (id INT PRIMARY KEY, doc JSONB, body JSON, amount NUMERIC(10,2), big BIGINT)"
)


@pytest.mark.parametrize("pg_type", ["json"])
@pytest.mark.parametrize(
    "text",
    [DEEP, DEEP_OBJECT, LONG_NUMBER, "9" * 5000, "-" + "9" * 5000],
    ids=["deep-array", "deep-object", "long-number-in-object", "long-number", "long-negative"],
)
def test_json_text_past_the_parser_limits_is_a_decode_error(pg_type: str, text: str) -> None:
    # DSQL: json/jsonb values are JSON text, validated: text Python cannot read back
    # (nested past the recursion limit, a number past the 4300-digit limit) does not decode.
    with pytest.raises(DecodeError) as raised:
        decode(ColumnSpec("doc", pg_type), text)
    assert raised.value.reason == "decode_error" and raised.value.column == "doc"


@pytest.mark.parametrize("column", ["doc", "body"])
@pytest.mark.parametrize(
    "text", [DEEP, DEEP_OBJECT, LONG_NUMBER], ids=["deep-array", "deep-object", "long-number"]
)
def test_decode_row_of_json_past_the_parser_limits_is_a_decode_error(
    column: str, text: str
) -> None:
    with pytest.raises(DecodeError) as raised:
        decode_row(SPEC, UPSERT, None, {"id": 1, column: text})
    assert raised.value.reason == "decode_error" and raised.value.column == column


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("amount", "9" * 5000),
        ("amount", "0." + "0" * 4998 + "1"),
        ("amount", "1e" + "9" * 5000),
        ("big", 10**5000),
        ("big", -(10**5000)),
    ],
    ids=["digits", "fraction", "exponent", "big-int", "big-negative-int"],
)
def test_a_number_of_5000_digits_is_a_decode_error(column: str, value: Any) -> None:
    with pytest.raises(DecodeError) as raised:
        decode_row(SPEC, UPSERT, None, {"id": 1, column: value})
    assert raised.value.column == column


def test_the_length_of_a_number_can_be_lowered() -> None:
    limits = RecordLimits(number_length=12)
    value = (
        '{"payload": {"op": "c", "after": {"id": %s, "s": "%s"},'
        ' "source": {"ts_ms": 1, "schema": "s", "table": "t"}}}'
    )
    long_text = "9" * 40  # a long run of digits in a string is no number
    for literal in ("123456789012", "-12345678901", "1234567890.1", "1.234567e+10"):
        parser_for("debezium", limits)(Message(value % (literal, long_text), None, POSITION, "t"))
    for literal in ("1234567890123", "-123456789012", "12345678901.2", "1.2345678e+10"):
        with pytest.raises(RecordFormatError, match="13 characters is over the limit of 12"):
            parser_for("debezium", limits)(Message(value % (literal, ""), None, POSITION, "t"))
    # The default is the longest number Spark's JSON reader reads: 1,000 characters.
    parser_for("debezium")(Message(value % ("9" * 1000, ""), None, POSITION, "t"))
    for literal in ("9" * 1001, "0." + "1" * 999):
        with pytest.raises(RecordFormatError, match="1,001 characters"):
            parser_for("debezium")(Message(value % (literal, ""), None, POSITION, "t"))


def test_record_limits_refuse_settings_out_of_range() -> None:
    for bad in ({"number_length": 0}, {"number_length": 1001}, {"fragments": 10**6 + 1}):
        with pytest.raises(ValueError, match="must be 1 to"):
            RecordLimits(**bad)


def test_a_lone_surrogate_in_a_record_is_a_bad_record() -> None:
    from spark_jobs.parse import _parsed_row

    value = '{"payload": {"op": "c", "after": {"id": 1, "s": "\\ud800"},'
    value += ' "source": {"ts_ms": 1, "schema": "s", "table": "t"}}}'
    row = {
        "record_id": "r",
        "batch_id": "b",
        "arrival_ts": None,
        "data": value.encode(),
        "envelope_error": None,
        "partition_key": None,
        "seq_key": POSITION,
        "stream": "t",
    }
    parsed = _parsed_row(parser_for("debezium"), row)
    assert (parsed["rtype"], parsed["reason"]) == ("error", "invalid_record")
    assert "lone UTF-16 surrogate" in parsed["detail"]


@pytest.mark.parametrize("text", ["01:00:00\n", "1 day\n", "01:00:00\r"])
def test_an_interval_text_is_the_whole_value(text: str) -> None:
    with pytest.raises(DecodeError):
        decode(ColumnSpec("i", "interval"), text)


def test_an_interval_column_reads_back_as_its_bigint_storage() -> None:
    from airflow_cdc.core.types import widen

    stored = ColumnSpec("d", "bigint")
    assert widen(stored, "interval") == stored
    assert widen(ColumnSpec("d", "interval"), "bigint") == ColumnSpec("d", "interval")
