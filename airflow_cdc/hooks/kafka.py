"""Connection to a Kafka cluster.

Connection fields: ``host`` holds the bootstrap servers (``host:port[,host:port...]``; a
``port`` of its own is appended to a single host). Client settings such as
``security.protocol`` go in the extra as ``{"config": {...}}`` and reach the landing job in its
environment (``AIRFLOW_CDC_KAFKA_CONFIG``), never on a command line.
"""

from __future__ import annotations

import json
from typing import Any

from airflow.sdk import BaseHook

CONFIG_ENV = "AIRFLOW_CDC_KAFKA_CONFIG"


class KafkaClusterHook(BaseHook):
    """The settings a Kafka landing job needs.

    :param kafka_conn_id: Airflow connection of type ``cdc_kafka``.
    """

    conn_name_attr = "kafka_conn_id"
    default_conn_name = "kafka_default"
    conn_type = "cdc_kafka"
    hook_name = "Kafka (airflow-cdc)"

    def __init__(self, kafka_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.kafka_conn_id = kafka_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "login", "password"],
            "relabeling": {"host": "Bootstrap servers"},
            "placeholders": {
                "host": "broker1:9092,broker2:9092",
                "extra": '{"config": {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",'
                ' "sasl.username": "...", "sasl.password": "..."}}',
            },
        }

    def bootstrap_servers(self) -> str:
        conn = self.get_connection(self.kafka_conn_id)
        if not conn.host:
            raise ValueError(f"connection {self.kafka_conn_id!r} names no bootstrap servers")
        if conn.port and "," not in conn.host and ":" not in conn.host:
            return f"{conn.host}:{conn.port}"
        return conn.host

    def job_environment(self) -> dict[str, str]:
        config = self.get_connection(self.kafka_conn_id).extra_dejson.get("config") or {}
        if not isinstance(config, dict):
            raise ValueError(f"connection {self.kafka_conn_id!r}: extra config must be an object")
        return {CONFIG_ENV: json.dumps(config)} if config else {}

    def get_conn(self) -> Any:
        from confluent_kafka.admin import AdminClient

        config = json.loads(self.job_environment().get(CONFIG_ENV, "{}"))
        return AdminClient({"bootstrap.servers": self.bootstrap_servers(), **config})
