from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from airflow_cdc.core.exceptions import ResolvedTimestampUnavailable
from airflow_cdc.core.resolved_state import parse_state, read_state
from airflow_cdc.jobs import resolved_state_path
from airflow_cdc.sensors.resolved import ResolvedTimestampSensor
from airflow_cdc.triggers.resolved import ResolvedTimestampTrigger


def _write_state(warehouse: Path, resolved: str | None) -> str:
    path = resolved_state_path(str(warehouse), "dsql")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"source": "dsql", "resolved_ts": resolved}))
    return path


def _sensor(warehouse: Path, target: str, wait_for: str = "resolved") -> ResolvedTimestampSensor:
    return ResolvedTimestampSensor(
        task_id="wait", warehouse=str(warehouse), source="dsql", target=target, wait_for=wait_for
    )


def test_poke_waits_until_resolved_passes_the_interval_end(tmp_path: Path) -> None:
    sensor = _sensor(tmp_path, "2026-01-01T01:00:00+00:00")
    assert sensor.poke({}) is False  # nothing landed yet
    _write_state(tmp_path, None)
    assert sensor.poke({}) is False  # a shard was never read
    _write_state(tmp_path, "2026-01-01T00:59:59.999999+00:00")
    assert sensor.poke({}) is False
    _write_state(tmp_path, "2026-01-01T01:00:00+00:00")
    done = sensor.poke({})
    assert not isinstance(done, bool) and done.is_done
    assert done.xcom_value == "2026-01-01T01:00:00+00:00"


def test_the_resolved_timestamp_goes_downstream_alike_poked_or_deferred(
    tmp_path: Path,
) -> None:
    """Poked at once or fired by the trigger later, the sensor's XCom is the resolved
    timestamp it read, in the same form."""
    from airflow.sdk.exceptions import TaskDeferred

    _write_state(tmp_path, "2026-01-01T00:30:00+00:00")
    sensor = _sensor(tmp_path, "2026-01-01T01:00:00+00:00")
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})  # type: ignore[arg-type]
    _write_state(tmp_path, "2026-01-01T01:05:00+00:00")

    async def fired() -> dict:
        return (await anext(deferred.value.trigger.run())).payload

    event = asyncio.run(asyncio.wait_for(fired(), timeout=10))
    poked = sensor.poke({})
    assert not isinstance(poked, bool)
    assert sensor.execute_complete({}, event) == poked.xcom_value == "2026-01-01T01:05:00+00:00"


@pytest.mark.parametrize("wait_for", ["resolved", "cut"])
@pytest.mark.parametrize(
    "text",
    [
        '{"source": "dsql", "resolved_ts": "2026-01-01T01:',
        "[1, 2]",
        '{"cut_at": null}',
        '{"resolved_ts": 5, "cut_at": 5}',
    ],
)
def test_a_state_file_that_cannot_be_read_now_means_wait(
    tmp_path: Path, wait_for: str, text: str
) -> None:
    """A state or pointer file half-written, or not yet what it will be, is waited out by
    the sensor and by its trigger alike, as the boundary trigger does."""
    from airflow_cdc.jobs import published_cut_path

    mode = {"resolved": resolved_state_path, "cut": published_cut_path}[wait_for]
    path = Path(mode(str(tmp_path), "dsql"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    assert _sensor(tmp_path, "2026-01-01T01:00:00+00:00", wait_for).poke({}) is False
    trigger = ResolvedTimestampTrigger(
        str(path), "2026-01-01T01:00:00+00:00", poll_interval=0.05, published_cut=wait_for == "cut"
    )

    async def scenario() -> dict:
        events = trigger.run()
        pending = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.3)
        assert not pending.done()  # waiting, not failed
        if wait_for == "cut":
            _publish(tmp_path, "2026-01-01T01:00:00+00:00")
        else:
            _write_state(tmp_path, "2026-01-01T01:00:00+00:00")
        return (await asyncio.wait_for(pending, timeout=5)).payload

    assert asyncio.run(scenario())["resolved_ts"] == "2026-01-01T01:00:00+00:00"


@pytest.mark.parametrize("wait_for", ["resolved", "cut"])
def test_a_source_that_is_no_plain_name_is_a_clear_error(tmp_path: Path, wait_for: str) -> None:
    """A source such as ``a/../b`` would make the sensor read another source's state."""
    (tmp_path / "_cdc" / "resolved").mkdir(parents=True)
    (tmp_path / "_cdc" / "b.json").write_text(
        json.dumps({"source": "b", "resolved_ts": "2026-01-02T00:00:00+00:00"})
    )
    sensor = ResolvedTimestampSensor(
        task_id="w",
        warehouse=str(tmp_path),
        source="../b",
        target="2026-01-01T01:00:00+00:00",
        wait_for=wait_for,
    )
    with pytest.raises(ValueError, match="source must match"):
        sensor.poke({})


def test_bad_target_is_a_clear_error_at_execution(tmp_path: Path) -> None:
    sensor = _sensor(tmp_path, "{{ not rendered }}")  # construction never validates
    with pytest.raises(ValueError, match="target must be an ISO 8601 time"):
        sensor.poke({})


def test_state_parsing() -> None:
    assert (
        parse_state('{"resolved_ts": "2026-01-01T00:00:00"}').isoformat()
        == "2026-01-01T00:00:00+00:00"
    )
    with pytest.raises(ResolvedTimestampUnavailable):
        read_state("/nonexistent/state.json")


def test_trigger_serializes_to_json_arguments() -> None:
    trigger = ResolvedTimestampTrigger("/wh/_cdc/resolved/s.json", "2026-01-01T01:00:00+00:00", 5)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_cdc.triggers.resolved.ResolvedTimestampTrigger"
    assert json.loads(json.dumps(kwargs)) == kwargs
    assert ResolvedTimestampTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_trigger_fires_once_resolved_passes(tmp_path: Path) -> None:
    path = _write_state(tmp_path, "2026-01-01T00:30:00+00:00")
    trigger = ResolvedTimestampTrigger(path, "2026-01-01T01:00:00+00:00", poll_interval=0.05)

    async def scenario() -> dict:
        events = trigger.run()
        pending = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.2)
        assert not pending.done()  # still waiting: 00:30 < 01:00
        _write_state(tmp_path, "2026-01-01T01:05:00+00:00")
        event = await asyncio.wait_for(pending, timeout=5)
        return event.payload

    payload = asyncio.run(scenario())
    assert payload == {
        "status": "success",
        "resolved_ts": "2026-01-01T01:05:00+00:00",
        "target": "2026-01-01T01:00:00+00:00",
    }


