"""Independent encoders for the Kafka formats built on Kafka Connect's or Debezium's envelope.

Part of the oracle: nothing here comes from ``airflow_cdc`` or ``spark_jobs``. Each encoder
renders ``typed_model`` changes the way the vendor's source writes them, from the vendor's
documents and source code, cited per renderer below.

* ``debezium``: the Debezium PostgreSQL connector (pgoutput, ``REPLICA IDENTITY FULL``, default
  ``decimal.handling.mode=precise``, ``time.precision.mode=adaptive``,
  ``binary.handling.mode=bytes``, ``interval.handling.mode=numeric``,
  ``tombstones.on.delete=true``), through Kafka Connect's ``JsonConverter`` with
  ``schemas.enable=true``.
* ``arcion``: Arcion Replicant's JSON CDC format for Kafka (seed 002) from a MySQL source.
* ``cdl``: Huawei CDL JSON, ``message_version`` 1.0 (seed 004), from a PostgreSQL source.
* ``ydb-debezium``: YDB's Debezium-compatible JSON changefeed (seed 001), ``MODE =
  'NEW_AND_OLD_IMAGES'``, read through the Kafka API.

How Kafka Connect's ``JsonConverter`` writes a value (org.apache.kafka.connect.json.JsonConverter,
``convertToJson``): ``int8``..``int64`` as JSON integers; ``float32`` as a Jackson ``FloatNode``
(``Float.toString``), ``float64`` as a ``DoubleNode`` (``Double.toString``); ``bytes`` (and the
``Decimal`` logical type, ``Decimal.fromLogical`` = ``BigDecimal.unscaledValue().toByteArray()``,
the minimal big-endian two's-complement bytes) as Base64 text; a struct as an object holding
every field of its schema. Jackson writes compact JSON (``,`` and ``:``) and leaves non-ASCII
characters as they are.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
from collections.abc import Callable
from decimal import Context, Decimal
from typing import Any

from tests.oracles.json_encoders import ydb_double  # YDB writes a Double so in both formats
from tests.oracles.typed_model import (
    COLUMN_NAMES,
    SCHEMA,
    TABLE,
    Change,
    Encoder,
    Message,
    Raw,
    write_json,
)

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)
_MICRO = dt.timedelta(microseconds=1)
_DAY_US = 86_400_000_000
_NUMERIC_PRECISION, _NUMERIC_SCALE = 12, 3  # typed_model: c_numeric NUMERIC(12, 3)


# --------------------------------------------------------------------------- JSON text


def dumps(value: Any, item: str = ",", key: str = ":") -> str:
    """JSON text of ``value``: objects in insertion order, strings with non-ASCII characters as
    they are (Jackson, PostgreSQL, MySQL and YDB all write them raw), ``Raw`` as it is."""
    return write_json(value, _string, item, key, number=repr)


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def sql_json_text(value: Any) -> str:
    """A JSON value as PostgreSQL's ``jsonb`` (and MySQL's ``JSON``) text output writes it: keys
    sorted shorter first, then bytewise, ``", "`` and ``": "`` between items (PostgreSQL
    ``JsonbToCString``; jsonb stores object keys ordered by length, then ``memcmp``: "jsonb
    ... does not preserve the order of object keys", PostgreSQL docs 8.14)."""

    def norm(v: Any) -> Any:
        if isinstance(v, dict):
            keys = sorted(v, key=lambda k: (len(k.encode()), k.encode()))
            return {k: norm(v[k]) for k in keys}
        if isinstance(v, list):
            return [norm(x) for x in v]
        return v

    return dumps(norm(value), ", ", ": ")


# --------------------------------------------------------------------------- Java numbers


def _java_notation(digits: str, exponent: int, negative: bool) -> str:
    """``Double.toString`` / ``Float.toString`` layout of a decimal ``0.d1d2... * 10**exponent``
    written with ``digits`` (no trailing zeros): plain with at least one fraction digit when
    1e-3 <= |v| < 1e7, else ``d.ddddE<n>`` (JDK 19+ ``Double.toString`` specification)."""
    sign = "-" if negative else ""
    sci = exponent - 1  # exponent of the first digit
    if -3 <= sci < 7:
        if sci >= 0:
            whole = digits[: sci + 1].ljust(sci + 1, "0")
            frac = digits[sci + 1 :] or "0"
        else:
            whole, frac = "0", "0" * (-sci - 1) + digits
        return f"{sign}{whole}.{frac}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{sci}"


def _shortest(value: float, round_trips: Callable[[float], bool]) -> tuple[str, int]:
    """The decimal digits and exponent that JDK 19+ ``Double.toString`` / ``Float.toString``
    select: of the decimals that read back as ``value``, those of the minimal length m (of
    length 1 or 2 when m is 1), and of these the closest to ``value``. A correctly rounded
    decimal of n digits is the closest of that length, so it is the choice when it reads back.
    """
    exact = Decimal(abs(value))
    for count in range(1, 18):
        text = f"{abs(value):.{count - 1}e}"
        if round_trips(float(text)):
            if count == 1:  # 5e-324 -> "4.9E-324": a closer 2-digit decimal wins
                two = f"{abs(value):.1e}"
                if round_trips(float(two)) and abs(Decimal(two) - exact) < abs(
                    Decimal(text) - exact
                ):
                    text = two
            mantissa, exp = text.split("e")
            return mantissa.replace(".", "").rstrip("0") or "0", int(exp) + 1
    raise ValueError(value)


def java_double(value: float) -> Raw:
    """``Double.toString(value)``, as Jackson's ``DoubleNode`` writes a Connect ``float64``."""
    if value == 0:
        return Raw("-0.0" if str(value).startswith("-") else "0.0")
    digits, exponent = _shortest(value, lambda x: x == abs(value))
    return Raw(_java_notation(digits, exponent, value < 0))


def _f32(value: float) -> float:
    """``value`` rounded to float32 (to the nearest, ties to even), inf past float32's range."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError:
        return float("inf")


def java_float(value: float) -> Raw:
    """``Float.toString((float) value)``, as Jackson's ``FloatNode`` writes a ``float32``."""
    if _f32(value) != value:
        raise ValueError(f"{value!r} is not exact in float32")
    if value == 0:
        return Raw("-0.0" if str(value).startswith("-") else "0.0")
    digits, exponent = _shortest(value, lambda x: _f32(x) == abs(value))
    return Raw(_java_notation(digits, exponent, value < 0))


# --------------------------------------------------------------------------- Connect values


def connect_decimal(value: Decimal, scale: int = _NUMERIC_SCALE) -> str:
    """``org.apache.kafka.connect.data.Decimal``: Base64 of ``BigInteger.toByteArray()`` of the
    unscaled value, the minimal big-endian two's complement (``bitLength() / 8 + 1`` bytes)."""
    # Exact: the default context rounds to 28 significant digits.
    unscaled = value.scaleb(scale, Context(prec=len(value.as_tuple().digits) + abs(scale) + 1))
    if unscaled != unscaled.to_integral_value():
        raise ValueError(f"{value} has more than {scale} fraction digits")
    number = int(unscaled)
    length = (number if number >= 0 else ~number).bit_length() // 8 + 1
    return base64.b64encode(number.to_bytes(length, "big", signed=True)).decode()


def epoch_days(value: dt.date) -> int:
    """``io.debezium.time.Date`` / ``org.apache.kafka.connect.data.Date``: days since the epoch."""
    return (value - _EPOCH_DATE).days


def epoch_micros(value: dt.datetime) -> int:
    """Microseconds since the epoch; a naive value is read as UTC (``MicroTimestamp``: "the
    number of microseconds past the epoch, and does not include timezone information")."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return (value - _EPOCH) // _MICRO


def micros_of_day(value: dt.time) -> int:
    """``io.debezium.time.MicroTime``: microseconds past midnight."""
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def _fraction(micros: int) -> str:
    """``DateTimeFormatter.ISO_LOCAL_TIME``'s fraction: ``appendFraction(NANO_OF_SECOND, 0, 9,
    true)``, as many digits as needed and none (no point either) for a whole second."""
    return "" if micros == 0 else "." + f"{micros:06d}".rstrip("0")


def zoned_timestamp(value: dt.datetime) -> str:
    """``io.debezium.time.ZonedTimestamp``: the PostgreSQL connector turns a ``timestamptz`` into
    an ``OffsetDateTime`` at UTC (``withOffsetSameInstant(ZoneOffset.UTC)``) and writes it with
    ``DateTimeFormatter.ISO_OFFSET_DATE_TIME`` (``ZonedTimestamp.toIsoString(OffsetDateTime)``):
    ``2011-12-03T10:15:30.030431Z``, ``2011-12-03T10:15:30Z``."""
    if value.tzinfo is None:
        raise ValueError("a ZonedTimestamp needs an aware value")
    u = value.astimezone(dt.UTC)
    return (
        f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}"
        f"{_fraction(u.microsecond)}Z"
    )


def zoned_time(value: dt.time) -> str:
    """``io.debezium.time.ZonedTime``: ``PostgresValueConverter.convertTimeWithZone`` shifts the
    ``OffsetTime`` to UTC (``withOffsetSameInstant(ZoneOffset.UTC)``, which wraps around the
    day) and ``ZonedTime.toIsoString`` writes ``DateTimeFormatter.ISO_OFFSET_TIME``:
    ``10:15:30Z``, ``10:15:30.5Z``."""
    offset = value.utcoffset()
    if offset is None:
        raise ValueError("a ZonedTime needs an aware value")
    micros = (micros_of_day(value) - offset // _MICRO) % _DAY_US
    seconds, fraction = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return f"{hour:02d}:{minute:02d}:{second:02d}{_fraction(fraction)}Z"


def b64(value: bytes) -> str:
    """Connect ``bytes``: ``JsonConverter`` writes a binary node, which Jackson writes as
    Base64 (MIME-less, padded)."""
    return base64.b64encode(value).decode()


# --------------------------------------------------------------------------- Connect schemas


def _schema(
    kind: str,
    field: str,
    name: str | None = None,
    optional: bool = True,
    version: int | None = None,
    parameters: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One field's Connect schema as ``JsonConverter.asJsonSchema`` writes it."""
    out: dict[str, Any] = {"type": kind, "optional": optional}
    if name is not None:
        out["name"] = name
    if version is not None:
        out["version"] = version
    if parameters is not None:
        out["parameters"] = parameters
    out["field"] = field
    return out


