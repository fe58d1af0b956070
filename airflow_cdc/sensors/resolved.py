"""Gate downstream tasks on the resolved timestamp of a landed source."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context

from airflow_cdc.core.exceptions import ResolvedTimestampUnavailable
from airflow_cdc.core.resolved_state import read_state
from airflow_cdc.jobs import resolved_state_path
from airflow_cdc.triggers.resolved import ResolvedTimestampTrigger


class ResolvedTimestampSensor(BaseSensorOperator):
    """Wait until no change committed before ``target`` can still arrive.

    The landing job records the source's resolved timestamp after every run (see
    :mod:`airflow_cdc.core.resolved`); this sensor succeeds once it is at or past ``target``,
    by default the data interval's end, so a task for hour H runs only when all of H's
    changes are landed.

    :param warehouse: Warehouse root the landing job writes to.
    :param source: Landed source name.
    :param target: ISO 8601 time to wait for; default the data interval end.
    :param deferrable: Wait in the triggerer instead of occupying a worker slot.
    """

    template_fields: Sequence[str] = ("warehouse", "source", "target")
    ui_color = "#fdf2d0"

    def __init__(
        self,
        *,
        warehouse: str,
        source: str,
        target: str = "{{ data_interval_end | ts }}",
        deferrable: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.warehouse = warehouse
        self.source = source
        self.target = target
        self.deferrable = deferrable

    def _target(self) -> dt.datetime:
        try:
            parsed = dt.datetime.fromisoformat(self.target)
        except (TypeError, ValueError) as err:
            raise ValueError(f"target must be an ISO 8601 time, got {self.target!r}") from err
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)

    def poke(self, context: Context) -> bool:
        target = self._target()
        try:
            resolved = read_state(resolved_state_path(self.warehouse, self.source))
        except ResolvedTimestampUnavailable as err:
            self.log.info("waiting: %s", err)
            return False
        self.log.info(
            "resolved timestamp of %s is %s; waiting for %s", self.source, resolved, target
        )
        return resolved >= target

    def execute(self, context: Context) -> Any:
        if not self.deferrable or self.poke(context):
            return super().execute(context)
        self.defer(
            trigger=ResolvedTimestampTrigger(
                state_path=resolved_state_path(self.warehouse, self.source),
                target=self._target().isoformat(),
                poll_interval=float(self.poke_interval),
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> str:
        self.log.info("resolved timestamp %s reached %s", event["resolved_ts"], event["target"])
        return str(event["resolved_ts"])
