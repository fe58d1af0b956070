"""Conformance: real Debezium streams from other projects must give the table states that
their own tests assert (../shared/fixtures/external, see each folder's SOURCE.md)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.spark.pipeline import land_dump, process

pytestmark = pytest.mark.spark
FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "external"
FLINK = FIXTURES / "flink-debezium"
PAIMON = FIXTURES / "paimon-debezium"
PRODUCTS = (
    "CREATE TABLE inventory.products (id INT PRIMARY KEY, name TEXT, description TEXT, weight REAL)"
)
PRODUCT = (
    "CREATE TABLE test.product (id INT PRIMARY KEY, name TEXT, description TEXT, weight DOUBLE"
    " PRECISION)"
)


def json_lines(path: Path) -> list[str]:
    """The lines that parse as JSON (Paimon's files start with a license comment)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            json.loads(line)
        except ValueError:
            continue
        lines.append(line)
    return lines


def run(warehouse: Path, batch: str, lines: list[str], ddl: str, layout: str = "lines") -> Any:
    dump = warehouse.parent / f"dump-{batch[:13]}"
    dump.mkdir()
    (dump / "messages.ndjson").write_text("\n".join(lines) + "\n", encoding="utf-8")
    land_dump(str(warehouse), str(dump), batch, layout=layout, fmt="debezium")
    return process(str(warehouse), batch, ddl=ddl, fmt="debezium")


def live(spark: Any, path: Path, columns: list[str]) -> list[list[Any]]:
    frame = spark.read.format("delta").load(str(path)).where("NOT _cdc_deleted")
    return sorted([[r[c] for c in columns] for r in frame.collect()], key=lambda r: r[0])


def flink_expected() -> dict[int, list[Any]]:
    """Replay Flink's asserted changelog (+I, -U, +U, -D) by id."""
    state: dict[int, list[Any]] = {}
    for line in (FLINK / "expected.txt").read_text().splitlines():
        found = re.fullmatch(r'"([+-][IUD])\((\d+),(.*),(.*),([\d.]+)\)",?', line.strip())
        if not found:
            continue
        kind, ident, name, description, weight = found.groups()
        if kind in ("+I", "+U"):
            state[int(ident)] = [int(ident), name, description, float(weight)]
        elif kind == "-D":
            del state[int(ident)]
    return state


def test_flink_changelog_agrees_with_the_recorded_final_state():
    with (FLINK / "expected_final_state.csv").open() as f:
        recorded = {int(r["id"]): r for r in csv.DictReader(f)}
    replayed = flink_expected()
    assert sorted(replayed) == sorted(recorded) == list(range(101, 111))
    for ident, row in recorded.items():
        assert replayed[ident] == [ident, row["name"], row["description"], float(row["weight"])]


@pytest.mark.parametrize(
    "name",
    [
        "debezium-data-schema-include.txt",
        "debezium-data-schema-exclude.txt",
        "debezium-postgres-data-schema-include.txt",
        "debezium-postgres-data-schema-exclude.txt",
    ],
)
def test_flink_streams_give_the_asserted_table(spark: Any, tmp_path: Path, name: str) -> None:
    warehouse = tmp_path / "warehouse"
    stats = run(warehouse, "2026-01-01T01:00:00+00:00", json_lines(FLINK / name), PRODUCTS)
    rows = live(
        spark, warehouse / "inventory" / "products", ["id", "name", "description", "weight"]
    )
    expected = [flink_expected()[k] for k in sorted(flink_expected())]
    assert [r[:3] for r in rows] == [e[:3] for e in expected]
    # weight is FLOAT (32-bit) in Flink's table, as here: 3.140000104904175 reads as 3.14.
    assert [round(r[3], 5) for r in rows] == [round(e[3], 5) for e in expected]
    accounting = stats["apply"]["accounting"]
    assert accounting["landed"] == 16 and accounting["quarantined"] == 0
    assert accounting["unprocessed"] == 0


def test_replica_identity_default_delete_without_key_is_quarantined(spark: Any, tmp_path: Path):
    """REPLICA IDENTITY DEFAULT: updates have no before (upserts by after are fine) and the
    final delete has neither image nor key: it cannot be applied and must say why."""
    warehouse = tmp_path / "warehouse"
    lines = json_lines(FLINK / "debezium-postgres-data-replica-identity.txt")
    stats = run(warehouse, "2026-01-01T01:00:00+00:00", lines, PRODUCTS)
    rows = live(spark, warehouse / "inventory" / "products", ["id", "description"])
    assert [r[0] for r in rows] == list(range(101, 112))
    assert stats["apply"]["accounting"]["quarantined"] == 1
    reasons = spark.read.format("delta").load(str(warehouse / "_cdc" / "quarantine")).collect()
    assert [r["reason"] for r in reasons] == ["missing_key"]
    assert '"op":"d"' in reasons[0]["payload"].replace(" ", "")


def paimon_expected(section: str) -> list[list[list[str]]]:
    """The asserted table contents after each file of an expected.txt section."""
    text = (PAIMON / "expected.txt").read_text()
    body = text.split(f"## {section}.", 1)[1].split("\n## ", 1)[0]
    states = []
    for block in body.split("### after")[1:]:
        rows = re.findall(r'"\+I\[(.*?)\]"', block)
        states.append([[v.strip() for v in row.split(", ")] for row in rows])
    return states


def as_text(value: Any) -> str:
    """A value as Paimon's test prints it."""
    return "NULL" if value is None else str(value)


def test_paimon_schema_evolution_without_schemas(spark: Any, tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    expected = paimon_expected("A")
    for number, want in enumerate(expected, start=1):
        lines = json_lines(PAIMON / "schemaevolution" / f"debezium-data-{number}.txt")
        run(warehouse, f"2026-01-01T0{number}:00:00+00:00", lines, PRODUCT)
        frame = spark.read.format("delta").load(str(warehouse / "test" / "product"))
        columns = [c for c in frame.columns if not c.startswith("_cdc_")]
        got = [
            [as_text(v) for v in row]
            for row in live(spark, warehouse / "test" / "product", columns)
        ]
        assert got == want, f"after debezium-data-{number}.txt"


def test_paimon_schema_evolution_with_connect_schemas(spark: Any, tmp_path: Path) -> None:
    """int32 -> int64 widens the column; int64 -> int32 keeps BIGINT; int64 -> string, which
    Paimon refuses ("Cannot convert field age from type BIGINT to STRING"), is quarantined."""
    warehouse = tmp_path / "warehouse"
    expected = paimon_expected("B")
    folder = PAIMON / "schema-include-schemaevolution"
    for number in range(1, 6):
        lines = json_lines(folder / f"debezium-data-{number}.txt")
        stats = run(warehouse, f"2026-01-01T0{number}:00:00+00:00", lines, PRODUCT)
        frame = spark.read.format("delta").load(str(warehouse / "test" / "product"))
        columns = [c for c in frame.columns if not c.startswith("_cdc_")]
        got = [
            [as_text(v) for v in row]
            for row in live(spark, warehouse / "test" / "product", columns)
        ]
        want = expected[min(number, 4) - 1]
        assert got == want, f"after debezium-data-{number}.txt"
        if number >= 3:
            assert dict(frame.dtypes)["age"] == "bigint"
    assert stats["apply"]["accounting"]["quarantined"] == 1
    quarantine = spark.read.format("delta").load(str(warehouse / "_cdc" / "quarantine"))
    [entry] = quarantine.collect()
    assert entry["reason"] == "type_conflict" and "age" in entry["detail"]


def test_paimon_null_value_is_skipped_and_a_schemaless_delete_applies(spark: Any, tmp_path: Path):
    warehouse = tmp_path / "warehouse"
    messages = [
        {
            "topic": "t",
            "partition": 0,
            "offset": 0,
            "key": None,
            "value": json_lines(PAIMON / "nullvalue" / "debezium-data-1.txt")[0],
        },
        {"topic": "t", "partition": 0, "offset": 1, "key": '{"id": 1}', "value": None},
        {
            "topic": "t",
            "partition": 0,
            "offset": 2,
            "key": None,
            "value": json_lines(PAIMON / "nullvalue" / "debezium-data-2.txt")[0],
        },
    ]
    ddl = "CREATE TABLE test.test (id INT PRIMARY KEY, value TEXT)"
    stats = run(
        warehouse, "2026-01-01T01:00:00+00:00", [json.dumps(m) for m in messages], ddl, "kafka"
    )
    assert live(spark, warehouse / "test" / "test", ["id", "value"]) == [[1, "A"], [2, "B"]]
    accounting = stats["apply"]["accounting"]
    assert (accounting["applied"], accounting["control"], accounting["quarantined"]) == (2, 1, 0)
