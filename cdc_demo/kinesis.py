"""Run the kinesis-local server and fill a stream, for the demo and the end-to-end tests."""

from __future__ import annotations

import os
import random
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from cdc_demo import free_port, is_taken, listening, on_free_ports, stop, wait_ready

REPO = Path(__file__).resolve().parents[1]
SERVER = REPO / "node_modules" / "kinesis-local" / "main.js"
CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}
REGION = "us-east-1"


@contextmanager
def kinesis_local(port: int | None = None, log_path: str | None = None) -> Iterator[str]:
    """Start kinesis-local on loopback; yields its endpoint URL and stops it afterwards. The
    server's log goes to ``log_path`` (default: a temporary file, read if it fails to start)."""
    if not SERVER.exists():
        raise FileNotFoundError(f"{SERVER} is missing: run `make setup` (npm install)")
    with tempfile.TemporaryDirectory(prefix="airflow-cdc-kinesis-") as home:
        log = Path(log_path or Path(home, "kinesis-local.log"))

        def start() -> AbstractContextManager[str]:
            # Fresh ports help only with the ports picked here, not with one the caller chose.
            if port and is_taken(port):
                raise RuntimeError(f"port {port} for kinesis-local is taken on 127.0.0.1")
            return _started(port or free_port(), log)

        with on_free_ports(start) as endpoint:
            yield endpoint


@contextmanager
def _started(port: int, log_path: Path) -> Iterator[str]:
    tls = free_port()
    env = dict(os.environ)
    env.update(
        {
            "KINESIS_MOCK_PLAIN_PORT": str(port),
            "KINESIS_MOCK_TLS_PORT": str(tls),
            "KINESIS_MOCK_CERT_PATH": str(SERVER.parent / "server.json"),
            "LOG_LEVEL": "WARN",
            "CREATE_STREAM_DURATION": "100ms",
            "SPLIT_SHARD_DURATION": "100ms",
            "MERGE_SHARDS_DURATION": "100ms",
        }
    )
    with log_path.open("w") as log:
        process = subprocess.Popen(["node", str(SERVER)], env=env, stdout=log, stderr=log)
    try:
        _wait_ready(port, process, log_path, tls)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(process, grace=10)


def _wait_ready(port: int, process: subprocess.Popen[bytes], log: Path, tls: int) -> None:
    """Wait until the server answers a Kinesis call. A port that takes connections is not
    enough: it may be another process's, taken before the server could bind it."""
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    probe = Config(retries={"total_max_attempts": 1}, connect_timeout=1, read_timeout=2)
    kinesis = client(f"http://127.0.0.1:{port}", probe)
    wait_ready(
        f"kinesis-local on port {port}",
        process,
        lambda: listening(port) and kinesis.list_streams(Limit=1),
        log,
        (port, tls),
        timeout=30.0,
        not_yet=(BotoCoreError, ClientError),
        interval=0.2,
    )


def client(endpoint: str, config: Any = None) -> Any:
    """A boto3 Kinesis client of the server at ``endpoint`` (``config``: a botocore Config)."""
    import boto3

    return boto3.client(
        "kinesis",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=CREDENTIALS["aws_access_key_id"],
        aws_secret_access_key=CREDENTIALS["aws_secret_access_key"],
        config=config,
    )


def create_stream(kinesis: Any, stream: str, shards: int) -> None:
    kinesis.create_stream(StreamName=stream, ShardCount=shards)
    wait_active(kinesis, stream)


def wait_active(kinesis: Any, stream: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        summary = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
        if summary["StreamStatus"] == "ACTIVE":
            return
        time.sleep(0.1)
    raise TimeoutError(f"stream {stream} not ACTIVE within {timeout}s")


def put(kinesis: Any, stream: str, deliveries: list[str], seed: int = 3, batch: int = 400) -> None:
    """Put records in order with random hash keys (DSQL's "randomized partition key")."""
    rng = random.Random(seed)
    for start in range(0, len(deliveries), batch):
        entries = [
            {
                "Data": text.encode("utf-8"),
                "PartitionKey": f"pk-{rng.getrandbits(32)}",
                "ExplicitHashKey": str(rng.randrange(2**128)),
            }
            for text in deliveries[start : start + batch]
        ]
        while entries:
            result = kinesis.put_records(StreamName=stream, Records=entries)
            entries = [
                e for e, r in zip(entries, result["Records"], strict=True) if "ErrorCode" in r
            ]


def split_first_shard(kinesis: Any, stream: str) -> str:
    """Split the first open shard in two at its middle hash key; returns its id."""
    shards = kinesis.list_shards(StreamName=stream)["Shards"]
    shard = next(s for s in shards if "EndingSequenceNumber" not in s["SequenceNumberRange"])
    low = int(shard["HashKeyRange"]["StartingHashKey"])
    high = int(shard["HashKeyRange"]["EndingHashKey"])
    kinesis.split_shard(
        StreamName=stream, ShardToSplit=shard["ShardId"], NewStartingHashKey=str((low + high) // 2)
    )
    wait_active(kinesis, stream)
    return str(shard["ShardId"])


def main() -> None:
    """``python -m cdc_demo.kinesis``: a kinesis-local server until Ctrl-C or SIGTERM
    (``make kinesis-up`` / ``make kinesis-down``)."""
    import argparse

    from cdc_demo import serve_until_stopped

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, default=4567, help="plain HTTP port on 127.0.0.1")
    parser.add_argument("--log", help="server log file (default: a temporary file)")
    args = parser.parse_args()
    with kinesis_local(args.port, args.log) as endpoint:
        serve_until_stopped(f"kinesis-local at {endpoint} (region {REGION}); Ctrl-C stops it")


if __name__ == "__main__":
    main()
