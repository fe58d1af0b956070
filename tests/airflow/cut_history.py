"""A source's cut history (``_cdc/cuts``) as the apply job appends it, written here with
delta-rs for the sensor and trigger tests, which run without Spark. The columns and the
partitioning are those of ``spark_jobs.cut.CUTS_SCHEMA``; ``tests/spark/test_cuts.py``
reads the history the apply job itself writes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from airflow_cdc.cuts import cut_history_location


def append_cuts(warehouse: Path, source: str, cuts: dict[str, int]) -> None:
    """Append one published cut per ``cut_at`` (ISO 8601) to the history, each naming the
    table ``public.orders`` at the given Delta version."""
    import pyarrow as pa
    from deltalake import write_deltalake

    utc = pa.timestamp("us", tz="UTC")
    times = [dt.datetime.fromisoformat(at) for at in cuts]
    rows = pa.table(
        {
            "cut_at": pa.array(times, utc),
            "interval_start": pa.array([at - dt.timedelta(hours=1) for at in times], utc),
            "interval_end": pa.array(times, utc),
            "heuristic": pa.array([False] * len(cuts)),
            "tables": pa.array(
                [[("public.orders", v)] for v in cuts.values()], pa.map_(pa.string(), pa.int64())
            ),
            "locations": pa.array(
                [[("public.orders", f"{warehouse}/public/orders")]] * len(cuts),
                pa.map_(pa.string(), pa.string()),
            ),
            "batch_id": pa.array([f"b{v}" for v in cuts.values()]),
            "run_id": pa.array(["r"] * len(cuts)),
            "published_at": pa.array([dt.datetime.now(dt.UTC)] * len(cuts), utc),
            "source": pa.array([source] * len(cuts)),
        }
    )
    location = cut_history_location(str(warehouse))
    write_deltalake(location, rows, mode="append", partition_by=["source"])
