"""Reading the resolved-timestamp state that each landing run records."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from airflow_cdc.core.exceptions import ResolvedTimestampUnavailable, StateUnreadable

# What reading a state file that exists can raise while it is being replaced, is
# half-written or its store is unreachable: an I/O error, bad JSON or text, a missing or
# mistyped field.
UNREADABLE = (OSError, ValueError, KeyError, TypeError)


def log_waiting(log: Any, err: Exception) -> None:
    """Log why a sensor or trigger waits: a warning when the state exists but cannot be read
    (:class:`~airflow_cdc.core.exceptions.StateUnreadable`), else as information (none yet)."""
    (log.warning if isinstance(err, StateUnreadable) else log.info)("waiting: %s", err)


def parse_state(text: str) -> dt.datetime:
    """The resolved timestamp in a landing run's state file (JSON with ``resolved_ts``)."""
    state = json.loads(text)
    if not isinstance(state, dict):
        raise ValueError(f"a resolved state is a JSON object, not {text[:80]!r}")
    value = state.get("resolved_ts")
    if not value:
        raise ResolvedTimestampUnavailable(
            f"source {state.get('source')!r} has shards never read yet; no resolved timestamp"
        )
    parsed = dt.datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def read_state(path: str) -> dt.datetime:
    """Read the state file at ``path`` (local path or any fsspec URI);
    :class:`~airflow_cdc.core.exceptions.ResolvedTimestampUnavailable` while there is none,
    :class:`~airflow_cdc.core.exceptions.StateUnreadable` while it cannot be read."""
    import fsspec

    try:
        with fsspec.open(path, "rt", encoding="utf-8") as handle:
            return parse_state(handle.read())
    except FileNotFoundError as err:
        raise ResolvedTimestampUnavailable(f"no landing run has recorded {path!r} yet") from err
    except UNREADABLE as err:
        raise StateUnreadable(f"cannot read {path!r} now: {err!r}") from err
