"""The demo's change streams, their expected results and the servers they run on (kinesis-local, a
Kafka broker): for `make demo`, the tests and the bench. Not part of the provider package."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

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


class PortTaken(RuntimeError):
    """A server exited because a port ``free_port`` gave it was taken before it could bind."""


# How the servers this project starts log a taken port: Node's net module, the JVM's
# BindException, and S3Proxy, which prints only Jetty's message.
_PORT_TAKEN = ("EADDRINUSE", "Address already in use", "Failed to bind to")


def server_exited(
    what: str, process: subprocess.Popen[bytes], log: Path, ports: Iterable[int]
) -> RuntimeError:
    """The error for a server that exited while starting: its exit code and its log's end;
    a ``PortTaken`` when its log says a port was taken or one of its ``ports`` is taken now
    (a broker with no logger on its classpath exits without a word)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    taken = [port for port in ports if is_taken(port)]
    if taken or any(mark in text for mark in _PORT_TAKEN):
        return PortTaken(
            f"{what} exited with {process.returncode}, port taken {taken}: {text[-2000:]}"
        )
    return RuntimeError(f"{what} exited with {process.returncode}: {text[-2000:]}")


def is_taken(port: int) -> bool:
    """Whether another socket holds ``port`` on 127.0.0.1 now. The probe binds as the servers
    do, with ``SO_REUSEADDR``: a closed connection's port, waiting out TIME_WAIT, is free."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def wait_ready(
    what: str,
    process: subprocess.Popen[bytes],
    ready: Callable[[], object],
    log: Path,
    ports: Iterable[int],
    timeout: float,
    not_yet: tuple[type[BaseException], ...] = (OSError,),
    interval: float = 0.3,
) -> None:
    """Wait until ``ready()`` is true for a server this project started (one that raises one of
    ``not_yet`` is not ready yet). A server that exits first raises :func:`server_exited`'s
    error, from its ``log`` and its ``ports``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise server_exited(what, process, log, ports)
        try:
            if ready():
                return
        except not_yet:
            pass
        time.sleep(interval)
    raise TimeoutError(f"{what} was not ready after {timeout}s")


def listening(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``port`` takes connections: a server's clients are tried only then, as a client
    probing a closed port logs (and botocore retries) every refused connection."""
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex((host, port)) == 0


@contextmanager
def on_free_ports(start: Callable[[], AbstractContextManager[T]], attempts: int = 5) -> Iterator[T]:
    """Enter ``start()``, a server that picks its ports with ``free_port``. A port is free when
    probed, but another process may take it before the server binds it: a server that exits
    with ``PortTaken`` is started again on fresh ports, at most ``attempts`` times."""
    for attempt in range(1, attempts + 1):
        with ExitStack() as stack:
            try:
                server = stack.enter_context(start())
            except PortTaken:
                if attempt == attempts:
                    raise
                continue
            yield server
            return


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
