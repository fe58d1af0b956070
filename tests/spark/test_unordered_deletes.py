"""CockroachDB messages without a timestamp take their place by offset among their key's
messages (the changefeed's per-key ordering), also when a feed mixes them with timestamped
ones: a bare-envelope feed ``WITH updated`` on Kafka sends upserts with ``__crdb__.updated``
and deletes as messages with the key and a null value, which carry no timestamp."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.ledger import STATUSES
from tests.spark.pipeline import land_dump, process

pytestmark = pytest.mark.spark
DDL = "CREATE TABLE items (id BIGINT PRIMARY KEY, name TEXT);"
WALL = 1_767_225_600_000_000_000


def upsert(ident: int, name: str, offset: int, at: int) -> str:
    value = {"id": ident, "name": name, "__crdb__": {"updated": f"{WALL + at}.0000000000"}}
    return json.dumps(
        {"topic": "items", "key": json.dumps([ident]), "value": json.dumps(value), "offset": offset}
    )


def delete(ident: int, offset: int) -> str:
    return json.dumps(
        {"topic": "items", "key": json.dumps([ident]), "value": None, "offset": offset}
    )


def live(spark: Any, warehouse: str) -> dict[int, str]:
    rows = spark.read.format("delta").load(f"{warehouse}/public/items").where("NOT _cdc_deleted")
    return {r["id"]: r["name"] for r in rows.collect()}


def run(warehouse: str, dump: Path, batch: str) -> dict[str, Any]:
    land_dump(warehouse, str(dump), batch, layout="kafka", fmt="cockroachdb")
    stats = process(warehouse, batch, ddl=DDL, fmt="cockroachdb")["apply"]
    accounting = stats["accounting"]
    assert accounting["unprocessed"] == 0
    assert accounting["landed"] == sum(accounting[s] for s in STATUSES)
    return accounting


def test_a_delete_without_timestamp_follows_the_upserts_before_it(
    spark: Any, tmp_path: Path
) -> None:
    dump = tmp_path / "dump"
    dump.mkdir()
    warehouse = str(tmp_path / "warehouse")
    first = [
        upsert(1, "one", 0, at=10),
        delete(1, 1),  # after the upsert: the row goes away
        upsert(2, "two", 2, at=20),
        delete(2, 3),
        upsert(2, "two again", 4, at=40),  # back, newer than the delete
        upsert(3, "three", 5, at=50),  # deleted in the next batch
        upsert(6, "six", 6, at=5),
    ]
    (dump / "p0.ndjson").write_text("\n".join(first) + "\n", encoding="utf-8")
    (dump / "p1.ndjson").write_text(
        "\n".join([upsert(5, "five", 0, at=30), delete(5, 1)]) + "\n", encoding="utf-8"
    )
    accounting = run(warehouse, dump, "b1")
    assert live(spark, warehouse) == {2: "two again", 3: "three", 6: "six"}
    assert accounting["applied"] == 5 and accounting["superseded"] == 4

    with (dump / "p0.ndjson").open("a", encoding="utf-8") as handle:
        handle.write("\n".join([delete(3, 7), delete(4, 8), upsert(6, "six later", 9, at=60)]))
        handle.write("\n")
    accounting = run(warehouse, dump, "b2")
    # Key 3's delete follows the upsert of the earlier batch; key 4 was never there.
    assert live(spark, warehouse) == {2: "two again", 6: "six later"}
    assert accounting["applied"] == 3

    again = process(warehouse, "b2", ddl=DDL, fmt="cockroachdb")["apply"]["accounting"]
    assert again == accounting
    assert live(spark, warehouse) == {2: "two again", 6: "six later"}


def resolved(offset: int, at: int) -> str:
    value = {"resolved": f"{WALL + at}.0000000000"}
    return json.dumps({"topic": "items", "key": None, "value": json.dumps(value), "offset": offset})


SECOND = 1_000_000_000  # the feed's timestamps are nanoseconds
START = dt.datetime.fromtimestamp(WALL // SECOND, dt.UTC)


def cut_batch(tmp_path: Path, name: str, lines: list[str], end_s: int) -> dict[str, Any]:
    """Append ``lines`` to the partition's dump, land them as batch ``name`` and apply it
    with a cut at ``end_s`` seconds past the feed's start; the apply's stats."""
    dump, warehouse = tmp_path / "dump", str(tmp_path / "warehouse")
    dump.mkdir(exist_ok=True)
    with (dump / "p0.ndjson").open("a", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    land_dump(warehouse, str(dump), name, layout="kafka", fmt="cockroachdb")
    options = ("--cut-at", (START + dt.timedelta(seconds=end_s)).isoformat())
    stats = process(warehouse, name, ddl=DDL, fmt="cockroachdb", options=options)["apply"]
    accounting = stats["accounting"]
    assert accounting["unprocessed"] == 0
    assert accounting["landed"] == sum(accounting[s] for s in STATUSES)
    return stats


def test_a_delete_without_timestamp_under_consistent_cuts(spark: Any, tmp_path: Path) -> None:
    """The delete follows the upsert of an earlier batch, which a published cut already
    holds: it is not late (it has no commit time to be late with), so it deletes the row
    rather than being quarantined as ``below_published_cut``; its tombstone takes the time
    of the upsert it follows (maintenance keeps it for the retention past that time, not
    past 1970); and a redelivery of that upsert at a later offset stays older than it."""
    second, wall, warehouse = SECOND, START, str(tmp_path / "warehouse")

    def batch(name: str, lines: list[str], end_s: int) -> dict[str, Any]:
        return cut_batch(tmp_path, name, lines, end_s)

    one = batch("b1", [upsert(1, "one", 0, at=10 * second), resolved(1, 50 * second)], 100)
    assert one["cut"]["published"]["cut_at"] == (wall + dt.timedelta(seconds=50)).isoformat()
    assert live(spark, warehouse) == {1: "one"}
    two = batch("b2", [delete(1, 2), resolved(3, 200 * second)], 300)
    assert two["accounting"]["quarantined"] == 0 and two["accounting"]["applied"] == 1
    assert live(spark, warehouse) == {}
    [tombstone] = (
        spark.read.format("delta")
        .load(f"{warehouse}/public/items")
        .selectExpr("_cdc_deleted", "unix_micros(_cdc_commit_ts) AS committed_us")
        .collect()
    )
    assert tombstone["_cdc_deleted"]
    assert tombstone["committed_us"] == (WALL + 10 * second) // 1000
    three = batch("b3", [upsert(1, "one", 4, at=10 * second), resolved(5, 300 * second)], 400)
    assert live(spark, warehouse) == {}
    assert three["accounting"]["applied"] == 0 and three["accounting"]["quarantined"] == 0


def test_a_redelivered_upsert_after_a_delete_without_timestamp_stays_deleted(
    spark: Any, tmp_path: Path
) -> None:
    """At-least-once: the upsert a null-value delete follows is delivered again at a later
    offset, in the same batch and in the next. Same ``updated``: the same version of the
    row, older than the delete, which was committed after it."""
    dump = tmp_path / "dump"
    dump.mkdir()
    warehouse = str(tmp_path / "warehouse")
    first = [upsert(7, "seven", 0, at=10), delete(7, 1), upsert(7, "seven", 2, at=10)]
    (dump / "p0.ndjson").write_text("\n".join(first) + "\n", encoding="utf-8")
    accounting = run(warehouse, dump, "b1")
    assert live(spark, warehouse) == {} and accounting["applied"] == 1
    (dump / "p1.ndjson").write_text(upsert(7, "seven", 3, at=10) + "\n", encoding="utf-8")
    accounting = run(warehouse, dump, "b2")
    assert live(spark, warehouse) == {} and accounting["applied"] == 0


def test_a_delete_without_timestamp_behind_a_held_change_keeps_its_place_under_a_cut(
    spark: Any, tmp_path: Path
) -> None:
    """Under a cut, a delete without a timestamp comes behind the partition's held change
    (another key's, committed past the cut). The upsert of its key at the next offset is a
    new version, committed before the cut: by the changefeed's per-key order the delete
    was committed before it, so the cut takes both, in offset order, and the row lives
    (held, the delete was released after the upsert was applied, and placed after it). A
    redelivery of the version the delete follows proves nothing: that delete waits."""
    second, wall, warehouse = SECOND, START, str(tmp_path / "warehouse")

    def batch(name: str, lines: list[str], end_s: int) -> dict[str, Any]:
        return cut_batch(tmp_path, name, lines, end_s)

    first = [
        upsert(1, "one", 0, at=10 * second),
        upsert(3, "three", 1, at=10 * second),
        upsert(2, "two", 2, at=150 * second),  # past the cut: held
        delete(1, 3),  # behind it
        upsert(1, "one again", 4, at=60 * second),  # after the delete, before the cut
        delete(3, 5),  # behind the held change too
        upsert(3, "three", 6, at=10 * second),  # a redelivery of the version it follows
        resolved(7, 100 * second),
    ]
    one = batch("b1", first, 200)
    assert one["cut"]["published"]["cut_at"] == (wall + dt.timedelta(seconds=100)).isoformat()
    assert live(spark, warehouse) == {1: "one again", 3: "three"}
    assert one["accounting"]["pending"] == 2  # key 2's upsert, key 3's delete
    two = batch("b2", [resolved(8, 300 * second)], 400)
    assert live(spark, warehouse) == {1: "one again", 2: "two"}
    assert two["accounting"]["quarantined"] == 0
