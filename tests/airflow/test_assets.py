"""Each table a CDC task commits is an Airflow asset named by its location."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from airflow_cdc.assets import event_extra, location_uri, partition_key, table_assets
from airflow_cdc.core.exceptions import DdlError
from airflow_cdc.operators.apply import ApplyChangesOperator

DDL = "CREATE TABLE s.a (id int PRIMARY KEY); CREATE TABLE b (id int PRIMARY KEY, v text)"


@pytest.mark.parametrize(
    ("location", "uri"),
    [
        ("/wh/s/a", "file:///wh/s/a"),
        ("file:/wh/s/a", "file:///wh/s/a"),
        ("file:///wh/s/a", "file:///wh/s/a"),
        ("s3a://bucket/wh/s/a", "s3://bucket/wh/s/a"),
        ("s3://bucket/wh/s/a", "s3://bucket/wh/s/a"),
        ("hdfs://nn:8020/wh/s/a", "hdfs://nn:8020/wh/s/a"),
    ],
)
def test_a_table_location_is_the_uri_openlineage_gives_its_dataset(location: str, uri: str) -> None:
    assert location_uri(location) == uri


@pytest.mark.parametrize("location", ["wh/s/a", "./wh/s/a", "file:wh/s/a"])
def test_a_relative_location_is_named_no_uri(location: str) -> None:
    """A relative path names no place (each process resolves it in its own working
    directory): no ``file:///wh/...`` asset or dataset for it."""
    from airflow_cdc.lineage import location_name

    with pytest.raises(ValueError, match="must be an absolute path or a URI"):
        location_uri(location)
    with pytest.raises(ValueError, match="must be an absolute path or a URI"):
        location_name(location)
    with pytest.raises(ValueError, match="must be an absolute path or a URI"):
        table_assets(location, DDL)
    # The operator declares no outlets for it; its submission refuses the warehouse.
    op = ApplyChangesOperator(task_id="a", warehouse=location, source="s", ddl=DDL)
    assert op.outlets == [] and op.table_assets == {}


def test_every_declared_table_and_history_table_is_an_asset() -> None:
    assets = table_assets("s3a://bucket/wh/", DDL, history=["public.b"])
    assert {name: asset.uri for name, asset in assets.items()} == {
        "s.a": "s3://bucket/wh/s/a",
        "public.b": "s3://bucket/wh/public/b",
        "public.b__history": "s3://bucket/wh/public/b__history",
    }
    # Not known when the DAG is parsed: no assets.
    assert table_assets("{{ var.value.cdc_warehouse }}", DDL) == {}
    assert table_assets("/wh", "{{ var.value.ddl }}") == {}


def test_the_apply_operator_declares_its_tables_as_outlets() -> None:
    op = ApplyChangesOperator(task_id="a", warehouse="/wh", source="s", ddl=DDL, history=True)
    assert sorted(asset.uri for asset in op.outlets) == [
        "file:///wh/public/b",
        "file:///wh/public/b__history",
        "file:///wh/s/a",
        "file:///wh/s/a__history",
    ]
    templated = ApplyChangesOperator(
        task_id="t", warehouse="{{ var.value.wh }}", source="s", ddl=DDL
    )
    assert templated.outlets == []
    # A bad history name declares nothing when the DAG is parsed; submission says why.
    bad = ApplyChangesOperator(task_id="b", warehouse="/wh", source="s", ddl=DDL, history=["c"])
    assert bad.outlets == []
    with pytest.raises(DdlError, match="no CREATE TABLE declares it"):
        bad.job_args({})


def test_the_outlets_name_the_warehouse_that_default_args_give() -> None:
    """Airflow fills in an argument from default_args only in the ``__init__`` that names it
    (``SparkJobOperator``'s for ``warehouse``)."""
    from airflow.sdk import DAG

    expected = ["file:///wh/public/b", "file:///wh/s/a"]
    op = ApplyChangesOperator(task_id="a", source="s", ddl=DDL, default_args={"warehouse": "/wh"})
    assert (op.warehouse, sorted(asset.uri for asset in op.outlets)) == ("/wh", expected)
    with DAG("d", schedule=None, default_args={"warehouse": "s3a://lake/wh"}):
        op = ApplyChangesOperator(task_id="a", source="s", ddl=DDL)
    assert sorted(asset.uri for asset in op.outlets) == [
        "s3://lake/wh/public/b",
        "s3://lake/wh/s/a",
    ]
    assert sorted(op.table_assets) == ["public.b", "s.a"]
    # Outlets given to the task are its own.
    mine = ApplyChangesOperator(
        task_id="m", source="s", ddl=DDL, outlets=[], default_args={"warehouse": "/wh"}
    )
    assert mine.outlets == [] and len(mine.table_assets) == 2


