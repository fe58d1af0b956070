"""Column names from the stream are data: a change bringing a column the table cannot take is
quarantined with the reason, and the batch goes on (it used to fail, and fail again on every
retry, at the ALTER TABLE)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cdc_demo.dsql_stream import write_ndjson
from tests.spark.pipeline import land_dump, process

pytestmark = pytest.mark.spark
DDL = "CREATE TABLE public.accounts (id BIGINT PRIMARY KEY, name TEXT);"
BASE_NS = 1_767_225_600_000_000_000
LIMITS = ("--max-added-columns", "2", "--max-columns-per-record", "10")


def record(ident: int, extra: dict[str, Any], ts_ns: int, table: str = "accounts") -> str:
    """A ``full`` insert as the DSQL document shapes it, with ``extra`` columns."""
    return json.dumps(
        {
            "type": "full",
            "op": "c",
            "before": None,
            "after": {"id": ident, "name": f"n{ident}", **extra},
            "source": {
                "version": "1.0",
                "ts_ms": ts_ns // 1_000_000,
                "ts_ns": ts_ns,
                "txId": f"tx{ident}",
                "schema": "public",
                "table": table,
                "db": "postgres",
                "cluster": "c1",
            },
            "ts_ms": ts_ns // 1_000_000,
            "ts_ns": ts_ns,
        }
    )


def run(spark: Any, tmp_path: Path, batch: str, records: list[str]) -> dict[str, Any]:
    dump = tmp_path / f"dump-{batch}"
    write_ndjson(records, str(dump), files=1)
    warehouse = str(tmp_path / "warehouse")
    land_dump(warehouse, str(dump), batch, source=f"s{batch}")
    return process(warehouse, batch, ddl=DDL, source=f"s{batch}", options=LIMITS)["apply"]


def quarantined(spark: Any, tmp_path: Path, batch: str) -> dict[int, str]:
    rows = (
        spark.read.format("delta")
        .load(str(tmp_path / "warehouse" / "_cdc" / "quarantine"))
        .where(f"batch_id = '{batch}'")
        .collect()
    )
    return {json.loads(r["payload"])["after"]["id"]: r["detail"] for r in rows}


def test_columns_the_table_cannot_take_quarantine_their_change(spark: Any, tmp_path: Path) -> None:
    hostile = {
        2: {"a b": 1},
        3: {"Name": "x"},  # the declared column "name", differing only in case
        4: {"_cdc_deleted": True},
        5: {"t,u": 1, "x(y)": 3, "p=q": 4, "r;s": 5, "t{u}": 6, "n\nl": 7, "t\tab": 8},
    }
    records = [
        record(1, {"note": "kept", "v`w": "tick"}, BASE_NS),
        *(record(i, extra, BASE_NS + i) for i, extra in hostile.items()),
        record(6, {"x1": 1}, BASE_NS + 6),  # note and v`w filled the limit of 2
        record(7, {f"c{i}": i for i in range(9)}, BASE_NS + 7),  # 11 columns, limit 10
    ]
    stats = run(spark, tmp_path, "b1", records)

    accounting = stats["accounting"]
    assert accounting["landed"] == 7 and accounting["unprocessed"] == 0
    assert accounting["applied"] == 1 and accounting["quarantined"] == 6
    table = spark.read.format("delta").load(str(tmp_path / "warehouse" / "public" / "accounts"))
    assert [(r["id"], r["note"], r["v`w"]) for r in table.collect()] == [(1, "kept", "tick")]
    added = [c for c in table.columns if not c.startswith("_cdc_") and c not in ("id", "name")]
    assert sorted(added) == ["note", "v`w"]
    reasons = quarantined(spark, tmp_path, "b1")
    assert set(reasons) == {2, 3, 4, 5, 6, 7}
    for ident in (2, 3, 4, 5):
        assert reasons[ident].startswith("invalid_column_name: "), reasons[ident]
    assert "differs only in case" in reasons[3]
    assert "'_cdc_'" in reasons[4]
    assert reasons[6].startswith("column_limit: column 'x1'"), reasons[6]
    assert reasons[7] == "too_many_columns: the image has 11 columns; the limit is 10"
    # The run's stats count them as the quarantine holds them, admission's reasons too.
    by_reason = Counter(text.split(":", 1)[0] for text in reasons.values())
    assert stats["tables"]["public.accounts"]["quarantined_by_reason"] == dict(by_reason)

    again = process(str(tmp_path / "warehouse"), "b1", ddl=DDL, source="sb1", options=LIMITS)[
        "apply"
    ]
    assert again["accounting"] == accounting


def test_names_refused_are_many(spark: Any, tmp_path: Path) -> None:
    """More refused names than the job words one by one: each change still gets a reason."""
    records = [record(i, {f"bad name {i}": i}, BASE_NS + i) for i in range(1, 1006)]
    stats = run(spark, tmp_path, "b2", records)
    assert stats["accounting"]["quarantined"] == 1005
    reasons = quarantined(spark, tmp_path, "b2")
    assert len(reasons) == 1005
    assert all(r.startswith("invalid_column_name: ") for r in reasons.values())
    assert "bad name 1005" in reasons[1005]


def test_a_dotted_column_beside_a_refused_one(spark: Any, tmp_path: Path) -> None:
    """Names are columns, never paths into structs: a column holding a dot is taken, and a
    refused name beside it in the batch quarantines only its own change."""
    stats = run(
        spark, tmp_path, "b3", [record(1, {"a.b": "dot"}, BASE_NS), record(2, {"x y": 2}, BASE_NS)]
    )
    assert stats["accounting"]["applied"] == 1 and stats["accounting"]["quarantined"] == 1
    table = spark.read.format("delta").load(str(tmp_path / "warehouse" / "public" / "accounts"))
    assert [(r["id"], r["a.b"]) for r in table.collect()] == [(1, "dot")]
    assert list(quarantined(spark, tmp_path, "b3")) == [2]


def mapping_mode(spark: Any, path: Path) -> str | None:
    from delta.tables import DeltaTable

    properties = DeltaTable.forPath(spark, str(path)).detail().first()["properties"]
    return properties.get("delta.columnMapping.mode")


def test_column_mapping_takes_the_names_delta_stores_only_with_it(
    spark: Any, tmp_path: Path
) -> None:
    """With ``--column-mapping`` a name holding a space or ``,;{}()=`` is a column: the table's
    column mapping is turned on when such a column is added, not before. A table that declares
    such a name is created with column mapping."""
    ddl = DDL + ' CREATE TABLE public.events (id BIGINT PRIMARY KEY, "order date" DATE);'
    warehouse = tmp_path / "warehouse"
    options = ("--column-mapping",)
    batches = {
        "m1": [
            record(1, {"note": "plain"}, BASE_NS),
            record(1, {"order date": 20455}, BASE_NS + 1, table="events"),  # epoch days
        ],
        "m2": [
            record(2, {"order date": "2026-01-02", "a,b;c": "odd"}, BASE_NS + 2),
            record(3, {"_cdc_op": "x"}, BASE_NS + 3),  # the pipeline's own prefix: still refused
        ],
    }
    accounts, events = warehouse / "public" / "accounts", warehouse / "public" / "events"
    stats = {}
    for batch, records in batches.items():
        write_ndjson(records, str(tmp_path / f"dump-{batch}"), files=1)
        land_dump(str(warehouse), str(tmp_path / f"dump-{batch}"), batch, source="mapped")
        stats[batch] = process(str(warehouse), batch, ddl=ddl, source="mapped", options=options)
        if batch == "m1":
            assert mapping_mode(spark, accounts) is None
            assert mapping_mode(spark, events) == "name"

    assert stats["m2"]["apply"]["accounting"]["applied"] == 1, quarantined(spark, tmp_path, "m2")
    assert stats["m2"]["apply"]["accounting"]["quarantined"] == 1
    assert mapping_mode(spark, accounts) == "name"
    rows = spark.read.format("delta").load(str(accounts)).orderBy("id").collect()
    assert [(r["id"], r["note"], r["order date"], r["a,b;c"]) for r in rows] == [
        (1, "plain", None, None),
        (2, None, "2026-01-02", "odd"),
    ]
    assert "'_cdc_'" in quarantined(spark, tmp_path, "m2")[3]
    [event] = spark.read.format("delta").load(str(events)).collect()
    assert str(event["order date"]) == "2026-01-02"


def test_a_change_is_quarantined_for_its_least_refused_name_in_every_format(
    spark: Any, tmp_path: Path
) -> None:
    """A change carrying two refused names is quarantined for the one that sorts first, as
    admission takes names: whether its image was read with its keys sorted (DSQL) or in the
    record's text order (Debezium, which the core parses)."""
    extra = {"zz bad": 1, "aa bad": 2}  # the text's order is the reverse of the sorted one
    dsql = tmp_path / "dump-dsql"
    write_ndjson([record(1, extra, BASE_NS)], str(dsql), files=1)
    change = {
        "before": None,
        "after": {"id": 1, "name": "n1", **extra},
        "source": {
            "connector": "postgresql",
            "schema": "public",
            "table": "accounts",
            "lsn": 1000,
            "txId": 7,
            "ts_ms": BASE_NS // 1_000_000,
        },
        "op": "c",
    }
    message = {
        "topic": "cdc.public.accounts",
        "partition": 0,
        "offset": 0,
        "timestamp": BASE_NS // 1_000_000,
        "key": json.dumps({"id": 1}),
        "value": json.dumps(change),
    }
    kafka = tmp_path / "dump-debezium"
    kafka.mkdir()
    (kafka / "part-0.ndjson").write_text(json.dumps(message) + "\n", "utf-8")

    details = {}
    for fmt, dump, layout in (("dsql", dsql, "kinesis"), ("debezium", kafka, "kafka")):
        warehouse = str(tmp_path / fmt)
        land_dump(warehouse, str(dump), "b5", source=fmt, layout=layout, fmt=fmt)
        stats = process(warehouse, "b5", ddl=DDL, source=fmt, fmt=fmt, options=LIMITS)["apply"]
        assert stats["accounting"]["quarantined"] == 1, stats["accounting"]
        [row] = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine").collect()
        details[fmt] = row["detail"]
    assert "aa bad" in details["dsql"] and "zz bad" not in details["dsql"]
    assert details["debezium"] == details["dsql"]
