"""Trigger that waits, in the triggerer, until a source's resolved timestamp passes a time."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_cdc.core.exceptions import ResolvedTimestampUnavailable
from airflow_cdc.core.resolved_state import log_waiting, read_state
from airflow_cdc.cuts import cut_for, read_published


class ResolvedTimestampTrigger(BaseTrigger):
    """Fire once the resolved timestamp recorded at ``state_path`` is >= ``target``.

    :param state_path: The landing job's resolved-state file.
    :param target: ISO 8601 time the resolved timestamp must reach.
    :param poll_interval: Seconds between reads (> 0).
    :param published_cut: ``state_path`` is the apply job's published-cut file instead
        (:func:`~airflow_cdc.jobs.published_cut_path`): fire once a cut at or past ``target``
        is published, with the cut in the event.
    :param cut_history: With ``published_cut``, the cut history
        (:func:`~airflow_cdc.cuts.cut_history_location`): the event's cut is then the one at
        ``target``, else the oldest past it (:func:`~airflow_cdc.cuts.cut_for`), not the
        newest.
    """

    def __init__(
        self,
        state_path: str,
        target: str,
        poll_interval: float = 30.0,
        published_cut: bool = False,
        cut_history: str | None = None,
    ) -> None:
        super().__init__()
        self.state_path = state_path
        self.target = target
        self.poll_interval = poll_interval
        self.published_cut = published_cut
        self.cut_history = cut_history

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_cdc.triggers.resolved.ResolvedTimestampTrigger",
            {
                "state_path": self.state_path,
                "target": self.target,
                "poll_interval": self.poll_interval,
                "published_cut": self.published_cut,
                "cut_history": self.cut_history,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        target = dt.datetime.fromisoformat(self.target)
        while True:
            try:
                event = await self._event(target)
            except ResolvedTimestampUnavailable as err:
                log_waiting(self.log, err)
            else:
                if event is not None:
                    yield TriggerEvent(event)
                    return
            await asyncio.sleep(self.poll_interval)

    async def _event(self, target: dt.datetime) -> dict[str, Any] | None:
        """The event to fire, once the state reaches ``target``; else ``None`` (logged)."""
        # File reads block: keep them off the triggerer's event loop.
        cut = None
        if self.published_cut:
            cut = await asyncio.to_thread(read_published, self.state_path)
            resolved = cut.at
        else:
            resolved = await asyncio.to_thread(read_state, self.state_path)
        if resolved < target:
            self.log.info("resolved timestamp %s has not reached %s", resolved, target)
            return None
        event: dict[str, Any] = {
            "status": "success",
            "resolved_ts": resolved.isoformat(),
            "target": self.target,
        }
        if cut is not None:
            chosen = await asyncio.to_thread(cut_for, cut, self.cut_history, target)
            event["cut"] = chosen.as_dict()
        return event
