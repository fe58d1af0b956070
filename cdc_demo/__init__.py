"""The demo's change streams, their expected results and the servers they run on (kinesis-local, a
Kafka broker): for `make demo`, the tests and the bench. Not part of the provider package."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

# The example DAGs' table definitions: the demo streams write exactly these tables.
EXAMPLE_DDL = Path(__file__).resolve().parents[1] / "dags_examples" / "ddl"


def example_ddl(name: str) -> str:
    """The ``CREATE TABLE`` statements of ``dags_examples/ddl/<name>``."""
    return (EXAMPLE_DDL / name).read_text(encoding="utf-8")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a server this project starts)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cached_jars(folder: str, pattern: str, what: str) -> Path:
    """The cache's folder of jars that ``make setup`` copied from Maven Central (it must hold
    a jar matching ``pattern``)."""
    from airflow_cdc.jobs import cache_dir

    libs = Path(cache_dir(), *folder.split("/"))
    if not any(libs.glob(pattern)):
        raise FileNotFoundError(f"no {what} jars in {libs}: run `make setup`")
    return libs


def stop(process: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """Stop a server this project started: terminate, then kill what outlives ``grace``."""
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(grace)


def serve_until_stopped(banner: str) -> None:
    """Print ``banner``, then wait until Ctrl-C or SIGTERM (which unwinds like Ctrl-C, so
    that the caller's ``with`` block stops the server it started)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(banner, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
