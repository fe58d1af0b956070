"""One dump of good records mixed with hostile ones, landed and applied: the batch finishes,
every landed record has exactly one outcome, every hostile record is quarantined with a
reason, the good records' rows hold their values, and applying the batch again changes nothing.

README: "Whatever a record holds (a number past Python's digit limit, a position wider than its
sort key, a resolved time outside years 1-9999), it ends in quarantine with a reason, never as
a failed batch." and "Columns that appear in the stream but not in the DDL are added to the
table as STRING" ("A column the DDL does not declare is added with its Connect type").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.ledger import STATUSES, current_status
from tests.spark.pipeline import land_dump, process

pytestmark = [pytest.mark.spark, pytest.mark.slow]
BATCH = "2026-01-01T01:00:00+00:00"
DDL = (
    "CREATE TABLE shop.items (id BIGINT PRIMARY KEY, name TEXT, qty INT, doc JSONB);"
    " CREATE TABLE shop.prices (k NUMERIC(10,2) PRIMARY KEY, v TEXT);"
)
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
BASE_NS = BASE_MS * 1_000_000
DECIMAL = "org.apache.kafka.connect.data.Decimal"
# Names Delta cannot store in a column without column mapping: " ,;{}()\n\t=".
UNSTORABLE = [" ", ",", ";", "{", "}", "(", ")", "=", "\n", "\t"]
WIDE = 3000
DEEP_TEXT = "[" * 100_000 + "]" * 100_000
LONG_NUMBER_TEXT = '{"n": ' + "9" * 5000 + "}"


@dataclass
class Dump:
    """Kafka-layout dump lines, and what each line is expected to become."""

    lines: list[str] = field(default_factory=list)
    # line number -> what it is: every one of them must be quarantined with a reason.
    hostile: dict[int, str] = field(default_factory=dict)
    # line number -> (label, table, key, columns): applied with these values, or quarantined
    # with a reason (records whose columns a table may or may not take).
    either: dict[int, tuple[str, str, Any, dict[str, Any]]] = field(default_factory=dict)
    # line number -> expected status (applied, superseded, duplicate, control).
    statuses: dict[int, str] = field(default_factory=dict)
    # Lines of one message delivered twice: one applied, the other a duplicate.
    redelivered: tuple[int, int] = (0, 0)

    def redeliver(self, line: int) -> None:
        doc = json.loads(self.lines[line - 1])
        doc["offset"] = len(self.lines)
        self.lines.append(json.dumps(doc))
        self.redelivered = (line, len(self.lines))

    def add(self, topic: str, key: Any, value: str | None) -> int:
        offset = len(self.lines)
        self.lines.append(
            json.dumps(
                {
                    "topic": topic,
                    "partition": 0,
                    "offset": offset,
                    "timestamp": BASE_MS + offset,
                    "key": key,
                    "value": value,
                }
            )
        )
        return offset + 1  # the line number, which names the record

    def write(self, tmp_path: Path) -> str:
        directory = tmp_path / "dump"
        directory.mkdir()
        (directory / "part-0.ndjson").write_text("\n".join(self.lines) + "\n", encoding="utf-8")
        return str(directory)


def line_of(record_id: str) -> int:
    return int(record_id.rsplit("#", 1)[1].split(".")[0])


def read(spark: Any, path: str) -> list[dict[str, Any]]:
    return [r.asDict() for r in spark.read.format("delta").load(path).collect()]


def table_rows(spark: Any, warehouse: str, table: str, key: str) -> dict[Any, dict[str, Any]]:
    rows = read(spark, f"{warehouse}/shop/{table}")
    return {r[key]: r for r in rows if not r["_cdc_deleted"]}


def outcomes(spark: Any, warehouse: str) -> tuple[dict[int, str], dict[int, dict[str, Any]]]:
    """(status by line, quarantine row by line) of the dump's records."""
    ledger = spark.read.format("delta").load(f"{warehouse}/_cdc/ledger")
    statuses = {line_of(r["record_id"]): r["status"] for r in current_status(ledger).collect()}
    quarantined: dict[int, dict[str, Any]] = {}
    for row in read(spark, f"{warehouse}/_cdc/quarantine"):
        line = line_of(row["record_id"])
        assert line not in quarantined, f"line {line} quarantined twice"
        quarantined[line] = row
    return statuses, quarantined


