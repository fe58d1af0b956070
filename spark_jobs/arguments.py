"""The command-line arguments the jobs share, and the argument types that check them."""

from __future__ import annotations

import argparse
import datetime as dt
import math
import re
from collections.abc import Callable

from airflow_cdc.jobs import check_source, check_time

BATCH_ID = re.compile(r"[A-Za-z0-9_.:+\-]{1,64}")


def base_parser(description: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--warehouse", required=True, help="warehouse root path or URI")
    parser.add_argument(
        "--batch-id",
        required=True,
        type=batch_id,
        help="the batch (Airflow data interval end, ISO 8601) being processed",
    )
    parser.add_argument("--run-id", default="manual", help="Airflow run id, kept in commits")
    parser.add_argument("--stats-file", help="where to write the run's counts as JSON")
    return parser


def add_table_arguments(parser: argparse.ArgumentParser) -> None:
    """The target tables of a source: ``--ddl`` and ``--default-schema``."""
    parser.add_argument("--ddl", required=True, help="CREATE TABLE statements of the targets")
    parser.add_argument("--default-schema", default="public")


def at_least(minimum: float, unit: str, most: float | None = None) -> Callable[[str], float]:
    """An argument type: a finite number of ``unit`` no smaller than ``minimum`` (and no
    larger than ``most``)."""

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        if not number >= minimum or not math.isfinite(number):
            raise argparse.ArgumentTypeError(f"must be >= {minimum} {unit}, got {value!r}")
        if most is not None and number > most:
            raise argparse.ArgumentTypeError(f"must be <= {most} {unit}, got {value!r}")
        return number

    return parse


def positive_count(unit: str, most: int | None = None) -> Callable[[str], int]:
    """An argument type: a whole number of ``unit``, at least 1 (and at most ``most``)."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = 0
        if number < 1:
            raise argparse.ArgumentTypeError(f"must be a whole number >= 1 of {unit}: {value!r}")
        if most is not None and number > most:
            raise argparse.ArgumentTypeError(f"must be at most {most:,} {unit}: {value!r}")
        return number

    return parse


def batch_id(value: str) -> str:
    """A batch id names an interval (``2026-01-01T01:00:00+00:00``); it is quoted into
    predicates, so only the characters of such names are allowed."""
    if not value or not BATCH_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(f"batch id must match {BATCH_ID.pattern}, got {value!r}")
    return value


def instant(value: str) -> dt.datetime:
    """An ISO 8601 time; one without an offset is UTC."""
    try:
        return check_time(value, "the argument")
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 time, got {value!r}") from err


def source_name(value: str) -> str:
    """A source names a partition and a file under the warehouse: a plain name only."""
    try:
        return check_source(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def landed_source(parser: argparse.ArgumentParser, given: str | None, named: str) -> str:
    """The source a landing job lands: ``--source`` (checked as it was parsed), else the
    stream or topic ``named``, which must be a plain source name too: a source names
    directories under the warehouse that the landing writes and clears (a stream named
    ``..`` would be the bookkeeping itself). The parser's error, before any work, where it
    is not."""
    if given is not None:
        return given
    try:
        return check_source(named)
    except ValueError as err:
        parser.error(f"{err}: name the source with --source")
