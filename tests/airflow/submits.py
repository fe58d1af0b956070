"""spark-submit replaced, for operator tests: each submission writes the job's counts where
the job would (its ``--stats-file``), and nothing runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_cdc.operators import base
from airflow_cdc.submit import SubmitSpec

Counts = Callable[[base.SparkJobOperator, SubmitSpec], dict[str, Any]]


def argument(args: list[str], option: str) -> str:
    """The value a job's arguments give ``option`` (as ``--name=value``)."""
    return next(a.split("=", 1)[1] for a in args if a.startswith(f"{option}="))


def fake_submit(
    monkeypatch: pytest.MonkeyPatch, counts: Counts, error: BaseException | None = None
) -> list[SubmitSpec]:
    """Submissions write ``counts(operator, spec)`` as the job's counts, then raise ``error``
    if given (a job that failed after writing them). Returns the submitted specs."""
    specs: list[SubmitSpec] = []

    def submit(self: base.SparkJobOperator, spec: SubmitSpec) -> None:
        specs.append(spec)
        args = spec.application_args
        written = Path(argument(args, "--stats-file"))
        written.parent.mkdir(parents=True)
        written.write_text(json.dumps(counts(self, spec)))
        if error is not None:
            raise error

    monkeypatch.setattr(base.SparkJobOperator, "submit", submit)
    monkeypatch.setattr(base, "ensure_jars", lambda: ["/jars/delta.jar"])
    monkeypatch.setattr(base, "library_archive", lambda: Path("/lib/airflow_cdc.zip"))
    return specs
