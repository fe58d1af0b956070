"""Which column names a stream may add to a table.

A column name from the stream is data: it becomes a Delta column only when Delta can store it
(Delta refuses a name holding any of `` ,;{}()\\n\\t=`` unless the table uses column mapping,
which a job turns on for a table when a declared column needs it, and for stream columns only
when the job is allowed to: see ``column_mapping``),
when it cannot be taken for another column (Spark resolves names without regard to case),
when it is not one of the project's own ``_cdc_`` columns, and while the table stays within
the configured number of columns added by streams. A change carrying a name that fails any of
these is quarantined with the reason :func:`admit` gives; the batch goes on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

# Characters Delta refuses in a column name without column mapping.
UNSTORABLE = re.compile(r"[ ,;{}()\n\t=]")
RESERVED_PREFIX = "_cdc_"
# The validity columns of history tables (SCD type 2), reserved in every table.
HISTORY_COLUMNS = ("__start_at", "__end_at")
INVALID_NAME = "invalid_column_name"
COLUMN_LIMIT = "column_limit"
# Defaults: PostgreSQL's own limit of columns per table, and the columns that streams may
# add to one table beyond its DDL.
MAX_COLUMNS_PER_RECORD = 1600
MAX_ADDED_COLUMNS = 200


def needs_mapping(name: str) -> bool:
    """Whether Delta stores ``name`` only in a table with column mapping."""
    return UNSTORABLE.search(name) is not None


def name_problem(name: str, mapping: bool = False) -> str | None:
    """Why ``name`` cannot be a column of a target table, or ``None``; with ``mapping``, the
    table may use column mapping."""
    if not name:
        return "a column name is empty"
    if not mapping and needs_mapping(name):
        return (
            f"column {name!r} holds a character Delta stores in a column name only with column"
            " mapping (a space, one of ,;{}()= or a tab or newline); allow it with"
            " column_mapping"
        )
    if name.lower().startswith(RESERVED_PREFIX):
        return f"column {name!r} uses the prefix {RESERVED_PREFIX!r} of the pipeline's own columns"
    if name.lower() in HISTORY_COLUMNS:
        return f"column {name!r} is one of the history tables' validity columns"
    return None


@dataclass(frozen=True)
class Admission:
    """New columns to add, and each refused name with ``reason: detail``."""

    added: tuple[str, ...]
    refused: dict[str, tuple[str, str]] = field(default_factory=dict)


def admit(
    current: Iterable[str],
    declared: Iterable[str],
    new: Iterable[str],
    limit: int,
    mapping: bool = False,
) -> Admission:
    """Decide which of ``new`` may be added to a table that has ``current`` columns, of which
    ``declared`` come from its DDL; at most ``limit`` columns beyond the DDL in all; with
    ``mapping``, names that need column mapping too.

    Names are taken in sorted order, so every run of a batch decides the same way.
    """
    current = list(current)
    present = set(current)
    taken = {name.lower(): name for name in current}
    declared_names = set(declared)
    count = sum(1 for n in current if n not in declared_names and not n.startswith(RESERVED_PREFIX))
    added: list[str] = []
    refused: dict[str, tuple[str, str]] = {}
    for name in sorted(set(new) - present):
        problem = name_problem(name, mapping)
        if problem is None and name.lower() in taken:
            problem = f"column {name!r} differs only in case from column {taken[name.lower()]!r}"
        if problem is not None:
            refused[name] = (INVALID_NAME, problem)
        elif count >= limit:
            refused[name] = (
                COLUMN_LIMIT,
                f"column {name!r} would be column {count + 1} added by the stream beyond the"
                f" DDL; the limit is {limit}",
            )
        else:
            added.append(name)
            taken[name.lower()] = name
            count += 1
    return Admission(tuple(added), refused)