def _publish(warehouse: Path, cut_at: str) -> str:
    from airflow_cdc.jobs import published_cut_path

    path = published_cut_path(str(warehouse), "dsql")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tables = {"public.orders": {"location": f"{warehouse}/public/orders", "version": 7}}
    state = {
        "source": "dsql",
        "cut_at": cut_at,
        "interval_start": "2026-01-01T00:00:00+00:00",
        "interval_end": "2026-01-01T01:00:00+00:00",
        "heuristic": True,
        "tables": tables,
        "batch_id": "b",
    }
    Path(path).write_text(json.dumps(state))
    return path


def _cut_sensor(warehouse: Path, target: str) -> ResolvedTimestampSensor:
    return _sensor(warehouse, target, "cut")


def test_waiting_for_a_published_cut_hands_the_cut_downstream(tmp_path: Path) -> None:
    sensor = _cut_sensor(tmp_path, "2026-01-01T01:00:00+00:00")
    _write_state(tmp_path, "2026-01-01T05:00:00+00:00")  # landed far past: not what counts
    assert sensor.poke({}) is False  # no cut published yet
    _publish(tmp_path, "2026-01-01T00:59:00+00:00")
    assert sensor.poke({}) is False
    _publish(tmp_path, "2026-01-01T01:00:00+00:00")
    done = sensor.poke({})
    assert not isinstance(done, bool) and done.is_done
    assert done.xcom_value["cut_at"] == "2026-01-01T01:00:00+00:00"
    assert done.xcom_value["tables"]["public.orders"]["version"] == 7
    with pytest.raises(ValueError, match="wait_for must be one of"):
        ResolvedTimestampSensor(task_id="w", warehouse="/wh", source="s", wait_for="tables")


