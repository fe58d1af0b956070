"""Folding partial updates (YDB's UPDATES mode) of one key into one change.

A partial update sets only the columns it names; the others keep the values they had. The
changes of one key, in sequence order, fold into one: the newest full image (or delete) is the
base, and every partial update after it overwrites the columns it sets. Changes before the base
are superseded; a change with the sequence of the one before it is a duplicate delivery.
Without a base the result is itself partial: it sets only the columns some update set.

Changes are dicts of staged columns plus the ``_cdc_*`` metadata of
:mod:`spark_jobs.resolve`; ``_cdc_set_columns`` is ``None`` for a full image.
"""

from __future__ import annotations

from typing import Any

SUPERSEDED = "superseded"
DUPLICATE = "duplicate"


def fold(
    changes: list[dict[str, Any]], columns: list[str]
) -> tuple[dict[str, Any], list[tuple[dict[str, Any], str, str]]]:
    """(folded change, [(loser, status, reason)]) of one key's ``changes``.

    :param columns: The table's non-key columns.
    """
    ordered = sorted(changes, key=lambda c: (c["_cdc_sequence"], c["_cdc_record_id"]))
    unique: list[dict[str, Any]] = []
    losers: list[tuple[dict[str, Any], str, str]] = []
    for change in ordered:
        if unique and unique[-1]["_cdc_sequence"] == change["_cdc_sequence"]:
            losers.append((change, DUPLICATE, "same sequence again in batch"))
        else:
            unique.append(change)
    fulls = [i for i, c in enumerate(unique) if c["_cdc_set_columns"] is None]
    start = fulls[-1] if fulls else 0
    newest = unique[-1]
    losers += [
        (c, SUPERSEDED, f"newer change in batch: {newest['_cdc_sequence']}") for c in unique[:start]
    ]
    result = dict(unique[start])
    result["_cdc_extra"] = dict(result["_cdc_extra"] or {})
    result["_cdc_special_values"] = dict(result["_cdc_special_values"] or {})
    patches = unique[start + 1 :] if fulls else unique
    if not fulls:
        result.update({c: None for c in columns}, _cdc_extra={}, _cdc_special_values={})
    set_columns: set[str] = set()
    for patch in patches:
        for name in patch["_cdc_set_columns"] or ():
            set_columns.add(name)
            _set(result, patch, name, columns)
    for meta in ("_cdc_is_delete", "_cdc_sequence", "_cdc_op", "_cdc_commit_ts", "_cdc_record_id"):
        result[meta] = newest[meta]
    result["_cdc_members"] = [m for c in unique[start:] for m in c["_cdc_members"]]
    result["_cdc_set_columns"] = None if fulls else sorted(set_columns)
    return result, losers


def _set(result: dict[str, Any], patch: dict[str, Any], name: str, columns: list[str]) -> None:
    extra = patch["_cdc_extra"] or {}
    if name in extra:
        result["_cdc_extra"][name] = extra[name]
        return
    if name not in columns:
        return
    result[name] = patch[name]
    special = (patch["_cdc_special_values"] or {}).get(name)
    result["_cdc_special_values"].pop(name, None)
    if special is not None:
        result["_cdc_special_values"][name] = special
