"""OpenLineage for the CDC operators: datasets named as OpenLineage names them, each target
table's schema, and the parent job information that links the Spark job's own events to the
Airflow task.

Everything here is computed from an operator's (rendered) arguments and the counts its run
returned: no Spark, no file system. The OpenLineage provider is an optional extra
(``airflow-cdc[openlineage]``): this module imports without it, and the functions that build
OpenLineage objects are only called by that provider.

Dataset names:

* a table or bookkeeping table is named by its location, as :func:`airflow_cdc.assets.
  location_uri` gives it to the asset: namespace ``file`` and the absolute path for a local
  warehouse, ``s3://<bucket>`` and the key for ``s3a://`` (what Airflow's own asset converters
  and OpenLineage's Spark integration give the same Delta table);
* a Kafka topic: namespace ``kafka://<first bootstrap server>``, name the topic (OpenLineage's
  naming spec);
* a Kinesis stream, for which the spec has no entry: namespace ``kinesis://<region>`` (AWS)
  or ``kinesis://<host:port>`` of a Kinesis API server (kinesis-local), name the stream.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow_cdc.assets import location_uri
from airflow_cdc.core.ddl import TableSpec
from airflow_cdc.core.types import spark_type

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import DatasetFacet

log = logging.getLogger(__name__)

# Stores whose OpenLineage name is an object key (no leading slash); others keep the path.
_OBJECT_STORES = ("s3", "gs", "gcs", "abfss", "wasbs")
_GLOB = ("*", "?", "[", "{")


def location_name(path: str) -> tuple[str, str]:
    """The OpenLineage ``(namespace, name)`` of a location (a table's, or a landed path).

    >>> location_name("/wh/public/orders")
    ('file', '/wh/public/orders')
    >>> location_name("s3a://lake/wh/public/orders")
    ('s3://lake', 'wh/public/orders')
    """
    uri = urlsplit(location_uri(path))
    if uri.scheme == "file":
        return ("file://" + uri.netloc if uri.netloc else "file", uri.path)
    namespace = f"{uri.scheme}://{uri.netloc}"
    if uri.scheme in _OBJECT_STORES:
        return namespace, uri.path.lstrip("/") or "/"
    return namespace, uri.path or "/"


def files_location(path: str) -> str:
    """The location a landing from files reads: ``path``, or for a glob the directory above
    its first wildcard (OpenLineage names a file dataset by its directory)."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if any(c in part for c in _GLOB):
            return "/".join(parts[:i]) or "/"
    return path


def kafka_namespace(bootstrap_servers: str) -> str:
    """``kafka://<host>:<port>`` of the first bootstrap server (OpenLineage's Kafka naming).

    >>> kafka_namespace("b1:9092,b2:9092")
    'kafka://b1:9092'
    """
    first = bootstrap_servers.split(",")[0].strip()
    if not first:
        raise ValueError(f"bootstrap_servers must name a server, got {bootstrap_servers!r}")
    return f"kafka://{first.split('://')[-1]}"


def kinesis_namespace(region: str, endpoint_url: str | None) -> str:
    """``kinesis://<region>`` for AWS, ``kinesis://<host:port>`` for another Kinesis API server.

    >>> kinesis_namespace("eu-west-1", None)
    'kinesis://eu-west-1'
    >>> kinesis_namespace("us-east-1", "http://127.0.0.1:4568")
    'kinesis://127.0.0.1:4568'
    """
    if endpoint_url:
        return f"kinesis://{urlsplit(endpoint_url).netloc or endpoint_url}"
    return f"kinesis://{region}"


def schema_facet(spec: TableSpec) -> DatasetFacet:
    """The declared columns of a target table with their Delta (Spark SQL) types."""
    from openlineage.client.facet_v2 import schema_dataset

    return schema_dataset.SchemaDatasetFacet(
        fields=[
            schema_dataset.SchemaDatasetFacetFields(name=column.name, type=spark_type(column))
            for column in spec.columns
        ]
    )


def version_facet(version: Any) -> DatasetFacet:
    """A Delta table's version, as the run committed or published it."""
    from openlineage.client.facet_v2 import dataset_version_dataset

    return dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(version))


def input_dataset(namespace: str, name: str) -> InputDataset:
    from openlineage.client.event_v2 import InputDataset

    return InputDataset(namespace=namespace, name=name)


def output_dataset(
    namespace: str, name: str, facets: Mapping[str, DatasetFacet] | None = None
) -> OutputDataset:
    from openlineage.client.event_v2 import OutputDataset

    return OutputDataset(namespace=namespace, name=name, facets=dict(facets or {}))


def location_inputs(locations: Iterable[str]) -> list[InputDataset]:
    return [input_dataset(*location_name(location)) for location in locations]


def location_outputs(locations: Iterable[str]) -> list[OutputDataset]:
    return [output_dataset(*location_name(location)) for location in locations]


def operator_lineage(
    inputs: list[InputDataset], outputs: list[OutputDataset]
) -> OperatorLineage[Any, Any]:
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(inputs=inputs, outputs=outputs)


def spark_conf_with_parent_job(
    spark_conf: Mapping[str, str],
    context: Context,
    *,
    parent_job_info: bool | None = None,
    transport_info: bool | None = None,
) -> dict[str, str]:
    """``spark_conf`` plus the OpenLineage properties the Spark integration links its events
    by, as apache-airflow-providers-apache-spark's ``SparkSubmitOperator`` injects them.

    :param parent_job_info: Add ``spark.openlineage.parentJobNamespace``, ``parentJobName``,
        ``parentRunId`` and the root parent's; ``None`` follows ``[openlineage]
        spark_inject_parent_job_info``.
    :param transport_info: Add the provider's HTTP transport (``spark.openlineage.
        transport.*``); ``None`` follows ``[openlineage] spark_inject_transport_info``.

    Unchanged without the OpenLineage provider, with OpenLineage disabled or without a
    transport configured, and for properties the conf already sets (the user's win).
    """
    conf = dict(spark_conf)
    try:
        from airflow.providers.openlineage import conf as ol_conf
        from airflow.providers.openlineage.utils.spark import (
            inject_parent_job_information_into_spark_properties,
            inject_transport_information_into_spark_properties,
        )
    except ImportError:
        return conf
    if ol_conf.is_disabled():
        return conf
    if parent_job_info if parent_job_info is not None else ol_conf.spark_inject_parent_job_info():
        log.debug("injecting OpenLineage parent job information into the Spark conf")
        conf = inject_parent_job_information_into_spark_properties(conf, context)
    if transport_info if transport_info is not None else ol_conf.spark_inject_transport_info():
        log.debug("injecting OpenLineage transport information into the Spark conf")
        conf = inject_transport_information_into_spark_properties(conf, context)
    return conf
