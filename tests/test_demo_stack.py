"""The demo stack's own helpers: a Kafka cluster id, and servers started on ports another
process takes (kinesis-local, which starts in a second)."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest

from cdc_demo import PortTaken, free_port, is_taken, kafka, kinesis, on_free_ports, server_exited


def test_a_kafka_cluster_id_never_reads_as_a_command_line_option() -> None:
    # uuid4 bytes whose URL-safe base64 begins with "-" (0xF8 >> 2 == 62), then ordinary ones.
    dashed = uuid.UUID(bytes=b"\xf8" + bytes(15))
    plain = uuid.UUID(bytes=b"\x10" + bytes(15))
    with mock.patch.object(kafka.uuid, "uuid4", side_effect=[dashed, dashed, plain]):
        cluster = kafka._cluster_id()
    assert not cluster.startswith("-")
    assert base64.urlsafe_b64decode(cluster + "==") == plain.bytes


@pytest.fixture(params=["bound", "listening"])
def taken_port(request: pytest.FixtureRequest) -> Iterator[int]:
    """A port another process holds for the test's length: bound, or listening (it takes
    connections and never answers them)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        if request.param == "listening":
            holder.listen()
        yield holder.getsockname()[1]


def test_a_server_whose_port_was_taken_after_the_probe_starts_again_on_fresh_ports(
    taken_port: int,
) -> None:
    # The first port kinesis-local is given is one another process took after free_port
    # found it free: the real server exits on EADDRINUSE, and it is started again.
    given = iter([taken_port])
    with (
        mock.patch.object(kinesis, "free_port", lambda: next(given, None) or free_port()),
        kinesis.kinesis_local() as endpoint,
    ):
        assert urllib.parse.urlsplit(endpoint).port != taken_port
        streams = kinesis.client(endpoint).list_streams()
    assert streams["StreamNames"] == []


def test_a_taken_port_its_caller_chose_is_reported_as_taken(taken_port: int) -> None:
    with (
        pytest.raises(RuntimeError, match=f"port {taken_port} .* is taken"),
        kinesis.kinesis_local(taken_port),
    ):
        pass


def test_a_server_that_fails_for_another_reason_is_not_started_again(tmp_path: Path) -> None:
    starts = []

    @contextmanager
    def broken() -> Iterator[None]:
        starts.append(1)
        log = tmp_path / "server.log"
        log.write_text("no such configuration\n")
        exited = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
        exited.wait()
        raise server_exited("the server", exited, log, ())
        yield

    expected = "exited with 3: no such configuration"
    with pytest.raises(RuntimeError, match=expected) as failure, on_free_ports(broken):
        pass
    assert not isinstance(failure.value, PortTaken)
    assert len(starts) == 1


def test_a_port_whose_last_connection_waits_out_time_wait_is_not_taken() -> None:
    # A stopped server that closed a connection first leaves its port in TIME_WAIT: a server
    # binding with SO_REUSEADDR (all of ours) can listen on it again, so it is not taken.
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Node and the JVM do
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            accepted.close()  # the server's side closes first: its end goes to TIME_WAIT
            client.recv(1)
    assert not is_taken(port)
    with socket.socket() as again:  # a server starting there meanwhile takes it
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.listen()
        assert is_taken(port)
