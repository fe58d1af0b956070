"""Which stream column names a table may take (airflow_cdc.core.columns)."""

from __future__ import annotations

import pytest

from airflow_cdc.core.columns import COLUMN_LIMIT, INVALID_NAME, admit, name_problem
from airflow_cdc.core.ddl import parse_tables
from airflow_cdc.core.exceptions import DdlError


@pytest.mark.parametrize(
    "name", ["a b", "a,b", "a;b", "a{b", "a}b", "a(b", "a)b", "a=b", "a\nb", "a\tb", ""]
)
def test_names_delta_cannot_store(name: str) -> None:
    assert name_problem(name) is not None
    # With column mapping Delta stores all of them but the empty name.
    assert (name_problem(name, mapping=True) is None) == (name != "")


@pytest.mark.parametrize("name", ["plain", "with`tick", "dotted.name", "ünïcödé", "42", "a-b"])
def test_names_delta_stores(name: str) -> None:
    assert name_problem(name) is None


def test_admission_is_sorted_bounded_and_case_blind() -> None:
    admission = admit(
        current=["id", "name", "extra_old"],
        declared=["id", "name"],
        new=["zeta", "NAME", "alpha", "beta", "_CDC_op", "x y", "id", "__Start_At"],
        limit=3,
    )
    # extra_old already counts: two more fit, in name order.
    assert admission.added == ("alpha", "beta")
    assert set(admission.refused) == {"zeta", "NAME", "_CDC_op", "x y", "__Start_At"}
    assert admission.refused["zeta"][0] == COLUMN_LIMIT
    for name in ("NAME", "_CDC_op", "x y", "__Start_At"):
        assert admission.refused[name][0] == INVALID_NAME


def test_with_column_mapping_only_the_mapping_names_change() -> None:
    new = ["x y", "a,b", "X Y", "_cdc_op", "plain"]
    without = admit(["id"], ["id"], new, limit=10)
    assert without.added == ("plain",)
    assert "column_mapping" in without.refused["x y"][1]
    mapped = admit(["id"], ["id"], new, limit=10, mapping=True)
    assert mapped.added == ("X Y", "a,b", "plain")
    assert set(mapped.refused) == {"x y", "_cdc_op"}  # a case twin, the reserved prefix


def test_two_new_names_differing_in_case_take_one_column() -> None:
    admission = admit(["id"], ["id"], ["Note", "note"], limit=10)
    assert admission.added == ("Note",)
    assert admission.refused["note"][0] == INVALID_NAME


@pytest.mark.parametrize(
    "ddl",
    [
        'CREATE TABLE t (id INT PRIMARY KEY, "" INT)',
        'CREATE TABLE t (id INT PRIMARY KEY, "Id" INT)',
        "CREATE TABLE t (id INT PRIMARY KEY, _cdc_op TEXT)",
        "CREATE TABLE t (id INT PRIMARY KEY, __END_AT TIMESTAMP)",  # a history's column
    ],
)
def test_declared_columns_the_warehouse_cannot_hold_fail_at_submission(ddl: str) -> None:
    with pytest.raises(DdlError):
        parse_tables(ddl)


def test_declared_names_that_need_column_mapping_are_taken() -> None:
    [spec] = parse_tables('CREATE TABLE t (id INT PRIMARY KEY, "order date" DATE, "a,b" INT)')
    assert [c.name for c in spec.columns] == ["id", "order date", "a,b"]
