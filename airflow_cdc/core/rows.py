"""Turning a change's JSON images into a typed row of a declared table."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from airflow_cdc.core.ddl import TableSpec
from airflow_cdc.core.events import DELETE
from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.types import decode, decode_undeclared


@dataclass(frozen=True)
class DecodedRow:
    """A change as a typed row: ``values`` holds every declared column (``None`` if absent).

    ``key_text`` is a canonical text of the primary key, for grouping changes per key.
    ``extra`` holds columns the DDL does not declare (as text); ``special`` the values that
    only a marker can hold (``NaN`` in a numeric, ``infinity`` dates and timestamps).
    """

    key_text: str
    is_delete: bool
    values: dict[str, Any]
    extra: dict[str, str | None]
    special: dict[str, str]


def decode_row(spec: TableSpec, kind: str, before: Any, after: Any) -> DecodedRow:
    """Decode one change of ``spec``'s table.

    A delete is keyed by its ``before`` image (the DSQL rule: "for deletes, the primary key
    columns appear in the before field"); an upsert is the full ``after`` image.

    :raises RecordFormatError: ``missing_key`` or ``decode_error`` with the column named.
    """
    is_delete = kind == DELETE
    image = before if is_delete else after
    if not isinstance(image, dict):
        name = "before" if is_delete else "after"
        raise RecordFormatError("missing_image", f"{name} image is {type(image).__name__}")
    missing = [k for k in spec.primary_key if image.get(k) is None]
    if missing:
        raise RecordFormatError("missing_key", f"key columns {missing} are absent or null")
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
    extra: dict[str, str | None] = {}
    if not is_delete:
        declared = {c.name for c in spec.columns}
        extra = {k: decode_undeclared(v) for k, v in image.items() if k not in declared}
    key_text = json.dumps([image[k] for k in spec.primary_key], sort_keys=True, default=str)
    return DecodedRow(key_text, is_delete, values, extra, special)
