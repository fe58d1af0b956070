"""Partial updates folded in Spark against the core's ``partial.fold``, key by key.

Random change lists per key (full images, deletes, partial updates of declared and undeclared
columns, special values, repeated sequences, arrival in any order) go through
``spark_jobs.resolve.fold_partials`` and through the core; the folded change of every key and
the status and reason of every loser must agree.
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from typing import Any

import pytest

from airflow_cdc.core.partial import fold
from spark_jobs.resolve import fold_partials

pytestmark = pytest.mark.spark

# Column names are data: a dot, and names like the fold's working columns.
SCHEMA = (
    "id BIGINT, a STRING, b BIGINT, c DECIMAL(10,2), `d.e` STRING, _f_pos STRING,"
    " _cdc_is_delete BOOLEAN,"
    " _cdc_sequence STRING, _cdc_op STRING, _cdc_commit_ts TIMESTAMP, _cdc_record_id STRING,"
    " _cdc_members ARRAY<STRUCT<record_id: STRING, batch_id: STRING>>, _cdc_partition STRING,"
    " _cdc_position STRING, _cdc_extra MAP<STRING, STRING>,"
    " _cdc_special_values MAP<STRING, STRING>, _cdc_set_columns ARRAY<STRING>"
)
COLUMNS = ["a", "b", "c", "d.e", "_f_pos"]
NAMES = [
    "id",
    *COLUMNS,
    "_cdc_is_delete",
    "_cdc_sequence",
    "_cdc_op",
    "_cdc_commit_ts",
    "_cdc_record_id",
    "_cdc_members",
    "_cdc_partition",
    "_cdc_position",
    "_cdc_extra",
    "_cdc_special_values",
    "_cdc_set_columns",
]


def changes(seed: int, keys: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    result = []
    serial = 0
    for key in range(keys):
        for _ in range(rng.randint(1, 7)):
            serial += 1
            kind = rng.choice(["full", "delete", "partial", "partial", "partial"])
            sets = None
            if kind == "partial":
                sets = sorted(rng.sample([*COLUMNS, "x", "y"], rng.randint(1, 3)))
            extra: dict[str, str] | None = {
                n: f"e{serial}" for n in ("x", "y") if rng.random() < 0.6
            }
            if rng.random() < 0.1:
                extra = None
            elif rng.random() < 0.1:  # a declared name carried as undeclared: the extra wins
                extra = {**(extra or {}), "a": f"e{serial}"}
            specials = {"b": "infinity"} if rng.random() < 0.2 else {}

            result.append(
                {
                    "id": key,
                    "a": rng.choice([None, f"a{serial}"]),
                    "b": rng.choice([None, serial]),
                    "c": Decimal(serial) / 4,
                    "d.e": rng.choice([None, f"d{serial}"]),
                    "_f_pos": f"f{serial}",
                    "_cdc_is_delete": kind == "delete",
                    "_cdc_sequence": f"{rng.randint(1, 6):020d}",
                    "_cdc_op": {"full": "u", "delete": "d", "partial": "u"}[kind],
                    "_cdc_commit_ts": dt.datetime(2026, 1, 1) + dt.timedelta(seconds=serial),
                    "_cdc_record_id": f"r{serial:05d}",
                    "_cdc_members": [(f"r{serial:05d}", "b1")],
                    "_cdc_partition": f"p{serial % 3}",
                    "_cdc_position": f"{serial:08d}",
                    "_cdc_extra": extra,
                    "_cdc_special_values": specials,
                    "_cdc_set_columns": sets,
                }
            )
    rng.shuffle(result)
    return result


def comparable(row: dict[str, Any]) -> dict[str, Any]:
    view = dict(row)
    view["_cdc_members"] = [tuple(m) for m in view["_cdc_members"]]
    for name in ("_cdc_extra", "_cdc_special_values"):  # NULL stays NULL: the core's is {}
        view[name] = None if view[name] is None else dict(view[name])
    return view


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_spark_folds_partial_updates_as_the_core_does(spark: Any, seed: int) -> None:
    rows = changes(seed, 60)
    frame = spark.createDataFrame([tuple(r[n] for n in NAMES) for r in rows], SCHEMA)
    winners, losers = fold_partials(frame, ["id"])
    want_winners: dict[int, dict[str, Any]] = {}
    want_losers = set()
    for key in sorted({r["id"] for r in rows}):
        mine = [
            {
                **r,
                "_cdc_members": [{"record_id": m[0], "batch_id": m[1]} for m in r["_cdc_members"]],
            }
            for r in rows
            if r["id"] == key
        ]
        result, lost = fold(mine, COLUMNS)
        result["_cdc_members"] = [(m["record_id"], m["batch_id"]) for m in result["_cdc_members"]]
        want_winners[key] = comparable(result)
        for loser, status, reason in lost:
            for member in loser["_cdc_members"]:
                want_losers.add((member["record_id"], status, reason))
    have_winners = {row["id"]: comparable(row.asDict(recursive=False)) for row in winners.collect()}
    mismatches = {
        key: {
            n: (want[n], have_winners.get(key, {}).get(n))
            for n in NAMES
            if want[n] != have_winners.get(key, {}).get(n)
        }
        for key, want in want_winners.items()
        if want != have_winners.get(key)
    }
    assert mismatches == {}
    have_losers = {(r["record_id"], r["status"], r["reason"]) for r in losers.collect()}
    assert have_losers == want_losers
    # Both kinds of fold happened: onto a base (a full result) and without one (partial).
    folded = [r["_cdc_set_columns"] for r in want_winners.values()]
    assert len(want_losers) > 20 and None in folded and any(folded)
