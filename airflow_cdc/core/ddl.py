"""Table declarations: the user's PostgreSQL ``CREATE TABLE`` statements.

The declared DDL is the source of truth for column types and the primary key; change records
only carry values (DSQL serializes each PostgreSQL type in its own way, see
:mod:`airflow_cdc.core.types`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from airflow_cdc.core.columns import name_problem
from airflow_cdc.core.events import BOOKKEEPING_SCHEMA, TableRef
from airflow_cdc.core.exceptions import DdlError

# sqlglot's type names -> the PostgreSQL type families whose serialization DSQL documents.
_TYPE_FAMILIES = {
    "SMALLINT": "smallint",
    "INT": "integer",
    "BIGINT": "bigint",
    "SMALLSERIAL": "smallint",
    "SERIAL": "integer",
    "BIGSERIAL": "bigint",
    "OID": "oid",
    "FLOAT": "real",
    "DOUBLE": "double",
    "DECIMAL": "numeric",
    "BOOLEAN": "boolean",
    "TEXT": "text",
    "VARCHAR": "text",
    "CHAR": "text",
    "NAME": "text",
    "VARBINARY": "bytea",
    "DATE": "date",
    "TIME": "time",
    "TIMETZ": "timetz",
    "TIMESTAMP": "timestamp",
    "DATETIME": "timestamp",  # YDB's Datetime: ISO 8601 text in UTC, as its Timestamp
    "TIMESTAMPTZ": "timestamptz",
    "INTERVAL": "interval",
    "JSON": "json",
    "JSONB": "json",
    "UUID": "uuid",
}
_USER_DEFINED = {
    "oidvector": "oidvector",
    "name": "text",
    '"char"': "text",
    "char": "text",
    "serial2": "smallint",
    "serial4": "integer",
    "serial8": "bigint",
    "bytes": "bytea",  # CockroachDB's name
    # YDB's wide date types, as its changefeeds write them: integers of days (``Date32``),
    # seconds (``Datetime64``) and microseconds (``Timestamp64``, ``Interval64``).
    "date32": "date32",
    "datetime64": "datetime64",
    "timestamp64": "timestamp",
    "interval64": "interval",
}


@dataclass(frozen=True)
class ColumnSpec:
    """One declared column: its name, PostgreSQL type family and numeric precision."""

    name: str
    pg_type: str
    precision: int | None = None
    scale: int | None = None
    nullable: bool = True


@dataclass(frozen=True)
class TableSpec:
    """A declared table: columns in declaration order and the primary key columns."""

    table: TableRef
    columns: tuple[ColumnSpec, ...]
    primary_key: tuple[str, ...]

    def column(self, name: str) -> ColumnSpec | None:
        for column in self.columns:
            if column.name == name:
                return column
        return None


# The source formats whose databases make ``INT``, ``INTEGER`` and every ``SERIAL`` 64-bit:
# CockroachDB's ``default_int_size`` is 8 and its SERIAL2/SERIAL4 "store 8-byte values" (its
# ``INT4`` is 32-bit, but the parser reads it as ``INT``: it becomes 64-bit too, which holds
# every value).
_INT_IS_INT8 = frozenset({"cockroachdb"})
_SERIALS = ("smallserial", "serial", "bigserial", "serial2", "serial4", "serial8")


def parse_tables(
    ddl: str, default_schema: str = "public", source_format: str | None = None
) -> list[TableSpec]:
    """Parse one or more ``CREATE TABLE`` statements.

    :param ddl: PostgreSQL DDL; statements separated by ``;``.
    :param default_schema: Schema of tables named without one.
    :param source_format: the format of the stream the tables come from, where its database
        gives a type name another size (:data:`_INT_IS_INT8`).
    :raises DdlError: naming the statement, column or type that cannot be used.
    """
    try:
        statements = [s for s in sqlglot.parse(ddl, read="postgres") if s is not None]
    except ParseError as err:
        raise DdlError(f"cannot parse DDL: {err}") from err
    if not statements:
        raise DdlError(f"no CREATE TABLE statement in {ddl[:80]!r}")
    int8 = source_format in _INT_IS_INT8
    specs = [_table_spec(statement, default_schema, int8) for statement in statements]
    seen: set[TableRef] = set()
    for spec in specs:
        if spec.table in seen:
            raise DdlError(f"table {spec.table.qualified!r} is declared twice")
        seen.add(spec.table)
    return specs


# A history table (SCD type 2) sits beside its table, named with this suffix.
HISTORY_SUFFIX = "__history"


def history_ref(table: TableRef) -> TableRef:
    """The history table (SCD type 2) kept beside ``table``: ``<table>__history``."""
    return TableRef(table.schema, table.name + HISTORY_SUFFIX)


def history_tables(
    names: str | list[str] | bool, specs: list[TableSpec], default_schema: str = "public"
) -> list[TableSpec]:
    """The declared tables that keep a history table: ``True`` (or ``"*"``) for all, else the
    tables named (``schema.table``, or ``table`` in ``default_schema``; a comma-separated
    string or a list).

    :raises DdlError: a name that no ``CREATE TABLE`` declares, or a declared table whose name
        a history table would take (``<table>__history``).
    """
    if names is False or names == [] or names == "":
        return []
    if names is True or names == "*":
        chosen = list(specs)
    else:
        wanted = names.split(",") if isinstance(names, str) else list(names)
        by_name = {spec.table: spec for spec in specs}
        chosen = []
        for name in (n.strip() for n in wanted if n.strip()):
            schema, _, table = name.rpartition(".")
            spec = by_name.get(TableRef(schema or default_schema, table))
            if spec is None:
                raise DdlError(f"history table for {name!r}: no CREATE TABLE declares it")
            if spec not in chosen:
                chosen.append(spec)
    declared = {spec.table for spec in specs}
    for spec in chosen:
        taken = history_ref(spec.table)
        if taken in declared:
            raise DdlError(
                f"{spec.table.qualified!r} keeps a history table named {taken.qualified!r},"
                " which the DDL declares as a table too"
            )
    return chosen


# A schema or table name that is safe as one path segment.
PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _plain(table: TableRef) -> TableRef:
    """``table``, if its schema and name can be directories of the warehouse."""
    for part in (table.schema, table.name):
        if not PLAIN_NAME.fullmatch(part):
            raise DdlError(
                f"table {table.qualified!r}: {part!r} is not a plain identifier (letters, digits"
                " and underscores, not starting with a digit); schema and table names become"
                " paths in the warehouse"
            )
    # In any case: PostgreSQL folds an unquoted _CDC to _cdc, and a case-insensitive file
    # system or Spark catalog takes one for the other.
    if table.schema.lower() == BOOKKEEPING_SCHEMA:
        raise DdlError(
            f"table {table.qualified!r}: schema {table.schema!r} is reserved; the warehouse"
            f" keeps the jobs' bookkeeping tables (raw, ledger, cuts...) in {BOOKKEEPING_SCHEMA}/,"
            " where this table would collide with them"
        )
    return table


def _table_spec(statement: exp.Expr, default_schema: str, int8: bool = False) -> TableSpec:
    if not isinstance(statement, exp.Create) or statement.kind != "TABLE":
        raise DdlError(f"expected CREATE TABLE, got {statement.sql(dialect='postgres')[:80]!r}")
    schema_expr = statement.this
    table_expr = schema_expr.this if isinstance(schema_expr, exp.Schema) else schema_expr
    if not isinstance(table_expr, exp.Table) or not isinstance(schema_expr, exp.Schema):
        raise DdlError(f"CREATE TABLE without a column list: {statement.sql()[:80]!r}")
    table = _plain(TableRef(table_expr.db or default_schema, table_expr.name))
    columns: list[ColumnSpec] = []
    primary_key: list[str] = []
    for item in schema_expr.expressions:
        if isinstance(item, exp.ColumnDef):
            column, is_key = _column_spec(item, table, int8)
            columns.append(column)
            if is_key:
                primary_key.append(column.name)
        elif isinstance(item, exp.PrimaryKey):
            primary_key.extend(part.name for part in item.expressions)
    names = [c.name for c in columns]
    _check_names(table, names)
    if not primary_key:
        raise DdlError(f"table {table.qualified!r} has no PRIMARY KEY; changes need a key")
    unknown = [k for k in primary_key if k not in names]
    if unknown:
        raise DdlError(f"table {table.qualified!r}: primary key names unknown columns {unknown}")
    nullable = {c.name: c for c in columns}
    for key in primary_key:
        nullable[key] = ColumnSpec(
            key, nullable[key].pg_type, nullable[key].precision, nullable[key].scale, nullable=False
        )
    return TableSpec(table, tuple(nullable[n] for n in names), tuple(primary_key))


def _check_names(table: TableRef, names: list[str]) -> None:
    """Every declared column name can be a Delta column of its own."""
    if len({n.lower() for n in names}) != len(names):
        raise DdlError(
            f"table {table.qualified!r} declares a column twice (names compare without regard"
            f" to case in Spark): {names}"
        )
    for name in names:
        # A declared name that needs column mapping gets it: the table is created with it.
        problem = name_problem(name, mapping=True)
        if problem is not None:
            raise DdlError(f"table {table.qualified!r}: {problem}")


def _column_spec(
    item: exp.ColumnDef, table: TableRef, int8: bool = False
) -> tuple[ColumnSpec, bool]:
    """One column and whether it is the primary key; ``int8``: ``INT``, ``INTEGER`` and
    the serials are 64-bit (:data:`_INT_IS_INT8`)."""
    kind = item.args.get("kind")
    if not isinstance(kind, exp.DataType):
        raise DdlError(f"{table.qualified}.{item.name}: column has no type")
    family = _family(kind)
    if int8 and (family == "integer" or kind.sql(dialect="postgres").lower() in _SERIALS):
        family = "bigint"
    if family is None:
        raise DdlError(
            f"{table.qualified}.{item.name}: type {kind.sql(dialect='postgres')!r} is not supported"
        )
    precision = scale = None
    if family == "numeric" and kind.expressions:
        params = [int(p.this.this) for p in kind.expressions]
        precision = params[0]
        scale = params[1] if len(params) > 1 else 0
    constraints = [c.kind for c in item.constraints]
    is_key = any(isinstance(c, exp.PrimaryKeyColumnConstraint) for c in constraints)
    not_null = any(
        isinstance(c, exp.NotNullColumnConstraint) and not c.args.get("allow_null")
        for c in constraints
    )
    return ColumnSpec(item.name, family, precision, scale, nullable=not not_null), is_key


def _family(kind: exp.DataType) -> str | None:
    name = kind.this.name if hasattr(kind.this, "name") else str(kind.this)
    if name == "USERDEFINED":
        return _USER_DEFINED.get(kind.sql(dialect="postgres").lower())
    return _TYPE_FAMILIES.get(name.upper())
