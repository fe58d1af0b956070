"""Helpers that every JSON format parser shares: strict field access with stable reasons."""

from __future__ import annotations

import json
from typing import Any

from airflow_cdc.core.exceptions import RecordFormatError
from airflow_cdc.core.ordering import sequence_key


def load_json(text: str | None) -> Any:
    """Parse a message's JSON text; ``malformed_json`` when it is not JSON."""
    if text is None:
        raise RecordFormatError("malformed_json", "the message has no value")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        raise RecordFormatError("malformed_json", str(err)) from err


def load_object(text: str | None) -> dict[str, Any]:
    doc = load_json(text)
    if not isinstance(doc, dict):
        raise RecordFormatError("malformed_json", f"expected a JSON object, got {kind(doc)}")
    return doc


def require(doc: dict[str, Any], field: str, expected: type) -> Any:
    value = doc.get(field)
    if expected is int and isinstance(value, bool):
        value = None
    if not isinstance(value, expected):
        raise RecordFormatError(
            "missing_field", f"{field} must be {expected.__name__}, got {kind(value)}"
        )
    return value


def integer(value: Any, name: str) -> int:
    """An integer given as a JSON number or as a decimal string."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit() and value.isascii():
        return int(value)
    raise RecordFormatError("missing_field", f"{name} must be an integer, got {value!r}")


def optional_integer(value: Any, name: str) -> int | None:
    return None if value is None else integer(value, name)


def image(value: Any, name: str) -> dict[str, Any] | None:
    """A row image: an object, or ``None`` for null (and for the empty object ``{}``)."""
    if value is None or isinstance(value, dict):
        return value or None
    raise RecordFormatError("invalid_image", f"{name} must be an object or null, got {kind(value)}")


# The sequence prefix of a record that carries no commit position at all (a CockroachDB
# message without ``updated``, a YDB record without ``ts``): only its place in its partition
# orders it, among the messages of its key (see spark_jobs.resolve.place_unordered).
UNORDERED = sequence_key(0) + "~"


def position_sequence(position: str, *parts: int) -> str:
    """Sequence of a record ordered by ``parts`` (if any), then by its place in its partition."""
    return f"{sequence_key(*parts)}~{position}" if parts else UNORDERED + position


def kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