def _decimal_parameters() -> dict[str, str]:
    # Debezium SpecialValueDecimal.builder -> Decimal.builder(scale) with the extra parameter
    # "connect.decimal.precision" (the column length).
    return {"scale": str(_NUMERIC_SCALE), "connect.decimal.precision": str(_NUMERIC_PRECISION)}


# A column's Connect type: (schema type, logical name or None, JSON value of an abstract value).
ConnectType = tuple[str, str | None, Callable[[Any], Any]]

_DECIMAL = "org.apache.kafka.connect.data.Decimal"

# Debezium PostgreSQL connector, "How Debezium PostgreSQL connectors map data types"
# (debezium.io/documentation/reference/connectors/postgresql.html#postgresql-data-types, and
# docs.redhat.com "Debezium PostgreSQL connector: how it maps data types"), with the defaults
# above. Each row quotes the document's table; the value column is what the converter writes.
DEBEZIUM_TYPES: dict[str, ConnectType] = {
    # "SMALLINT, SMALLSERIAL | INT16 | n/a"
    "c_smallint": ("int16", None, int),
    # "INTEGER, SERIAL | INT32 | n/a"
    "c_int": ("int32", None, int),
    # "BIGINT, BIGSERIAL, OID | INT64 | n/a"
    "c_bigint": ("int64", None, int),
    # "REAL | FLOAT32 | n/a"
    "c_real": ("float32", None, java_float),
    # "DOUBLE PRECISION | FLOAT64 | n/a"
    "c_double": ("float64", None, java_double),
    # decimal.handling.mode=precise: "NUMERIC[(M[,D])] | BYTES |
    # org.apache.kafka.connect.data.Decimal. The scale schema parameter contains an integer
    # that represents how many digits the decimal point shifted."
    "c_numeric": ("bytes", _DECIMAL, connect_decimal),
    # "BOOLEAN | BOOLEAN | n/a"
    "c_bool": ("boolean", None, bool),
    # "TEXT | STRING | n/a"
    "c_text": ("string", None, str),
    # binary.handling.mode=bytes: "BYTEA | BYTES or STRING | n/a. Either the raw bytes (the
    # default), a base64-encoded string, ..." (bytes -> Base64 in JsonConverter's JSON)
    "c_bytea": ("bytes", None, b64),
    # time.precision.mode=adaptive: "DATE | INT32 | io.debezium.time.Date. Represents the
    # number of days since the epoch."
    "c_date": ("int32", "io.debezium.time.Date", epoch_days),
    # "TIMESTAMP(4), TIMESTAMP(5), TIMESTAMP(6), TIMESTAMP | INT64 |
    # io.debezium.time.MicroTimestamp. Represents the number of microseconds since the epoch,
    # and does not include timezone information."
    "c_ts": ("int64", "io.debezium.time.MicroTimestamp", epoch_micros),
    # "TIMESTAMPTZ, TIMESTAMP WITH TIME ZONE | STRING | io.debezium.time.ZonedTimestamp. A
    # string representation of a timestamp with timezone information, where the timezone is
    # GMT."
    "c_tstz": ("string", "io.debezium.time.ZonedTimestamp", zoned_timestamp),
    # "TIME(4), TIME(5), TIME(6) | INT64 | io.debezium.time.MicroTime. Represents the number of
    # microseconds past midnight, and does not include timezone information." (TIME without a
    # precision is TIME(6) in PostgreSQL.)
    "c_time": ("int64", "io.debezium.time.MicroTime", micros_of_day),
    # "TIMETZ, TIME WITH TIME ZONE | STRING | io.debezium.time.ZonedTime. A string
    # representation of a time value with timezone information, where the timezone is GMT."
    "c_timetz": ("string", "io.debezium.time.ZonedTime", zoned_time),
    # interval.handling.mode=numeric: "INTERVAL [P] | INT64 | io.debezium.time.MicroDuration
    # (default). The approximate number of microseconds for a time interval using the
    # 365.25 / 12.0 formula for days per month average." (No months or days here: exact.)
    "c_interval": ("int64", "io.debezium.time.MicroDuration", lambda v: v // _MICRO),
    # "JSON, JSONB | STRING | io.debezium.data.Json. Contains the string representation of a
    # JSON document, array, or scalar." (the server's text output of the value)
    "c_json": ("string", "io.debezium.data.Json", sql_json_text),
    # "UUID | STRING | io.debezium.data.Uuid. Contains the string representation of a
    # PostgreSQL UUID value." (PostgreSQL writes lowercase, hyphenated)
    "c_uuid": ("string", "io.debezium.data.Uuid", str),
}

# Arcion Replicant, MySQL source. The seed (002) shows only "int32" (an INT key) and "string"
# (VARCHAR/TEXT). Every other type is the closest Connect (logical) type that the README's
# "Types" section lists as accepted, as the MySQL column type would carry it:
ARCION_TYPES: dict[str, ConnectType] = {
    "c_smallint": ("int16", None, int),  # SMALLINT: int16 (not in the seed)
    "c_int": ("int32", None, int),  # INT: "int32" as the seed's r_regionkey
    "c_bigint": ("int64", None, int),  # BIGINT: int64 (not in the seed)
    "c_real": ("float32", None, java_float),  # FLOAT: float32 (not in the seed)
    "c_double": ("float64", None, java_double),  # DOUBLE: float64 (not in the seed)
    "c_numeric": ("bytes", _DECIMAL, connect_decimal),  # DECIMAL(12,3): Connect Decimal
    "c_bool": ("boolean", None, bool),  # BOOLEAN (TINYINT(1)): boolean (not in the seed)
    "c_text": ("string", None, str),  # TEXT: "string" as the seed's r_comment
    "c_bytea": ("bytes", None, b64),  # VARBINARY/BLOB: bytes, Base64 (not in the seed)
    # DATE: Connect's own Date, int32 days since the epoch (not in the seed)
    "c_date": ("int32", "org.apache.kafka.connect.data.Date", epoch_days),
    # DATETIME(6): MicroTimestamp, because Connect's Timestamp holds milliseconds only and the
    # model's values have microseconds (not in the seed)
    "c_ts": ("int64", "io.debezium.time.MicroTimestamp", epoch_micros),
    # TIMESTAMP(6) (stored in UTC): ZonedTimestamp in UTC (not in the seed)
    "c_tstz": ("string", "io.debezium.time.ZonedTimestamp", zoned_timestamp),
    # TIME(6): MicroTime, microseconds past midnight (not in the seed)
    "c_time": ("int64", "io.debezium.time.MicroTime", micros_of_day),
    # JSON: io.debezium.data.Json, MySQL's normalized text (not in the seed)
    "c_json": ("string", "io.debezium.data.Json", sql_json_text),
    # no UUID type in MySQL (a CHAR(36) column): io.debezium.data.Uuid, the README's listed
    # logical type for it (not in the seed)
    "c_uuid": ("string", "io.debezium.data.Uuid", str),
    # not carried: c_timetz and c_interval (MySQL has no TIME WITH TIME ZONE or INTERVAL)
}


def cdl_decimal(value: Decimal) -> str:
    """Seed 004 types ``decimalNum`` as ``{"type":"string","name":"com.xxx.cdc.data.Decimal"}``
    and shows only null: the text chosen is Java ``BigDecimal.toPlainString()`` at the
    column's scale (``1.500``)."""
    return format(value.quantize(Decimal(1).scaleb(-_NUMERIC_SCALE)), "f")


# Huawei CDL, PostgreSQL source. Its supported PostgreSQL types ("Data Types and Mapping
# Supported by CDL Synchronization Tasks", MRS component guide): int2, int4, int8,
# numeric(p, s), bool, char, varchar, text, timestamptz, timestamp, date, json, jsonb, float4,
# float8; so no bytea, time, timetz, interval or uuid. Seed 004 shows "int32" (id), "int64"
# (count1), org.apache.kafka.connect.data.Timestamp (time1) and a string
# "com.xxx.cdc.data.Decimal" (decimalNum); the other types are the closest the README lists.
CDL_TYPES: dict[str, ConnectType] = {
    "c_smallint": ("int16", None, int),  # int2: int16 (not in the seed)
    "c_int": ("int32", None, int),  # int4: "int32" as the seed's id
    "c_bigint": ("int64", None, int),  # int8: "int64" as the seed's count1
    "c_real": ("float32", None, java_float),  # float4: float32 (not in the seed)
    "c_double": ("float64", None, java_double),  # float8: float64 (not in the seed)
    "c_numeric": ("string", "com.xxx.cdc.data.Decimal", cdl_decimal),  # as the seed's decimalNum
    "c_bool": ("boolean", None, bool),  # bool: boolean (not in the seed)
    "c_text": ("string", None, str),  # text: string (not in the seed)
    # date: Connect's Date, int32 days since the epoch (not in the seed)
    "c_date": ("int32", "org.apache.kafka.connect.data.Date", epoch_days),
    # json/jsonb: io.debezium.data.Json, the server's text (not in the seed)
    "c_json": ("string", "io.debezium.data.Json", sql_json_text),
    # not carried: c_ts and c_tstz. The seed types time1 as org.apache.kafka.connect.data.Timestamp
    # (int64 milliseconds), which cannot hold the model's microseconds.
}


def _values(types: dict[str, ConnectType], row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A row as a Connect struct's JSON: ``id`` first, then every carried column (a null for
    SQL NULL: JsonConverter writes every field of the struct)."""
    if row is None:
        return None
    out: dict[str, Any] = {"id": row["id"]}
    for name, (_, _, render) in types.items():
        value = row.get(name)
        out[name] = None if value is None else render(value)
    return out


def _row_fields(types: dict[str, ConnectType], versioned: bool) -> list[dict[str, Any]]:
    fields = [_schema("int64", "id", optional=False)]
    for name, (kind, logical, _) in types.items():
        fields.append(
            _schema(
                kind,
                name,
                logical,
                version=1 if logical is not None and versioned else None,
                parameters=_decimal_parameters() if logical == _DECIMAL else None,
            )
        )
    return fields


def _key(name: str, ident: int) -> str:
    schema = {
        "type": "struct",
        "fields": [_schema("int64", "id", optional=False)],
        "optional": False,
        "name": name,
    }
    return dumps({"schema": schema, "payload": {"id": ident}})


# --------------------------------------------------------------------------- Debezium

_DBZ_SERVER = "dbserver1"
_LSN_BASE = 24_023_128  # the document's example LSN


def _lsn(seq: int) -> int:
    return _LSN_BASE + seq * 136


class DebeziumEncoder:
    """Debezium PostgreSQL connector change events ("Debezium PostgreSQL connector data change
    events": key and value each ``{"schema": ..., "payload": ...}``). ``before`` is the whole old
    row (REPLICA IDENTITY FULL) for updates and deletes, null for inserts; ``after`` null for
    deletes; each delete is followed by a tombstone (same key, null value) unless
    ``tombstones`` is False ("tombstones.on.delete ... default true")."""

    def __init__(self, tombstones: bool = True) -> None:
        self.columns: tuple[str, ...] = tuple(n for n in COLUMN_NAMES if n in DEBEZIUM_TYPES)
        self.tombstones = tombstones
        prefix = f"{_DBZ_SERVER}.{SCHEMA}.{TABLE}"
        row = {
            "type": "struct",
            "fields": _row_fields(DEBEZIUM_TYPES, versioned=True),
            "optional": True,
            "name": f"{prefix}.Value",
        }
        self.value_schema = {
            "type": "struct",
            "fields": [
                {**row, "field": "before"},
                {**row, "field": "after"},
                _DEBEZIUM_SOURCE_SCHEMA,
                _schema("string", "op", optional=False),
                _schema("int64", "ts_ms"),
                _TRANSACTION_SCHEMA,
            ],
            "optional": False,
            "name": f"{prefix}.Envelope",
        }
        self.key_name = f"{prefix}.Key"

    def source(self, change: Change) -> dict[str, Any]:
        lsn = _lsn(change.seq)
        return {
            "version": "2.7.3.Final",
            "connector": "postgresql",
            "name": _DBZ_SERVER,
            "ts_ms": change.commit_us // 1000,
            "snapshot": "false",
            "db": "postgres",
            # "sequence": [last committed LSN, this event's LSN], both as strings
            "sequence": dumps([str(_lsn(change.seq - 1)), str(lsn)]),
            "schema": SCHEMA,
            "table": TABLE,
            "txId": 600 + change.seq,
            "lsn": lsn,
            "xmin": None,
        }

    def change(self, change: Change) -> list[Message]:
        payload = {
            "before": _values(DEBEZIUM_TYPES, change.before),
            "after": _values(DEBEZIUM_TYPES, change.row),
            "source": self.source(change),
            "op": change.op,
            "ts_ms": change.commit_us // 1000 + 7,
            "transaction": None,
        }
        key = _key(self.key_name, change.ident)
        messages: list[Message] = [
            (key, dumps({"schema": self.value_schema, "payload": payload}), False)
        ]
        if change.op == "d" and self.tombstones:
            messages.append((key, None, True))
        return messages

    def marker(self, commit_us: int, partition: int) -> str | None:
        return None


_DEBEZIUM_SOURCE_SCHEMA = {
    "type": "struct",
    "fields": [
        _schema("string", "version", optional=False),
        _schema("string", "connector", optional=False),
        _schema("string", "name", optional=False),
        _schema("int64", "ts_ms", optional=False),
        {
            **_schema("string", "snapshot", "io.debezium.data.Enum", version=1),
            "parameters": {"allowed": "true,last,false,incremental"},
            "default": "false",
        },
        _schema("string", "db", optional=False),
        _schema("string", "sequence"),
        _schema("string", "schema", optional=False),
        _schema("string", "table", optional=False),
        _schema("int64", "txId"),
        _schema("int64", "lsn"),
        _schema("int64", "xmin"),
    ],
    "optional": False,
    "name": "io.debezium.connector.postgresql.Source",
    "field": "source",
}
_TRANSACTION_SCHEMA = {
    "type": "struct",
    "fields": [
        _schema("string", "id", optional=False),
        _schema("int64", "total_order", optional=False),
        _schema("int64", "data_collection_order", optional=False),
    ],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": "transaction",
}


# --------------------------------------------------------------------------- Arcion

_ARCION_CONNECTOR = "KAFKA_Connector"
_ARCION_SOURCE_FIELDS = [
    # the seed's "source" struct, field for field
    _schema("string", "version", optional=False),
    _schema("string", "connector", optional=False),
    _schema("string", "name", optional=False),
    _schema("int64", "ts_ms"),
    _schema("string", "db"),
    _schema("string", "schema"),
    _schema("string", "table", optional=False),
    _schema("string", "query"),
    _schema("string", "snapshot"),
    _schema("int64", "server_id"),
    _schema("string", "gtid"),
    _schema("string", "file"),
    _schema("int64", "pos"),
    _schema("int32", "row"),
]


def binlog_position(seq: int) -> tuple[str, int, int]:
    """A MySQL binlog (file, pos, row) that strictly increases with the commit sequence: a new
    file every 1000 commits, positions from 4 (the first event after the magic header)."""
    return f"mysql-log.{13 + seq // 1000:06d}", 4 + (seq % 1000) * 100, 1


class ArcionEncoder:
    """Arcion Replicant JSON CDC for Kafka, realtime mode (seed 002): key and value each
    ``{"schema": ..., "payload": ...}``; ``before`` is ``{}`` for an insert and the whole old
    row for an update or a delete, ``after`` the new row or ``{}`` for a delete ("DELETE
    event"); "For each delete operation, Replicant generates a tombstone event. Replicant
    assigns the event the same key as the previous delete operation and sets the value to
    null." """

    columns: tuple[str, ...] = tuple(n for n in COLUMN_NAMES if n in ARCION_TYPES)

    def __init__(self) -> None:
        prefix = f"{_ARCION_CONNECTOR}.{SCHEMA}.{TABLE}"
        row = {
            "type": "struct",
            "optional": True,
            "name": f"{prefix}.Value",
            "fields": _row_fields(ARCION_TYPES, versioned=False),
        }
        self.value_schema = {
            "type": "struct",
            "optional": False,
            "name": f"{prefix}.Envelope",
            "fields": [
                {**row, "field": "before"},
                {**row, "field": "after"},
                {
                    "type": "struct",
                    "optional": False,
                    "field": "source",
                    "name": _ARCION_CONNECTOR,
                    "fields": _ARCION_SOURCE_FIELDS,
                },
                _schema("string", "op", optional=False),
                _schema("int64", "ts_ms"),
            ],
        }
        self.key_name = f"{prefix}.Key"

    def change(self, change: Change) -> list[Message]:
        binlog, pos, row = binlog_position(change.seq)
        verb = {"c": "INSERT INTO", "u": "UPDATE", "d": "DELETE FROM"}[change.op]
        source = {
            "version": "8.0.36",
            "connector": "MYSQL",
            "name": _ARCION_CONNECTOR,
            "ts_ms": change.commit_us // 1000,
            "db": SCHEMA,
            "schema": None,
            "table": TABLE,
            "snapshot": "false",
            "server_id": "1",
            "gtid": None,
            "file": binlog,
            "pos": pos,
            "row": row,
            "thread": 309,
            "query": f"{verb} {SCHEMA}.{TABLE} ... id={change.ident}",
        }
        payload = {
            "before": _values(ARCION_TYPES, change.before) or {},
            "after": _values(ARCION_TYPES, change.row) or {},
            "source": source,
            "op": change.op,
            "ts_ms": change.commit_us // 1000 + 11,
        }
        key = _key(self.key_name, change.ident)
        messages: list[Message] = [
            (key, dumps({"schema": self.value_schema, "payload": payload}), False)
        ]
        if change.op == "d":
            messages.append((key, None, True))
        return messages

    def marker(self, commit_us: int, partition: int) -> str | None:
        return None


# --------------------------------------------------------------------------- Huawei CDL

_CDL_HEARTBEAT_ID = "279fb050-0143-45c1-b184-50bc48c2461c"  # the seed's


class CdlEncoder:
    """Huawei CDL JSON, ``message_version`` "1.0" (seed 004), from PostgreSQL: the seed's
    top-level schema (DATA_STORE .. HEARTBEAT_IDENTIFIER) and payload; ``OPERATION`` INSERT /
    UPDATE / DELETE; ``data`` the row after the change (null for a delete); ``before`` the key
    of a deleted row, null otherwise (PostgreSQL's default replica identity: the old key for
    a delete only); ``unique`` the primary key; ``transaction.properties`` lsn and txId.
    A heartbeat is a payload with ``message_type`` other than "0"."""

    columns: tuple[str, ...] = tuple(n for n in COLUMN_NAMES if n in CDL_TYPES)

    def __init__(self) -> None:
        row_fields = _row_fields(CDL_TYPES, versioned=False)
        self.schema = {
            "type": "struct",
            "fields": [
                _schema("string", "DATA_STORE", optional=False),
                _schema("string", "SEG_OWNER", optional=False),
                _schema("string", "TABLE_NAME", optional=False),
                _schema(
                    "int64",
                    "TIMESTAMP",
                    "org.apache.kafka.connect.data.Timestamp",
                    optional=False,
                    version=1,
                ),
                _schema("string", "OPERATION", optional=False),
                _schema("string", "LOB_COLUMNS"),
                {
                    "type": "struct",
                    "fields": [
                        {
                            "type": "array",
                            "items": {
                                "type": "struct",
                                "fields": [
                                    _schema("string", "name", optional=False),
                                    _schema("int64", "value", optional=False),
                                ],
                                "optional": False,
                            },
                            "optional": False,
                            "field": "properties",
                        }
                    ],
                    "optional": False,
                    "name": "transaction",
                    "field": "transaction",
                },
                {
                    "type": "struct",
                    "fields": [_schema("int64", "id", optional=False)],
                    "optional": True,
                    "name": "unique",
                    "field": "unique",
                },
                {
                    "type": "struct",
                    "fields": row_fields,
                    "optional": True,
                    "name": "data",
                    "field": "data",
                },
                {
                    "type": "struct",
                    "fields": row_fields,
                    "optional": True,
                    "name": "before",
                    "field": "before",
                },
                _schema("string", "message_version", optional=False),
                _schema("string", "message_type", optional=False),
                _schema("string", "HEARTBEAT_IDENTIFIER"),
            ],
            "optional": False,
            "name": f"{SCHEMA}.{TABLE}",
        }

    def change(self, change: Change) -> list[Message]:
        payload = {
            "DATA_STORE": "POSTGRESQL",
            "SEG_OWNER": SCHEMA,
            "TABLE_NAME": TABLE,
            "TIMESTAMP": change.commit_us // 1000,
            "OPERATION": {"c": "INSERT", "u": "UPDATE", "d": "DELETE"}[change.op],
            "LOB_COLUMNS": None,
            "transaction": {
                "properties": [
                    {"name": "lsn", "value": 163_955_221_008 + change.seq * 64},
                    {"name": "txId", "value": 57_227_595 + change.seq},
                ]
            },
            "unique": {"id": change.ident},
            "data": _values(CDL_TYPES, change.row),
            "before": {"id": change.ident} if change.op == "d" else None,
            "message_version": "1.0",
            "message_type": "0",
            "HEARTBEAT_IDENTIFIER": _CDL_HEARTBEAT_ID,
        }
        return [(None, dumps({"schema": self.schema, "payload": payload}), False)]

    def marker(self, commit_us: int, partition: int) -> str | None:
        """A heartbeat (``message_type`` "1") stamped with the commit time in milliseconds,
        rounded down, so that it never claims more than ``commit_us``."""
        payload = {
            "message_type": "1",
            "TIMESTAMP": commit_us // 1000,
            "HEARTBEAT_IDENTIFIER": f"heartbeat-{partition}",
            "message_version": "1.0",
        }
        return dumps({"schema": None, "payload": payload})


# --------------------------------------------------------------------------- YDB


def ydb_decimal(value: Decimal) -> str:
    """``Decimal(12,3)``: ``DecimalToString`` -> ``NYql::NDecimal::ToString(val, 12, 3)``
    (ydb/library/yql/public/decimal/yql_decimal.cpp), which writes the unscaled integer's
    digits, drops trailing fraction zeros and the point with them, and adds a leading 0 before
    a bare point: 1.500 -> "1.5", 2.000 -> "2", 0.010 -> "0.01", 0 -> "0"."""
    unscaled = int(value.scaleb(_NUMERIC_SCALE))
    if unscaled == 0:
        return "0"
    digits = str(abs(unscaled)).rjust(_NUMERIC_SCALE + 1, "0")
    whole, frac = digits[:-_NUMERIC_SCALE], digits[-_NUMERIC_SCALE:].rstrip("0")
    return ("-" if unscaled < 0 else "") + whole + ("." + frac if frac else "")


def _ydb_json(value: Any) -> Any:
    """``Json``: ``StringToJson`` reads the stored text back into a ``TJsonValue`` and the
    writer writes it again, as an embedded JSON value (doubles as ``ydb_double``)."""
    if isinstance(value, dict):
        return {k: _ydb_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ydb_json(v) for v in value]
    if isinstance(value, float):
        return ydb_double(value)
    return value


# typed_model's columns as YDB column types, with what ``TJsonSerializer::ToJson``
# (ydb/core/tx/datashard/change_record_cdc_serializer.cpp) writes for each. YDB has no
# time-of-day type: c_time and c_timetz are not carried. The model's dates and timestamps
# reach back to 1887 and 1901, before YDB's Date and Timestamp (from 1970), so they are the
# wide Date32 and Timestamp64, which ToJson writes as JSON integers.
YDB_TYPES: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "c_smallint": ("Int16", int),  # TJsonValue(i16)
    "c_int": ("Int32", int),  # TJsonValue(i32)
    "c_bigint": ("Int64", int),  # TJsonValue(i64)
    "c_real": ("Float", ydb_double),  # TJsonValue(float)
    "c_double": ("Double", ydb_double),  # TJsonValue(double)
    "c_numeric": ("Decimal(12,3)", ydb_decimal),  # TJsonValue(DecimalToString(...)): a string
    "c_bool": ("Bool", bool),  # TJsonValue(bool)
    "c_text": ("Utf8", str),  # TJsonValue(cell.AsBuf())
    "c_bytea": ("String", b64),  # TJsonValue(Base64Encode(cell.AsBuf()))
    "c_date": ("Date32", epoch_days),  # TJsonValue(i32): days since the epoch
    "c_ts": ("Timestamp64", epoch_micros),  # TJsonValue(i64): microseconds since the epoch
    "c_tstz": ("Timestamp64", epoch_micros),  # no zoned column type: the UTC instant
    "c_interval": ("Interval", lambda v: v // _MICRO),  # TJsonValue(i64): microseconds
    "c_json": ("Json", _ydb_json),  # StringToJson(cell.AsBuf()): embedded JSON
    "c_uuid": ("Uuid", str),  # NUuid::UuidBytesToString: lowercase, hyphenated
}
_YDB_TX_BASE = 562_949_953_421_312  # txIds of the size the seed shows (562949953607163)


class YdbDebeziumEncoder:
    """YDB's Debezium-compatible JSON (seed 001), ``NEW_AND_OLD_IMAGES`` mode, read with the
    Kafka API: the message key is ``{"payload": {<key columns>}}`` and the value
    ``{"payload": {"op", "before", "after", "source"}}`` without a schema.

    ``TDebeziumJsonSerializer::SerializeToJson``: ``before`` from the old image and ``after``
    from the new one, each extended with the key columns, and present only when the image is
    (``TCdcStreamChangeCollector``: ``NullIfErased``, so an insert has no ``before`` and an
    erase no ``after``); ``op`` "c" for an upsert without an old image in this mode ("c —
    create. Applicable only in NEW_AND_OLD_IMAGES mode"), "u" with one, "d" for an erase;
    ``source`` ``{"version": "1.0.0", "connector": "ydb", "ts_ms", "snapshot", "step",
    "txId"}``."""

    columns: tuple[str, ...] = tuple(n for n in COLUMN_NAMES if n in YDB_TYPES)

    def _image(self, row: dict[str, Any]) -> dict[str, Any]:
        out = {n: None if row.get(n) is None else YDB_TYPES[n][1](row[n]) for n in self.columns}
        out["id"] = row["id"]  # ExtendJson(image, key payload)
        return out

    def change(self, change: Change) -> list[Message]:
        payload: dict[str, Any] = {}
        if change.before is not None:
            payload["before"] = self._image(change.before)
        if change.row is not None:
            payload["after"] = self._image(change.row)
        payload["op"] = change.op
        payload["source"] = {
            "version": "1.0.0",
            "connector": "ydb",
            "ts_ms": change.commit_us // 1000,
            "snapshot": False,
            "step": change.commit_us // 1000,
            "txId": _YDB_TX_BASE + change.seq,
        }
        key = dumps({"payload": {"id": change.ident}})
        return [(key, dumps({"payload": payload}), False)]

    def marker(self, commit_us: int, partition: int) -> str | None:
        return None


ENCODERS: dict[str, Encoder] = {
    "debezium": DebeziumEncoder(),
    "arcion": ArcionEncoder(),
    "cdl": CdlEncoder(),
    "ydb-debezium": YdbDebeziumEncoder(),
}
