"""airflow-cdc: change data capture into Delta Lake, scheduled by Apache Airflow.

This module must stay importable without Airflow, Spark or boto3: the Spark jobs ship it to the
cluster and import only :mod:`airflow_cdc.core` from it.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def get_provider_info() -> dict[str, Any]:
    """Describe the provider to Airflow (entry point ``apache_airflow_provider``)."""
    from airflow_cdc.settings import config_section

    return {
        "package-name": "airflow-cdc",
        "name": "Change Data Capture",
        "description": "Land, reassemble, order and apply CDC streams into Delta Lake on Spark.",
        "versions": [__version__],
        "connection-types": [
            {
                "connection-type": "cdc_kinesis",
                "hook-class-name": "airflow_cdc.hooks.kinesis.KinesisStreamHook",
            },
            {
                "connection-type": "cdc_kafka",
                "hook-class-name": "airflow_cdc.hooks.kafka.KafkaClusterHook",
            },
        ],
        "operators": [
            {
                "integration-name": "Change Data Capture",
                "python-modules": [
                    "airflow_cdc.operators.land",
                    "airflow_cdc.operators.apply",
                    "airflow_cdc.operators.maintain",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "Change Data Capture",
                "python-modules": ["airflow_cdc.sensors.resolved"],
            }
        ],
        "triggers": [
            {
                "integration-name": "Change Data Capture",
                "python-modules": [
                    "airflow_cdc.triggers.resolved",
                    "airflow_cdc.triggers.boundary",
                ],
            }
        ],
        "config": config_section(),
        "extra-links": [
            "airflow_cdc.links.DeltaTableLink",
            "airflow_cdc.links.SparkMasterLink",
            "airflow_cdc.links.SparkApplicationLink",
        ],
        "hooks": [
            {
                "integration-name": "Change Data Capture",
                "python-modules": ["airflow_cdc.hooks.kinesis", "airflow_cdc.hooks.kafka"],
            }
        ],
    }
