"""Tables applied in parallel threads of one Spark session (spark_jobs.frames.in_parallel)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from spark_jobs.frames import in_parallel
from spark_jobs.session import session_conf


def test_items_run_at_once_with_the_callers_job_properties_and_return_in_order(
    spark: Any,
) -> None:
    both_started = threading.Barrier(2, timeout=60)
    spark.sparkContext.setLocalProperty("airflow_cdc.test", "caller")

    def work(item: int) -> tuple[int, str | None, int]:
        both_started.wait()  # times out (BrokenBarrierError) unless both items run at once
        rows = spark.range(item * 10).count()
        return item, spark.sparkContext.getLocalProperty("airflow_cdc.test"), rows

    try:
        results = in_parallel(spark, work, [3, 1], workers=2)
    finally:
        spark.sparkContext.setLocalProperty("airflow_cdc.test", None)
    assert results == [(3, "caller", 30), (1, "caller", 10)]


def test_each_item_has_its_own_copy_of_the_job_properties(spark: Any) -> None:
    set_, read = threading.Barrier(2, timeout=60), threading.Barrier(2, timeout=60)

    def work(item: str) -> str | None:
        if item == "writer":
            spark.sparkContext.setLocalProperty("airflow_cdc.item", item)
        set_.wait()  # the writer has set its property before the reader looks
        seen = spark.sparkContext.getLocalProperty("airflow_cdc.item")
        read.wait()
        return seen

    assert in_parallel(spark, work, ["writer", "reader"], workers=2) == ["writer", None]
    assert spark.sparkContext.getLocalProperty("airflow_cdc.item") is None


def test_every_item_ends_before_the_first_failure_is_raised(spark: Any) -> None:
    ended: list[str] = []

    def work(item: str) -> str:
        if item == "bad":
            raise ValueError("bad table")
        time.sleep(0.5)
        ended.append(item)
        return item

    with pytest.raises(ValueError, match="bad table"):
        in_parallel(spark, work, ["bad", "slow"], workers=2)
    assert ended == ["slow"]


def test_one_item_or_one_worker_runs_in_the_callers_thread(spark: Any) -> None:
    caller = threading.get_ident()
    assert in_parallel(spark, lambda _: threading.get_ident(), ["a"]) == [caller]
    assert in_parallel(spark, lambda _: threading.get_ident(), ["a", "b"], workers=1) == [
        caller,
        caller,
    ]


def test_conf_blocks_of_parallel_threads_restore_the_setting_before_them(spark: Any) -> None:
    key = "spark.sql.codegen.wholeStage"
    spark.conf.set(key, "false")

    def work(delay: float) -> str:
        time.sleep(delay)  # the second block starts while the first is in its block
        with session_conf(spark, {key: "true"}):
            time.sleep(0.5)
            return str(spark.conf.get(key))

    try:
        assert in_parallel(spark, work, [0.0, 0.2], workers=2) == ["true", "true"]
        assert spark.conf.get(key) == "false"
    finally:
        spark.conf.unset(key)