def test_an_event_carries_the_batch_the_counts_and_the_cut_version() -> None:
    stats = {
        "batch_id": "2026-01-01T01:00:00+00:00",
        "job_version": "2.6.0",
        "tables": {
            "public.b": {
                "changes": 5,
                "applied": 4,
                "superseded": 1,
                "quarantined": 2,
                "quarantined_by_reason": {"type_conflict": 2},
                "inserted": 3,
                "updated": 0,
                "deleted": 1,
                "version": 6,
                "history": {"versions": 5, "reclosed": 1},
            },
        },
        "cut": {
            "published": {
                "cut_at": "2026-01-01T01:00:00+00:00",
                "tables": {
                    "public.b": {"location": "/wh/public/b", "version": 7},
                    "public.b__history": {"location": "/wh/public/b__history", "version": 3},
                },
            }
        },
    }
    assert event_extra(stats, "public.b", "src") == {
        "source": "src",
        "batch_id": "2026-01-01T01:00:00+00:00",
        "job_version": "2.6.0",
        "counts": {
            "changes": 5,
            "applied": 4,
            "superseded": 1,
            "duplicate": 0,
            "quarantined": 2,
            "inserted": 3,
            "updated": 0,
            "deleted": 1,
        },
        "quarantined_by_reason": {"type_conflict": 2},
        "cut_at": "2026-01-01T01:00:00+00:00",
        "version": 7,
    }
    history = event_extra(stats, "public.b__history", "src")
    assert history["history"] == {"versions": 5, "reclosed": 1} and history["version"] == 3
    # A run of land_and_apply names the version of each job it ran.
    versions = {"land_and_apply": "1.0.1", "land_files": "1.2.28", "apply_changes": "2.6.0"}
    extra = event_extra(
        {**stats, "job_version": "1.0.1", "job_versions": versions}, "public.b", "s"
    )
    assert extra["job_version"] == "1.0.1" and extra["job_versions"] == versions
    # Without a cut the event names the version the MERGE committed; a table the run never
    # touched has no version and no counts.
    stats.pop("cut")
    assert event_extra(stats, "public.b", "src")["version"] == 6
    assert "version" not in event_extra({"tables": {}}, "s.a", "src")
    assert event_extra({"tables": {}}, "s.a", "src")["counts"]["applied"] == 0


