"""ResolvedBoundaryTrigger against real state files, remembering in the real asset state store.

The triggerer hands an asset watcher's trigger an ``AssetStateStoreAccessors`` whose calls
travel to its supervisor, which serves them through the in-process Execution API on the
metadata database. ``_TriggererChannel`` stands in for that channel only: it serves each call
with the same request handlers and the same in-process API client the triggerer's supervisor
uses, so the values land in the ``asset_state_store`` table of the test's SQLite database.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import doctest
import json
import re
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_cdc.jobs import published_cut_path, resolved_state_path
from airflow_cdc.triggers import boundary
from airflow_cdc.triggers.boundary import ResolvedBoundaryTrigger, boundary_memory_path

SOURCE = "dsql"
POLL = 0.01


class _TriggererChannel:
    """Serve asset-state-store calls as the triggerer's supervisor does
    (``TriggerRunnerSupervisor._handle_request``), off the event loop as its socket is."""

    def __init__(self) -> None:
        from airflow.jobs.triggerer_job_runner import in_process_api_server
        from airflow.sdk.api.client import Client

        self.client = Client(
            base_url=None, token="", dry_run=True, transport=in_process_api_server().transport
        )
        self.client.base_url = "http://in-process.invalid./"

    def send(self, msg: Any) -> Any:
        from airflow.sdk.api.client import ServerResponseError
        from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType
        from airflow.sdk.execution_time import comms
        from airflow.sdk.execution_time.request_handlers import (
            handle_get_asset_state_store_by_name,
            handle_set_asset_state_store_by_name,
        )

        try:
            if isinstance(msg, comms.GetAssetStateStoreByName):
                response, _ = handle_get_asset_state_store_by_name(self.client, msg)
            elif isinstance(msg, comms.SetAssetStateStoreByName):
                response, _ = handle_set_asset_state_store_by_name(self.client, msg)
            else:
                raise TypeError(f"a watcher's trigger does not send {msg!r}")
        except ServerResponseError as err:
            detail = {"status_code": err.response.status_code, "message": str(err)}
            error = comms.ErrorResponse(error=ErrorType.API_SERVER_ERROR, detail=detail)
            raise AirflowRuntimeError(error) from err
        return comms.OKResponse(ok=True) if response is None else response

    async def asend(self, msg: Any) -> Any:
        return await asyncio.to_thread(self.send, msg)


@pytest.fixture(scope="module")
def channel(airflow_db: str) -> _TriggererChannel:
    return _TriggererChannel()


@pytest.fixture
def asset(channel: _TriggererChannel, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An asset to watch, active in the metadata database (as the DAG processor leaves it),
    with the triggerer's channel to the asset state store in place."""
    from airflow.models.asset import AssetActive, AssetModel
    from airflow.sdk import Asset
    from airflow.sdk.execution_time import task_runner
    from airflow.utils.session import create_session

    name = f"{SOURCE}-hours-{uuid.uuid4().hex[:8]}"
    uri = f"file:///warehouse/_cdc/resolved/{name}"
    with create_session() as session:
        model = AssetModel(name=name, uri=uri, group="asset")
        session.add(model)
        session.flush()
        session.add(AssetActive.for_asset(model))
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", channel, raising=False)
    return Asset(name=name, uri=uri)


def _store(*assets: Any) -> Any:
    """What the triggerer injects into a watcher's trigger: accessors for its assets."""
    from airflow.sdk.execution_time.context import AssetStateStoreAccessors

    return AssetStateStoreAccessors(inlets=list(assets))


def _land(warehouse: Path, resolved: str | None) -> None:
    """Record a resolved timestamp as the landing job does (its state file's format)."""
    path = Path(resolved_state_path(str(warehouse), SOURCE))
    path.parent.mkdir(parents=True, exist_ok=True)
    state: dict[str, Any] = {"source": SOURCE, "resolved_ts": resolved, "batch_id": "b"}
    path.write_text(json.dumps(state, indent=2))


def _publish(warehouse: Path, cut_at: str) -> None:
    """Publish a cut as the apply job does (its pointer file's format)."""
    path = Path(published_cut_path(str(warehouse), SOURCE))
    path.parent.mkdir(parents=True, exist_ok=True)
    tables = {"public.orders": {"location": f"{warehouse}/public/orders", "version": 3}}
    state = {
        "source": SOURCE,
        "cut_at": cut_at,
        "interval_start": "2026-01-01T00:00:00+00:00",
        "interval_end": cut_at,
        "heuristic": False,
        "tables": tables,
        "batch_id": "b",
    }
    path.write_text(json.dumps(state))


