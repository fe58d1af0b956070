"""What it takes to submit a versioned Spark job: Delta's Spark conf, job files, versions and the
library archive shipped to the cluster.

Pure Python (no Airflow, no Spark), so that both the operators and the jobs' own session
builder use one definition.
"""

from __future__ import annotations

import ast
import datetime as dt
import fcntl
import hashlib
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import airflow_cdc
from airflow_cdc.core.events import BOOKKEEPING_SCHEMA, TableRef

log = logging.getLogger(__name__)

# delta-spark 4.4.0 is built for Spark 4.2 (artifact suffix _4.2_2.13).
DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
JOBS = (
    "land_kinesis",
    "land_kafka",
    "land_files",
    "apply_changes",
    "land_and_apply",
    "maintain",
)
# Delta's floor for VACUUM (``delta.deletedFileRetentionDuration``'s default): a shorter
# retention could delete files that a running reader or writer still needs.
MIN_VACUUM_RETENTION_HOURS = 168.0
# Kafka client settings (security protocol, SASL...) reach a landing job's driver in this
# environment variable, never on a command line; the job's readers carry them to executors.
KAFKA_CONFIG_ENV = "AIRFLOW_CDC_KAFKA_CONFIG"
# Maintenance's retentions by default (spark_jobs.maintain, airflow_cdc.settings).
TOMBSTONE_RETENTION_SECONDS = 86400.0
RAW_RETENTION_SECONDS = 7 * 86400.0
QUARANTINE_RETENTION_SECONDS = 30 * 86400.0
CUT_RETENTION_SECONDS = 7 * 86400.0
# A target table this large is clustered by its primary key (see spark_jobs.maintain.cluster).
# Delta's OPTIMIZE writes files of up to 1 GiB, so a smaller table is one or two files, and
# clustering leaves its MERGE nothing more to skip: at 1,000,000 rows (40 MB) the same 20,000
# changes took as long to apply into a table clustered by key as into one bin-packed in
# random key order.
CLUSTER_ABOVE_BYTES = 2 * 1024**3
# The longest retention a job takes (a hundred years: "keep it"); longer ones overflow dates.
MAX_RETENTION_SECONDS = 100 * 365 * 86400.0
# A day: an incomplete fragment set that has waited this long in the open state is
# quarantined, however the stream moves (a stalled stream does not hold it forever).
MAX_PENDING_WALL_SECONDS = 86400.0
_PACKAGE_ROOT = Path(airflow_cdc.__file__).resolve().parent
_REPO_ROOT = _PACKAGE_ROOT.parent
_SHIPPED = (
    "airflow_cdc/__init__.py",
    "airflow_cdc/jobs.py",
    "airflow_cdc/storage.py",
    "airflow_cdc/core",
    "spark_jobs",
)


# A Spark catalog's name as its conf names it (``spark.sql.catalog.<name>``): no dots.
CATALOG_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]{0,127}")
# A source names a partition and a file under the warehouse: a plain name, never a path.
SOURCE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")
# An absolute local path, or a URI's scheme and the root of its path (``s3a://``, ``file:/``).
ABSOLUTE_LOCATION = re.compile(r"/|[A-Za-z][A-Za-z0-9+.\-]*:/")
# A file URI names a local path: ``file:/wh`` or ``file:///wh``, not a host (``file://wh``).
FILE_WITH_HOST = re.compile(r"file://[^/]", re.IGNORECASE)


def check_time(value: str | dt.datetime, name: str) -> dt.datetime:
    """``value`` as a time (an ISO 8601 text or a datetime; one without an offset is UTC),
    else ``ValueError`` naming the argument ``name``."""
    try:
        parsed = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be an ISO 8601 time, got {value!r}") from err
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def check_source(source: str | None) -> str:
    """``source`` if it is a plain name (letters, digits, ``_.-``), else ``ValueError``."""
    if not isinstance(source, str) or not SOURCE_NAME.fullmatch(source) or ".." in source:
        raise ValueError(f"source must match {SOURCE_NAME.pattern}, got {source!r}")
    return source


