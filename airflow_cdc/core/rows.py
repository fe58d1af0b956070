"""Turning a change's JSON images into a typed row of a declared table."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from airflow_cdc.core.ddl import TableSpec
from airflow_cdc.core.events import DELETE
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.types import (
    decode,
    decode_undeclared,
    family_of,
    in_column_unit,
    widen,
)


@dataclass(frozen=True)
class DecodedRow:
    """A change as a typed row: ``values`` holds every declared column (``None`` if absent).

    ``key_text`` is a canonical text of the primary key, for grouping changes per key.
    ``extra`` holds columns the DDL does not declare (as text); ``special`` the values that
    only a marker can hold (``NaN`` in a numeric, ``infinity`` dates and timestamps).
    ``set_columns`` names the columns a partial update sets (``None``: the whole row).
    """

    key_text: str
    is_delete: bool
    values: dict[str, Any]
    extra: dict[str, str | None]
    special: dict[str, str]
    set_columns: list[str] | None = None


def decode_row(
    spec: TableSpec,
    kind: str,
    before: Any,
    after: Any,
    key: dict[str, Any] | list[Any] | None = None,
    partial: bool = False,
    types: dict[str, str] | None = None,
) -> DecodedRow:
    """Decode one change of ``spec``'s table.

    A delete is keyed by its ``before`` image (the DSQL rule: "for deletes, the primary key
    columns appear in the before field"); an upsert is the full ``after`` image, or with
    ``partial`` only the columns it changes. ``key`` adds the primary key where the record
    carries it apart from the images: by name, or by position in the declared key. ``types``
    are the record's own column types, checked against the table's (a change that would lose
    data is a ``type_conflict``).

    :raises RecordFormatError: ``missing_key``, ``key_mismatch``, ``type_conflict``,
        ``decode_error`` with the column named, or ``special_key``: a key column holds a
        special value (NaN, infinity) that its type stores only as null, and a null key
        matches no row.
    """
    is_delete = kind == DELETE
    image = before if is_delete else after
    if image is None and key is not None and is_delete:
        image = {}  # a delete names its row by the key alone; an upsert needs its image
    if image is None and is_delete:
        raise RecordFormatError(
            "missing_key", "the delete has no before image and the record carries no key"
        )
    if not isinstance(image, dict):
        name = "before" if is_delete else "after"
        raise RecordFormatError("missing_image", f"{name} image is {type(image).__name__}")
    image = _with_key(spec, image, key)
    missing = [k for k in spec.primary_key if image.get(k) is None]
    if missing:
        raise RecordFormatError("missing_key", f"key columns {missing} are absent or null")
    if types:
        _check_types(spec, types, image)
        image = {
            name: in_column_unit(column, types.get(name), value)
            if (column := spec.column(name)) is not None
            else value
            for name, value in image.items()
        }
    values: dict[str, Any] = {}
    special: dict[str, str] = {}
    for column in spec.columns:
        if is_delete and column.name not in spec.primary_key:
            values[column.name] = None
            continue
        decoded = decode(column, image.get(column.name))
        values[column.name] = decoded.value
        if decoded.special is not None:
            special[column.name] = decoded.special
    held = {k: special[k] for k in spec.primary_key if k in special}
    if held:
        raise RecordFormatError("special_key", special_key_message(held))
    extra: dict[str, str | None] = {}
    if not is_delete:
        declared = {c.name for c in spec.columns}
        extra = {k: decode_undeclared(v) for k, v in image.items() if k not in declared}
    key_text = json.dumps([image[k] for k in spec.primary_key], sort_keys=True, default=str)
    set_columns = None
    if partial and not is_delete:
        set_columns = sorted(k for k in image if k not in spec.primary_key)
    return DecodedRow(key_text, is_delete, values, extra, special, set_columns)


# Why a key column cannot hold a special value.
SPECIAL_KEY = "a key column's type stores it only as null, and a null key matches no row"


def special_key_message(held: dict[str, str]) -> str:
    """Why a change whose key columns hold the special values ``held`` (by column) is
    refused."""
    named = ", ".join(f"{name} holds {value}" for name, value in held.items())
    return f"{named}: {SPECIAL_KEY}"


def _with_key(
    spec: TableSpec, image: dict[str, Any], key: dict[str, Any] | list[Any] | None
) -> dict[str, Any]:
    """``image`` with the key columns it lacks (a delete without a before image, YDB's update)
    from the record's ``key``. The image is the row: a message key may not be the primary key
    at all (CockroachDB's ``key_column``), so it is not read while the row carries its own."""
    lacking = [k for k in spec.primary_key if image.get(k) is None]
    if not lacking:
        return image
    own_key = _key_columns(spec, key)
    return {**image, **{k: own_key[k] for k in lacking if k in own_key}}


def _key_columns(spec: TableSpec, key: dict[str, Any] | list[Any] | None) -> dict[str, Any]:
    if key is None:
        return {}
    if isinstance(key, dict):
        return {k: v for k, v in key.items() if k in spec.primary_key}
    if len(key) != len(spec.primary_key):
        raise RecordFormatError(
            "key_mismatch",
            f"key {key!r} has {len(key)} components, {spec.table.qualified} declares"
            f" {list(spec.primary_key)}",
        )
    return dict(zip(spec.primary_key, key, strict=True))


def type_conflicts(spec: TableSpec, types: dict[str, str]) -> dict[str, str]:
    """The columns whose type in a record's own schema (``types``) does not fit the table's
    column without losing data, with a message for each."""
    conflicts = {}
    for name, incoming in types.items():
        column = spec.column(name)
        if column is None:
            continue
        try:
            fits = widen(column, incoming) == column
        except ValueError:
            fits = False
        if not fits:
            conflicts[name] = (
                f"column {name} is {family_of(column)} in the table but {incoming} in the"
                " record; converting would lose data"
            )
    return conflicts


def _check_types(spec: TableSpec, types: dict[str, str], image: dict[str, Any]) -> None:
    conflicts = type_conflicts(spec, types)
    for name in image:
        if name in conflicts:
            raise RecordFormatError("type_conflict", conflicts[name])
