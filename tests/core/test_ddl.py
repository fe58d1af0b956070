from __future__ import annotations

import pytest

from airflow_cdc.core.ddl import ColumnSpec, parse_tables
from airflow_cdc.core.events import TableRef
from airflow_cdc.core.exceptions import DdlError


def test_reference_example_composite_key() -> None:
    # The DSQL reference's example table.
    (spec,) = parse_tables(
        "CREATE TABLE order_items ( order_id INT, item_id INT, quantity INT, price NUMERIC, "
        "PRIMARY KEY (order_id, item_id) );"
    )
    assert spec.table == TableRef("public", "order_items")
    assert spec.primary_key == ("order_id", "item_id")
    assert spec.column("price") == ColumnSpec("price", "numeric")
    assert spec.column("order_id") == ColumnSpec("order_id", "integer", nullable=False)


def test_every_serialized_type_family() -> None:
    (spec,) = parse_tables(
        """CREATE TABLE shop.t (
            id bigint PRIMARY KEY, a smallint, b int4, c oid, d real, e double precision,
            f numeric(12, 3), g boolean, h varchar(20), i char(3), j text, k bytea, l date,
            m time, n timetz, o timestamp, p timestamptz, q timestamp with time zone,
            r interval, s json, t jsonb, u uuid, v oidvector, w name, x "char"
        )"""
    )
    families = {c.name: c.pg_type for c in spec.columns}
    assert families == {
        "id": "bigint",
        "a": "smallint",
        "b": "integer",
        "c": "oid",
        "d": "real",
        "e": "double",
        "f": "numeric",
        "g": "boolean",
        "h": "text",
        "i": "text",
        "j": "text",
        "k": "bytea",
        "l": "date",
        "m": "time",
        "n": "timetz",
        "o": "timestamp",
        "p": "timestamptz",
        "q": "timestamptz",
        "r": "interval",
        "s": "json",
        "t": "json",
        "u": "uuid",
        "v": "oidvector",
        "w": "text",
        "x": "text",
    }
    assert spec.column("f") == ColumnSpec("f", "numeric", 12, 3)
    assert spec.table == TableRef("shop", "t")


def test_ydb_type_names_take_the_family_of_the_form_its_changefeeds_write() -> None:
    """YDB's changefeeds write Date, Datetime and Timestamp as ISO 8601 text, Date32 as an
    integer of days, Datetime64 of seconds, Timestamp64 and Interval64 of microseconds
    (YDB's ``change_record_cdc_serializer.cpp``): each name takes the family that reads
    that form."""
    (spec,) = parse_tables(
        """CREATE TABLE t (
            id Int64 PRIMARY KEY, a Date, b Datetime, c Timestamp, d Date32, e Datetime64,
            f Timestamp64, g Interval64, h Interval
        )"""
    )
    assert {c.name: c.pg_type for c in spec.columns} == {
        "id": "bigint",
        "a": "date",
        "b": "timestamp",
        "c": "timestamp",
        "d": "date32",
        "e": "datetime64",
        "f": "timestamp",
        "g": "interval",
        "h": "interval",
    }


def test_several_statements() -> None:
    specs = parse_tables("CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (k text PRIMARY KEY)")
    assert [s.table.name for s in specs] == ["a", "b"]


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("CREATE TABLE t (id int)", "no PRIMARY KEY"),
        ("CREATE TABLE t (id int, PRIMARY KEY (nope))", "unknown columns"),
        ("CREATE TABLE t (id int PRIMARY KEY, g geometry)", "not supported"),
        ("SELECT 1", "expected CREATE TABLE"),
        ("CREATE TABLE t (id int PRIMARY KEY); CREATE TABLE t (id int PRIMARY KEY)", "twice"),
        ("", "no CREATE TABLE"),
    ],
)
def test_unusable_ddl_is_rejected_clearly(ddl: str, message: str) -> None:
    with pytest.raises(DdlError, match=message):
        parse_tables(ddl)


@pytest.mark.parametrize(
    "ddl",
    [
        'CREATE TABLE "../../tmp".x (id INT PRIMARY KEY)',
        'CREATE TABLE public."x/y" (id INT PRIMARY KEY)',
        'CREATE TABLE public."a b" (id INT PRIMARY KEY)',
        'CREATE TABLE public."..".t (id INT PRIMARY KEY)',
        'CREATE TABLE "1abc".t (id INT PRIMARY KEY)',
    ],
)
def test_names_that_would_leave_their_directory_are_rejected(ddl: str) -> None:
    with pytest.raises(DdlError, match="not a plain identifier"):
        parse_tables(ddl)


@pytest.mark.parametrize(
    ("ddl", "default_schema"),
    [
        ("CREATE TABLE _cdc.ledger (id INT PRIMARY KEY)", "public"),
        ("CREATE TABLE _CDC.orders (id INT PRIMARY KEY)", "public"),
        ('CREATE TABLE "_Cdc".orders (id INT PRIMARY KEY)', "public"),
        ("CREATE TABLE orders (id INT PRIMARY KEY)", "_cdc"),
    ],
)
def test_the_bookkeeping_schema_is_refused(ddl: str, default_schema: str) -> None:
    """The warehouse keeps the jobs' bookkeeping tables in ``_cdc/``, beside one directory per
    schema: a declared table there would collide with them (in any case: PostgreSQL folds an
    unquoted name, and a case-insensitive file system or catalog takes one for the other)."""
    with pytest.raises(DdlError, match=r"schema '_\w+' is reserved; .* bookkeeping"):
        parse_tables(ddl, default_schema)
    assert parse_tables("CREATE TABLE cdc.t (id INT PRIMARY KEY)")[0].table.schema == "cdc"


def test_cockroachdb_int_is_64_bit_as_its_default_int_size_makes_it() -> None:
    """CockroachDB's INT, INTEGER and every SERIAL are INT8 (``default_int_size`` 8; "SERIAL2
    and SERIAL4 are the same as SERIAL and store 8-byte values"; its seed document's tables
    key on ``id INT``, and ``unique_rowid()`` fills them past 2^31); the same DDL for another
    source keeps PostgreSQL's sizes. CockroachDB's BYTES is bytea."""
    ddl = (
        "CREATE TABLE t (id INT PRIMARY KEY, a INTEGER, b SERIAL, c INT2, d INT8, e BYTES,"
        " f SMALLSERIAL, g SERIAL2, h SERIAL4)"
    )
    (cockroach,) = parse_tables(ddl, source_format="cockroachdb")
    assert {c.name: c.pg_type for c in cockroach.columns} == {
        "id": "bigint",
        "a": "bigint",
        "b": "bigint",
        "c": "smallint",
        "d": "bigint",
        "e": "bytea",
        "f": "bigint",
        "g": "bigint",
        "h": "bigint",
    }
    (postgres,) = parse_tables(ddl)
    assert [c.pg_type for c in postgres.columns] == [
        "integer",
        "integer",
        "integer",
        "smallint",
        "bigint",
        "bytea",
        "smallint",
        "smallint",
        "integer",
    ]