def snapshot(spark: Any, warehouse: str) -> dict[str, Any]:
    """Everything a run writes, comparable across runs."""

    def rows(path: str, drop: tuple[str, ...] = ()) -> list[str]:
        frame = spark.read.format("delta").load(path).drop(*drop)
        return sorted(json.dumps(r.asDict(), default=str, sort_keys=True) for r in frame.collect())

    statuses, quarantined = outcomes(spark, warehouse)
    return {
        "items": rows(f"{warehouse}/shop/items"),
        "prices": rows(f"{warehouse}/shop/prices"),
        "statuses": statuses,
        "quarantine": {k: (v["reason"], v["payload"]) for k, v in quarantined.items()},
    }


def run_and_check(
    spark: Any, tmp_path: Path, fmt: str, dump: Dump
) -> tuple[str, dict[str, Any], dict[int, str], dict[int, dict[str, Any]]]:
    warehouse = str(tmp_path / "warehouse")
    landed = land_dump(warehouse, dump.write(tmp_path), BATCH, layout="kafka", fmt=fmt)
    assert landed["landed"] == len(dump.lines)

    stats = process(warehouse, BATCH, ddl=DDL, fmt=fmt)["apply"]

    accounting = stats["accounting"]
    assert accounting["landed"] == len(dump.lines), accounting
    assert accounting["unprocessed"] == 0, accounting
    assert accounting["landed"] == sum(accounting[s] for s in STATUSES), accounting
    statuses, quarantined = outcomes(spark, warehouse)
    assert set(statuses) == set(range(1, len(dump.lines) + 1))
    for line, what in dump.hostile.items():
        assert statuses[line] == "quarantined", (what, statuses[line])
        assert line in quarantined, what
        assert quarantined[line]["reason"], what
        assert quarantined[line]["payload"], what
    for line, status in dump.statuses.items():
        assert statuses[line] == status, (line, statuses[line], status)
    assert sorted(statuses[line] for line in dump.redelivered) == ["applied", "duplicate"]
    for line, (what, table, key, columns) in dump.either.items():
        if statuses[line] == "quarantined":
            assert quarantined[line]["reason"], what
            continue
        assert statuses[line] == "applied", (what, statuses[line])
        row = table_rows(spark, warehouse, table, "id" if table == "items" else "k")[key]
        stored = {c: row[c] for c in columns}
        for name, expected in columns.items():
            if isinstance(expected, Decimal) and stored[name] is not None:
                # A decimal is kept exactly, whatever the column's type.
                stored[name] = Decimal(str(stored[name]))
        assert stored == columns, what
    assert accounting["quarantined"] == len(quarantined)
    # Each table's quarantined records by reason, as the ledger counts them (records), are
    # among the batch's quarantined records with those reasons.
    ledger_reasons: dict[str, int] = {}
    for entry in quarantined.values():
        ledger_reasons[entry["reason"]] = ledger_reasons.get(entry["reason"], 0) + 1
    table_reasons: dict[str, int] = {}
    for counts in stats["tables"].values():
        by_reason = counts.get("quarantined_by_reason", {})
        assert counts.get("quarantined", 0) == sum(by_reason.values())
        for reason, n in by_reason.items():
            table_reasons[reason] = table_reasons.get(reason, 0) + n
    assert all(n <= ledger_reasons.get(r, 0) for r, n in table_reasons.items()), table_reasons

    # The same batch again: nothing left to do, nothing changes.
    before = snapshot(spark, warehouse)
    again = process(warehouse, BATCH, ddl=DDL, fmt=fmt)["apply"]
    assert again["accounting"] == accounting
    assert snapshot(spark, warehouse) == before
    return warehouse, accounting, statuses, quarantined


# --- Debezium -----------------------------------------------------------------------------


def debezium_value(
    ident: int,
    lsn: Any,
    after: dict[str, Any] | None,
    op: str = "c",
    ts_ms: Any = None,
    table: str = "items",
    schema: Any = None,
) -> str:
    payload = {
        "op": op,
        "before": {"id": ident} if op == "d" else None,
        "after": after,
        "source": {
            "connector": "postgresql",
            "db": "shop",
            "schema": "shop",
            "table": table,
            "snapshot": "false",
            "lsn": lsn,
            "txId": 600,
            "ts_ms": BASE_MS + int(str(lsn)[-6:]) if ts_ms is None else ts_ms,
        },
    }
    if schema is None:
        return json.dumps(payload)
    return json.dumps({"schema": schema, "payload": payload})


