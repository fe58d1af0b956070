"""Trigger that waits, in the triggerer, until a source's resolved timestamp passes a time."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_cdc.core.exceptions import ResolvedTimestampUnavailable
from airflow_cdc.core.resolved_state import read_state


class ResolvedTimestampTrigger(BaseTrigger):
    """Fire once the resolved timestamp recorded at ``state_path`` is >= ``target``.

    :param state_path: The landing job's resolved-state file.
    :param target: ISO 8601 time the resolved timestamp must reach.
    :param poll_interval: Seconds between reads (> 0).
    """

    def __init__(self, state_path: str, target: str, poll_interval: float = 30.0) -> None:
        super().__init__()
        self.state_path = state_path
        self.target = target
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_cdc.triggers.resolved.ResolvedTimestampTrigger",
            {
                "state_path": self.state_path,
                "target": self.target,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        target = dt.datetime.fromisoformat(self.target)
        while True:
            try:
                # File reads block: keep them off the triggerer's event loop.
                resolved = await asyncio.to_thread(read_state, self.state_path)
            except ResolvedTimestampUnavailable as err:
                self.log.info("waiting: %s", err)
            else:
                if resolved >= target:
                    yield TriggerEvent(
                        {
                            "status": "success",
                            "resolved_ts": resolved.isoformat(),
                            "target": self.target,
                        }
                    )
                    return
                self.log.info("resolved timestamp %s has not reached %s", resolved, target)
            await asyncio.sleep(self.poll_interval)
