"""One small hierarchy for every domain error raised by airflow-cdc."""

from __future__ import annotations


class CdcError(Exception):
    """Base class of every airflow-cdc error."""


class RecordFormatError(CdcError):
    """A change record does not follow its format.

    ``reason`` is a short stable code (``malformed_json``, ``unknown_record_type``...) that lands
    in the quarantine table; the message says what exactly was wrong.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


class DecodeError(RecordFormatError):
    """A column value does not decode to the column's declared type."""

    def __init__(self, column: str, message: str) -> None:
        super().__init__("decode_error", f"column {column!r}: {message}")
        self.column = column


class DdlError(CdcError, ValueError):
    """A declared CREATE TABLE statement cannot be used."""


class JobVersionError(CdcError):
    """The installed Spark job is not the version an operator pinned."""


class ResolvedTimestampUnavailable(CdcError):
    """No landing run has recorded a resolved timestamp for the source yet."""


class StateUnreadable(ResolvedTimestampUnavailable):
    """A state or pointer file exists but cannot be read or parsed now (being replaced,
    half-written, an unreachable store): wait, as for one not written yet."""


class CutHistoryUnavailable(ResolvedTimestampUnavailable):
    """The history of a source's published cuts cannot be read now (try again later)."""