def connect_schema(after_fields: Any, envelope_fields: Any = None) -> dict[str, Any]:
    image = {"type": "struct", "optional": True, "fields": after_fields}
    fields = envelope_fields
    if fields is None:
        fields = [
            {**image, "field": "before"},
            {**image, "field": "after"},
            {"type": "struct", "optional": False, "field": "source", "fields": []},
            {"type": "string", "optional": False, "field": "op"},
        ]
    return {"type": "struct", "optional": False, "fields": fields}


ITEM_FIELDS = [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {"type": "int32", "optional": True, "field": "qty"},
]


def debezium_dump() -> tuple[Dump, dict[int, dict[str, Any]], dict[Decimal, str]]:
    dump = Dump()
    items: dict[int, dict[str, Any]] = {}
    lsn = 34_000_000

    def item(ident: int, name: str | None, qty: int | None, doc: str | None, op: str = "c") -> int:
        nonlocal lsn
        lsn += 8
        after = None if op == "d" else {"id": ident, "name": name, "qty": qty, "doc": doc}
        value = debezium_value(ident, lsn, after, op)
        if op == "d":
            items.pop(ident, None)
        else:
            items[ident] = {"name": name, "qty": qty, "doc": doc}
        return dump.add("items", json.dumps({"id": ident}), value)

    # Good records: 14 inserts, updates that supersede, a delete, a redelivery.
    for ident in range(1, 15):
        line = item(ident, f"item {ident} ✓", ident * 10, json.dumps({"n": ident}))
        # Ids 1-4 are updated later and id 5 deleted.
        dump.statuses[line] = "superseded" if ident <= 5 else "applied"
    for ident in range(1, 4):
        dump.statuses[item(ident, f"item {ident} v2", ident * 11, None, op="u")] = "applied"
    dump.redeliver(item(4, "item 4 v2", 44, None, op="u"))
    dump.statuses[item(5, None, None, None, op="d")] = "applied"
    # An undeclared int8 column, with its Connect schema: added as a column that holds it.
    lsn += 8
    int8 = connect_schema([*ITEM_FIELDS, {"type": "int8", "optional": True, "field": "tiny"}])
    after = {"id": 30, "name": "tiny", "qty": 1, "tiny": 7}
    dump.statuses[dump.add("items", None, debezium_value(30, lsn, after, schema=int8))] = "applied"
    items[30] = {"name": "tiny", "qty": 1, "doc": None, "tiny": 7}
    # Keys 1.5 then 1.50 (and "2.5" then "2.50"): one key of a NUMERIC(10,2) column.
    prices: dict[Decimal, str] = {}
    for first, later, expected in (("1.5", "1.50", "1.50"), ('"2.5"', '"2.50"', "2.50")):
        for literal, v, status in ((first, "first", "superseded"), (later, "second", "applied")):
            lsn += 8
            value = debezium_value(0, lsn, {"k": 0, "v": v}, table="prices")
            value = value.replace('"k": 0', f'"k": {literal}')  # the literal as sent
            dump.statuses[dump.add("prices", None, value)] = status
        prices[Decimal(expected)] = "second"

    # Hostile records, each a row of its own that must not reach the table.
    def hostile(what: str, ident: int, value: str) -> None:
        dump.hostile[dump.add("items", json.dumps({"id": ident}), value)] = what

    row = {"name": "hostile", "qty": 1}
    hostile("lsn of 21 digits", 101, debezium_value(101, 10**20, {"id": 101, **row}))
    hostile("ts_ms of 21 digits", 102, debezium_value(102, 1, {"id": 102, **row}, ts_ms=10**20 + 1))
    hostile("ts_ms 1e15", 103, debezium_value(103, 2, {"id": 103, **row}, ts_ms=10**15))
    hostile("ts_ms 1e19", 104, debezium_value(104, 3, {"id": 104, **row}, ts_ms=10**19))
    not_a_list = connect_schema([], envelope_fields={"after": ITEM_FIELDS})
    hostile(
        "schema fields not a list",
        105,
        debezium_value(105, 4, {"id": 105, **row}, schema=not_a_list),
    )
    unhashable = connect_schema([{"type": ["int64"], "optional": False, "field": "id"}])
    hostile("field type a list", 106, debezium_value(106, 5, {"id": 106, **row}, schema=unhashable))
    for offset, scale in enumerate((40, 1000, 10**6)):
        ident = 107 + offset
        decimal = {"type": "bytes", "optional": True, "name": DECIMAL, "field": f"d{offset}"}
        decimal["parameters"] = {"scale": str(scale)}
        schema = connect_schema([*ITEM_FIELDS, decimal])
        value = debezium_value(
            ident, 6 + offset, {"id": ident, **row, f"d{offset}": "AQ=="}, schema=schema
        )
        # Unscaled 1: 1E-40 and smaller, which no Spark DECIMAL (scale <= 38) holds. Either the
        # record is quarantined, or the column holds the exact number (as text, say).
        line = dump.add("items", json.dumps({"id": ident}), value)
        exact = Decimal(1).scaleb(-scale)
        dump.either[line] = (f"decimal scale {scale}", "items", ident, {f"d{offset}": exact})
    negative = {"type": "bytes", "optional": True, "name": DECIMAL, "field": "dneg"}
    negative["parameters"] = {"scale": "-3"}
    schema = connect_schema([*ITEM_FIELDS, negative])
    line = dump.add(
        "items",
        json.dumps({"id": 110}),
        debezium_value(110, 9, {"id": 110, **row, "dneg": "AQ=="}, schema=schema),
    )
    # Unscaled 1, scale -3: 1000 (a DECIMAL(38, 0) holds it).
    dump.either[line] = ("decimal scale -3", "items", 110, {"dneg": Decimal(1000)})
    hostile("json 100,000 deep", 111, debezium_value(111, 10, {"id": 111, "doc": DEEP_TEXT}))
    hostile(
        "json number of 5000 digits",
        112,
        debezium_value(112, 11, {"id": 112, "doc": LONG_NUMBER_TEXT}),
    )
    for offset, char in enumerate(UNSTORABLE):
        ident = 120 + offset
        after = {"id": ident, **row, f"bad{char}name": "x"}
        hostile(f"column name with {char!r}", ident, debezium_value(ident, 20 + offset, after))
    # A backtick Delta can store: the column is added (or the record quarantined with a reason).
    line = dump.add(
        "items",
        json.dumps({"id": 140}),
        debezium_value(140, 40, {"id": 140, **row, "tick`name": "ticked"}),
    )
    dump.either[line] = ("column name with a backtick", "items", 140, {"tick`name": "ticked"})
    wide = {"id": 150, **row, **{f"z{i:04d}": f"v{i}" for i in range(WIDE)}}
    line = dump.add("items", json.dumps({"id": 150}), debezium_value(150, 50, wide))
    dump.either[line] = ("3000 columns", "items", 150, {"z0000": "v0", "z2999": "v2999"})
    return dump, items, prices


