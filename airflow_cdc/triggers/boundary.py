"""Event trigger (for an ``AssetWatcher``) that fires once each time a source's resolved
timestamp crosses a time boundary.

Boundaries are the multiples of ``interval`` since the UTC epoch (the hours, by default). The
trigger fires for boundary B once the resolved timestamp R has reached it (R >= B): every
change committed before B has then been landed (or, with ``published_cut=True``, a cut at or
past B has been published). It fires once per boundary, oldest first, even when R jumps over
several at once, and never again for a boundary it has fired for, across triggerer restarts.

It remembers the newest boundary it has fired for in the asset state store of the asset it
watches (Airflow 3.3, AIP-103), which survives restarts and which the consumer's tasks can
read, and in a small JSON file in the warehouse (:func:`boundary_memory_path`), the one
memory it has without a store (run outside an ``AssetWatcher``, or one trigger shared by
several assets); it resumes after the later boundary of the two.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from airflow.sdk.exceptions import AirflowRuntimeError
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_cdc.core.exceptions import CutHistoryUnavailable, ResolvedTimestampUnavailable
from airflow_cdc.core.resolved_state import log_waiting, read_state
from airflow_cdc.cuts import PublishedCut, cut_for, cut_history_location, read_published
from airflow_cdc.jobs import (
    bookkeeping_location,
    check_source,
    check_time,
    published_cut_path,
    resolved_state_path,
)

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
HOUR_SECONDS = 3600

# The memory could not be read or written: fire nothing until it can.
_MEMORY_ERRORS = (OSError, ValueError, KeyError, AirflowRuntimeError)


def interval_seconds(interval: int | float | dt.timedelta) -> int:
    """``interval`` as whole seconds: a number of seconds or a :class:`~datetime.timedelta`.
    Must be a whole number of seconds, at least 1.

    >>> interval_seconds(dt.timedelta(days=1))
    86400
    """
    if isinstance(interval, dt.timedelta):
        seconds: float = interval.total_seconds()
    elif isinstance(interval, int | float) and not isinstance(interval, bool):
        seconds = float(interval)
    else:
        raise TypeError(f"interval must be seconds or a timedelta, got {interval!r}")
    if seconds < 1 or seconds != int(seconds):
        raise ValueError(f"interval must be a whole number of seconds >= 1, got {interval!r}")
    return int(seconds)


def boundary_index(at: dt.datetime, interval: int) -> int:
    """Index of the newest boundary at or before ``at``: boundary ``i`` is the UTC epoch plus
    ``i * interval`` seconds.

    >>> boundary_index(dt.datetime(1970, 1, 1, 2, 59, tzinfo=dt.UTC), HOUR_SECONDS)
    2
    """
    return (at - EPOCH) // dt.timedelta(seconds=interval)


def first_boundary_index(at: dt.datetime, interval: int) -> int:
    """Index of the oldest boundary at or after ``at``.

    >>> first_boundary_index(dt.datetime(1970, 1, 1, 2, 1, tzinfo=dt.UTC), HOUR_SECONDS)
    3
    """
    return -((EPOCH - at) // dt.timedelta(seconds=interval))


def boundary_at(index: int, interval: int) -> dt.datetime:
    """The time of boundary ``index``.

    >>> boundary_at(493_008, HOUR_SECONDS).isoformat()
    '2026-03-30T00:00:00+00:00'
    """
    return EPOCH + dt.timedelta(seconds=index * interval)


def boundary_memory_path(
    warehouse: str, source: str, mode: str, interval: int, start: str | None = None
) -> str:
    """The file in which a trigger without an asset state store remembers the newest boundary
    it fired for (JSON), beside the resolved state: one per source, mode (``resolved`` or
    ``cut``), interval and ``start`` (a UTC ISO 8601 time), so that a new watcher replaying
    from its ``start`` does not resume where another watcher of the source is."""
    name = f"{source}.{mode}.{interval}s"
    if start is not None:
        name += ".from-" + _utc(start, "start").strftime("%Y%m%dT%H%M%S.%fZ")
    return bookkeeping_location(warehouse, "boundary", f"{name}.json")


def _utc(value: str | dt.datetime, name: str) -> dt.datetime:
    return check_time(value, name).astimezone(dt.UTC)


@dataclass(frozen=True)
class _Reading:
    """One read of the source's state: its resolved timestamp and, in cut mode, the cut."""

    resolved: dt.datetime
    cut: PublishedCut | None = None