def test_an_event_partition_is_the_interval_start_in_utc() -> None:
    start = dt.datetime(2026, 1, 1, 3, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert partition_key(start) == "2026-01-01T01:00:00"


def test_a_run_whose_cut_misses_its_interval_end_announces_no_partition() -> None:
    """With a consistent cut, the events say whether the tables are the state as of the
    interval's end; a run that published no cut there (blocked, or capped by the resolved
    timestamp) adds no partition: a task for that hour must not run on it."""
    from airflow.sdk.execution_time.context import OutletEventAccessors

    start = dt.datetime(2026, 1, 1, 1, tzinfo=dt.UTC)
    end = start + dt.timedelta(hours=1)
    op = ApplyChangesOperator(
        task_id="a",
        warehouse="/wh",
        source="s",
        ddl=DDL,
        consistent_cut=True,
        partitioned_events=True,
    )
    op.cut_at = end.isoformat()  # as the default template renders for this interval

    def announced(cut: dict[str, object]) -> list[tuple[bool, set[str]]]:
        events = OutletEventAccessors()
        stats = {"batch_id": end.isoformat(), "tables": {}, "cut": cut}
        context = {"outlet_events": events, "data_interval_start": start, "data_interval_end": end}
        op.report(stats, context)  # type: ignore[arg-type]
        return [
            (events[a].extra["interval_complete"], events[a].partition_keys)
            for a in op.table_assets.values()
        ]

    whole = (True, {partition_key(start)})
    reached = {"published": {"cut_at": end.isoformat(), "tables": {}}}
    assert announced(reached) == [whole] * len(op.table_assets)
    short = {"published": {"cut_at": (end - dt.timedelta(minutes=5)).isoformat(), "tables": {}}}
    assert announced(short) == [(False, set())] * len(op.table_assets)
    assert announced({"blocked_by": ["b0"]}) == [(False, set())] * len(op.table_assets)
    # A cut time of the DAG's own, before the interval's end: reached at that time.
    op.cut_at = (end - dt.timedelta(minutes=30)).isoformat()
    half = {"published": {"cut_at": op.cut_at, "tables": {}}}
    assert announced(half) == [whole] * len(op.table_assets)


def test_a_backfill_below_the_published_cut_names_the_cut_that_holds_its_interval(
    tmp_path: Path,
) -> None:
    """A backfill (or a re-run) after a later interval's run published a cut past its end
    publishes none and changes no table: its events name the published cut that a task for
    its interval reads, with that cut's time and versions, not the run's own counts."""
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_cdc.jobs import published_cut_path
    from tests.airflow.cut_history import append_cuts

    start = dt.datetime(2026, 1, 1, 1, tzinfo=dt.UTC)
    end = start + dt.timedelta(hours=1)
    op = ApplyChangesOperator(
        task_id="a",
        warehouse=str(tmp_path),
        source="s",
        ddl="CREATE TABLE orders (id int PRIMARY KEY)",
        consistent_cut=True,
        partitioned_events=True,
    )
    op.cut_at = end.isoformat()
    # What the apply job reports for a cut that does not move forward: none published.
    backfill = {
        "batch_id": end.isoformat(),
        "tables": {"public.orders": {"changes": 2, "version": 9}},
        "cut": {
            "at": end.isoformat(),
            "published_before": (end + dt.timedelta(hours=2)).isoformat(),
            "forward": False,
        },
    }

    def announced() -> tuple[dict[str, object], set[str]]:
        events = OutletEventAccessors()
        context = {"outlet_events": events, "data_interval_start": start, "data_interval_end": end}
        op.report(json.loads(json.dumps(backfill)), context)  # type: ignore[arg-type]
        event = events[op.table_assets["public.orders"]]
        return event.extra, event.partition_keys

    pointer = Path(published_cut_path(str(tmp_path), "s"))
    pointer.parent.mkdir(parents=True)
    newest = {
        "source": "s",
        "cut_at": "2026-01-01T04:00:00+00:00",
        "interval_start": "2026-01-01T03:00:00+00:00",
        "interval_end": "2026-01-01T04:00:00+00:00",
        "heuristic": False,
        "tables": {"public.orders": {"location": f"{tmp_path}/public/orders", "version": 8}},
    }
    pointer.write_text(json.dumps(newest))
    # Which cut holds the interval is in the cut history, which cannot be read: the events
    # name no cut, and do not claim the interval.
    extra, partitions = announced()
    assert (extra["interval_complete"], partitions) == (False, set())
    assert "cut_at" not in extra and extra["version"] == 9

    append_cuts(tmp_path, "s", {"2026-01-01T02:00:00+00:00": 5, "2026-01-01T03:00:00+00:00": 7})
    append_cuts(tmp_path, "s", {"2026-01-01T04:00:00+00:00": 8})
    extra, partitions = announced()
    assert (extra["interval_complete"], partitions) == (True, {partition_key(start)})
    assert (extra["cut_at"], extra["version"]) == ("2026-01-01T02:00:00+00:00", 5)
    # The run's XCom and its lineage name the same cut.
    stats = json.loads(json.dumps(backfill))
    op.report(stats, {"outlet_events": OutletEventAccessors()})  # type: ignore[arg-type]
    assert stats["cut"]["reached"]["cut_at"] == "2026-01-01T02:00:00+00:00"
    op.run_stats = stats
    assert op.lineage_outputs()[0].facets["version"].datasetVersion == "5"