def test_a_backfill_waiting_for_a_cut_gets_the_cut_of_its_own_hour(tmp_path: Path) -> None:
    """Cuts were published at 00:30, 01:00 and 02:00 (newest): the task for 01:00 reads the
    cut at 01:00, not the newest; the task for 01:30, at which none was published, the
    oldest past it (02:00); the task for 02:30 waits. Deferred, the trigger hands over the
    same cut."""
    from airflow_cdc.cuts import cut_history_location
    from airflow_cdc.jobs import published_cut_path
    from tests.airflow.cut_history import append_cuts

    def poked(target: str) -> dict | None:
        done = _cut_sensor(tmp_path, target).poke({})
        return None if isinstance(done, bool) else done.xcom_value

    def deferred(target: str) -> dict:
        trigger = ResolvedTimestampTrigger(
            published_cut_path(str(tmp_path), "dsql"),
            target,
            poll_interval=0.05,
            published_cut=True,
            cut_history=cut_history_location(str(tmp_path)),
        )
        trigger = ResolvedTimestampTrigger(**trigger.serialize()[1])

        async def first() -> dict:
            return (await asyncio.wait_for(anext(trigger.run()), timeout=5)).payload

        return asyncio.run(first())["cut"]

    append_cuts(tmp_path, "dsql", {"2026-01-01T00:30:00+00:00": 4})
    append_cuts(tmp_path, "other", {"2026-01-01T01:00:00+00:00": 99})  # another source's
    append_cuts(tmp_path, "dsql", {"2026-01-01T01:00:00+00:00": 5, "2026-01-01T02:00:00+00:00": 7})
    _publish(tmp_path, "2026-01-01T02:00:00+00:00")  # the pointer: the newest, version 7
    for target, (cut_at, version) in {
        "2026-01-01T01:00:00+00:00": ("2026-01-01T01:00:00+00:00", 5),
        "2026-01-01T00:15:00+00:00": ("2026-01-01T00:30:00+00:00", 4),
        "2026-01-01T01:30:00+00:00": ("2026-01-01T02:00:00+00:00", 7),
        "2026-01-01T02:00:00+00:00": ("2026-01-01T02:00:00+00:00", 7),
    }.items():
        for cut in (poked(target), deferred(target)):
            assert cut is not None
            assert (cut["cut_at"], cut["tables"]["public.orders"]["version"]) == (cut_at, version)
            assert cut["tables"]["public.orders"]["location"] == f"{tmp_path}/public/orders"
    assert poked("2026-01-01T02:30:00+00:00") is None


def test_a_cut_history_that_cannot_be_read_makes_the_sensor_wait(tmp_path: Path) -> None:
    """The pointer is past the target, so the cut at the target is looked up in the history;
    while that cannot be read, the sensor waits rather than handing over the newest cut: a
    log entry that is not JSON, a data file gone (read lazily: an Arrow error), or no
    history where the pointer says cuts were published (a wrong location)."""
    import shutil

    from airflow_cdc.cuts import cut_history_location
    from tests.airflow.cut_history import append_cuts

    history = Path(cut_history_location(str(tmp_path)))
    _publish(tmp_path, "2026-01-01T02:00:00+00:00")
    sensor = _cut_sensor(tmp_path, "2026-01-01T01:00:00+00:00")
    assert sensor.poke({}) is False  # no history at all
    append_cuts(tmp_path, "dsql", {"2026-01-01T01:00:00+00:00": 5})
    log = history / "_delta_log"
    (log / "00000000000000000001.json").write_text("not json\n")
    assert sensor.poke({}) is False
    (log / "00000000000000000001.json").unlink()
    [data] = history.rglob("*.parquet")
    moved = tmp_path / "aside.parquet"
    shutil.move(data, moved)
    assert sensor.poke({}) is False
    shutil.move(moved, data)
    done = sensor.poke({})
    assert not isinstance(done, bool) and done.xcom_value["cut_at"].startswith("2026-01-01T01:00")


def test_a_deferred_cut_sensor_gives_its_trigger_the_cut_history(tmp_path: Path) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_cdc.cuts import cut_history_location

    with pytest.raises(TaskDeferred) as deferred:
        _cut_sensor(tmp_path, "2026-01-01T01:00:00+00:00").execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, ResolvedTimestampTrigger)
    assert trigger.published_cut is True
    assert trigger.cut_history == cut_history_location(str(tmp_path))


def test_trigger_fires_with_the_cut_once_one_is_published_past_the_target(
    tmp_path: Path,
) -> None:
    from airflow_cdc.jobs import published_cut_path

    path = published_cut_path(str(tmp_path), "dsql")
    trigger = ResolvedTimestampTrigger(
        path, "2026-01-01T01:00:00+00:00", poll_interval=0.05, published_cut=True
    )
    kwargs = trigger.serialize()[1]
    assert kwargs["published_cut"] is True

    async def scenario() -> dict:
        events = trigger.run()
        pending = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.2)
        assert not pending.done()  # nothing published
        _publish(tmp_path, "2026-01-01T01:00:00+00:00")
        event = await asyncio.wait_for(pending, timeout=5)
        return event.payload

    payload = asyncio.run(scenario())
    assert payload["cut"]["tables"]["public.orders"]["version"] == 7
    assert payload["resolved_ts"] == "2026-01-01T01:00:00+00:00"
