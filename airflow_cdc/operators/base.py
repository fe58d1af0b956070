"""The one operator shape every job uses: render, build a submit spec, submit, report."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

import fsspec
from airflow.sdk import BaseHook, BaseOperator, BaseOperatorLink, Context
from airflow.sdk.exceptions import AirflowRescheduleException, AirflowSensorTimeout

from airflow_cdc.jobs import (
    bookkeeping_location,
    class_archive,
    describe_shard,
    ensure_jars,
    library_archive,
    spark_defaults,
)
from airflow_cdc.lineage import operator_lineage, spark_conf_with_parent_job
from airflow_cdc.links import SparkApplicationLink, SparkMasterLink
from airflow_cdc.submit import SubmitSpec, check_versions, job_spec

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset

# The Spark conf that names the deploy mode where the connection does not.
DEPLOY_MODE_CONF = "spark.submit.deployMode"


def land_again_later(
    log: Any,
    context: Context,
    waiting: str,
    target: dt.datetime,
    lateness: float,
    poke_interval: float,
    timeout: float,
) -> NoReturn:
    """Reschedule the task to land again, or fail once it has waited ``timeout`` seconds.

    Again is ``poke_interval`` from now, and no sooner than ``target`` plus the landing's
    ``lateness``: a resolved timestamp is a horizon (a time already read) less the lateness,
    so it cannot reach the target before then."""
    now = dt.datetime.now(dt.UTC)
    first = context["ti"].get_first_reschedule_date(context) or now
    deadline = first + dt.timedelta(seconds=timeout)
    if now >= deadline:
        raise AirflowSensorTimeout(f"{waiting}; waited {timeout:.0f} s since {first.isoformat()}")
    earliest = target + dt.timedelta(seconds=lateness)
    again = min(max(now + dt.timedelta(seconds=poke_interval), earliest), deadline)
    log.info("%s; landing again at %s", waiting, again.isoformat())
    raise AirflowRescheduleException(again)


def check_waiting(poke_interval: float, timeout: float) -> None:
    """``poke_interval`` and ``timeout`` must be > 0 seconds."""
    for name, value in (("poke_interval", poke_interval), ("timeout", timeout)):
        if not value > 0:
            raise ValueError(f"{name} must be > 0 seconds, got {value!r}")


class SparkJobOperator(BaseOperator):
    """Submit one versioned airflow-cdc Spark job over the task's batch.

    :param warehouse: Warehouse root: an absolute local path or any Hadoop file system URI
        (a relative path is refused at submission: each process would resolve it in its own
        working directory).
    :param batch_id: The batch; by default the data interval's end, so re-running an
        interval (a backfill) reprocesses the same batch.
    :param job_version: The job version this task is pinned to; the task fails if another
        version is installed. ``None`` runs whatever is installed. A task that runs jobs
        inside its job (:class:`~airflow_cdc.operators.apply.LandAndApplyOperator`) also
        takes a mapping of job name to version, pinning any of them.
    :param spark_conn_id: Airflow Spark connection (master, deploy mode).
    :param spark_conf: Extra Spark conf for this job.
    :param openlineage_inject_parent_job_info: Pass the task's OpenLineage run to the Spark
        job (``spark.openlineage.parentRunId`` and the rest), so that the OpenLineage Spark
        listener's events link to the task; ``None`` follows ``[openlineage]
        spark_inject_parent_job_info``. Needs the OpenLineage provider and a transport.
    :param openlineage_inject_transport_info: Pass the provider's HTTP transport to the Spark
        job; ``None`` follows ``[openlineage] spark_inject_transport_info``.
    """

    job: ClassVar[str]
    operator_extra_links: Sequence[BaseOperatorLink] = (SparkApplicationLink(), SparkMasterLink())
    template_fields: Sequence[str] = ("warehouse", "batch_id", "spark_conf")
    ui_color = "#e8f4ea"

    def __init__(
        self,
        *,
        warehouse: str,
        batch_id: str = "{{ data_interval_end | ts }}",
        job_version: str | Mapping[str, str] | None = None,
        spark_conn_id: str = "spark_default",
        spark_conf: dict[str, str] | None = None,
        openlineage_inject_parent_job_info: bool | None = None,
        openlineage_inject_transport_info: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.warehouse = warehouse
        self.batch_id = batch_id
        self.job_version = job_version
        self.spark_conn_id = spark_conn_id
        self.spark_conf = spark_conf or {}
        self.openlineage_inject_parent_job_info = openlineage_inject_parent_job_info
        self.openlineage_inject_transport_info = openlineage_inject_transport_info
        # The counts of this task's run, for its lineage (set by execute).
        self.run_stats: dict[str, Any] | None = None

    def job_args(self, context: Context) -> list[str]:
        """The job's own arguments, after the common ones."""
        return []

    def job_env(self) -> dict[str, str]:
        return {}

    def jobs_run(self) -> list[str]:
        """The job this task submits, then any it runs inside it (each versioned)."""
        return [self.job]

    def driver_is_here(self, env: Mapping[str, str] | None = None) -> bool:
        """Whether the job's driver runs on this machine (client deploy mode, the default),
        where the class archive is (a driver deployed to the cluster would not find it), for
        a spark-submit run in ``env`` (by default, this process's environment)."""
        given = dict(os.environ) if env is None else env
        return not cluster_deploy_mode(self.spark_conn_id, self.spark_conf, given)

    def execute(self, context: Context) -> dict[str, Any]:
        versions = check_versions(self.jobs_run(), self.job_version)
        version = versions[self.job]
        # The job writes its counts into the warehouse, which the driver reaches wherever it
        # runs; the directory is this run's alone and goes once read.
        stats_dir = bookkeeping_location(self.warehouse, "stats", uuid.uuid4().hex)
        fs, stats_path = fsspec.core.url_to_fs(stats_dir)  # fails before the job, not after
        env = self.job_env()
        submit_env = {**os.environ, **env}
        spec = job_spec(
            self.job,
            warehouse=self.warehouse,
            batch_id=self.batch_id,
            run_id=str(context["run_id"]),
            stats_file=f"{stats_dir}/stats.json",
            job_args=self.job_args(context),
            library=str(library_archive()),
            jars=ensure_jars(),
            class_archive=class_archive() if self.driver_is_here(submit_env) else None,
            spark_conf=spark_conf_with_parent_job(
                self.spark_conf,
                context,
                parent_job_info=self.openlineage_inject_parent_job_info,
                transport_info=self.openlineage_inject_transport_info,
            ),
            env_vars=env,
            spark_defaults=spark_defaults(submit_env),
        )
        self.log.info("submitting %s version %s for batch %s", self.job, version, self.batch_id)

        # The job writes its application there as it starts and its counts as it ends: a
        # failed run still names its application (the task's link to its executors' logs).
        def read_stats() -> dict[str, Any]:
            with fs.open(f"{stats_path}/stats.json", "rt", encoding="utf-8") as handle:
                found: dict[str, Any] = json.load(handle)
            return found

        try:
            self.submit(spec)
        except BaseException:
            with contextlib.suppress(Exception):
                self.run_stats = read_stats()
            raise
        else:
            stats = read_stats()
        finally:
            if fs.exists(stats_path):
                fs.rm(stats_path, recursive=True)
        self.run_stats = stats
        if "job" not in stats:
            raise RuntimeError(f"{self.job} ended without writing its counts: {stats}")
        stats["job_version"] = version
        if len(versions) > 1:
            stats["job_versions"] = versions
        self.log.info("%s counts: %s", self.job, json.dumps(stats, sort_keys=True))
        landed = stats.get("land") or stats  # a landing inside the run, or the run itself
        for shard, done in sorted((landed.get("shards") or {}).items()):
            self.log.info("shard %s", describe_shard(shard, done))
        accounting = stats.get("accounting")
        if accounting:
            self.log.info(
                "landed=%s applied=%s superseded=%s duplicate=%s pending=%s quarantined=%s "
                "unprocessed=%s",
                *(
                    accounting.get(k)
                    for k in (
                        "landed",
                        "applied",
                        "superseded",
                        "duplicate",
                        "pending",
                        "quarantined",
                        "unprocessed",
                    )
                ),
            )
        return stats

    def lineage_inputs(self) -> list[InputDataset]:
        """The datasets the job reads (OpenLineage), from the operator's arguments alone."""
        return []

    def lineage_outputs(self) -> list[OutputDataset]:
        """The datasets the job writes (OpenLineage); after a run, with what it committed."""
        return []

    def get_openlineage_facets_on_start(self) -> OperatorLineage[Any, Any]:
        return operator_lineage(self.lineage_inputs(), self.lineage_outputs())

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage[Any, Any]:
        return operator_lineage(self.lineage_inputs(), self.lineage_outputs())

    def submit(self, spec: SubmitSpec) -> None:
        """Run spark-submit (the one place that starts a process).

        The job's environment (credentials, client settings) goes to the spark-submit process
        itself, never into its arguments: the Spark provider's hook would turn ``env_vars``
        into ``--conf`` options on YARN and Kubernetes, where anyone who lists processes
        reads them. So it reaches a driver on this machine (client deploy mode); a driver
        deployed to the cluster would need it on the command line, which is refused."""
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        # spark-submit's environment: this worker's and the job's. The job's keys come with
        # their own token or none: never this worker's.
        inherited = dict(os.environ)
        if "AWS_ACCESS_KEY_ID" in spec.env_vars:
            for name in ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
                inherited.pop(name, None)
        env = {**inherited, **spec.env_vars}
        cluster = cluster_deploy_mode(self.spark_conn_id, spec.conf, env)
        hook = SparkSubmitHook(
            conn_id=self.spark_conn_id,
            conf=spec.conf,
            py_files=",".join(spec.py_files),
            application_args=spec.application_args,
            name=spec.name,
            # The hook finds a YARN application's id (which on_kill stops) and reads a
            # Kubernetes driver's exit code only where it knows the mode: told here wherever
            # spark-submit takes it from, not only from the connection.
            deploy_mode="cluster" if cluster else None,
        )
        self._submit_hook = hook  # for on_kill
        if not spec.env_vars:
            hook.submit(spec.application)
            return
        if cluster:
            raise ValueError(
                f"{self.job} needs {sorted(spec.env_vars)} in its driver's environment, which"
                f" cluster deploy mode (connection {self.spark_conn_id!r}, or {DEPLOY_MODE_CONF}"
                " in spark_conf or spark-defaults.conf, or DEPLOY_MODE) would put on the"
                " spark-submit command line: use client deploy"
                " mode, or give the cluster its own identity (an instance role, IRSA, Kubernetes"
                " secrets) and a connection without keys"
            )
        hook.submit(spec.application, env=env)

    def on_kill(self) -> None:
        """Stop the job this try submitted when Airflow stops the try (its timeout, a task
        marked failed or cleared): the spark-submit process, whose driver's JVM does the
        job's work (the Python driver's next call to it fails), and a driver the cluster
        runs. Left running, it would write the tables beside the retry's job."""
        hook = getattr(self, "_submit_hook", None)
        if hook is not None:
            hook.on_kill()


def cluster_deploy_mode(
    spark_conn_id: str, spark_conf: Mapping[str, str], env: Mapping[str, str]
) -> bool:
    """Whether a spark-submit run in ``env`` deploys the job's driver to the cluster, as
    spark-submit decides it: the connection's deploy mode (its ``--deploy-mode``), else
    ``spark_conf``'s ``spark.submit.deployMode`` (a ``--conf``), else its spark-defaults.conf's,
    else its environment's ``DEPLOY_MODE``; none is client mode."""
    mode = (
        deploy_mode(spark_conn_id)
        or spark_conf.get(DEPLOY_MODE_CONF)
        or spark_defaults(env).get(DEPLOY_MODE_CONF)
        or env.get("DEPLOY_MODE")
    )
    return mode == "cluster"


def deploy_mode(spark_conn_id: str) -> str | None:
    """The deploy mode a Spark connection names (``None``: client, Spark's default)."""
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(spark_conn_id)
    except AirflowNotFoundException:  # the Spark provider's hook reports it itself
        return None
    mode = conn.extra_dejson.get("deploy-mode")
    return str(mode) if mode else None
