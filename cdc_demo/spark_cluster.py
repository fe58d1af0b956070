"""A Spark standalone cluster on 127.0.0.1 (one master, one worker), for tests and the demo:
started with ``spark-class`` from the installed pyspark, which ships the standalone daemons.

The worker's executors are processes of their own: they share nothing with a driver but this
machine's files (the virtualenv named by ``spark.pyspark.python``, Delta's jars, which the
driver serves them) and what a submit ships them.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdc_demo import free_port, on_free_ports, stop, wait_ready

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Cluster:
    master: str  # spark://127.0.0.1:PORT
    web_ui: str  # the master's web UI
    work_dir: Path  # the worker's directory: one folder per application, executor logs in it


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


# What the daemons (and so the executors they start) take from this process's environment:
# nothing that could carry a credential, so that an executor has only what a submit ships it.
# (Their HOME is their scratch directory: no ~/.aws there either.) JAVA_TOOL_OPTIONS holds
# the machine's JVM flags (the tests' short-lived JVMs and class archive), which the
# executors, started by the worker with its environment, then run with too.
_PASSED_ENV = ("PATH", "JAVA_HOME", "LANG", "TMPDIR", "JAVA_TOOL_OPTIONS")


def _daemon(home: Path, log: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    passed = {k: os.environ[k] for k in _PASSED_ENV if k in os.environ}
    with log.open("w") as out:
        return subprocess.Popen(
            [str(home / "bin" / "spark-class"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**passed, "SPARK_HOME": str(home), **env},
            start_new_session=True,
        )


def master_state(web_ui: str) -> dict[str, Any]:
    """The master's state as its web UI's JSON endpoint reports it."""
    with urllib.request.urlopen(f"{web_ui}/json/", timeout=5) as response:
        state: dict[str, Any] = json.load(response)
    return state


@contextmanager
def standalone_cluster(
    cores: int = 2, memory: str = "3g", startup_timeout: float = 90.0
) -> Iterator[Cluster]:
    """Start a master and a worker on free loopback ports; yields once the worker is ALIVE
    at the master; stops both and deletes their directories."""
    with on_free_ports(lambda: _started(cores, memory, startup_timeout)) as cluster:
        yield cluster


@contextmanager
def _started(cores: int, memory: str, startup_timeout: float) -> Iterator[Cluster]:
    home = spark_home()
    with tempfile.TemporaryDirectory(prefix="airflow-cdc-spark-") as scratch:
        port, ui_port, worker_ui = free_port(), free_port(), free_port()
        master_url, web_ui = f"spark://{HOST}:{port}", f"http://{HOST}:{ui_port}"
        work_dir = Path(scratch, "work")
        # The daemons' own directories and logs stay in the scratch directory.
        env = {
            "HOME": scratch,
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOG_DIR": scratch,
            "SPARK_WORKER_DIR": str(work_dir),
            # A daemon whose port was taken exits, to be started on fresh ports, rather than
            # listening on the next port up, where nothing would look for it.
            "SPARK_DAEMON_JAVA_OPTS": "-Dspark.port.maxRetries=0",
        }
        master_log, worker_log = Path(scratch, "master.log"), Path(scratch, "worker.log")
        master = _daemon(
            home,
            master_log,
            "org.apache.spark.deploy.master.Master",
            *("--host", HOST, "--port", str(port), "--webui-port", str(ui_port)),
            env=env,
        )
        processes = [master]
        try:
            wait_ready(
                "the Spark master",
                master,
                lambda: master_state(web_ui).get("status") == "ALIVE",
                master_log,
                (port, ui_port),
                startup_timeout,
                interval=0.5,
            )
            worker = _daemon(
                home,
                worker_log,
                "org.apache.spark.deploy.worker.Worker",
                master_url,
                *("--host", HOST, "--cores", str(cores), "--memory", memory),
                *("--webui-port", str(worker_ui), "--work-dir", str(work_dir)),
                env=env,
            )
            processes.append(worker)
            wait_ready(
                "the Spark worker",
                worker,
                lambda: _alive_workers(web_ui) > 0,
                worker_log,
                (worker_ui,),
                startup_timeout,
                interval=0.5,
            )
            yield Cluster(master_url, web_ui, work_dir)
        finally:
            for process in reversed(processes):
                stop(process)


def _alive_workers(web_ui: str) -> int:
    workers = master_state(web_ui).get("workers") or []
    return sum(1 for w in workers if w.get("state") == "ALIVE")


if __name__ == "__main__":  # python -m cdc_demo.spark_cluster: a cluster until Ctrl-C
    from cdc_demo import serve_until_stopped

    with standalone_cluster() as cluster:
        serve_until_stopped(
            f"Spark standalone master at {cluster.master} (web UI {cluster.web_ui});"
            " point spark_default at it; Ctrl-C stops it"
        )
