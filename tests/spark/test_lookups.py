"""The jobs' sessions resolve a JVM class and its static methods once (spark_jobs.lookups).

The counts hold for the sessions' own setup: PySpark's pinned threads (each Python thread
its own ``ClientServerConnection``) and no call-site recording
(``spark.python.sql.dataFrameDebugging.enabled``, off in the jobs' conf and the suite's).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from py4j.clientserver import ClientServerConnection
from pyspark.sql import functions as F

from spark_jobs.lookups import remember_lookups

pytestmark = pytest.mark.spark


class RoundTrips:
    """Commands this thread sends to the JVM while counting: not py4j's finalizer thread's
    (it frees the JVM's side of dropped objects whenever it wakes), nor any other's."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.commands: list[str] = []
        mine = threading.get_ident()
        send = ClientServerConnection.send_command

        def counted(connection: Any, command: str) -> Any:
            if threading.get_ident() == mine:
                self.commands.append(command)
            return send(connection, command)

        monkeypatch.setattr(ClientServerConnection, "send_command", counted)


@pytest.fixture
def trips(spark: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[RoundTrips]:
    remember_lookups()  # the session fixture installed it already: a second call is a no-op
    yield RoundTrips(monkeypatch)


def size_of(x: Any) -> Any:
    return F.when(x > 1, F.lit("big")).otherwise(F.lit("small")).alias("size")


def test_a_function_call_is_one_round_trip(spark: Any, trips: RoundTrips) -> None:
    size_of(F.col("x"))  # the first use of each name resolves it
    trips.commands.clear()
    column = size_of(F.col("x"))
    # Calls only ("c"): no reflection ("r") resolves a class or a method again.
    assert [command[0] for command in trips.commands] == ["c"] * len(trips.commands)
    # col, >, when, lit, otherwise, lit, alias: one round trip each.
    assert len(trips.commands) == 7, trips.commands
    rows = spark.createDataFrame([(0,), (5,)], "x INT").select(column).collect()
    assert [r.size for r in rows] == ["small", "big"]


def test_a_static_field_is_read_each_time(spark: Any, trips: RoundTrips) -> None:
    integer = getattr(spark.sparkContext._jvm, "java.lang.Integer")
    assert integer.MAX_VALUE == 2**31 - 1
    assert "MAX_VALUE" not in vars(integer)  # a field's value may change: never kept
    trips.commands.clear()
    assert integer.MAX_VALUE == 2**31 - 1
    assert len(trips.commands) == 1


def test_a_package_is_not_kept(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    F.lit(1)  # PySpark's functions, through a class this view keeps
    getattr(jvm, "no.such.package")
    # A package (or a class not loaded yet: py4j answers "package") may become a class.
    assert "no.such.package" not in vars(jvm)
    assert "org.apache.spark.sql.functions" in vars(jvm)  # what PySpark's functions use
