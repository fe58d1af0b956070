"""Shared fixtures: one Spark session for the whole run, and warehouses in temp dirs."""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.zones import ADELAIDE

REPO = Path(__file__).resolve().parent.parent

# The suite runs where the driver's clock is not UTC: its Python and every JVM it starts
# (the jobs' Spark sessions stay in UTC). A TIMESTAMP collected from Spark comes back naive
# in the local zone; code that read one as UTC moved resolved timestamps and reassembly's
# clock by the zone's offset, and passed on a machine set to UTC.
os.environ["TZ"] = ADELAIDE
time.tzset()

# Every JVM the tests start but their shared session is short-lived: the jobs'
# spark-submits and subprocesses, the brokers', a standalone cluster's daemons and the
# executors they start (of this environment, cdc_demo.spark_cluster passes them
# JAVA_TOOL_OPTIONS). The JIT's optimizing tier costs more than it saves in a run of a few
# hundred records (a crash test's two jobs ran about 15% faster without it). The JVM reads
# these before its command line. That tier off, the JVM reserves only 48 MB for compiled
# code, which an apply's two table threads outgrow ("Out of space in CodeCache for method
# handle intrinsic" kills the driver): the default 240 MB again.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
os.environ.setdefault("AIRFLOW_CDC_CACHE", str(REPO / ".cache"))
if "JAVA_TOOL_OPTIONS" not in os.environ:
    # And each maps the Spark classes that ``make setup`` archived (spark_jobs.class_archive).
    from airflow_cdc.jobs import class_archive, class_archive_options

    archive = class_archive()
    mapped = class_archive_options(archive) if archive else None
    os.environ["JAVA_TOOL_OPTIONS"] = " ".join(filter(None, [SHORT_LIVED_JVM, mapped]))
# Airflow reads its home at import: point it at a throwaway SQLite database for this run.
os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="airflow-cdc-tests-")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags_examples")
# spark-submit and airflow are next to this interpreter; Python workers must inherit the
# (kinesis-local) credentials, so they are set before any Spark worker starts.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


# The shared session's own settings, for speed alone (what the jobs compute does not depend
# on them). It has no UI: each query's plan described in the simple form, not the formatted
# one (which walks the plan again for every operator's details).
SUITE_SESSION_CONF = {"spark.sql.ui.explainMode": "simple"}


SUITE_JIT = "-XX:TieredStopAtLevel=4 -XX:InlineSmallCode=1000 -XX:MaxInlineLevel=6"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from airflow_cdc.jobs import JAVA_OPTIONS
    from spark_jobs.session import get_session

    # This one runs the whole suite: its command line turns the optimizing tier back on, with
    # less inlining than JDK 17's 2,500 bytes and 15 levels. Its queries are many and small,
    # and the JIT never stops compiling them: seven minutes into a run, the compiler threads
    # had 45% of a worker's JVM CPU, the tasks 13%. Four modules (test_history, test_cuts,
    # test_typed_streams, test_pipeline_files) under two workers: 568-577 s (1,081-1,094
    # CPU-seconds) with the defaults, 529 s (991) with this, 528 s inlining less still,
    # 583 s with the optimizing tier off.
    jvm = {"spark.driver.extraJavaOptions": f"{JAVA_OPTIONS} {SUITE_JIT}"}
    session = get_session(
        "airflow-cdc-tests", master="local[2]", conf={**SUITE_SESSION_CONF, **jvm}
    )
    yield session
    session.stop()
    # py4j's connections log their closing as they are collected, after a pytest-xdist
    # worker has closed its output: "Logging error" tracebacks, nothing more.
    logging.getLogger("py4j").setLevel(logging.WARNING)


# Seconds each module took in a `make test` run (its tests' setup, call and teardown), to
# hand the longest out first; ``pytest --module-times=tests/module_times.json`` writes them.
MODULE_TIMES = REPO / "tests" / "module_times.json"
# A module the file does not name yet: about what one of its kind takes.
UNTIMED = {"slow": 150.0, "spark": 30.0, "": 1.0}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--module-times",
        metavar="PATH",
        help="write the seconds each test module took, as JSON, to PATH",
    )


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that takes the shared session (the ``spark`` fixture, itself or through
    another fixture) is marked ``spark``, so ``make test-fast`` leaves it out whatever its
    module says. Then the modules longest first, by the seconds ``tests/module_times.json``
    recorded (or their kind's, for one it does not name), each module's tests together and
    in their order: under ``make test``'s workers (pytest-xdist, a module to a worker) the
    short modules fill the end of the run, where a long module given out last leaves the
    other worker idle until it ends."""
    cost = json.loads(MODULE_TIMES.read_text()) if MODULE_TIMES.exists() else {}
    guessed: dict[str, float] = {}
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
        kind = next((m for m in ("slow", "spark") if item.get_closest_marker(m)), "")
        module = module_of(item.nodeid)
        guessed[module] = max(guessed.get(module, 0.0), UNTIMED[kind])
    seconds = {module: cost.get(module, guess) for module, guess in guessed.items()}
    items.sort(key=lambda item: -seconds[module_of(item.nodeid)])


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class ModuleTimes:
    """Sums each module's test phases as the reports arrive (under pytest-xdist, in the
    process that runs the workers) and writes them at the end, longest first, over what the
    file held: a run of some modules keeps the others' seconds."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = module_of(report.nodeid)
        self.seconds[module] = self.seconds.get(module, 0.0) + report.duration

    def pytest_sessionfinish(self) -> None:
        held = json.loads(self.path.read_text()) if self.path.exists() else {}
        ranked = sorted({**held, **self.seconds}.items(), key=lambda kv: -kv[1])
        text = json.dumps({m: round(s, 1) for m, s in ranked}, indent=1)
        self.path.write_text(text + "\n")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--module-times")
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(ModuleTimes(path), "module-times")


@pytest.fixture(autouse=True)
def _shared_session_first(request: pytest.FixtureRequest) -> None:
    """A Spark test that runs a job in this process without the ``spark`` fixture would start
    the session itself, with the short-lived JVM's options: the fixture's comes first."""
    if request.node.get_closest_marker("spark") is not None:
        request.getfixturevalue("spark")


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    return str(tmp_path / "warehouse")


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """A migrated SQLite metadata database for tests that run DAGs."""
    from cdc_demo.environment import migrate

    migrate({"AIRFLOW_HOME": os.environ["AIRFLOW_HOME"]})
    return os.environ["AIRFLOW_HOME"]


@pytest.fixture(scope="session")
def kinesis_endpoint() -> Iterator[str]:
    """A kinesis-local server on loopback for the whole run."""
    from cdc_demo.kinesis import kinesis_local

    with kinesis_local() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """A real Kafka broker (KRaft mode) for the whole run."""
    from cdc_demo.kafka import kafka_broker

    with kafka_broker() as bootstrap:
        yield bootstrap
