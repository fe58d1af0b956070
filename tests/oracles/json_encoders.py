"""Independent encoders for the schemaless JSON changefeeds: CockroachDB and YDB.

Part of the oracle: nothing here comes from ``airflow_cdc`` or ``spark_jobs``. Every value is
rendered the way the vendor's own serializer renders it, read from the vendor's source (cited
per function), so that a conformance test can hold the pipeline's decoding to what the sources
really emit, not to what the pipeline thinks they emit.

CockroachDB: ``format=json``, ``envelope=wrapped`` with ``updated``, on a Kafka sink (the key is
the message key, not in the value). Sources (github.com/cockroachdb/cockroach):

* ``pkg/ccl/changefeedccl/encoder_json.go``: ``versionEncoder.datumToJSON`` calls
  ``tree.AsJSON(d, sessiondatapb.DataConversionConfig{}, time.UTC)`` (zero config: interval
  style POSTGRES, bytes as hex); ``EncodeKey`` / ``rowAsGoNative`` build the key array and the
  row object; ``initWrappedEnvelope`` sets ``after`` and ``updated``
  (``hlc.Timestamp.AsOfSystemTime()``: ``<wall ns>.<logical, 10 digits>``);
  ``EncodeResolvedTimestamp`` marshals ``{"resolved": ...}`` with Go's ``encoding/json``.
* ``pkg/sql/sem/tree/datum.go``, ``AsJSON``: per datum type, cited at each renderer below.
* ``pkg/util/json/json.go``: ``jsonNumber.Format`` writes ``apd.Decimal.String()``,
  ``jsonObject.Format`` / ``jsonArray.Format`` separate with ``", "`` and ``": "``, objects hold
  their keys sorted, ``encodeJSONString`` escapes like Go's ``encoding/json`` without HTML
  escaping.

YDB: changefeed ``FORMAT = 'JSON'``, ``MODE = 'NEW_IMAGE'``, ``VIRTUAL_TIMESTAMPS = TRUE``.
Sources (github.com/ydb-platform/ydb):

* ``ydb/core/tx/datashard/change_record_cdc_serializer.cpp``: ``TJsonSerializer::ToJson`` (one
  case per column type, cited below), ``TYdbJsonSerializer::SerializeDataChange`` (``key``,
  ``newImage``, ``update`` / ``erase``, ``ts``), ``SerializeHeartbeat`` (``resolved``), and
  ``DefaultJsonConfig`` (``DoubleNDigits = max_digits10`` = 17, ``PREC_NDIGITS``; since
  ydb-platform/ydb#7625, August 2024: before it doubles had 10 digits and lost precision).
* ``library/cpp/json/writer/json.cpp``: compact output (``,`` and ``:``), ``WriteBareString``
  escaping, ``WriteFloatImpl`` -> ``util/string/cast.cpp`` ``FloatToString`` (``PREC_NDIGITS``:
  double-conversion ``ToPrecision``, then ``FixZeros`` / ``FixEnd``).
* The document (seed 001, "Change Data Capture", "JSON format"): the record layout; the key
  columns are in ``key`` only, never in ``newImage``.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Any

from tests.oracles.typed_model import (
    COLUMN_NAMES,
    COLUMNS,
    Change,
    Encoder,
    Message,
    Raw,
    write_json,
)

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)
_MICRO = dt.timedelta(microseconds=1)


def _micros_since_epoch(value: dt.datetime) -> int:
    """Microseconds since the epoch: an aware value's instant, a naive value's wall time as UTC."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return (value - _EPOCH) // _MICRO


