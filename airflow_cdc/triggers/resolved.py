"""Trigger that waits, in the triggerer, until a source's resolved timestamp passes a time."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_cdc.core.exceptions import ResolvedTimestampUnavailable
from airflow_cdc.core.resolved_state import read_state
from airflow_cdc.cuts import read_published


class ResolvedTimestampTrigger(BaseTrigger):
    """Fire once the resolved timestamp recorded at ``state_path`` is >= ``target``.

    :param state_path: The landing job's resolved-state file.
    :param target: ISO 8601 time the resolved timestamp must reach.
    :param poll_interval: Seconds between reads (> 0).
    :param published_cut: ``state_path`` is the apply job's published-cut file instead
        (:func:`~airflow_cdc.jobs.published_cut_path`): fire once a cut at or past ``target``
        is published, with the cut in the event.
    """

    def __init__(
        self,
        state_path: str,
        target: str,
        poll_interval: float = 30.0,
        published_cut: bool = False,
    ) -> None:
        super().__init__()
        self.state_path = state_path
        self.target = target
        self.poll_interval = poll_interval
        self.published_cut = published_cut

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_cdc.triggers.resolved.ResolvedTimestampTrigger",
            {
                "state_path": self.state_path,
                "target": self.target,
                "poll_interval": self.poll_interval,
                "published_cut": self.published_cut,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        target = dt.datetime.fromisoformat(self.target)
        while True:
            try:
                # File reads block: keep them off the triggerer's event loop.
                cut = None
                if self.published_cut:
                    cut = await asyncio.to_thread(read_published, self.state_path)
                    resolved = cut.at
                else:
                    resolved = await asyncio.to_thread(read_state, self.state_path)
            except ResolvedTimestampUnavailable as err:
                self.log.info("waiting: %s", err)
            else:
                if resolved >= target:
                    event: dict[str, Any] = {
                        "status": "success",
                        "resolved_ts": resolved.isoformat(),
                        "target": self.target,
                    }
                    if cut is not None:
                        event["cut"] = cut.as_dict()
                    yield TriggerEvent(event)
                    return
                self.log.info("resolved timestamp %s has not reached %s", resolved, target)
            await asyncio.sleep(self.poll_interval)
