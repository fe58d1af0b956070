"""Every Kafka-borne format, every declared type, several batches, exact counts.

The messages come from encoders written from the vendors' documents
(``tests/oracles/connect_encoders.py``, ``tests/oracles/json_encoders.py``) over a model of
typed changes (``tests/oracles/typed_model.py``); none of them shares code with the pipeline.
Batches arrive with redeliveries and late messages (an older change of a key in a later
batch), so after each batch the table must equal the model's state by the README's rules,
and the ledger must hold exactly the model's applied, superseded, duplicate and control
counts, with nothing quarantined, pending or unprocessed.

Expected values are the README's Spark types of each declared type: timestamps as µs since
the epoch, ``time`` as ``HH:MM:SS.ffffff``, ``timetz`` adjusted to UTC with ``+00:00``,
``interval`` as µs, ``json`` compared by value, ``uuid`` as lower-case text.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable

from airflow_cdc.core.formats import IN_BAND_RESOLVED
from spark_jobs.ledger import STATUSES
from tests.oracles import connect_encoders, json_encoders, typed_model
from tests.spark.pipeline import land_dump, process

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ENCODERS: dict[str, typed_model.Encoder] = {
    **connect_encoders.ENCODERS,
    **json_encoders.ENCODERS,
}
# Sources that deliver a key's changes in commit order (YDB: "changes by the same primary key
# are delivered to the same topic partition in the order they took place").
IN_ORDER = frozenset({"ydb"})
BATCHES = 2
_DAY_US = 86_400 * 10**6
_EPOCH = dt.datetime(1970, 1, 1)


def expected_value(name: str, value: Any) -> Any:
    """An abstract value of the model as the README says its column reads back from Spark."""
    if value is None:
        return None
    if name == "c_ts":
        return (value - _EPOCH) // dt.timedelta(microseconds=1)
    if name == "c_tstz":
        return (value - _EPOCH.replace(tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    if name == "c_time":
        return value.strftime("%H:%M:%S.%f")
    if name == "c_timetz":
        local = dt.datetime.combine(dt.date(2000, 1, 2), value.replace(tzinfo=None))
        utc = local - value.utcoffset()
        return utc.strftime("%H:%M:%S.%f") + "+00:00"
    if name == "c_interval":
        return value // dt.timedelta(microseconds=1)
    if name == "c_uuid":
        return str(value)
    return value


def table_state(spark: Any, warehouse: str) -> dict[int, dict[str, Any]]:
    frame = spark.read.format("delta").load(f"{warehouse}/{typed_model.SCHEMA}/{typed_model.TABLE}")
    columns = []
    for name in ("id", *typed_model.COLUMN_NAMES):
        if name in ("c_ts", "c_tstz"):
            columns.append(f"unix_micros(CAST(`{name}` AS TIMESTAMP)) AS `{name}`")
        else:
            columns.append(f"`{name}`")
    rows = frame.where("NOT _cdc_deleted").selectExpr(*columns).collect()
    state = {}
    for row in rows:
        values = row.asDict()
        if values["c_bytea"] is not None:
            values["c_bytea"] = bytes(values["c_bytea"])
        if values["c_json"] is not None:
            values["c_json"] = json.loads(values["c_json"])
        state[values["id"]] = values
    return state


def expected_state(batch: typed_model.Batch) -> dict[int, dict[str, Any]]:
    return {
        ident: {
            "id": ident,
            **{name: expected_value(name, row.get(name)) for name in typed_model.COLUMN_NAMES},
        }
        for ident, row in batch.expected.items()
    }


def differences(
    got: dict[int, dict[str, Any]], want: dict[int, dict[str, Any]]
) -> list[tuple[int, str, Any, Any]]:
    """(id, column, got, wanted) of every cell that differs; a missing row is column ``*``."""
    found = []
    for ident in sorted(set(got) | set(want)):
        if ident not in got or ident not in want:
            found.append((ident, "*", got.get(ident), want.get(ident)))
            continue
        for name, wanted in want[ident].items():
            if got[ident][name] != wanted:
                found.append((ident, name, got[ident][name], wanted))
    return found


def quarantined(spark: Any, warehouse: str) -> list[tuple[str, str]]:
    """A few quarantine reasons and details, to show what went wrong."""
    path = f"{warehouse}/_cdc/quarantine"
    if not DeltaTable.isDeltaTable(spark, path):
        return []
    frame = spark.read.format("delta").load(path)
    rows = frame.selectExpr("reason", "substring(detail, 1, 160) AS what").distinct()
    return sorted((r["reason"], r["what"]) for r in rows.limit(20).collect())


@pytest.mark.parametrize("fmt", sorted(ENCODERS))
def test_typed_stream_end_to_end(spark: Any, tmp_path: Path, fmt: str) -> None:
    encoder = ENCODERS[fmt]
    batches = typed_model.generate(encoder, batches=BATCHES, seed=17, in_order=fmt in IN_ORDER)
    dump = tmp_path / "dump"
    dump.mkdir()
    warehouse = str(tmp_path / "warehouse")
    for number, batch in enumerate(batches):
        batch_id = f"2026-01-01T0{number + 1}:00:00+00:00"
        (dump / f"batch-{number}.ndjson").write_text("\n".join(batch.lines) + "\n", "utf-8")
        landed = land_dump(warehouse, str(dump), batch_id, layout="kafka", fmt=fmt)
        stats = process(warehouse, batch_id, ddl=typed_model.DDL, fmt=fmt)

        assert landed["landed"] == len(batch.lines)
        accounting = stats["apply"]["accounting"]
        assert quarantined(spark, warehouse) == [], f"batch {number}"
        want = {**batch.counts, "quarantined": 0, "pending": 0, "unprocessed": 0}
        assert {k: accounting[k] for k in want} == want, f"batch {number}"
        assert accounting["landed"] == sum(accounting[k] for k in STATUSES)
        assert differences(table_state(spark, warehouse), expected_state(batch)) == [], (
            f"batch {number}"
        )
    if fmt in IN_BAND_RESOLVED:
        state = json.loads(Path(warehouse, "_cdc", "resolved", "dump.json").read_text())
        assert state["resolved_ts"] is not None


WIDE_AMOUNTS = [
    "12345678901234567890.123456789",
    "-0.000000001",
    "99999999999999999999.999999999",
    # 38 digits: past the 28 of Python's default decimal context.
    "-12345678901234567890123456789.123456789",
    # 40 digits, written as CockroachDB pads a DECIMAL to its scale: past the 38 that Spark
    # holds exactly, but for the zeros that end it.
    "123456789012345678.1000000000000000000000",
]


def _wide_cockroachdb(n: int, amount: str) -> tuple[str, str]:
    # CockroachDB writes DECIMAL as a JSON number.
    value = f'{{"after": {{"id": {n}, "amount": {amount}}}, "updated": "{n + 1}000.0000000000"}}'
    return f"[{n}]", value


def _wide_debezium(n: int, amount: str) -> tuple[str, str]:
    encoded = connect_encoders.connect_decimal(Decimal(amount), 9)
    field = {"field": "amount", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal"}
    columns = [{"field": "id", "type": "int64"}, {**field, "parameters": {"scale": "9"}}]
    schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": columns}]}
    payload = {
        "op": "c",
        "after": {"id": n, "amount": encoded},
        "source": {"schema": "shop", "table": "wide", "lsn": n + 1, "ts_ms": 1},
    }
    return json.dumps({"id": n}), json.dumps({"schema": schema, "payload": payload})


@pytest.mark.parametrize(
    ("fmt", "encode"), [("cockroachdb", _wide_cockroachdb), ("debezium", _wide_debezium)]
)
def test_a_decimal_wider_than_a_double(spark: Any, tmp_path: Path, fmt: str, encode: Any) -> None:
    # Every digit must reach the column.
    lines = []
    for n, amount in enumerate(WIDE_AMOUNTS):
        key, value = encode(n, amount)
        lines.append(
            json.dumps({"topic": "wide", "partition": 0, "offset": n, "key": key, "value": value})
        )
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "part-0.ndjson").write_text("\n".join(lines) + "\n", "utf-8")
    warehouse = str(tmp_path / "warehouse")
    ddl = "CREATE TABLE shop.wide (id BIGINT PRIMARY KEY, amount NUMERIC(38, 9));"
    land_dump(warehouse, str(dump), "b1", layout="kafka", fmt=fmt)
    stats = process(warehouse, "b1", ddl=ddl, fmt=fmt)
    assert stats["apply"]["accounting"]["applied"] == len(WIDE_AMOUNTS)
    rows = spark.read.format("delta").load(f"{warehouse}/shop/wide").collect()
    assert {r["id"]: r["amount"] for r in rows} == {
        n: Decimal(amount) for n, amount in enumerate(WIDE_AMOUNTS)
    }