def _iso_seconds(value: dt.datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` (years zero-padded to four digits, as Go's ``2006`` pads them)."""
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
        f"T{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    )


def _fraction(micros: int) -> str:
    """Go's ``.999999`` layout element: the fraction without trailing zeros, no dot for 0."""
    return "." + f"{micros:06d}".rstrip("0") if micros else ""


# --------------------------------------------------------------------------- CockroachDB


def _crdb_string(text: str) -> str:
    """``pkg/util/json/json.go`` ``encodeJSONString``: ``\\\\``, ``\\"``, ``\\n``, ``\\r``,
    ``\\t`` escaped, other bytes below 0x20 as ``\\u00xx`` (lowercase hex), invalid UTF-8 as
    ``\\ufffd``, everything else (non-ASCII, ``<``, ``&``, U+2028) written as is."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in '\\"':
            out.append("\\" + char)
        elif char in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[char])
        elif code < 0x20:
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:  # a lone surrogate is no UTF-8: Go's RuneError
            out.append("\\ufffd")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def crdb_format(value: Any) -> str:
    """``JSON.Format`` of ``pkg/util/json/json.go``: ``", "`` and ``": "`` separators, object
    keys in sorted (bytewise) order, numbers pre-rendered as :class:`Raw`."""
    return write_json(value, _crdb_string, ", ", ": ", lambda keys: sorted(keys, key=str.encode))


def crdb_float(value: float) -> Raw:
    """FLOAT4 / FLOAT8: ``json.FromFloat64`` -> ``apd.Decimal.SetFloat64`` (parses
    ``strconv.FormatFloat(f, 'E', -1, 64)``, the shortest round-trip digits) -> ``String()``
    (``Text('G')``, the General Decimal Arithmetic to-scientific-string): ``0.1``, ``1024.25``,
    but ``5E+2`` for 500 and ``1.7976931348623157E+308``. Python's ``repr`` gives the same
    shortest digits and ``Decimal.__str__`` the same to-scientific-string.

    NaN and ±Infinity would be quoted strings (``jsonNumber.Format``); apd writes them as
    ``NaN``, ``Infinity``, ``-Infinity``."""
    if math.isnan(value):
        return Raw('"NaN"')
    if math.isinf(value):
        return Raw('"Infinity"' if value > 0 else '"-Infinity"')
    return Raw(str(Decimal(repr(value)).normalize()))


def crdb_decimal(value: Decimal) -> Raw:
    """DECIMAL: ``json.FromDecimal`` -> ``apd.Decimal.String()``: the stored coefficient and
    exponent, so a DECIMAL(10, 2) keeps ``25.00`` (seed 003, ``"revenue": 25.00``)."""
    return Raw(str(value))


def _crdb_jsonb(value: Any) -> Any:
    """JSONB: ``AsJSON`` returns ``t.JSON`` as is, an embedded JSON value (object keys sorted by
    ``crdb_format``); its numbers are apd decimals parsed from the JSON text (``json.ParseJSON``
    with ``UseNumber``), so ``2.5`` stays ``2.5``."""
    if isinstance(value, dict):
        return {key: _crdb_jsonb(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_crdb_jsonb(item) for item in value]
    if isinstance(value, float):
        return Raw(str(Decimal(repr(value))))
    return value


def _go_offset(seconds: int) -> str:
    """Go's ``-07`` zone layout, extended as ``PGWireFormatTimeTZ`` does: ``:00`` when the
    offset has minutes, ``:00:00`` when it has seconds; UTC is ``+00``."""
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{sign}{hours:02d}"
    if seconds % 60:
        return f"{text}:{minutes:02d}:{secs:02d}"
    if seconds % 3600:
        return f"{text}:{minutes:02d}"
    return text


def _crdb_date(value: dt.date) -> str:
    """DATE: ``AsStringWithFlags(FmtBareStrings)`` -> ``pgdate.Date.Format``:
    ``%04d-%02d-%02d`` (" BC" for years before 1)."""
    return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"


def _crdb_timestamp(value: dt.datetime) -> str:
    """TIMESTAMP: ``t.UTC().Format("2006-01-02T15:04:05.999999999")``: no zone, the fraction
    without trailing zeros (seed 003: ``"2019-01-02T03:04:05"``,
    ``"2023-06-02T15:14:20.790155"``)."""
    return _iso_seconds(value) + _fraction(value.microsecond)


def _crdb_timestamptz(value: dt.datetime) -> str:
    """TIMESTAMPTZ: ``t.Time.In(loc).Format(time.RFC3339Nano)`` with ``loc = time.UTC`` (the
    changefeed's ``datumToJSON``): normalized to UTC, ``Z``, trimmed fraction."""
    utc = value.astimezone(dt.UTC)
    return _iso_seconds(utc) + _fraction(utc.microsecond) + "Z"


def _crdb_time(value: dt.time) -> str:
    """TIME: ``PGWireFormatTime`` / ``TimeOfDay`` formatting: ``15:04:05.999999``."""
    return f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}" + _fraction(value.microsecond)


def _crdb_timetz(value: dt.time) -> str:
    """TIMETZ: ``PGWireFormatTimeTZ``: the local time of day as stored, ``15:04:05.999999``,
    then the stored offset in Go's ``-07`` layout (``+05:30``, ``-08``, ``+00``)."""
    offset = value.utcoffset()
    if offset is None:
        raise ValueError("a TIMETZ value needs its offset")
    return _crdb_time(value) + _go_offset(int(offset.total_seconds()))


def _crdb_interval(value: dt.timedelta) -> str:
    """INTERVAL (no months or days): ``duration.Duration.FormatWithStyle(POSTGRES)``
    (``encodePostgres``): ``00:00:00`` for zero, else a ``-`` for a negative time part and
    ``%02d:%02d:%02d`` hours (beyond 24 as they are), minutes, seconds, the fraction trimmed."""
    micros = value // _MICRO
    if micros == 0:
        return "00:00:00"
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{sign}{hours:02d}:{minutes:02d}:{secs:02d}{_fraction(fraction)}"


_CRDB_DATUMS: dict[str, Callable[[Any], Any]] = {
    "INT": int,  # DInt: json.FromInt, an apd integer: plain digits
    "FLOAT": crdb_float,
    "DECIMAL": crdb_decimal,
    "BOOL": bool,  # DBool: json.FromBool
    "STRING": str,  # DString: json.FromString
    "BYTES": lambda v: "\\x" + bytes(v).hex(),  # DBytes.Format, bare: `\x` + lowercase hex
    "DATE": _crdb_date,
    "TIMESTAMP": _crdb_timestamp,
    "TIMESTAMPTZ": _crdb_timestamptz,
    "TIME": _crdb_time,
    "TIMETZ": _crdb_timetz,
    "INTERVAL": _crdb_interval,
    "JSONB": _crdb_jsonb,
    "UUID": str,  # DUuid.Format, bare: uuid.UUID.StringBytes, RFC 4122 lowercase
}

# typed_model's declared PostgreSQL types as the CockroachDB column types of the source table
_CRDB_TYPES = {
    "SMALLINT": "INT",  # INT2
    "INTEGER": "INT",  # INT4
    "BIGINT": "INT",  # INT8
    "REAL": "FLOAT",  # FLOAT4: a DFloat holding the float32 value
    "DOUBLE PRECISION": "FLOAT",  # FLOAT8
    "NUMERIC(12, 3)": "DECIMAL",  # DECIMAL(12, 3)
    "BOOLEAN": "BOOL",
    "TEXT": "STRING",
    "BYTEA": "BYTES",
    "DATE": "DATE",
    "TIMESTAMP": "TIMESTAMP",
    "TIMESTAMPTZ": "TIMESTAMPTZ",
    "TIME": "TIME",
    "TIMETZ": "TIMETZ",
    "INTERVAL": "INTERVAL",
    "JSONB": "JSONB",
    "UUID": "UUID",
}
_CRDB_COLUMN_TYPES = {name: _CRDB_TYPES[pg_type] for name, pg_type, _ in COLUMNS}


def crdb_datum(crdb_type: str, value: Any) -> Any:
    """A column value as ``tree.AsJSON`` makes it (SQL NULL is JSON null)."""
    if value is None:
        return None
    return _CRDB_DATUMS[crdb_type](value)


def crdb_hlc(wall_ns: int, logical: int) -> str:
    """``hlc.Timestamp.AsOfSystemTime()``: the wall time in ns, a dot, the logical counter in
    ten digits (seed 003: ``"1701102296662969433.0000000000"``)."""
    return f"{wall_ns}.{logical:010d}"


class CockroachJsonEncoder:
    """CockroachDB changefeed, ``format=json``, ``envelope=wrapped``, ``updated``, ``resolved``,
    Kafka sink: key ``[id]``, value ``{"after": {...}, "updated": "..."}`` (seed 003)."""

    columns: tuple[str, ...] = COLUMN_NAMES  # every typed_model column has a CockroachDB type

    def row(self, row: dict[str, Any]) -> dict[str, Any]:
        """The ``after`` object: every column of the table, the key column included."""
        after = {"id": crdb_datum("INT", row["id"])}
        for name in self.columns:
            value = row.get(name)
            if name == "c_numeric" and value is not None:
                value = value.quantize(Decimal("0.001"))  # a DECIMAL(12, 3) holds scale 3
            after[name] = crdb_datum(_CRDB_COLUMN_TYPES[name], value)
        return after

    def change(self, change: Change) -> list[Message]:
        after = None if change.row is None else self.row(change.row)
        # The commit's HLC: its wall time (strictly increasing with seq), a small logical part.
        updated = crdb_hlc(change.commit_us * 1000, change.seq % 7)
        key = crdb_format([change.ident])
        return [(key, crdb_format({"after": after, "updated": updated}), False)]

    def marker(self, commit_us: int, partition: int) -> str | None:
        # EncodeResolvedTimestamp: gojson.Marshal(map{"resolved": decimal string}), compact.
        return '{"resolved":' + _crdb_string(crdb_hlc(commit_us * 1000, 0)) + "}"


# --------------------------------------------------------------------------- YDB


def _ydb_string(text: str) -> str:
    """``NJsonWriter::TBuf::WriteBareString`` in ``HEM_UNSAFE`` mode: ``\\"``, ``\\\\``,
    ``\\b``, ``\\f``, ``\\n``, ``\\r``, ``\\t``, other bytes below 0x20 as ``\\u00XX`` (uppercase
    hex), U+2028 / U+2029 as ``\\u2028`` / ``\\u2029``; ``/``, ``<``, non-ASCII as is."""
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r"}
    short["\t"] = "\\t"
    out = ['"']
    for char in text:
        if char in short:
            out.append(short[char])
        elif ord(char) < 0x20:
            out.append(f"\\u{ord(char):04X}")
        elif char in "\u2028\u2029":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def ydb_format(value: Any) -> str:
    """``NJson::WriteJson`` with ``FormatOutput = false``: no spaces. YDB's maps are hash maps,
    so its key order is unspecified; this writes keys in insertion order."""
    return write_json(value, _ydb_string, ",", ":")


def ydb_double(value: float, digits: int = 17) -> Raw | str:
    """Float / Double: ``TJsonValue(double)`` (a Float widened to double), written by
    ``WriteDouble(v, PREC_NDIGITS, 17)`` -> ``FloatToString`` -> double-conversion
    ``ToPrecision(v, 17)`` (correctly rounded, ties away from zero; exponential when the decimal
    point would sit more than 4 zeros left of the digits or right of the 17th digit; ``e``,
    exponent sign always) -> ``FixZeros`` (trailing fraction zeros and a bare dot dropped) ->
    ``FixEnd`` (a one-digit exponent padded to two). So ``0.1`` is ``0.10000000000000001``.
    NaN and ±Infinity are the strings ``nan``, ``inf``, ``-inf`` (``WriteNanAsString``)."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return Raw(sign + "0")
    rounded = Context(prec=digits, rounding=ROUND_HALF_UP).plus(Decimal(abs(value)))
    shown = "".join(map(str, rounded.as_tuple().digits)).rstrip("0")
    exponent = rounded.adjusted()
    point = exponent + 1  # the decimal point's place after the first digit of `shown`
    if point < -3 or point > digits:
        mantissa = shown[0] + ("." + shown[1:] if len(shown) > 1 else "")
        return Raw(f"{sign}{mantissa}e{'+' if exponent >= 0 else '-'}{abs(exponent):02d}")
    if point <= 0:
        return Raw(f"{sign}0.{'0' * -point}{shown}")
    if point >= len(shown):
        return Raw(sign + shown + "0" * (point - len(shown)))
    return Raw(f"{sign}{shown[:point]}.{shown[point:]}")


def ydb_decimal(value: Decimal, precision: int = 12, scale: int = 3) -> str:
    """Decimal(p, s): ``DecimalToString`` -> ``NYql::NDecimal::ToString(v, p, s)``
    (``yql/essentials/public/decimal/yql_decimal.cpp``): a JSON string, trailing fraction zeros
    (and the dot) dropped, ``0`` for zero: ``25.000`` is ``"25"``, ``0.001`` is ``"0.001"``."""
    unscaled = int(value.scaleb(scale).to_integral_value())
    if unscaled == 0:
        return "0"
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    if len(digits) > max(precision, scale + 1):
        raise ValueError(f"{value} does not fit Decimal({precision},{scale})")
    whole, fraction = digits[: len(digits) - scale], digits[len(digits) - scale :].rstrip("0")
    return ("-" if unscaled < 0 else "") + whole + ("." + fraction if fraction else "")


def _ydb_instant(micros: int) -> str:
    """``TInstant::ToString`` (``util/datetime/base.cpp``, ``Out<TInstant>``):
    ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, always six fraction digits (seed 001:
    ``"2022-12-12T00:00:00.000000Z"``)."""
    moment = _EPOCH + dt.timedelta(microseconds=micros)
    return _iso_seconds(moment) + f".{moment.microsecond:06d}Z"


def _ydb_date(value: dt.date) -> str:
    """Date (ui16 days, 1970-01-01..2105-12-31): ``TInstant::Days(d).ToString()``, a whole
    timestamp at midnight UTC: ``"2022-02-22T00:00:00.000000Z"``."""
    days = (value - _EPOCH_DATE).days
    if not 0 <= days < 49673:
        raise ValueError(f"{value} is outside YDB's Date range")
    return _ydb_instant(days * 86_400_000_000)


def _ydb_timestamp(value: dt.datetime) -> str:
    """Timestamp (ui64 µs from 1970 to 2105): ``TInstant::MicroSeconds(v).ToString()``."""
    micros = _micros_since_epoch(value)
    if not 0 <= micros < 49673 * 86_400_000_000:
        raise ValueError(f"{value} is outside YDB's Timestamp range")
    return _ydb_instant(micros)


def _ydb_json(value: Any) -> Any:
    """Json: ``StringToJson`` (``NJson::ReadJsonTree`` of the stored text), an embedded JSON
    value written back by the same writer: integers as they are, doubles as ``ydb_double``."""
    if isinstance(value, dict):
        return {key: _ydb_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_ydb_json(item) for item in value]
    if isinstance(value, float):
        return ydb_double(value)
    return value


_YDB_DATUMS: dict[str, Callable[[Any], Any]] = {
    "Int16": int,  # TJsonValue(i16): a JSON integer
    "Int32": int,
    "Int64": int,
    "Float": ydb_double,  # TJsonValue(float), widened to double
    "Double": ydb_double,
    "Decimal(12,3)": ydb_decimal,  # a JSON string
    "Bool": bool,
    "Utf8": str,  # TJsonValue(cell.AsBuf()): the text as is
    "String": lambda v: base64.b64encode(bytes(v)).decode(),  # Base64Encode: standard, padded
    "Date": _ydb_date,
    "Timestamp": _ydb_timestamp,
    "Date32": lambda v: (v - _EPOCH_DATE).days,  # TJsonValue(i32): days since the epoch
    "Timestamp64": _micros_since_epoch,  # TJsonValue(i64): µs since the epoch
    "Interval": lambda v: v // _MICRO,  # TJsonValue(i64): µs
    "Json": _ydb_json,
    "Uuid": str,  # UuidToJson -> NUuid::UuidToString: 8-4-4-4-12, lowercase hex
}


def ydb_datum(ydb_type: str, value: Any) -> Any:
    """A column value as ``TJsonSerializer::ToJson`` makes it (a null cell is JSON null)."""
    if value is None:
        return None
    return _YDB_DATUMS[ydb_type](value)


# typed_model's columns as YDB column types. YDB has no time-of-day type, so c_time and c_timetz
# are not carried. The model's dates and instants reach back to 1888 and 1901, before the range
# of YDB's Date and Timestamp (from 1970), so by default they are the wide Date32 and
# Timestamp64 (both written as JSON integers); `wide=False` uses Date and Timestamp (ISO text)
# and refuses values before 1970.
_YDB_TYPES = {
    "c_smallint": "Int16",
    "c_int": "Int32",
    "c_bigint": "Int64",
    "c_real": "Float",
    "c_double": "Double",
    "c_numeric": "Decimal(12,3)",
    "c_bool": "Bool",
    "c_text": "Utf8",
    "c_bytea": "String",
    "c_date": "Date32",
    "c_ts": "Timestamp64",
    "c_tstz": "Timestamp64",  # no time zone type can be a column: the UTC instant
    "c_interval": "Interval",
    "c_json": "Json",
    "c_uuid": "Uuid",
}
_YDB_NARROW = {"c_date": "Date", "c_ts": "Timestamp", "c_tstz": "Timestamp"}
# txIds as YDB hands them out are large (seed 001: 562949953607163); this base keeps that size.
_YDB_TX_BASE = 562_949_953_421_312


class YdbJsonEncoder:
    """YDB changefeed JSON, NEW_IMAGE mode with virtual timestamps (seed 001): an upsert is
    ``{"key": [id], "update": {}, "newImage": {...}, "ts": [step, txId]}``, a delete
    ``{"key": [id], "erase": {}, "ts": [...]}``; the Kafka message key is null."""

    columns: tuple[str, ...] = tuple(name for name in COLUMN_NAMES if name in _YDB_TYPES)

    def __init__(self, wide: bool = True) -> None:
        self.types = dict(_YDB_TYPES) if wide else {**_YDB_TYPES, **_YDB_NARROW}

    def row(self, row: dict[str, Any]) -> dict[str, Any]:
        """``newImage``: every non-key column (nulls included), never the key columns."""
        return {name: ydb_datum(self.types[name], row.get(name)) for name in self.columns}

    @staticmethod
    def ts(change: Change) -> list[int]:
        # step: the coordinator time in ms (seed 001: 1670792400890); txId unique, increasing.
        return [change.commit_us // 1000, _YDB_TX_BASE + change.seq]

    def change(self, change: Change) -> list[Message]:
        record: dict[str, Any] = {"key": [change.ident]}
        if change.row is None:
            record["erase"] = {}
        else:
            record["update"] = {}
            record["newImage"] = self.row(change.row)
        record["ts"] = self.ts(change)
        return [(None, ydb_format(record), False)]

    def marker(self, commit_us: int, partition: int) -> str | None:
        # SerializeHeartbeat: {"resolved": [step, txId]}
        return ydb_format({"resolved": [commit_us // 1000, 0]})


ENCODERS: dict[str, Encoder] = {
    "cockroachdb": CockroachJsonEncoder(),
    "ydb": YdbJsonEncoder(),
}
