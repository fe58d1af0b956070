"""The demo's change streams, their expected results and the servers they run on (kinesis-local, a
Kafka broker): for `make demo`, the tests and the bench. Not part of the provider package."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

# The example DAGs' table definitions: the demo streams write exactly these tables.
EXAMPLE_DDL = Path(__file__).resolve().parents[1] / "dags_examples" / "ddl"


def example_ddl(name: str) -> str:
    """The ``CREATE TABLE`` statements of ``dags_examples/ddl/<name>``."""
    return (EXAMPLE_DDL / name).read_text(encoding="utf-8")


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
