"""A real Apache Kafka broker in KRaft mode (one combined broker and controller), for tests
and the demo: started from the jars that ``make setup`` resolves from Maven Central."""

from __future__ import annotations

import base64
import os
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cdc_demo import cached_jars, free_port, listening, on_free_ports, stop, wait_ready

SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:{controller}
listeners=PLAINTEXT://localhost:{port},CONTROLLER://localhost:{controller}
advertised.listeners=PLAINTEXT://localhost:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data}
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
"""


def kafka_libs() -> Path:
    return cached_jars("kafka/libs", "kafka_2.13-*.jar", "Kafka")


@contextmanager
def kafka_broker(startup_timeout: float = 90.0) -> Iterator[str]:
    """Start a broker on free ports; yields its bootstrap servers; stops and deletes it."""
    with on_free_ports(lambda: _started(startup_timeout)) as bootstrap:
        yield bootstrap


@contextmanager
def _started(startup_timeout: float) -> Iterator[str]:
    libs = kafka_libs()
    classpath = f"{libs}/*"
    with tempfile.TemporaryDirectory(prefix="airflow-cdc-kafka-") as home:
        port, controller = free_port(), free_port()
        config = Path(home, "server.properties")
        config.write_text(
            SERVER_PROPERTIES.format(port=port, controller=controller, data=f"{home}/data")
        )
        java = ["java", "-Xmx512m", "-cp", classpath]
        cluster = f"--cluster-id={_cluster_id()}"
        formatted = subprocess.run(
            [*java, "kafka.tools.StorageTool", "format", cluster, "-c", str(config)],
            capture_output=True,
            text=True,
        )
        if formatted.returncode:
            raise RuntimeError(f"Kafka storage format failed: {formatted.stderr[-2000:]}")
        log = Path(home, "broker.log")
        with log.open("w") as out:
            process = subprocess.Popen(
                [*java, "kafka.Kafka", str(config)], stdout=out, stderr=subprocess.STDOUT
            )
        bootstrap = f"localhost:{port}"
        try:
            _wait_ready(bootstrap, process, startup_timeout, log, (port, controller))
            yield bootstrap
        finally:
            stop(process)


def _cluster_id() -> str:
    """A random cluster id as Kafka's own ``Uuid.randomUuid`` draws one: 22 URL-safe base64
    characters that do not begin with ``-``, which a command line would read as an option."""
    while True:
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster.startswith("-"):
            return cluster


def _wait_ready(
    bootstrap: str, process: Any, timeout: float, log: Path, ports: tuple[int, ...]
) -> None:
    from confluent_kafka.admin import AdminClient

    host, _, port = bootstrap.rpartition(":")
    wait_ready(
        f"the Kafka broker at {bootstrap}",
        process,
        lambda: (
            listening(int(port), host)
            and AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).brokers
        ),
        log,
        ports,
        timeout,
        not_yet=(Exception,),
        interval=0.5,
    )


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)


def produce(bootstrap: str, messages: list[dict[str, Any]], transactional: bool = False) -> None:
    """Send messages (``topic``, ``partition``, ``key``, ``value`` as text or None).

    ``transactional`` sends them in one Kafka transaction: its commit marker takes an offset
    of its own in every partition written, which consumers never see.
    """
    from confluent_kafka import Producer

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "enable.idempotence": True}
    if transactional:
        config["transactional.id"] = f"airflow-cdc-{uuid.uuid4().hex[:8]}"
    producer = Producer(config)
    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    for message in messages:
        producer.produce(
            message["topic"],
            key=None if message["key"] is None else message["key"].encode("utf-8"),
            value=None if message["value"] is None else message["value"].encode("utf-8"),
            partition=message["partition"],
        )
    if transactional:
        producer.commit_transaction(60)
    remaining = producer.flush(60)
    if remaining:
        raise RuntimeError(f"{remaining} messages were not delivered")


if __name__ == "__main__":  # python -m cdc_demo.kafka: a broker until Ctrl-C
    from cdc_demo import serve_until_stopped

    with kafka_broker() as servers:
        serve_until_stopped(f"Kafka broker (KRaft) at {servers}; Ctrl-C stops it")
    os._exit(0)
