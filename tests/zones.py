"""Run a block with the driver's Python in another time zone (the JVM and the Spark
session stay in UTC): a TIMESTAMP collected from Spark comes back naive in the local zone,
so code that lets one leave Spark shows it only where the local zone is not UTC."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# East of UTC by a fraction of an hour, with daylight saving time (UTC+10:30 in January).
ADELAIDE = "Australia/Adelaide"


@contextmanager
def local_zone(name: str) -> Iterator[None]:
    before = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def utc_times(frame: Any) -> Any:
    """``frame`` with each TIMESTAMP column as the session (UTC) shows it: a TIMESTAMP_NTZ,
    which collects as a naive UTC datetime whatever the local zone (a TIMESTAMP collects
    naive in the local zone, ambiguous in a daylight-saving fold)."""
    from pyspark.sql.types import TimestampType

    return frame.select(
        *(
            frame[f"`{field.name}`"].cast("timestamp_ntz").alias(field.name)
            if isinstance(field.dataType, TimestampType)
            else frame[f"`{field.name}`"]
            for field in frame.schema.fields
        )
    )