class _Reads:
    """Counts the trigger's reads of the state file (each one real), so that a test can
    let it poll a given number of times rather than for a given time."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        for name in ("read_state", "read_published"):
            real = getattr(boundary, name)
            monkeypatch.setattr(boundary, name, self._counted(real))

    def _counted(self, real: Any) -> Any:
        def read(path: str) -> Any:
            try:
                return real(path)
            finally:
                self.count += 1

        return read

    async def more(self, polls: int) -> None:
        target = self.count + polls
        while self.count < target:
            await asyncio.sleep(POLL / 2)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> _Reads:
    return _Reads(monkeypatch)


class _Watch:
    """One run of a trigger, as the triggerer drives it: events are taken as it yields
    them; ``stop`` cancels it as a triggerer shutting down does."""

    def __init__(self, trigger: ResolvedBoundaryTrigger, reads: _Reads) -> None:
        self.events: AsyncIterator[Any] = trigger.run()
        self.reads = reads
        self.pending: asyncio.Future[Any] | None = None

    def _next(self) -> asyncio.Future[Any]:
        if self.pending is None:
            self.pending = asyncio.ensure_future(anext(self.events))
        return self.pending

    async def quiet(self, polls: int = 2) -> None:
        """The trigger handles ``polls`` more readings of the state file and fires nothing."""
        pending = self._next()
        # The last reading counted may still be being handled: wait for one more.
        await asyncio.wait_for(self.reads.more(polls + 1), timeout=30)
        assert not pending.done(), pending.result().payload

    async def fired(self, count: int = 1) -> list[dict[str, Any]]:
        payloads = []
        for _ in range(count):
            event = await asyncio.wait_for(self._next(), timeout=30)
            self.pending = None
            payloads.append(event.payload)
        return payloads

    async def stop(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await self.pending
        await self.events.aclose()  # type: ignore[attr-defined]


def _trigger(warehouse: Path, store: Any = None, **kwargs: Any) -> ResolvedBoundaryTrigger:
    """A trigger as the triggerer builds it: from its serialized arguments, with the
    asset state store it injects for a watcher."""
    trigger = ResolvedBoundaryTrigger(str(warehouse), SOURCE, poll_interval=POLL, **kwargs)
    trigger = ResolvedBoundaryTrigger(**trigger.serialize()[1])
    trigger.asset_state_store = store
    return trigger


async def _run_once(
    trigger: ResolvedBoundaryTrigger,
    reads: _Reads,
    fires: int,
    change: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """One triggerer run of ``trigger``: it watches (and ``change`` happens), it fires
    ``fires`` events, then nothing more; then the triggerer stops."""
    watch = _Watch(trigger, reads)
    if change is not None:
        await watch.quiet()
        change()
    fired = await watch.fired(fires)
    await watch.quiet()
    await watch.stop()
    return fired


def _boundaries(payloads: list[dict[str, Any]]) -> list[str]:
    return [p["boundary"][11:16] for p in payloads]


def test_fires_once_per_boundary_never_while_the_condition_merely_stays_true(
    tmp_path: Path, asset: Any, reads: _Reads
) -> None:
    _land(tmp_path, "2026-01-01T00:30:00+00:00")
    trigger = _trigger(tmp_path, _store(asset))

    async def scenario() -> list[dict[str, Any]]:
        watch = _Watch(trigger, reads)
        await watch.quiet()  # 00:00 was passed before it started watching
        _land(tmp_path, "2026-01-01T01:05:00+00:00")
        (first,) = await watch.fired()
        await watch.quiet()  # R >= 01:00 stays true: no second event
        _land(tmp_path, "2026-01-01T01:59:59.999999+00:00")
        await watch.quiet()  # R moved, no new boundary
        _land(tmp_path, "2026-01-01T02:00:00+00:00")  # R reaches B exactly
        (second,) = await watch.fired()
        await watch.quiet()
        await watch.stop()
        return [first, second]

    first, second = asyncio.run(scenario())
    assert first == {
        "source": SOURCE,
        "boundary": "2026-01-01T01:00:00+00:00",
        "interval_start": "2026-01-01T00:00:00+00:00",
        "resolved_ts": "2026-01-01T01:05:00+00:00",
    }
    assert (second["boundary"], second["resolved_ts"]) == (
        "2026-01-01T02:00:00+00:00",
        "2026-01-01T02:00:00+00:00",
    )
    remembered = asyncio.run(_store(asset).aget(trigger.memory_key))
    assert remembered == {
        "source": SOURCE,
        "boundary": "2026-01-01T02:00:00+00:00",
        "resolved_ts": "2026-01-01T02:00:00+00:00",
    }
    # The file keeps the same, for the times Airflow shares the trigger among assets.
    memory = Path(boundary_memory_path(str(tmp_path), SOURCE, "resolved", 3600))
    assert json.loads(memory.read_text())["boundary"] == "2026-01-01T02:00:00+00:00"


def test_a_restarted_trigger_does_not_fire_again_and_catches_up(
    tmp_path: Path, asset: Any, reads: _Reads
) -> None:
    _land(tmp_path, "2026-01-01T00:30:00+00:00")

    def restarted(fires: int, change: Callable[[], None] | None = None) -> list[str]:
        """A new trigger from the same arguments, as after a triggerer restart."""
        trigger = _trigger(tmp_path, _store(asset))
        return _boundaries(asyncio.run(_run_once(trigger, reads, fires, change)))

    assert restarted(0) == []  # watching begins after 00:00
    _land(tmp_path, "2026-01-01T01:05:00+00:00")  # crossed while no triggerer ran
    assert restarted(1) == ["01:00"]  # where watching began was remembered
    assert restarted(0) == []  # R >= 01:00 still: not again
    assert restarted(1, lambda: _land(tmp_path, "2026-01-01T02:10:00+00:00")) == ["02:00"]
    assert restarted(0) == []


def test_a_jump_over_several_boundaries_fires_each_once_oldest_first(
    tmp_path: Path, reads: _Reads
) -> None:
    from tests.airflow.cut_history import append_cuts

    append_cuts(tmp_path, SOURCE, {"2026-01-01T00:30:00+00:00": 1})
    _publish(tmp_path, "2026-01-01T00:30:00+00:00")
    trigger = _trigger(tmp_path, published_cut=True)  # no asset store: the file memory

    async def scenario() -> list[dict[str, Any]]:
        watch = _Watch(trigger, reads)
        await watch.quiet()
        # Two cuts published since the last read: at 02:00 (a run for 01:00-02:00) and
        # at 03:10 (the pointer's).
        append_cuts(tmp_path, SOURCE, {"2026-01-01T02:00:00+00:00": 2})
        append_cuts(tmp_path, SOURCE, {"2026-01-01T03:10:00+00:00": 3})
        _publish(tmp_path, "2026-01-01T03:10:00+00:00")
        fired = await watch.fired(3)
        await watch.quiet()
        await watch.stop()
        return fired

    fired = asyncio.run(scenario())
    assert _boundaries(fired) == ["01:00", "02:00", "03:00"]
    assert {p["resolved_ts"] for p in fired} == {"2026-01-01T03:10:00+00:00"}
    assert [p["interval_start"][11:16] for p in fired] == ["00:00", "01:00", "02:00"]
    # Each boundary's cut: the one at it, else the oldest past it (none was at 01:00).
    cuts = [
        (p["cut"]["cut_at"][11:16], p["cut"]["tables"]["public.orders"]["version"]) for p in fired
    ]
    assert cuts == [("02:00", 2), ("02:00", 2), ("03:10", 3)]
    memory = Path(boundary_memory_path(str(tmp_path), SOURCE, "cut", 3600))
    assert json.loads(memory.read_text())["boundary"] == "2026-01-01T03:00:00+00:00"
    assert [p.name for p in memory.parent.iterdir()] == [memory.name]  # no partial files


def test_the_file_memory_survives_a_restart(tmp_path: Path, reads: _Reads) -> None:
    _land(tmp_path, "2026-01-01T00:30:00+00:00")

    def restarted(fires: int, change: Callable[[], None] | None = None) -> list[str]:
        trigger = _trigger(tmp_path)  # outside a watcher: no asset state store
        return _boundaries(asyncio.run(_run_once(trigger, reads, fires, change)))

    assert restarted(1, lambda: _land(tmp_path, "2026-01-01T01:00:00+00:00")) == ["01:00"]
    assert restarted(0) == []
    assert restarted(1, lambda: _land(tmp_path, "2026-01-01T02:00:00+00:00")) == ["02:00"]
    memory = Path(boundary_memory_path(str(tmp_path), SOURCE, "resolved", 3600))
    assert json.loads(memory.read_text()) == {
        "source": SOURCE,
        "boundary": "2026-01-01T02:00:00+00:00",
        "resolved_ts": "2026-01-01T02:00:00+00:00",
        "start": None,
    }


def test_start_replays_the_boundaries_from_it_once(
    tmp_path: Path, asset: Any, reads: _Reads
) -> None:
    _land(tmp_path, "2026-01-01T03:10:00+00:00")

    def watch_from(start: str, fires: int) -> list[str]:
        trigger = _trigger(tmp_path, _store(asset), start=start)
        return _boundaries(asyncio.run(_run_once(trigger, reads, fires)))

    # 01:30 rounds up to 02:00; 01:00 is before start and never fires.
    assert watch_from("2026-01-01T01:30:00+00:00", 2) == ["02:00", "03:00"]
    # An earlier start on the same memory replays nothing already fired.
    assert watch_from("2026-01-01T00:00:00+00:00", 0) == []


def test_a_new_watcher_replays_from_its_start_whatever_another_watcher_remembers(
    tmp_path: Path, asset: Any, reads: _Reads
) -> None:
    """Another asset's watcher of the same source, mode and interval has fired up to 03:00
    (its file and its own store say so); a new asset's watcher with ``start`` replays from
    its start all the same, and remembers apart from it."""
    _land(tmp_path, "2026-01-01T02:30:00+00:00")
    first = _trigger(tmp_path, _store(asset))
    change = lambda: _land(tmp_path, "2026-01-01T03:10:00+00:00")  # noqa: E731
    assert _boundaries(asyncio.run(_run_once(first, reads, 1, change))) == ["03:00"]

    replay = _trigger(tmp_path, start="2026-01-01T01:00:00+00:00")  # outside a watcher
    assert _boundaries(asyncio.run(_run_once(replay, reads, 3))) == ["01:00", "02:00", "03:00"]
    assert _boundaries(asyncio.run(_run_once(replay, reads, 0))) == []  # and only once
    own = Path(boundary_memory_path(str(tmp_path), SOURCE, "resolved", 3600, replay.start))
    shared = Path(boundary_memory_path(str(tmp_path), SOURCE, "resolved", 3600))
    assert own != shared and own.exists() and shared.exists()


def test_a_trigger_with_start_keeps_what_it_remembered_before_its_file_was_named_after_it(
    tmp_path: Path, reads: _Reads
) -> None:
    """Before the file memory was named after ``start``, a trigger with one remembered in
    the source's common file (a record without ``start``): it resumes from it, firing no
    boundary twice, and remembers in its own file from then on."""
    _land(tmp_path, "2026-01-01T02:30:00+00:00")
    shared = Path(boundary_memory_path(str(tmp_path), SOURCE, "resolved", 3600))
    shared.parent.mkdir(parents=True, exist_ok=True)
    written_before = {
        "source": SOURCE,
        "boundary": "2026-01-01T02:00:00+00:00",
        "resolved_ts": "2026-01-01T02:10:00+00:00",
    }
    shared.write_text(json.dumps(written_before))
    upgraded = _trigger(tmp_path, start="2026-01-01T00:00:00+00:00")
    assert _boundaries(asyncio.run(_run_once(upgraded, reads, 0))) == []
    # Moved into its own file at once: a watcher without start that rewrites the common
    # file before this one fires again changes nothing for it.
    own = Path(boundary_memory_path(str(tmp_path), SOURCE, "resolved", 3600, upgraded.start))
    assert json.loads(own.read_text())["boundary"] == "2026-01-01T02:00:00+00:00"
    shared.write_text(json.dumps({**written_before, "start": None}))
    change = lambda: _land(tmp_path, "2026-01-01T03:10:00+00:00")  # noqa: E731
    assert _boundaries(asyncio.run(_run_once(upgraded, reads, 1, change))) == ["03:00"]
    assert json.loads(own.read_text())["boundary"] == "2026-01-01T03:00:00+00:00"


def test_a_missing_or_unreadable_state_file_means_wait(tmp_path: Path, reads: _Reads) -> None:
    trigger = _trigger(tmp_path, interval=dt.timedelta(minutes=15))
    state = Path(resolved_state_path(str(tmp_path), SOURCE))

    async def scenario() -> list[dict[str, Any]]:
        watch = _Watch(trigger, reads)
        await watch.quiet()  # nothing landed yet
        state.parent.mkdir(parents=True)
        state.write_text('{"source": "dsql", "resolved_ts": "2026-01-01T01:')  # half written
        await watch.quiet()
        _land(tmp_path, None)  # a shard never read: no resolved timestamp
        await watch.quiet()
        _land(tmp_path, "2026-01-01T01:20:00+00:00")
        await watch.quiet()  # the first reading: where watching begins
        state.unlink()  # the landing job replaces the file: gone for a moment
        await watch.quiet()
        _land(tmp_path, "2026-01-01T01:30:00+00:00")
        fired = await watch.fired()
        await watch.stop()
        return fired

    (event,) = asyncio.run(scenario())
    assert (event["interval_start"], event["boundary"]) == (
        "2026-01-01T01:15:00+00:00",
        "2026-01-01T01:30:00+00:00",
    )


def test_a_trigger_watching_several_assets_remembers_in_the_file(
    tmp_path: Path, asset: Any, reads: _Reads
) -> None:
    from airflow.sdk import Asset

    other = Asset(name="cdc-other", uri="file:///warehouse/other")
    _land(tmp_path, "2026-01-01T00:30:00+00:00")
    trigger = _trigger(tmp_path, _store(asset, other))

    def change() -> None:
        _land(tmp_path, "2026-01-01T01:00:00+00:00")

    assert _boundaries(asyncio.run(_run_once(trigger, reads, 1, change))) == ["01:00"]
    memory = Path(boundary_memory_path(str(tmp_path), SOURCE, "resolved", 3600))
    assert json.loads(memory.read_text())["boundary"] == "2026-01-01T01:00:00+00:00"
    assert asyncio.run(_store(asset).aget(trigger.memory_key)) is None

    # Watching one asset again: its store says an older boundary (from before the trigger
    # was shared), the file says 01:00, so 01:00 does not fire again; the next one does.
    older = {"source": SOURCE, "boundary": "2026-01-01T00:00:00+00:00", "resolved_ts": "x"}
    asyncio.run(_store(asset).aset(trigger.memory_key, older))
    alone = _trigger(tmp_path, _store(asset))

    def later() -> None:
        _land(tmp_path, "2026-01-01T02:00:00+00:00")

    assert _boundaries(asyncio.run(_run_once(alone, reads, 1, later))) == ["02:00"]
    assert asyncio.run(_store(asset).aget(trigger.memory_key))["boundary"] == (
        "2026-01-01T02:00:00+00:00"
    )


def test_arguments_are_checked_and_serialize_round_trips() -> None:
    trigger = ResolvedBoundaryTrigger(
        "s3://bucket/wh",
        SOURCE,
        interval=dt.timedelta(days=1),
        start=dt.datetime(2026, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))),
        poll_interval=5,
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_cdc.triggers.boundary.ResolvedBoundaryTrigger"
    assert kwargs == {
        "warehouse": "s3://bucket/wh",
        "source": SOURCE,
        "interval": 86400,
        "start": "2026-01-01T00:00:00+00:00",
        "published_cut": False,
        "poll_interval": 5,
    }
    assert json.loads(json.dumps(kwargs)) == kwargs
    assert ResolvedBoundaryTrigger(**kwargs).serialize() == (classpath, kwargs)
    assert trigger.memory_key == "airflow_cdc.boundary.dsql.resolved.86400s"
    wrong: list[tuple[dict[str, Any], str]] = [
        ({"interval": 0}, "interval must be a whole number of seconds >= 1, got 0"),
        ({"interval": 1.5}, "got 1.5"),
        ({"interval": dt.timedelta(milliseconds=10)}, "got datetime.timedelta"),
        ({"start": "{{ ds }}"}, "start must be an ISO 8601 time, got '{{ ds }}'"),
        ({"poll_interval": 0}, "poll_interval must be > 0 seconds, got 0"),
        ({"source": "../etc"}, "source must match"),
    ]
    for bad, message in wrong:
        arguments = {"warehouse": "/wh", "source": SOURCE, **bad}
        with pytest.raises(ValueError, match=re.escape(message)):
            ResolvedBoundaryTrigger(**arguments)
    with pytest.raises(TypeError, match="interval must be seconds or a timedelta, got '1h'"):
        ResolvedBoundaryTrigger("/wh", SOURCE, interval="1h")  # type: ignore[arg-type]


def test_boundary_arithmetic_doctests() -> None:
    assert doctest.testmod(boundary).failed == 0
