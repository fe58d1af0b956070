"""Times as they cross between Spark and Python: microseconds since the epoch, aware datetimes."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column
from pyspark.sql import functions as F


def from_micros(micros: int | None) -> dt.datetime | None:
    """A time in microseconds since the epoch as an aware datetime (how a time leaves Spark:
    a collected TIMESTAMP is naive in the driver's local zone, not the session's)."""
    if micros is None:
        return None
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)


def to_micros(value: dt.datetime) -> int:
    """An aware datetime in microseconds since the epoch (a naive one raises TypeError: a
    TIMESTAMP collected from Spark is naive in the driver's local zone)."""
    return (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def horizon_us() -> Column:
    """A checkpoint's horizon as it leaves Spark: microseconds since the epoch. A collected
    TIMESTAMP arrives naive in the driver's local zone, not the session's, so none is."""
    return F.unix_micros("horizon_ts").alias("horizon_us")
