"""A real S3-compatible server for tests and the demo: S3Proxy with its file system backend
(each bucket a directory under a temporary one), started from the jars that ``make setup``
resolves from Maven Central (``scripts/s3/pom.xml``), on a free port of the loopback.

Requests are signed (AWS Signature V2 or V4) with a key made up at each start, so a client
without the credentials is refused, as by S3.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_cdc.storage import DEFAULT_REGION
from cdc_demo import cached_jars, free_port, listening, on_free_ports, stop, wait_ready

# The AWS SDKs send CRC checksums of uploads and of every DeleteObjects request (botocore
# since 1.36, the Java SDK since 2.30), in headers S3Proxy does not know and by default refuses
# as unimplemented: it ignores them instead (and does not verify them).
S3PROXY_PROPERTIES = """\
s3proxy.endpoint={endpoint}
s3proxy.authorization=aws-v2-or-v4
s3proxy.identity={access_key}
s3proxy.credential={secret_key}
s3proxy.ignore-unknown-headers=true
jclouds.provider=filesystem
jclouds.filesystem.basedir={data}
"""


@dataclass(frozen=True)
class S3Server:
    """A running server: its endpoint and the credentials it accepts."""

    endpoint_url: str
    access_key: str
    secret_key: str = field(repr=False)
    region: str = DEFAULT_REGION

    def environment(self) -> dict[str, str]:
        """The environment under which AWS clients (botocore, s3fs, the jobs through
        :func:`airflow_cdc.storage.configure_object_storage`) reach this server."""
        return {
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
            "AWS_REGION": self.region,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }

    def client(self) -> Any:
        """A boto3 S3 client of this server."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(retries={"max_attempts": 1}),
        )


def server_libs() -> Path:
    return cached_jars("s3/server", "s3proxy-*.jar", "S3Proxy")


@contextmanager
def s3_server(startup_timeout: float = 60.0) -> Iterator[S3Server]:
    """Start S3Proxy on a free port; yields it; stops it and deletes every bucket."""
    with on_free_ports(lambda: _started(startup_timeout)) as server:
        yield server


@contextmanager
def _started(startup_timeout: float) -> Iterator[S3Server]:
    libs = server_libs()
    with tempfile.TemporaryDirectory(prefix="airflow-cdc-s3-") as home:
        server = S3Server(
            endpoint_url=f"http://127.0.0.1:{free_port()}",
            access_key=f"cdc-{secrets.token_hex(8)}",
            secret_key=secrets.token_urlsafe(30),
        )
        data = Path(home, "data")
        data.mkdir()
        config = Path(home, "s3proxy.conf")
        config.write_text(
            S3PROXY_PROPERTIES.format(
                endpoint=server.endpoint_url,
                access_key=server.access_key,
                secret_key=server.secret_key,
                data=data,
            )
        )
        config.chmod(0o600)
        command = [
            "java",
            "-Xmx256m",
            # A test server: quick to start, light on the CPU the jobs under test need.
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            # S3Proxy sends its standard error to its logger: the logger writes elsewhere.
            "-Dorg.slf4j.simpleLogger.logFile=System.out",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            f"{libs}/*",
            "org.gaul.s3proxy.Main",
            "--properties",
            str(config),
        ]
        log_path = Path(home, "s3proxy.log")
        with log_path.open("w") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_ready(server, process, startup_timeout, log_path)
            yield server
        finally:
            stop(process)


def _wait_ready(server: S3Server, process: Any, timeout: float, log: Path) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    client = server.client()
    port = int(server.endpoint_url.rsplit(":", 1)[1])
    wait_ready(
        f"S3Proxy at {server.endpoint_url}",
        process,
        lambda: listening(port) and client.list_buckets(),
        log,
        [port],
        timeout,
        not_yet=(OSError, BotoCoreError, ClientError),
    )


def create_bucket(server: S3Server, bucket: str) -> str:
    """Create ``bucket`` on ``server``; returns its ``s3a://`` root for the jobs."""
    server.client().create_bucket(Bucket=bucket)
    return f"s3a://{bucket}"


if __name__ == "__main__":  # python -m cdc_demo.s3: a server until Ctrl-C
    from cdc_demo import serve_until_stopped

    with s3_server() as running:
        create_bucket(running, "lake")
        serve_until_stopped(
            f"S3Proxy at {running.endpoint_url}, bucket 'lake'; its environment:\n"
            + "\n".join(f"export {k}={v}" for k, v in sorted(running.environment().items()))
            + "\nCtrl-C stops it"
        )
    os._exit(0)
