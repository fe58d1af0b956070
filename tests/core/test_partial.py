"""Folding YDB UPDATES-mode partial updates of one key."""

from __future__ import annotations

from typing import Any

from airflow_cdc.core.partial import DUPLICATE, SUPERSEDED, fold

COLUMNS = ["name", "qty"]


def change(seq: str, set_columns: list[str] | None, **values: Any) -> dict[str, Any]:
    return {
        "id": 1,
        "name": values.get("name"),
        "qty": values.get("qty"),
        "_cdc_sequence": seq,
        "_cdc_record_id": f"r{seq}",
        "_cdc_members": [f"r{seq}"],
        "_cdc_set_columns": set_columns,
        "_cdc_extra": values.get("extra", {}),
        "_cdc_special_values": {},
        "_cdc_is_delete": values.get("deleted", False),
        "_cdc_op": "u",
        "_cdc_commit_ts": None,
    }


def test_updates_after_a_full_image_set_only_their_columns():
    result, losers = fold(
        [
            change("3", ["qty"], qty=7),
            change("1", None, name="a", qty=1),
            change("2", ["name"], name="b"),
        ],
        COLUMNS,
    )
    assert (result["id"], result["name"], result["qty"]) == (1, "b", 7)
    assert result["_cdc_set_columns"] is None  # a full row: the base was in the batch
    assert result["_cdc_sequence"] == "3" and result["_cdc_members"] == ["r1", "r2", "r3"]
    assert losers == []


def test_without_a_full_image_the_result_is_partial_and_keeps_the_key():
    result, _ = fold([change("2", ["name"], name="b"), change("1", ["qty"], qty=3)], COLUMNS)
    assert result["id"] == 1 and result["_cdc_set_columns"] == ["name", "qty"]
    assert (result["name"], result["qty"]) == ("b", 3)


def test_changes_before_the_newest_full_image_are_superseded_and_repeats_duplicates():
    result, losers = fold(
        [
            change("1", ["qty"], qty=3),
            change("2", None, deleted=True),
            change("2", None, deleted=True),
            change("3", ["name"], name="new", extra={"note": "x"}),
        ],
        COLUMNS,
    )
    statuses = sorted((loser["_cdc_sequence"], status) for loser, status, _ in losers)
    assert statuses == [("1", SUPERSEDED), ("2", DUPLICATE)]
    # Re-created after the delete: only what the update set, the rest null.
    assert (result["name"], result["qty"], result["_cdc_is_delete"]) == ("new", None, False)
    assert result["_cdc_extra"] == {} and result["_cdc_set_columns"] is None


def test_an_undeclared_column_set_by_a_partial_update_is_kept():
    result, _ = fold(
        [change("1", None, name="a"), change("2", ["note"], extra={"note": "x"})], COLUMNS
    )
    assert result["_cdc_extra"] == {"note": "x"} and result["name"] == "a"
