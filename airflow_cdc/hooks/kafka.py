"""Connection to a Kafka cluster: a ``cdc_kafka`` connection, or the ``kafka`` connection of
apache-airflow-providers-apache-kafka, so that an Airflow deployment reuses the connections it
has.

``cdc_kafka``: ``host`` holds the bootstrap servers (``host:port[,host:port...]``; a ``port`` of
its own is appended to a single host); client settings such as ``security.protocol`` go in the
extra as ``{"config": {...}}``.

``kafka`` (the Kafka provider's): the extra is the client config itself, bootstrap servers
included (``{"bootstrap.servers": "...", "security.protocol": ...}``). Callbacks that the
provider resolves from strings (``oauth_cb``...) cannot travel to a Spark job and are refused,
and so is OAUTHBEARER without OIDC (the provider's MSK IAM and Google token callbacks). Its
``group.id`` goes along (landing commits no offsets to it: it keeps its own checkpoints).

The client settings reach the landing job in its environment (``AIRFLOW_CDC_KAFKA_CONFIG``),
never on a command line.
"""

from __future__ import annotations

import json
from typing import Any

from airflow.sdk import BaseHook

from airflow_cdc.jobs import KAFKA_CONFIG_ENV

# The Kafka provider's connection type; its extra is the client config.
PROVIDER_CONN_TYPE = "kafka"
_BOOTSTRAP = "bootstrap.servers"
# Settings of the provider's connection that a landing job sets itself or cannot take.
_NOT_PASSED = (_BOOTSTRAP, "enable.auto.commit", "auto.offset.reset", "enable.partition.eof")


class KafkaClusterHook(BaseHook):
    """The settings a Kafka landing job needs.

    :param kafka_conn_id: Airflow connection of type ``cdc_kafka`` or ``kafka``.
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
        if conn.conn_type == PROVIDER_CONN_TYPE:
            servers = conn.extra_dejson.get(_BOOTSTRAP)
            if not servers or not isinstance(servers, str):
                raise ValueError(
                    f"connection {self.kafka_conn_id!r} names no bootstrap servers"
                    f" (extra {_BOOTSTRAP!r})"
                )
            return servers
        if not conn.host:
            raise ValueError(f"connection {self.kafka_conn_id!r} names no bootstrap servers")
        if conn.port and "," not in conn.host and ":" not in conn.host:
            return f"{conn.host}:{conn.port}"
        return str(conn.host)

    def client_config(self) -> dict[str, Any]:
        """The client settings beyond the bootstrap servers (they may hold secrets)."""
        conn = self.get_connection(self.kafka_conn_id)
        extra = conn.extra_dejson
        if conn.conn_type == PROVIDER_CONN_TYPE:
            config = {k: v for k, v in extra.items() if k not in _NOT_PASSED}
        else:
            config = extra.get("config") or {}
        if not isinstance(config, dict):
            raise ValueError(f"connection {self.kafka_conn_id!r}: extra config must be an object")
        calls = sorted(k for k, v in config.items() if k.endswith("_cb") or callable(v))
        if calls:
            raise ValueError(
                f"connection {self.kafka_conn_id!r}: callbacks {calls} cannot reach a Spark"
                " job; give the client settings they stand for instead"
            )
        if str(config.get("sasl.mechanism", "")).upper() == "OAUTHBEARER" and (
            str(config.get("sasl.oauthbearer.method", "")).lower() != "oidc"
        ):
            raise ValueError(
                f"connection {self.kafka_conn_id!r}: OAUTHBEARER needs a token callback, which"
                " cannot reach a Spark job; use sasl.oauthbearer.method=oidc or SASL/SCRAM"
            )
        return config

    def job_environment(self) -> dict[str, str]:
        config = self.client_config()
        return {KAFKA_CONFIG_ENV: json.dumps(config)} if config else {}

    def get_conn(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({_BOOTSTRAP: self.bootstrap_servers(), **self.client_config()})
