"""Gate downstream tasks on the resolved timestamp of a landed source."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from airflow_cdc.core.exceptions import ResolvedTimestampUnavailable
from airflow_cdc.core.resolved_state import log_waiting, read_state
from airflow_cdc.cuts import cut_for, cut_history_location, published_cut
from airflow_cdc.jobs import check_time, published_cut_path, resolved_state_path
from airflow_cdc.triggers.resolved import ResolvedTimestampTrigger

WAIT_FOR = ("resolved", "cut")


class ResolvedTimestampSensor(BaseSensorOperator):
    """Wait until no change committed before ``target`` can still arrive.

    The landing job records the source's resolved timestamp after every run (see
    :mod:`airflow_cdc.core.resolved`); this sensor succeeds once it is at or past ``target``,
    by default the data interval's end, so a task for hour H runs only when all of H's
    changes are landed.

    With ``wait_for="cut"`` it waits instead until the apply job has *published* a
    consistent cut at or past ``target`` (``ApplyChangesOperator(consistent_cut=True)``, see
    :mod:`airflow_cdc.cuts`), and hands downstream, as its XCom, the cut at ``target`` where
    one was published, else the oldest published past it (a backfill of hour H reads H's
    state, not today's; see :func:`airflow_cdc.cuts.cut_for`): ``cut_at``, the interval,
    and each table's location and Delta version, so that a task reads every table as of
    the same point (:func:`airflow_cdc.cuts.read_cut`, or the ``deltalake`` package with
    those versions).

    :param warehouse: Warehouse root the landing job writes to.
    :param source: Landed source name.
    :param target: ISO 8601 time to wait for; default the data interval end.
    :param wait_for: ``"resolved"`` (the landed resolved timestamp) or ``"cut"`` (a published
        consistent cut).
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
        wait_for: str = "resolved",
        deferrable: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if wait_for not in WAIT_FOR:
            raise ValueError(f"wait_for must be one of {WAIT_FOR}, got {wait_for!r}")
        self.warehouse = warehouse
        self.source = source
        self.target = target
        self.wait_for = wait_for
        self.deferrable = deferrable

    def _state_path(self) -> str:
        if self.wait_for == "cut":
            return published_cut_path(self.warehouse, self.source)
        return resolved_state_path(self.warehouse, self.source)

    def _target(self) -> dt.datetime:
        return check_time(self.target, "target")

    def poke(self, context: Context) -> bool | PokeReturnValue:
        """Done once the state reaches the target, with what downstream gets as XCom: the
        cut (``wait_for="cut"``) or the resolved timestamp (ISO 8601), as when deferred.
        Waits while the state cannot be read (not written yet, being replaced, a store
        that does not answer)."""
        target = self._target()
        try:
            if self.wait_for == "cut":
                return self._poke_cut(target)
            resolved = read_state(resolved_state_path(self.warehouse, self.source))
        except ResolvedTimestampUnavailable as err:
            log_waiting(self.log, err)
            return False
        self.log.info(
            "resolved timestamp of %s is %s; waiting for %s", self.source, resolved, target
        )
        if resolved < target:
            return False
        return PokeReturnValue(is_done=True, xcom_value=resolved.isoformat())

    def _poke_cut(self, target: dt.datetime) -> bool | PokeReturnValue:
        cut = published_cut(self.warehouse, self.source)
        if cut is None or cut.at < target:
            self.log.info(
                "newest published cut of %s: %s; waiting for %s",
                self.source,
                None if cut is None else cut.at,
                target,
            )
            return False
        chosen = cut_for(cut, cut_history_location(self.warehouse), target)
        self.log.info(
            "published cut of %s at %s reaches %s%s",
            self.source,
            chosen.at,
            target,
            "" if chosen.at == target else " (no cut was published at it)",
        )
        return PokeReturnValue(is_done=True, xcom_value=chosen.as_dict())

    def execute(self, context: Context) -> Any:
        if not self.deferrable or self.poke(context):
            return super().execute(context)
        self.defer(
            trigger=ResolvedTimestampTrigger(
                state_path=self._state_path(),
                target=self._target().isoformat(),
                poll_interval=float(self.poke_interval),
                published_cut=self.wait_for == "cut",
                cut_history=cut_history_location(self.warehouse),
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        self.log.info("resolved timestamp %s reached %s", event["resolved_ts"], event["target"])
        if "cut" in event:
            return event["cut"]
        return event["resolved_ts"]
