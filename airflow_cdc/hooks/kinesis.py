"""Connection to a Kinesis data stream: AWS itself, or any Kinesis API server (kinesis-local).

Connection fields: ``host`` is the endpoint URL (empty for AWS), ``login``/``password`` the
access key id and secret (empty to use boto3's default credential chain), and the extra
``{"region_name": "..."}``.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook


class KinesisStreamHook(BaseHook):
    """boto3 access to Kinesis, and the settings a landing job needs to reach it.

    :param kinesis_conn_id: Airflow connection of type ``cdc_kinesis``.
    """

    conn_name_attr = "kinesis_conn_id"
    default_conn_name = "kinesis_default"
    conn_type = "cdc_kinesis"
    hook_name = "Kinesis (airflow-cdc)"

    def __init__(self, kinesis_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.kinesis_conn_id = kinesis_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "port"],
            "relabeling": {
                "host": "Endpoint URL (empty for AWS)",
                "login": "Access key id",
                "password": "Secret access key",
            },
            "placeholders": {
                "host": "http://127.0.0.1:4567 (kinesis-local); empty for AWS",
                "login": "empty: boto3's own credential chain",
                "extra": '{"region_name": "eu-west-1"}',
            },
        }

    def settings(self) -> dict[str, Any]:
        """Endpoint URL, region and credentials (``None`` where boto3 should decide)."""
        conn = self.get_connection(self.kinesis_conn_id)
        extra = conn.extra_dejson
        return {
            "endpoint_url": conn.host or None,
            "region": extra.get("region_name", "us-east-1"),
            "access_key": conn.login or None,
            "secret_key": conn.password or None,
        }

    def job_environment(self) -> dict[str, str]:
        """Credentials for the Spark job, passed in its environment, never on a command line."""
        settings = self.settings()
        env = {"AWS_DEFAULT_REGION": settings["region"]}
        if settings["access_key"]:
            env["AWS_ACCESS_KEY_ID"] = settings["access_key"]
            env["AWS_SECRET_ACCESS_KEY"] = settings["secret_key"] or ""
        return env

    def get_conn(self) -> Any:
        import boto3

        settings = self.settings()
        return boto3.client(
            "kinesis",
            endpoint_url=settings["endpoint_url"],
            region_name=settings["region"],
            aws_access_key_id=settings["access_key"],
            aws_secret_access_key=settings["secret_key"],
        )