def check_location(location: str, name: str = "warehouse") -> str:
    """``location`` if it is an absolute local path (``/wh``) or a URI with an absolute path
    (``s3a://lake/wh``, ``file:/wh``), else ``ValueError`` naming the argument ``name``: each
    process that reads a relative path (the Spark driver, the Airflow worker, the triggerer)
    would resolve it against its own working directory, and no asset or lineage dataset
    could name it.

    >>> check_location("s3a://lake/wh")
    's3a://lake/wh'
    """
    if (
        not isinstance(location, str)
        or not ABSOLUTE_LOCATION.match(location)
        or FILE_WITH_HOST.match(location)
    ):
        raise ValueError(
            f"{name} must be an absolute path or a URI (/data/wh, s3a://bucket/wh),"
            f" got {location!r}"
        )
    return location


def table_location(warehouse: str, table: TableRef) -> str:
    """Where the jobs keep ``table``: ``<warehouse>/<schema>/<table>``."""
    return "/".join([warehouse.rstrip("/"), table.schema, table.name])


def bookkeeping_location(warehouse: str, *parts: str) -> str:
    """Where the jobs keep their bookkeeping (tables ``raw``, ``ledger``..., state files):
    ``<warehouse>/_cdc/<parts>``."""
    return "/".join([warehouse.rstrip("/"), BOOKKEEPING_SCHEMA, *parts])


def resolved_state_path(warehouse: str, source: str) -> str:
    """Where the landing job records the resolved timestamp of ``source`` (JSON); a source
    that is no plain name (:func:`check_source`) names none."""
    return bookkeeping_location(warehouse, "resolved", f"{check_source(source)}.json")


def published_cut_path(warehouse: str, source: str) -> str:
    """Where the apply job points at the newest cut it published for ``source`` (JSON: the
    cut, the interval, and each table's location and Delta version); a source that is no
    plain name (:func:`check_source`) names none."""
    return bookkeeping_location(warehouse, "cut", f"{check_source(source)}.json")


