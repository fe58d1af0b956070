"""A warehouse on S3 or an S3-compatible server (MinIO, Ceph, S3Proxy...).

The jobs name the warehouse ``s3a://bucket/path`` (Hadoop's S3A file system, through the
``hadoop-aws`` jars); everything else reads the same objects with other clients: the sensors,
the triggers and :mod:`airflow_cdc.cuts` through fsspec (s3fs, which takes ``s3a://`` as it
is, and ``s3://``), delta-rs through its own object store. One set of settings serves them
all, taken from the process environment under the AWS SDKs' own names:

============================== ================================================================
``AWS_ENDPOINT_URL_S3``        the S3 API's URL (else ``AWS_ENDPOINT_URL``); unset for AWS
``AWS_REGION``                 the bucket's region (else ``AWS_DEFAULT_REGION``, else us-east-1)
``AWS_ACCESS_KEY_ID``,         the credentials; unset to use each client's default chain
``AWS_SECRET_ACCESS_KEY``,     (instance profile, web identity...)
``AWS_SESSION_TOKEN``
============================== ================================================================

botocore (so s3fs) reads these itself; :func:`s3a_spark_conf` turns the endpoint and region
into Spark conf, and :func:`configure_object_storage` hands the credentials to S3A when a job
starts. A custom endpoint is addressed path-style (``http://host:port/bucket/key``), as
S3-compatible servers expect and as botocore does for one.

Secrets never travel as Spark conf: a ``--conf`` is on the spark-submit command line, in
the driver's logs and on the Spark UI's environment page. They reach the job in its process
environment, and the job's driver copies them into its Hadoop configuration, which Spark
ships to the executors inside their tasks.

Pure Python: no Spark, no Airflow (the jobs import it too).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow_cdc.jobs import cache_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# hadoop-aws must be the version of the Hadoop that pyspark ships (hadoop-client-api 3.5.0).
HADOOP_AWS_VERSION = "3.5.0"
# Hadoop's names for S3 (``s3a``; ``s3n`` is its retired predecessor) and the one that fsspec,
# Airflow and OpenLineage use.
HADOOP_S3_SCHEMES = ("s3a", "s3n")
S3_SCHEME = "s3"
DEFAULT_REGION = "us-east-1"
# Where ``make setup`` copies hadoop-aws and the AWS SDK modules it calls
# (scripts/s3/pom.xml, profile hadoop-aws).
HADOOP_AWS_DIR = ("s3", "hadoop-aws")

# Environment variable -> the S3A property that takes it (one bucket's settings may
# override them: fs.s3a.bucket.<bucket>.access.key...).
_CREDENTIALS = (
    ("AWS_ACCESS_KEY_ID", "fs.s3a.access.key"),
    ("AWS_SECRET_ACCESS_KEY", "fs.s3a.secret.key"),
    ("AWS_SESSION_TOKEN", "fs.s3a.session.token"),
)


def scheme(uri: str) -> str:
    """The scheme of ``uri`` in lower case; ``""`` for a local path."""
    if "://" not in uri:
        return ""
    return uri.split("://", 1)[0].lower()


def is_s3(uri: str) -> bool:
    """Whether ``uri`` names an object on S3 (``s3://``, ``s3a://`` or ``s3n://``)."""
    return scheme(uri) in (S3_SCHEME, *HADOOP_S3_SCHEMES)


def fsspec_uri(uri: str) -> str:
    """``uri`` as fsspec, Airflow and OpenLineage name it: Hadoop's ``s3a://`` (or ``s3n://``)
    becomes ``s3://``; anything else is returned unchanged.

    >>> fsspec_uri("s3a://lake/warehouse/_cdc/resolved/orders.json")
    's3://lake/warehouse/_cdc/resolved/orders.json'
    >>> fsspec_uri("/data/warehouse")
    '/data/warehouse'
    """
    if scheme(uri) in HADOOP_S3_SCHEMES:
        return f"{S3_SCHEME}://{uri.split('://', 1)[1]}"
    return uri


def spark_uri(uri: str) -> str:
    """``uri`` as the jobs' Hadoop file systems name it: ``s3://`` becomes ``s3a://`` (Spark
    has no file system for ``s3`` without extra configuration); anything else is unchanged.

    >>> spark_uri("s3://lake/warehouse")
    's3a://lake/warehouse'
    """
    if scheme(uri) == S3_SCHEME:
        return f"s3a://{uri.split('://', 1)[1]}"
    return uri


@dataclass(frozen=True)
class S3Settings:
    """Where the S3 API is: ``endpoint_url`` (``None`` for AWS itself) and ``region``.

    :param endpoint_url: ``http://host:port`` or ``https://host[:port]`` of an S3-compatible
        server or an AWS endpoint; it is then addressed path-style.
    :param region: The bucket's region; S3-compatible servers mostly take any.
    """

    endpoint_url: str | None = None
    region: str = DEFAULT_REGION

    def __post_init__(self) -> None:
        if self.endpoint_url is not None:
            parts = urlsplit(self.endpoint_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    "endpoint_url must be an http:// or https:// URL with a host, got"
                    f" {self.endpoint_url!r}"
                )
        if not self.region:
            raise ValueError(f"region must be a region name, got {self.region!r}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> S3Settings:
        """The settings in ``env`` (default: this process's environment), by the AWS SDKs'
        names and precedence: ``AWS_ENDPOINT_URL_S3`` over ``AWS_ENDPOINT_URL``, ``AWS_REGION``
        over ``AWS_DEFAULT_REGION``."""
        env = os.environ if env is None else env
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
        return cls(endpoint_url=endpoint, region=region)

    @property
    def path_style(self) -> bool:
        """Whether buckets are addressed in the path (any custom endpoint) rather than the
        host name (AWS's own endpoints)."""
        return self.endpoint_url is not None

    @property
    def secure(self) -> bool:
        """Whether the endpoint is reached over TLS (AWS's always is)."""
        return self.endpoint_url is None or self.endpoint_url.lower().startswith("https://")


def hadoop_aws_jars() -> list[str] | None:
    """hadoop-aws and the AWS SDK modules it calls, as local files (``make setup`` copies them
    into ``$AIRFLOW_CDC_CACHE/s3/hadoop-aws``), sorted; ``None`` when they are not there."""
    directory = cache_dir().joinpath(*HADOOP_AWS_DIR)
    jars = sorted(str(path) for path in directory.glob("*.jar"))
    if not any(Path(jar).name == f"hadoop-aws-{HADOOP_AWS_VERSION}.jar" for jar in jars):
        return None
    return jars


def s3a_spark_conf(
    settings: S3Settings | None = None, jars: Sequence[str] | None = None
) -> dict[str, str]:
    """The Spark conf of a job whose warehouse is on S3: no secret in it (see
    :func:`configure_object_storage` for the credentials).

    :param settings: The endpoint and region; default :meth:`S3Settings.from_env`.
    :param jars: hadoop-aws and the SDK as local files, for ``spark.jars`` (default
        :func:`hadoop_aws_jars`; :func:`airflow_cdc.submit.job_spec` adds them to Delta's).
        Where the cluster already has them on its classpath, pass ``[]``.

    Delta's log store for ``s3a`` is its default, ``S3SingleDriverLogStore``: only one
    driver at a time may write a table (see the README, *Warehouse on object storage*).

    >>> conf = s3a_spark_conf(S3Settings("http://127.0.0.1:9000"), jars=[])
    >>> conf["spark.hadoop.fs.s3a.path.style.access"], conf["spark.hadoop.fs.s3a.endpoint"]
    ('true', 'http://127.0.0.1:9000')
    """
    settings = S3Settings.from_env() if settings is None else settings
    if jars is None:
        jars = hadoop_aws_jars()
        if jars is None:
            raise FileNotFoundError(
                "hadoop-aws is not in"
                f" {cache_dir().joinpath(*HADOOP_AWS_DIR)}: run `make setup`, or pass the jars"
                " the cluster has (jars=[] when they are on its classpath)"
            )
    conf = {"spark.jars": ",".join(jars)} if jars else {}
    conf["spark.hadoop.fs.s3a.endpoint.region"] = settings.region
    if settings.endpoint_url is not None:
        conf["spark.hadoop.fs.s3a.endpoint"] = settings.endpoint_url
        conf["spark.hadoop.fs.s3a.path.style.access"] = str(settings.path_style).lower()
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(settings.secure).lower()
    return conf


def fsspec_storage_options(uri: str, settings: S3Settings | None = None) -> dict[str, Any]:
    """Keyword arguments for ``fsspec.open(uri, ...)`` (s3fs's): the endpoint and region of
    ``settings`` (default :meth:`S3Settings.from_env`) for an S3 URI, nothing for any other.

    s3fs reads the same environment itself; these make it explicit for settings that do not
    come from the environment. Credentials are left to botocore's chain.

    >>> fsspec_storage_options("/tmp/warehouse")
    {}
    >>> fsspec_storage_options("s3a://lake/wh", S3Settings("http://127.0.0.1:9000", "eu-west-1"))
    {'endpoint_url': 'http://127.0.0.1:9000', 'client_kwargs': {'region_name': 'eu-west-1'}}
    """
    if not is_s3(uri):
        return {}
    settings = S3Settings.from_env() if settings is None else settings
    options: dict[str, Any] = {}
    if settings.endpoint_url is not None:
        options["endpoint_url"] = settings.endpoint_url
    options["client_kwargs"] = {"region_name": settings.region}
    return options


def delta_rs_storage_options(
    settings: S3Settings | None = None, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``storage_options`` for delta-rs (``deltalake.DeltaTable(uri, storage_options=...)``)
    on S3: the endpoint, region and, when ``env`` (default: this process's environment) has
    them, the credentials. delta-rs does not read ``AWS_ENDPOINT_URL_S3`` itself, and needs
    ``AWS_ALLOW_HTTP`` for an endpoint without TLS. Readers only: delta-rs's own writers need
    a locking provider on S3, which these settings do not give."""
    env = os.environ if env is None else env
    settings = S3Settings.from_env(env) if settings is None else settings
    options = {"AWS_REGION": settings.region}
    if settings.endpoint_url is not None:
        options["AWS_ENDPOINT_URL"] = settings.endpoint_url
        options["AWS_ALLOW_HTTP"] = str(not settings.secure).lower()
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = str(not settings.path_style).lower()
    for name, _ in _CREDENTIALS:
        if env.get(name):
            options[name] = env[name]
    return options


def configure_object_storage(
    spark: SparkSession, env: Mapping[str, str] | None = None
) -> list[str]:
    """Hand the AWS credentials in the driver's environment to S3A: each of
    ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_SESSION_TOKEN`` that ``env``
    (default: this process's environment) holds goes into the SparkContext's Hadoop
    configuration, which Spark ships to the executors inside their tasks (executors on a
    cluster do not share the driver's environment). Returns the Hadoop properties set, by
    name.

    Call it as the job's session starts, before anything opens an ``s3a://`` path: S3A file
    systems are cached per bucket with the configuration they were opened with. Without
    these variables nothing is set and S3A's default chain finds the credentials (instance
    profile, web identity...). Spark 4.2 copies the same variables when a SparkContext
    starts (``SparkHadoopUtil``); this makes the hand-over the jobs rely on explicit rather
    than a side effect of the Spark version. The values are never logged, and Spark redacts
    these properties (``spark.redaction.regex``: ``secret``, ``token``, ``access.key``)
    wherever it shows its Hadoop configuration.
    """
    env = os.environ if env is None else env
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    given = [(name, prop) for name, prop in _CREDENTIALS if env.get(name)]
    for name, prop in given:
        hadoop.set(prop, env[name])
    if given:
        log.info(
            "S3A takes its credentials from the driver's environment (%s)",
            ", ".join(name for name, _ in given),
        )
    return [prop for _, prop in given]
