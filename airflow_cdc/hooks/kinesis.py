"""Connection to a Kinesis data stream: AWS itself, or any Kinesis API server (kinesis-local).

Two kinds of connection serve:

- ``cdc_kinesis`` (this provider's, no other dependency): ``host`` is the endpoint URL (empty
  for AWS), ``login``/``password`` the access key id and secret (empty to use boto3's default
  credential chain), and the extra ``{"region_name": "...", "aws_session_token": "..."}`` (the
  token for temporary credentials).
- ``aws``, the amazon provider's connection (``pip install 'airflow-cdc[aws]'``): whatever it
  resolves (keys, session tokens, an assumed role, a profile, SSO) becomes temporary
  credentials for the job; its ``endpoint_url`` and ``region_name`` apply too.

The credentials reach the Spark job in its process environment, never on a command line
(:meth:`airflow_cdc.operators.base.SparkJobOperator.submit`).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

# The amazon provider's connection type.
AWS_CONN_TYPE = "aws"
DEFAULT_REGION = "us-east-1"


class KinesisStreamHook(BaseHook):
    """boto3 access to Kinesis, and the settings a landing job needs to reach it.

    :param kinesis_conn_id: Airflow connection of type ``cdc_kinesis`` or ``aws``.
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
                "extra": '{"region_name": "eu-west-1", "aws_session_token": "(temporary keys)"}',
            },
        }

    def settings(self) -> dict[str, Any]:
        """Endpoint URL, region and credentials (``None`` where boto3 should decide)."""
        conn = self.get_connection(self.kinesis_conn_id)
        if conn.conn_type == AWS_CONN_TYPE:
            return self._aws_settings()
        extra = conn.extra_dejson
        return {
            "endpoint_url": conn.host or None,
            "region": extra.get("region_name") or DEFAULT_REGION,
            "access_key": conn.login or None,
            "secret_key": conn.password or None,
            "session_token": extra.get("aws_session_token") or None,
        }

    def _aws_settings(self) -> dict[str, Any]:
        """The settings of an amazon-provider connection, its credentials resolved now."""
        try:
            from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
        except ImportError as missing:
            raise ImportError(
                f"connection {self.kinesis_conn_id!r} is an 'aws' connection, which needs the"
                " amazon provider: pip install 'airflow-cdc[aws]' (or use a 'cdc_kinesis'"
                " connection)"
            ) from missing
        aws = AwsBaseHook(aws_conn_id=self.kinesis_conn_id, client_type="kinesis")
        config = aws.conn_config
        try:
            credentials = aws.get_credentials()
        except AttributeError as nothing:  # the chain found no credentials
            raise ValueError(
                f"connection {self.kinesis_conn_id!r} resolves to no AWS credentials"
            ) from nothing
        return {
            "endpoint_url": config.get_service_endpoint_url("kinesis") or None,
            "region": aws.region_name or aws.get_session().region_name or DEFAULT_REGION,
            "access_key": credentials.access_key,
            "secret_key": credentials.secret_key,
            "session_token": credentials.token,
        }

    def job_environment(self) -> dict[str, str]:
        """Credentials for the Spark job, passed in its environment, never on a command line
        (none for a connection without keys: the job's own chain finds them)."""
        settings = self.settings()
        env: dict[str, str] = {}
        if settings["access_key"]:
            env["AWS_ACCESS_KEY_ID"] = settings["access_key"]
            env["AWS_SECRET_ACCESS_KEY"] = settings["secret_key"] or ""
            if settings["session_token"]:
                env["AWS_SESSION_TOKEN"] = settings["session_token"]
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
            aws_session_token=settings["session_token"],
        )