def cache_dir() -> Path:
    """Where jars and the shipped library are cached (``$AIRFLOW_CDC_CACHE``)."""
    configured = os.environ.get("AIRFLOW_CDC_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "airflow-cdc"


JAVA_OPTIONS = "-XX:+UseParallelGC -Xss8m"
CLASS_ARCHIVE = "spark-classes.jsa"
# A JVM that cannot map the archive says nothing of it.
QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"
# A user's own class data sharing options: theirs alone (-XX:ArchiveClassesAtExit beside a
# dynamic archive stops the JVM).
_OWN_CDS = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare")


def class_archive_path() -> Path:
    """Where ``python -m spark_jobs.class_archive`` writes the class archive."""
    return cache_dir() / CLASS_ARCHIVE


def _built_for_path(archive: Path) -> Path:
    return archive.with_name(f"{archive.name}.built-for")


def java_runtime() -> str:
    """What a class archive is bound to beyond its class path: the ``java`` that spark-submit
    starts (``$JAVA_HOME/bin/java``, else the one on the PATH), by its real path, size and
    modification time, and the installed pyspark."""
    from importlib.metadata import PackageNotFoundError, version

    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    java = "none"
    if found and os.path.isfile(found):
        real = os.path.realpath(found)
        stat = os.stat(real)
        java = f"{real} {stat.st_size} {stat.st_mtime_ns}"
    try:
        pyspark = version("pyspark")
    except PackageNotFoundError:
        pyspark = "none"
    return f"java {java}; pyspark {pyspark}"


def record_class_archive(archive: Path) -> None:
    """Record that ``archive`` was written for this machine's :func:`java_runtime`."""
    write_whole(_built_for_path(archive), java_runtime() + "\n")


def class_archive() -> str | None:
    """The class archive for the jobs' drivers (:mod:`spark_jobs.class_archive`), when the
    cache holds one written for this machine's :func:`java_runtime`. A JVM given an archive it
    cannot map (another JDK's, a missing file) starts without the JDK's own archive either, so
    slower than with none: an archive of another runtime is not given. Nor is one whose path
    the JVM options could not hold as one word (Spark splits them at spaces)."""
    archive = class_archive_path()
    if not archive.is_file() or shlex.quote(str(archive)) != str(archive):
        return None
    try:
        built_for = _built_for_path(archive).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return str(archive) if built_for == java_runtime() else None


def class_archive_options(archive: str) -> str:
    """JVM options that map the class archive ``archive``."""
    return f"-XX:SharedArchiveFile={archive} {QUIET_CDS}"


def owns_class_sharing(java_options: str) -> bool:
    """Whether JVM options set class data sharing themselves (no class archive then)."""
    return any(option in java_options for option in _OWN_CDS)


def spark_defaults_file(env: Mapping[str, str]) -> Path | None:
    """The ``spark-defaults.conf`` that spark-submit reads in the environment ``env``: in
    ``SPARK_CONF_DIR``, else in ``SPARK_HOME``'s ``conf``, else in the installed pyspark's
    (where its ``spark-submit`` finds its home); ``None`` without any of them."""
    if env.get("SPARK_CONF_DIR"):
        return Path(env["SPARK_CONF_DIR"]) / "spark-defaults.conf"
    home = env.get("SPARK_HOME")
    if not home:
        import importlib.util

        spec = importlib.util.find_spec("pyspark")
        if spec is None or spec.origin is None:
            return None
        home = str(Path(spec.origin).parent)
    return Path(home) / "conf" / "spark-defaults.conf"


def spark_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """The settings of the ``spark-defaults.conf`` that spark-submit reads in ``env``
    (:func:`spark_defaults_file`; a Java properties file, as Spark reads it); none when
    there is no such file."""
    import javaproperties

    path = spark_defaults_file(env)
    if path is None or not path.is_file():
        return {}
    # Decoded as spark-submit's reader decodes it: UTF-8, a replacement character for each
    # byte that is not (an administrator's Latin-1 comment stops no submission).
    with path.open(encoding="utf-8", errors="replace") as file:
        loaded: dict[str, str] = javaproperties.load(file)
    # spark-submit keeps the ``spark.`` keys only, their values trimmed.
    return {k.strip(): v.strip() for k, v in loaded.items() if k.strip().startswith("spark.")}


def delta_spark_conf(
    jars: Sequence[str] | None = None, class_archive: str | None = None
) -> dict[str, str]:
    """Spark conf that enables Delta Lake.

    :param jars: Delta's jars as local files (:func:`resolved_jars`), passed to spark-submit
        as they are; without them, Ivy resolves the package into the cache at every start.
    :param class_archive: A class archive for the driver's JVM (:func:`class_archive`), when
        it runs on this machine: it starts the job's work sooner. Executors on other hosts
        would not find the file, and a local master's run in the driver.

    The partition counts suit hourly CDC batches (thousands to millions of rows); a large
    cluster raises them through the operators' ``spark_conf``.
    """
    if jars:
        where = {"spark.jars": ",".join(jars)}
    else:
        where = {"spark.jars.packages": DELTA_PACKAGE, "spark.jars.ivy": str(cache_dir() / "ivy")}
    return {
        **where,
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.databricks.delta.optimizeMetadataQuery.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "16",
        # Delta's snapshot state (a table's files) in one partition: each scan of a table
        # filters it in a Spark job, a dozen or more per apply, and a job of one task
        # starts sooner. Measured on 2 cores, warm, an apply of 2,605 DSQL records, the
        # settings alternated twice: 15.8 s against 18.2 s with 4 (the mean of runs 3-5).
        "spark.databricks.delta.snapshotPartitions": "1",
        # VACUUM lists a table's files in this many tasks (Spark's default, 10,000, costs
        # about a minute of task start-up per table on two cores).
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "16",
        # Spark keeps this many compiled classes of generated code (its default, 100, holds
        # less than one job: an apply of 200,000 DSQL records compiles 506 distinct classes,
        # and running it again in the same JVM made 580 compilations, each one compiled by
        # the JIT again after). A JVM that runs the jobs again reuses them. Spark reads the
        # setting once per JVM, the first time it generates code.
        "spark.sql.codegen.cache.maxEntries": "1000",
        # On a local master the executors run in the driver: with Spark's default 1g heap the
        # batch's materialized stages spill to disk (about a third of apply_changes' time at
        # 200k records). A cluster sets its own through ``spark_conf``.
        "spark.driver.memory": "4g",
        # A large apply keeps its materialized stages as serialized blocks
        # (:func:`spark_jobs.session.fit_storage`), which Kryo writes and reads at a fraction
        # of Java serialization's cost: one apply of 998,092 DSQL records, serialized by
        # Java 118.4 s, by Kryo 103.2 s (2 cores, warm, ``scripts/profile_apply.py``).
        "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
        # Kryo serializes some values whole into one buffer (a task's result; Spark's default
        # limit is 64m), and one row may hold an image of up to 128 MiB: its largest buffer.
        "spark.kryoserializer.buffer.max": "2047m",
        # Batch jobs want throughput: the parallel collector ran small applies 10-20% faster
        # than the default G1 on two cores (G1's concurrent work competes with the tasks).
        # Spark reads a VARIANT recursively (to_json, schema_of_variant): a value nested as
        # deep as its JSON reader takes (999 levels) overflowed a task thread's default
        # stack, a fatal error that ends the executor, and so every retry of the batch.
        "spark.driver.extraJavaOptions": (
            JAVA_OPTIONS
            if class_archive is None
            else f"{JAVA_OPTIONS} {class_archive_options(class_archive)}"
        ),
        "spark.executor.extraJavaOptions": JAVA_OPTIONS,
        # PySpark records the Python call site of every column expression it builds (three
        # JVM calls and a stack walk each): several seconds per job for plans of hundreds of
        # expressions. Errors still name the failing expression.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
    }


JARS_MANIFEST = "delta-jars.txt"


# The manifest's first line names the package its jars were resolved for: after an upgrade
# (another DELTA_PACKAGE) the old jars are not taken, though they are still in the cache.
_MANIFEST_HEADER = f"# {DELTA_PACKAGE}"
# Longest a resolution may take before the waiting tasks give up on it.
RESOLVE_TIMEOUT_SECONDS = 1800


def resolved_jars() -> list[str] | None:
    """Delta's jars as resolved once into the cache (one local path per line of
    ``$AIRFLOW_CDC_CACHE/delta-jars.txt``, after a line naming :data:`DELTA_PACKAGE`), or
    None when they are not all there or were resolved for another package."""
    try:
        lines = (cache_dir() / JARS_MANIFEST).read_text(encoding="utf-8").split("\n")
    except FileNotFoundError:
        return None
    if not lines or lines[0] != _MANIFEST_HEADER:
        return None
    paths = [p for p in lines[1:] if p]
    if paths and all(Path(p).is_file() for p in paths):
        return paths
    return None


def partial_of(path: Path) -> Path:
    """A name of this process's own beside ``path``, to write a file under and rename into
    place whole: a reader never sees half of it, and two writers do not mix."""
    return path.with_name(f".{path.name}.{os.getpid()}")


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`partial_of`)."""
    partial = partial_of(path)
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def write_jars_manifest(jars: Sequence[str]) -> Path:
    """Record ``jars`` (local paths) as the resolved jars of :data:`DELTA_PACKAGE`,
    atomically."""
    manifest = cache_dir() / JARS_MANIFEST
    manifest.parent.mkdir(parents=True, exist_ok=True)
    write_whole(manifest, "".join(f"{line}\n" for line in (_MANIFEST_HEADER, *jars)))
    return manifest


def ensure_jars() -> list[str] | None:
    """Delta's jars as local files, resolving them first if the cache lacks them; None when
    this machine cannot resolve them (no pyspark here, a failed or hung resolution): the
    submit then names the package and spark-submit resolves it, as without a cache.

    Resolution runs once per machine: ``make setup`` (or ``python -m spark_jobs.session
    --resolve-jars``) does it at install time; otherwise the first task to need them resolves
    them while every other process on the machine waits on a lock (Ivy's cache is not safe
    for two resolutions at once), then all submit the same files.
    """
    jars = resolved_jars()
    if jars:
        return jars
    lock = cache_dir() / f"{JARS_MANIFEST}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        jars = resolved_jars()
        if jars is None:
            try:
                subprocess.run(
                    [sys.executable, "-m", "spark_jobs.session", "--resolve-jars"],
                    check=True,
                    env={**os.environ, "AIRFLOW_CDC_CACHE": str(cache_dir())},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    timeout=RESOLVE_TIMEOUT_SECONDS,
                )
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
                log.warning(
                    "Delta's jars did not resolve into %s (%s); spark-submit resolves the"
                    " package itself",
                    cache_dir(),
                    err,
                )
                return None
            jars = resolved_jars()
    return jars


def job_file(job: str) -> Path:
    """Path of a job's entry file, ``spark_jobs/<job>.py``."""
    if job not in JOBS:
        raise ValueError(f"job must be one of {JOBS}, got {job!r}")
    return _REPO_ROOT / "spark_jobs" / f"{job}.py"