def check_rows(
    spark: Any,
    warehouse: str,
    items: dict[int, dict[str, Any]],
    prices: dict[Decimal, str],
    dump: Dump,
    statuses: dict[int, str],
) -> None:
    stored = table_rows(spark, warehouse, "items", "id")
    maybe = {key for line, (_, _, key, _) in dump.either.items() if statuses[line] == "applied"}
    assert set(stored) - maybe == set(items)
    for ident, expected in items.items():
        if ident in stored:
            assert {c: stored[ident][c] for c in expected} == expected, ident
    assert 5 not in stored
    stored_prices = table_rows(spark, warehouse, "prices", "k")
    assert {k: r["v"] for k, r in stored_prices.items()} == prices


def test_a_hostile_debezium_dump_keeps_the_accounting_exact(spark: Any, tmp_path: Path) -> None:
    dump, items, prices = debezium_dump()
    warehouse, _, statuses, _ = run_and_check(spark, tmp_path, "debezium", dump)
    check_rows(spark, warehouse, items, prices, dump, statuses)


# --- CockroachDB --------------------------------------------------------------------------


def cockroach_dump() -> tuple[Dump, dict[int, dict[str, Any]], dict[Decimal, str]]:
    dump = Dump()
    items: dict[int, dict[str, Any]] = {}
    tick = 0

    def updated() -> str:
        nonlocal tick
        tick += 1
        return f"{BASE_NS + tick * 1000}.0000000000"

    def item(ident: int, name: str | None, qty: int | None, doc: Any, delete: bool = False) -> int:
        after = None if delete else {"id": ident, "name": name, "qty": qty, "doc": doc}
        if delete:
            items.pop(ident, None)
        else:
            stored = json.dumps(doc, separators=(",", ":"), sort_keys=True) if doc else None
            items[ident] = {"name": name, "qty": qty, "doc": stored}
        value = json.dumps({"after": after, "updated": updated()})
        return dump.add("items", json.dumps([ident]), value)

    for ident in range(1, 15):
        line = item(ident, f"item {ident} ✓", ident * 10, {"n": ident})
        # Ids 1-4 are updated later and id 5 deleted.
        dump.statuses[line] = "superseded" if ident <= 5 else "applied"
    for ident in range(1, 4):
        dump.statuses[item(ident, f"item {ident} v2", ident * 11, None)] = "applied"
    dump.redeliver(item(4, "item 4 v2", 44, None))
    dump.statuses[item(5, None, None, None, delete=True)] = "applied"
    marker = json.dumps({"resolved": f"{BASE_NS + 10**9}.0000000000"})
    dump.statuses[dump.add("items", None, marker)] = "control"
    # Keys 1.5 then 1.50: CockroachDB writes DECIMAL as a JSON number, as sent.
    prices: dict[Decimal, str] = {}
    for first, later in (("1.5", "1.50"), ("2.5", "2.500")):
        for literal, v, status in ((first, "first", "superseded"), (later, "second", "applied")):
            value = '{"after": {"k": ' + literal + ', "v": "' + v + '"}, "updated": "'
            value += updated() + '"}'
            dump.statuses[dump.add("prices", "[" + literal + "]", value)] = status
        prices[Decimal(later)] = "second"

    def hostile(what: str, ident: int, value: str) -> None:
        dump.hostile[dump.add("items", json.dumps([ident]), value)] = what

    row = {"name": "hostile", "qty": 1}
    hostile(
        "updated wall time of 21 digits",
        101,
        json.dumps({"after": {"id": 101, **row}, "updated": "1" * 21 + ".0000000000"}),
    )
    hostile(
        "bare updated wall time of 21 digits",
        102,
        json.dumps({"id": 102, **row, "__crdb__": {"updated": "9" * 21 + ".0000000000"}}),
    )
    marker = json.dumps({"resolved": "1" + "0" * 25 + ".0000000000"})
    dump.hostile[dump.add("items", None, marker)] = "resolved of 26 digits"
    deep = '{"after": {"id": 103, "doc": ' + DEEP_TEXT + '}, "updated": "' + updated() + '"}'
    hostile("jsonb value 100,000 deep", 103, deep)
    long_number = '{"after": {"id": 104, "doc": ' + LONG_NUMBER_TEXT + "}, "
    long_number += '"updated": "' + updated() + '"}'
    hostile("jsonb number of 5000 digits", 104, long_number)
    for offset, char in enumerate(UNSTORABLE):
        ident = 120 + offset
        after = {"id": ident, **row, f"bad{char}name": "x"}
        hostile(
            f"column name with {char!r}",
            ident,
            json.dumps({"after": after, "updated": updated()}),
        )
    after = {"id": 140, **row, "tick`name": "ticked"}
    line = dump.add("items", "[140]", json.dumps({"after": after, "updated": updated()}))
    dump.either[line] = ("column name with a backtick", "items", 140, {"tick`name": "ticked"})
    wide = {"id": 150, **row, **{f"z{i:04d}": f"v{i}" for i in range(WIDE)}}
    line = dump.add("items", "[150]", json.dumps({"after": wide, "updated": updated()}))
    dump.either[line] = ("3000 columns", "items", 150, {"z0000": "v0", "z2999": "v2999"})
    return dump, items, prices


def test_a_hostile_cockroach_dump_keeps_the_accounting_exact(spark: Any, tmp_path: Path) -> None:
    dump, items, prices = cockroach_dump()
    warehouse, accounting, statuses, _ = run_and_check(spark, tmp_path, "cockroachdb", dump)
    assert accounting["control"] == 1
    check_rows(spark, warehouse, items, prices, dump, statuses)