class _Memory(Protocol):
    """Where a trigger remembers the newest boundary it fired for."""

    where: str

    async def recall(self) -> dt.datetime | None: ...

    async def record(self, boundary: dt.datetime, resolved: dt.datetime) -> None: ...


def _memory_value(source: str, boundary: dt.datetime, resolved: dt.datetime) -> dict[str, str]:
    return {"source": source, "boundary": boundary.isoformat(), "resolved_ts": resolved.isoformat()}


def _remembered_boundary(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if not isinstance(value, dict) or "boundary" not in value:
        raise ValueError(f"remembered boundary is not a {{'boundary': ...}} object: {value!r}")
    return _utc(value["boundary"], "remembered boundary")


class _SeveralAssets(Exception):
    """The trigger watches several assets: no single asset to remember its boundary in."""


class _AssetStateMemory:
    """One key in the asset state store of the asset the trigger watches (AIP-103)."""

    def __init__(self, store: Any, key: str, source: str) -> None:
        self.store = store
        self.key = key
        self.source = source
        self.where = f"the asset state store (key {key!r})"

    async def recall(self) -> dt.datetime | None:
        try:
            value = await self.store.aget(self.key)
        except ValueError as err:
            # The triggerer's accessors refuse an unnamed get when they hold several assets.
            raise _SeveralAssets(str(err)) from err
        return _remembered_boundary(value)

    async def record(self, boundary: dt.datetime, resolved: dt.datetime) -> None:
        await self.store.aset(self.key, _memory_value(self.source, boundary, resolved))


class _FileMemory:
    """A small JSON file in the warehouse (local path or any fsspec URI), which records the
    trigger's ``start`` beside the boundary.

    ``legacy`` is the file a trigger with a ``start`` remembered in before the file was
    named after it: recalled while the trigger's own file does not exist yet, if it records
    no ``start`` (written before the rename, by this trigger or a shared one), and moved
    into the trigger's own file at once, so that an upgrade fires nothing twice. A record
    another watcher wrote since (it records its own ``start``) is never taken."""

    def __init__(
        self, path: str, source: str, start: str | None, legacy: str | None = None
    ) -> None:
        self.path = path
        self.source = source
        self.start = start
        self.legacy = legacy
        self.where = path

    async def recall(self) -> dt.datetime | None:
        text = await asyncio.to_thread(_read_text, self.path)
        if text is not None:
            return _remembered_boundary(json.loads(text))
        if self.legacy is None:
            return None
        text = await asyncio.to_thread(_read_text, self.legacy)
        value = None if text is None else json.loads(text)
        if not isinstance(value, dict) or "start" in value:
            return None
        boundary = _remembered_boundary(value)
        if boundary is not None:
            # Moved into the trigger's own file at once: a watcher without start may
            # rewrite the common one (with its own start) before this one fires again.
            resolved = _utc(value.get("resolved_ts") or boundary, "resolved_ts")
            await self.record(boundary, resolved)
        return boundary

    async def record(self, boundary: dt.datetime, resolved: dt.datetime) -> None:
        value = {**_memory_value(self.source, boundary, resolved), "start": self.start}
        await asyncio.to_thread(_write_atomically, self.path, json.dumps(value))


class _BothMemories:
    """The asset state store and the file together: recalls the later boundary of the two,
    records in both. A trigger that Airflow runs for one asset, then for several (watchers
    with the same arguments share one trigger: the file alone), then for one again, resumes
    where it really was."""

    def __init__(self, store: _AssetStateMemory, file: _FileMemory) -> None:
        self.store = store
        self.file = file
        self.where = f"{store.where} and {file.where}"

    async def recall(self) -> dt.datetime | None:
        known = [b for b in (await self.store.recall(), await self.file.recall()) if b]
        return max(known, default=None)

    async def record(self, boundary: dt.datetime, resolved: dt.datetime) -> None:
        await self.store.record(boundary, resolved)
        await self.file.record(boundary, resolved)


def _read_text(path: str) -> str | None:
    import fsspec

    try:
        with fsspec.open(path, "rt", encoding="utf-8") as handle:
            return str(handle.read())
    except FileNotFoundError:
        return None


def _write_atomically(path: str, text: str) -> None:
    """Replace the file at ``path`` whole: a reader sees the old text or the new, never half."""
    from fsspec.core import url_to_fs
    from fsspec.implementations.local import LocalFileSystem

    fs, target = url_to_fs(path)
    if not isinstance(fs, LocalFileSystem):
        # An object store replaces an object whole: one PUT is atomic.
        fs.pipe_file(target, text.encode("utf-8"))
        return
    directory = os.path.dirname(target)
    os.makedirs(directory, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=directory, prefix=".boundary-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, target)
    except BaseException:
        os.unlink(partial)
        raise


class ResolvedBoundaryTrigger(BaseEventTrigger):
    """Fire once each time the resolved timestamp of ``source`` crosses a boundary.

    For an ``AssetWatcher``: each event becomes an asset event whose ``extra["payload"]``
    is ``{"source", "boundary", "interval_start", "resolved_ts"}`` (ISO 8601 times; all
    changes committed in ``[interval_start, boundary)`` are landed), plus ``"cut"`` (as
    :meth:`~airflow_cdc.cuts.PublishedCut.as_dict`) with ``published_cut=True``. When the
    resolved timestamp jumps over several boundaries, it fires one event per boundary, oldest
    first, each with the resolved timestamp it read and the cut that boundary's tasks read:
    the one published at the boundary, else the oldest past it
    (:func:`~airflow_cdc.cuts.cut_for`). To gate a task inside a DAG
    run, use :class:`~airflow_cdc.sensors.resolved.ResolvedTimestampSensor` instead.

    It fires for each boundary at most once. It records a boundary (see the module's
    docstring for where) before firing it, so a triggerer killed between the two loses that
    event rather than repeating it. Started with nothing recorded and no ``start``, it fires
    nothing for the boundaries already passed: the first event is the first boundary the
    resolved timestamp crosses while it watches.

    :param warehouse: Warehouse root the landing (or apply) job writes to.
    :param source: Landed source name.
    :param interval: Boundary spacing: seconds (a whole number, at least 1) or a
        ``timedelta``; default one hour. Boundaries are aligned to the UTC epoch (a day's
        is midnight UTC).
    :param start: ISO 8601 time: the earliest boundary to fire for (rounded up to a
        boundary), including those already passed when the trigger first starts (a replay).
        Default: none before the first resolved timestamp the trigger reads.
    :param published_cut: Watch the apply job's published consistent cut
        (:func:`~airflow_cdc.jobs.published_cut_path`) instead of the landed resolved
        timestamp: fire once a cut at or past the boundary is published, with the cut at
        the boundary (else the oldest past it) in the event.
    :param poll_interval: Seconds between reads of the state file (> 0).
    """

    def __init__(
        self,
        warehouse: str,
        source: str,
        interval: int | float | dt.timedelta = HOUR_SECONDS,
        start: str | dt.datetime | None = None,
        published_cut: bool = False,
        poll_interval: float = 60.0,
    ) -> None:
        super().__init__()
        # Built when the DAG file is parsed, never templated: check the arguments now.
        if not poll_interval > 0:
            raise ValueError(f"poll_interval must be > 0 seconds, got {poll_interval!r}")
        self.warehouse = warehouse
        self.source = check_source(source)
        self.interval = interval_seconds(interval)
        self.start = None if start is None else _utc(start, "start").isoformat()
        self.published_cut = published_cut
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_cdc.triggers.boundary.ResolvedBoundaryTrigger",
            {
                "warehouse": self.warehouse,
                "source": self.source,
                "interval": self.interval,
                "start": self.start,
                "published_cut": self.published_cut,
                "poll_interval": self.poll_interval,
            },
        )

    @property
    def mode(self) -> str:
        return "cut" if self.published_cut else "resolved"

    @property
    def state_path(self) -> str:
        if self.published_cut:
            return published_cut_path(self.warehouse, self.source)
        return resolved_state_path(self.warehouse, self.source)

    @property
    def memory_key(self) -> str:
        """The asset state store key: one per source, mode and interval, so that watchers of
        one asset with other settings keep their own memory."""
        return f"airflow_cdc.boundary.{self.source}.{self.mode}.{self.interval}s"

    def _file_memory(self) -> _FileMemory:
        path = boundary_memory_path(
            self.warehouse, self.source, self.mode, self.interval, self.start
        )
        legacy = None
        if self.start is not None:
            legacy = boundary_memory_path(self.warehouse, self.source, self.mode, self.interval)
        return _FileMemory(path, self.source, self.start, legacy)

    async def _open_memory(self) -> tuple[_Memory, dt.datetime | None]:
        """The memory to use, and the boundary it holds."""
        file = self._file_memory()
        if self.asset_state_store is not None:
            store = _AssetStateMemory(self.asset_state_store, self.memory_key, self.source)
            both = _BothMemories(store, file)
            try:
                return both, await both.recall()
            except _SeveralAssets as err:
                self.log.warning("%s; remembering boundaries in a file only", err)
        return file, await file.recall()

    async def _read(self) -> _Reading | None:
        """The source's state now; ``None`` (logged) while there is none to read."""
        try:
            # File reads block: keep them off the triggerer's event loop.
            if self.published_cut:
                cut = await asyncio.to_thread(read_published, self.state_path)
                return _Reading(cut.at, cut)
            return _Reading(await asyncio.to_thread(read_state, self.state_path))
        except ResolvedTimestampUnavailable as err:
            log_waiting(self.log, err)
        return None

    def _passed(self, remembered: dt.datetime | None, resolved: dt.datetime) -> int:
        """Index of the newest boundary not to fire for: the one remembered, else the one at
        or before the first resolved timestamp read; those before ``start`` count as passed."""
        if remembered is None and self.start is None:
            return boundary_index(resolved, self.interval)
        passed = []
        if remembered is not None:
            passed.append(boundary_index(remembered, self.interval))
        if self.start is not None:
            passed.append(first_boundary_index(_utc(self.start, "start"), self.interval) - 1)
        return max(passed)

    async def _begin(self, reading: _Reading) -> tuple[_Memory, int]:
        """Open the memory at the first reading; the index of the newest boundary passed."""
        memory, remembered = await self._open_memory()
        passed = self._passed(remembered, reading.resolved)
        if remembered is None and self.start is None:
            # Remember where watching began: a restart before the next boundary must not
            # begin again past a boundary crossed while the triggerer was down.
            await memory.record(boundary_at(passed, self.interval), reading.resolved)
        self.log.info(
            "watching %s for boundaries after %s (memory: %s)",
            self.source,
            boundary_at(passed, self.interval),
            memory.where,
        )
        return memory, passed

    async def _payload(self, index: int, reading: _Reading) -> dict[str, Any]:
        """The event for boundary ``index``; with a cut, the one the boundary's tasks read
        (from the cut history: raises while it cannot be read)."""
        boundary = boundary_at(index, self.interval)
        payload: dict[str, Any] = {
            "source": self.source,
            "boundary": boundary.isoformat(),
            "interval_start": boundary_at(index - 1, self.interval).isoformat(),
            "resolved_ts": reading.resolved.isoformat(),
        }
        if reading.cut is not None:
            history = cut_history_location(self.warehouse)
            cut = await asyncio.to_thread(cut_for, reading.cut, history, boundary)
            payload["cut"] = cut.as_dict()
        return payload

    async def run(self) -> AsyncIterator[TriggerEvent]:
        memory: _Memory | None = None
        passed = 0  # index of the newest boundary fired for or passed over, once memory is open
        while True:
            reading = await self._read()
            if reading is not None:
                try:
                    if memory is None:
                        memory, passed = await self._begin(reading)
                    reached = boundary_index(reading.resolved, self.interval)
                    for index in range(passed + 1, reached + 1):
                        boundary = boundary_at(index, self.interval)
                        payload = await self._payload(index, reading)
                        # Recorded before it fires: at most once, even if killed in between.
                        await memory.record(boundary, reading.resolved)
                        passed = index
                        self.log.info("%s reached boundary %s", self.source, boundary)
                        yield TriggerEvent(payload)
                except _MEMORY_ERRORS as err:
                    self.log.warning("cannot use the boundary memory, waiting: %r", err)
                except CutHistoryUnavailable as err:
                    self.log.warning("waiting: %s", err)
            await asyncio.sleep(self.poll_interval)