def installed_job_version(job: str) -> str:
    """The ``JOB_VERSION`` constant of a job file, read without importing it (no pyspark)."""
    tree = ast.parse(job_file(job).read_text(encoding="utf-8"))
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "JOB_VERSION" for t in node.targets)
            and isinstance(node.value, ast.Constant)
        ):
            return str(node.value.value)
    raise ValueError(f"{job_file(job)} defines no JOB_VERSION")


def library_archive() -> Path:
    """A zip of the core and the jobs' shared modules, for ``--py-files``.

    Named by content hash, so a cluster never runs a stale copy and an unchanged library is
    built once.
    """
    files = sorted(
        path
        for entry in _SHIPPED
        for path in (
            [_REPO_ROOT / entry] if entry.endswith(".py") else (_REPO_ROOT / entry).rglob("*.py")
        )
    )
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(_REPO_ROOT)).encode())
        digest.update(path.read_bytes())
    target = (
        cache_dir()
        / "pyfiles"
        / f"airflow_cdc-{airflow_cdc.__version__}-{digest.hexdigest()[:12]}.zip"
    )
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = partial_of(target)
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                archive.write(path, str(path.relative_to(_REPO_ROOT)))
        partial.replace(target)
    return target


# The keys of a reader's report of how far it stopped behind its shard's tip.
OFFSETS_BEHIND = "offsets_behind"  # a Kafka partition: offsets from the last landed to its end
MILLIS_BEHIND = "millis_behind_latest"  # a Kinesis shard: its last page's MillisBehindLatest
LINES_BEHIND = "lines_behind"  # a dump file: a last line its writer has not ended (1)

# How far a shard's reader stopped from the tip of its shard, in the source's own unit (its
# report's key, and how a log line says it).
TIP_UNITS = {OFFSETS_BEHIND: "offsets", MILLIS_BEHIND: "ms", LINES_BEHIND: "lines"}


def describe_shard(shard: str, done: dict[str, Any]) -> str:
    """One log line's words for a shard's entry in a landing job's counts (its ``shards``)."""
    tip = "".join(
        f", {done[key]} {unit} behind the tip" for key, unit in TIP_UNITS.items() if key in done
    )
    return (
        f"{shard}: {done.get('landed')} records landed, newest change {done.get('horizon_ts')}"
        f" ({done.get('behind_seconds')} s behind now){tip}"
        + (", closed" if done.get("closed") else "")
    )
