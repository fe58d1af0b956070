"""Submit commands are pure functions: tested by exact equality."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from airflow_cdc.core.exceptions import JobVersionError
from airflow_cdc.jobs import (
    DELTA_PACKAGE,
    JARS_MANIFEST,
    JOBS,
    cache_dir,
    class_archive,
    class_archive_path,
    ensure_jars,
    installed_job_version,
    job_file,
    library_archive,
    record_class_archive,
    resolved_jars,
    resolved_state_path,
    spark_defaults,
    spark_defaults_file,
    write_jars_manifest,
)
from airflow_cdc.submit import SubmitSpec, check_version, job_spec, python_files


def test_apply_job_spec_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CDC_CACHE", "/cache")
    spec = job_spec(
        "apply_changes",
        warehouse="/wh",
        batch_id="2026-01-01T01:00:00+00:00",
        run_id="scheduled__x",
        stats_file="/tmp/s.json",
        job_args=["--ddl=CREATE TABLE t (id int PRIMARY KEY)"],
        library="/cache/lib.zip",
        jars=["/cache/ivy/jars/delta-spark.jar", "/cache/ivy/jars/delta-storage.jar"],
        spark_conf={"spark.executor.memory": "2g"},
        env_vars={"A": "1"},
    )
    assert spec == SubmitSpec(
        application=str(job_file("apply_changes")),
        application_args=[
            "--warehouse=/wh",
            "--batch-id=2026-01-01T01:00:00+00:00",
            "--run-id=scheduled__x",
            "--stats-file=/tmp/s.json",
            "--ddl=CREATE TABLE t (id int PRIMARY KEY)",
        ],
        conf={
            "spark.jars": "/cache/ivy/jars/delta-spark.jar,/cache/ivy/jars/delta-storage.jar",
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.databricks.delta.optimizeMetadataQuery.enabled": "true",
            "spark.sql.session.timeZone": "UTC",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "16",
            "spark.databricks.delta.snapshotPartitions": "1",
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "16",
            "spark.sql.codegen.cache.maxEntries": "1000",
            "spark.driver.memory": "4g",
            "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
            "spark.kryoserializer.buffer.max": "2047m",
            "spark.driver.extraJavaOptions": "-XX:+UseParallelGC -Xss8m",
            "spark.executor.extraJavaOptions": "-XX:+UseParallelGC -Xss8m",
            "spark.python.sql.dataFrameDebugging.enabled": "false",
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            "spark.executor.memory": "2g",
        },
        py_files=["/cache/lib.zip"],
        name="airflow-cdc-apply_changes",
        env_vars={"A": "1"},
    )


def test_job_spec_without_resolved_jars_resolves_the_package(monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CDC_CACHE", "/cache")
    spec = job_spec(
        "maintain", warehouse="/wh", batch_id="b", run_id="r", stats_file="s", library="l"
    )
    assert spec.conf["spark.jars.packages"] == DELTA_PACKAGE
    assert spec.conf["spark.jars.ivy"] == "/cache/ivy"
    assert "spark.jars" not in spec.conf


def test_resolved_jars_need_every_file(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CDC_CACHE", str(tmp_path))
    assert resolved_jars() is None
    jars = [tmp_path / "a.jar", tmp_path / "b.jar"]
    jars[0].write_bytes(b"PK")
    write_jars_manifest([str(j) for j in jars])
    assert resolved_jars() is None  # b.jar is missing: resolve again
    jars[1].write_bytes(b"PK")
    assert resolved_jars() == [str(j) for j in jars]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # Resolved for another package (before an upgrade): not taken, though every file is there.
    manifest = tmp_path / JARS_MANIFEST
    manifest.write_text(manifest.read_text().replace(DELTA_PACKAGE, "io.delta:delta-spark:0.1"))
    assert resolved_jars() is None


def maintain_spec(
    spark_conf: dict[str, str],
    class_archive: str | None = None,
    defaults: dict[str, str] | None = None,
) -> SubmitSpec:
    """The maintain job's submission with Delta's jar resolved, ``spark_conf`` and
    ``class_archive``, on a cluster whose spark-defaults.conf holds ``defaults``."""
    return job_spec(
        "maintain",
        warehouse="/wh",
        batch_id="b",
        run_id="r",
        stats_file="s",
        library="l",
        jars=["/cache/delta.jar"],
        class_archive=class_archive,
        spark_conf=spark_conf,
        spark_defaults=defaults,
    )


def test_the_jobs_conf_extends_the_clusters_spark_defaults() -> None:
    """A --conf replaces what spark-defaults.conf sets for the key: the cluster's JVM options
    and jars stay beside the jobs', its tuning stays instead of the jobs', and what the jobs
    cannot run without is the jobs'."""
    cluster = {
        "spark.driver.extraJavaOptions": "-Djava.security.krb5.conf=/etc/krb5.conf",
        "spark.executor.extraJavaOptions": "-Dlog4j2.configurationFile=/etc/log4j2.xml",
        "spark.jars": "/opt/spark/extra/gcs-connector.jar",
        "spark.sql.extensions": "org.apache.sedona.sql.SedonaSqlExtensions",
        "spark.driver.memory": "16g",
        "spark.sql.shuffle.partitions": "400",
        "spark.ui.enabled": "true",
        "spark.sql.catalog.spark_catalog": "org.apache.iceberg.spark.SparkSessionCatalog",
        "spark.sql.session.timeZone": "Europe/Paris",
        "spark.kryoserializer.buffer.max": "64m",
    }
    conf = maintain_spec({}, defaults=cluster).conf
    ours = maintain_spec({}).conf
    assert conf["spark.driver.extraJavaOptions"] == (
        "-Djava.security.krb5.conf=/etc/krb5.conf -XX:+UseParallelGC -Xss8m"
    )
    assert conf["spark.executor.extraJavaOptions"] == (
        "-Dlog4j2.configurationFile=/etc/log4j2.xml -XX:+UseParallelGC -Xss8m"
    )
    assert conf["spark.jars"] == "/opt/spark/extra/gcs-connector.jar,/cache/delta.jar"
    assert conf["spark.sql.extensions"] == (
        "org.apache.sedona.sql.SedonaSqlExtensions,io.delta.sql.DeltaSparkSessionExtension"
    )
    for key in ("spark.driver.memory", "spark.sql.shuffle.partitions", "spark.ui.enabled"):
        assert key in ours and key not in conf  # spark-submit takes the cluster's
    for key in (
        "spark.sql.catalog.spark_catalog",
        "spark.sql.session.timeZone",
        "spark.kryoserializer.buffer.max",
    ):
        assert conf[key] == ours[key] != cluster[key]
    # Keys the cluster does not set are the jobs', and an operator's spark_conf goes last.
    assert conf["spark.serializer"] == ours["spark.serializer"]
    mine = maintain_spec({"spark.driver.extraJavaOptions": "-Xss16m"}, defaults=cluster).conf
    assert mine["spark.driver.extraJavaOptions"] == (
        "-Djava.security.krb5.conf=/etc/krb5.conf -XX:+UseParallelGC -Xss8m -Xss16m"
    )


def test_a_collector_chosen_by_the_cluster_or_the_user_replaces_the_jobs() -> None:
    """Two collectors stop the JVM ("Conflicting collector combinations")."""
    cluster = {"spark.executor.extraJavaOptions": "-XX:+UseG1GC"}
    conf = maintain_spec({}, defaults=cluster).conf
    assert conf["spark.executor.extraJavaOptions"] == "-XX:+UseG1GC -Xss8m"
    assert conf["spark.driver.extraJavaOptions"] == "-XX:+UseParallelGC -Xss8m"
    mine = maintain_spec({"spark.driver.extraJavaOptions": "-XX:+UseZGC"}).conf
    assert mine["spark.driver.extraJavaOptions"] == "-Xss8m -XX:+UseZGC"
    # Or the default options Spark puts before the extra ones (an administrator's).
    cluster = {"spark.driver.defaultJavaOptions": "-XX:+UseG1GC -Dsite=a"}
    for given in ({}, {"spark.executor.defaultJavaOptions": "-XX:+UseShenandoahGC"}):
        conf = maintain_spec(given, defaults=cluster).conf
        assert conf["spark.driver.extraJavaOptions"] == "-Xss8m"
        assert conf["spark.executor.extraJavaOptions"] == (
            "-Xss8m" if given else "-XX:+UseParallelGC -Xss8m"
        )
    # A spark_conf's default options replace the cluster's, even empty ones.
    conf = maintain_spec({"spark.driver.defaultJavaOptions": ""}, defaults=cluster).conf
    assert conf["spark.driver.extraJavaOptions"] == "-XX:+UseParallelGC -Xss8m"


def test_a_users_list_extends_the_clusters_where_the_jobs_set_none() -> None:
    cluster = {"spark.jars.packages": "org.apache.hadoop:hadoop-aws:3.4.1"}
    conf = maintain_spec({"spark.jars.packages": "org.apache.sedona:sedona:1.7"}, defaults=cluster)
    assert conf.conf["spark.jars.packages"] == (
        "org.apache.hadoop:hadoop-aws:3.4.1,org.apache.sedona:sedona:1.7"
    )


def test_the_python_files_the_cluster_or_the_user_ships_go_beside_the_library() -> None:
    """spark-submit's --py-files (the library) replaces spark.submit.pyFiles wherever it is
    set: the cluster's files and the user's go after the library, and no --conf of it."""
    cluster = {"spark.submit.pyFiles": "hdfs:///libs/udfs.zip, hdfs:///libs/geo.zip,l"}
    spec = maintain_spec({"spark.submit.pyFiles": "/opt/mine.py"}, defaults=cluster)
    assert spec.py_files == ["l", "hdfs:///libs/udfs.zip", "hdfs:///libs/geo.zip", "/opt/mine.py"]
    assert "spark.submit.pyFiles" not in spec.conf
    assert maintain_spec({}).py_files == ["l"]
    # Spark refuses two paths of one name: the user's newer copy wins, the library stays.
    mine = {"spark.submit.pyFiles": "/home/me/udfs.zip,/opt/l"}
    assert maintain_spec(mine, defaults=cluster).py_files == [
        "l",
        "/home/me/udfs.zip",
        "hdfs:///libs/geo.zip",
    ]
    assert python_files("/cache/lib.zip", None, "", " ") == ["/cache/lib.zip"]


def test_a_clusters_own_class_sharing_gets_no_class_archive(tmp_path) -> None:
    archive = str(tmp_path / "spark-classes.jsa")
    cluster = {"spark.driver.extraJavaOptions": "-XX:SharedArchiveFile=/opt/app.jsa"}
    conf = maintain_spec({}, class_archive=archive, defaults=cluster).conf
    assert conf["spark.driver.extraJavaOptions"] == (
        "-XX:SharedArchiveFile=/opt/app.jsa -XX:+UseParallelGC -Xss8m"
    )
    # Spark puts an administrator's default options before the extra ones.
    for options in ("-XX:SharedArchiveFile=/opt/app.jsa", "-Xshare:off"):
        cluster = {"spark.driver.defaultJavaOptions": options}
        for given in ({}, cluster):
            conf = maintain_spec(given, class_archive=archive, defaults=cluster).conf
            assert conf["spark.driver.extraJavaOptions"] == "-XX:+UseParallelGC -Xss8m"
        # A spark_conf's default options replace the cluster's.
        mine = {"spark.driver.defaultJavaOptions": "-Dsite=b"}
        conf = maintain_spec(mine, class_archive=archive, defaults=cluster).conf
        assert "-XX:SharedArchiveFile=" + archive in conf["spark.driver.extraJavaOptions"]


def test_spark_defaults_that_are_not_utf8_are_read_as_spark_submit_reads_them(tmp_path) -> None:
    """spark-submit decodes the file as UTF-8 with a replacement character for each byte that
    is not (Java's reader): an administrator's Latin-1 comment must not stop a submission."""
    (tmp_path / "spark-defaults.conf").write_bytes(
        "# r\u00e9glages du cluster\nspark.driver.memory 8g\nspark.app.name caf\u00e9\n".encode(
            "latin-1"
        )
    )
    assert spark_defaults({"SPARK_CONF_DIR": str(tmp_path)}) == {
        "spark.driver.memory": "8g",
        "spark.app.name": "caf\ufffd",
    }


def test_spark_defaults_are_read_where_spark_submit_reads_them(tmp_path) -> None:
    conf_dir, home = tmp_path / "conf", tmp_path / "spark"
    conf_dir.mkdir()
    (home / "conf").mkdir(parents=True)
    (conf_dir / "spark-defaults.conf").write_text(
        "# the cluster's\n"
        "spark.driver.memory     8g\n"
        "spark.driver.extraJavaOptions=-Da=1 \\\n"
        "    -Db=2\n"
        "! not a setting\n"
        "spark.sql.shuffle.partitions : 64  \n"
        "hadoop.not.spark x\n",
        encoding="utf-8",
    )
    (home / "conf" / "spark-defaults.conf").write_text("spark.ui.enabled true\n")
    both = {"SPARK_CONF_DIR": str(conf_dir), "SPARK_HOME": str(home)}
    assert spark_defaults(both) == {
        "spark.driver.memory": "8g",
        "spark.driver.extraJavaOptions": "-Da=1 -Db=2",
        "spark.sql.shuffle.partitions": "64",
    }
    assert spark_defaults({"SPARK_HOME": str(home)}) == {"spark.ui.enabled": "true"}
    assert spark_defaults({"SPARK_CONF_DIR": str(tmp_path / "none")}) == {}
    # Without either, pyspark's own spark-submit finds its home in the installed package.
    import pyspark

    assert spark_defaults_file({}) == Path(pyspark.__file__).parent / "conf" / (
        "spark-defaults.conf"
    )


def test_a_users_spark_jars_go_beside_deltas(monkeypatch) -> None:
    spec = maintain_spec(
        {
            "spark.jars": "/opt/hadoop-aws.jar,/cache/delta.jar",
            "spark.sql.extensions": "org.apache.sedona.sql.SedonaSqlExtensions",
        }
    )
    assert spec.conf["spark.jars"] == "/cache/delta.jar,/opt/hadoop-aws.jar"
    # A user's session extension joins Delta's, which the jobs cannot run without.
    assert spec.conf["spark.sql.extensions"] == (
        "io.delta.sql.DeltaSparkSessionExtension,org.apache.sedona.sql.SedonaSqlExtensions"
    )


def test_a_users_jvm_options_follow_the_jobs(monkeypatch) -> None:
    log4j = "-Dlog4j2.configurationFile=/etc/log4j2.xml"
    spec = maintain_spec({"spark.executor.extraJavaOptions": log4j})
    # The jobs need their thread stack (a fatal error without it); the user's options come
    # after, so an -Xss of theirs wins.
    assert spec.conf["spark.executor.extraJavaOptions"] == f"-XX:+UseParallelGC -Xss8m {log4j}"
    assert spec.conf["spark.driver.extraJavaOptions"] == "-XX:+UseParallelGC -Xss8m"


def test_the_driver_maps_a_class_archive_written_for_this_runtime(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CDC_CACHE", str(tmp_path))
    assert class_archive() is None  # none built: the jobs' JVMs start without one
    archive = class_archive_path()
    archive.write_bytes(b"archive")
    assert class_archive() is None  # not known to be this runtime's
    record_class_archive(archive)
    assert class_archive() == str(tmp_path / "spark-classes.jsa")
    # Another java (an upgraded JDK) on the PATH: its JVM could not map the archive, and
    # would then start without the JDK's own archive too.
    other = tmp_path / "jdk" / "bin" / "java"
    other.parent.mkdir(parents=True)
    other.write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert class_archive() is None
    record_class_archive(archive)  # built again for it
    assert class_archive() == str(archive)

    log4j = "-Dlog4j2.configurationFile=/etc/log4j2.xml"
    spec = maintain_spec({"spark.driver.extraJavaOptions": log4j}, class_archive())
    assert spec.conf["spark.driver.extraJavaOptions"] == (
        f"-XX:+UseParallelGC -Xss8m -XX:SharedArchiveFile={archive}"
        f" -Xlog:cds=off -Xlog:cds+dynamic=off {log4j}"
    )
    # Executors on other hosts would not find it (a local master's run in the driver).
    assert spec.conf["spark.executor.extraJavaOptions"] == "-XX:+UseParallelGC -Xss8m"
    # A user's own class sharing options are theirs alone.
    for own in ("-Xshare:off", "-XX:ArchiveClassesAtExit=/tmp/mine.jsa"):
        spec = maintain_spec({"spark.driver.extraJavaOptions": own}, class_archive())
        assert spec.conf["spark.driver.extraJavaOptions"] == f"-XX:+UseParallelGC -Xss8m {own}"


def test_no_class_archive_at_a_path_the_jvm_options_would_split(tmp_path, monkeypatch) -> None:
    cache = tmp_path / "a cache"
    cache.mkdir()
    monkeypatch.setenv("AIRFLOW_CDC_CACHE", str(cache))
    class_archive_path().write_bytes(b"archive")
    record_class_archive(class_archive_path())
    assert class_archive() is None


def test_a_driver_on_another_host_gets_no_class_archive(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_HERE", json.dumps({"conn_type": "spark"}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_AWAY",
        json.dumps({"conn_type": "spark", "extra": {"deploy-mode": "cluster"}}),
    )
    from airflow_cdc.operators.maintain import CdcMaintenanceOperator

    def operator(conn_id: str, conf: dict[str, str] | None = None) -> CdcMaintenanceOperator:
        return CdcMaintenanceOperator(
            task_id="m",
            warehouse="/wh",
            source="s",
            ddl="CREATE TABLE t (id int PRIMARY KEY)",
            spark_conn_id=conn_id,
            spark_conf=conf,
        )

    assert operator("spark_here").driver_is_here()
    assert not operator("spark_away").driver_is_here()
    assert not operator("spark_here", {"spark.submit.deployMode": "cluster"}).driver_is_here()
    # Where neither names a mode, the cluster's spark-defaults.conf does.
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.submit.deployMode=cluster\n")
    cluster = {"SPARK_CONF_DIR": str(conf_dir)}
    assert not operator("spark_here").driver_is_here(cluster)
    assert operator("spark_here", {"spark.submit.deployMode": "client"}).driver_is_here(cluster)
    assert operator("spark_here").driver_is_here({})
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    assert not operator("spark_here").driver_is_here()


def test_a_jvm_that_cannot_map_the_archive_starts_without_a_word(tmp_path) -> None:
    """A driver whose class path differs from the builder's (Spark's jars, which `java
    -version` lacks) starts, silent, with the JDK's own archive: as it would without ours."""
    from airflow_cdc.jobs import class_archive_options

    built = class_archive()
    if built is None:
        pytest.skip("no class archive: `make setup` writes one where the JDK can")
    java = shutil.which("java")
    assert java is not None
    ran = subprocess.run(
        [java, *class_archive_options(built).split(), "-version"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"},
    )
    assert ran.returncode == 0
    assert ran.stdout == ""
    assert "archive" not in ran.stderr.lower() and "cds" not in ran.stderr.lower()
    assert "sharing" in ran.stderr  # the JDK's own archive, mapped


def test_a_machine_that_cannot_resolve_the_jars_leaves_it_to_spark_submit(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CDC_CACHE", str(tmp_path))
    monkeypatch.setattr(sys, "executable", "/bin/false")  # the resolution fails
    assert ensure_jars() is None


@pytest.mark.slow
def test_two_tasks_starting_at_once_both_get_the_jars(tmp_path) -> None:
    """A machine whose cache lacks the resolved jars: two tasks starting together resolve them
    once, under a lock (two Ivy resolutions into one cache at once fail), and both submit the
    same files. The Ivy cache is copied from this one, so nothing is downloaded."""
    shutil.copytree(cache_dir() / "ivy", tmp_path / "ivy")
    script = "from airflow_cdc.jobs import ensure_jars; print(','.join(ensure_jars()))"
    env = {**os.environ, "AIRFLOW_CDC_CACHE": str(tmp_path)}
    tasks = [
        subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [task.communicate(timeout=300)[0].strip() for task in tasks]
    assert [task.returncode for task in tasks] == [0, 0]
    assert outputs[0] == outputs[1]
    jars = outputs[0].split(",")
    assert any(Path(j).name.startswith("io.delta_delta-spark_") for j in jars)
    assert all(Path(j).is_file() and Path(j).is_relative_to(tmp_path) for j in jars)
    assert (tmp_path / JARS_MANIFEST).read_text().splitlines()[1:] == jars


def test_job_spec_rejects_missing_arguments() -> None:
    with pytest.raises(ValueError, match="warehouse"):
        job_spec(
            "apply_changes", warehouse="", batch_id="b", run_id="r", stats_file="s", library="l"
        )
    with pytest.raises(ValueError, match="batch_id"):
        job_spec(
            "apply_changes", warehouse="/w", batch_id="", run_id="r", stats_file="s", library="l"
        )


@pytest.mark.parametrize(
    "warehouse", ["wh", "./wh", "../data/wh", "file:wh", "file://data/wh", "s3a:lake/wh"]
)
def test_job_spec_refuses_a_relative_warehouse(warehouse: str) -> None:
    """Each process would find a relative warehouse under its own working directory (the
    driver's, the worker's, the triggerer's), and assets and lineage could not name it."""
    with pytest.raises(ValueError, match=r"warehouse must be an absolute path or a URI .* got"):
        job_spec(
            "apply_changes",
            warehouse=warehouse,
            batch_id="b",
            run_id="r",
            stats_file="s",
            library="l",
        )


def test_unknown_job() -> None:
    with pytest.raises(ValueError, match="'nope'"):
        job_file("nope")


def test_every_job_has_a_version_and_main() -> None:
    for job in JOBS:
        assert installed_job_version(job).count(".") == 2
        assert "def main(" in job_file(job).read_text()


def test_pinned_version_must_match() -> None:
    installed = installed_job_version("apply_changes")
    assert check_version("apply_changes", installed) == installed
    assert check_version("apply_changes", None) == installed
    with pytest.raises(JobVersionError, match=r"pinned to version '0\.0\.1'"):
        check_version("apply_changes", "0.0.1")


def test_library_archive_ships_core_and_jobs_but_no_airflow_layer(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CDC_CACHE", str(tmp_path))
    archive = library_archive()
    names = set(zipfile.ZipFile(archive).namelist())
    assert {
        "airflow_cdc/__init__.py",
        "airflow_cdc/core/reassembly.py",
        "spark_jobs/apply_changes.py",
        "spark_jobs/warehouse.py",
    } <= names
    assert not any(n.startswith(("airflow_cdc/operators", "airflow_cdc/sensors")) for n in names)
    assert library_archive() == archive  # built once per content


def test_resolved_state_path() -> None:
    assert resolved_state_path("s3://b/wh/", "dsql") == "s3://b/wh/_cdc/resolved/dsql.json"


def real_maintain_spec(tmp_path: Path, **given: Any) -> SubmitSpec:
    """The maintain job's submission with the real library and Delta's resolved jars."""
    return job_spec(
        "maintain",
        warehouse=str(tmp_path / "wh"),
        batch_id="b",
        run_id="r",
        stats_file="s",
        library=str(library_archive()),
        jars=ensure_jars(),
        **given,
    )


def submitted(
    spec: SubmitSpec, probes: dict[str, str], cwd: Path, env: dict[str, str] | None = None
) -> dict[str, str]:
    """What a job's session under a real spark-submit of ``spec`` (local master, environment
    ``env`` over this one's) says: each of ``probes``, a Python expression over the session
    ``spark``, by name."""
    script = cwd / "job.py"
    script.write_text(
        "from spark_jobs.session import get_session\n"
        "spark = get_session('probe')\n"
        + "".join(f"print({name!r} + '=' + str({probe}))\n" for name, probe in probes.items())
    )
    submit = Path(sys.executable).parent / "spark-submit"
    args = [str(submit), "--master", "local[1]"]
    for key, value in spec.conf.items():
        args += ["--conf", f"{key}={value}"]
    args += ["--py-files", ",".join(spec.py_files), str(script)]
    done = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.split("=", 1) for line in done.stdout.splitlines() if "=" in line]
    return {name: value for name, value in lines if name in probes}


@pytest.mark.slow
@pytest.mark.spark
def test_the_submitted_conf_wins_over_the_jobs_defaults(tmp_path) -> None:
    """A job's session under spark-submit keeps what the submit says (a user's jars beside
    Delta's, a user's setting that the jobs' Delta conf also sets), and takes the rest."""
    extra_jar = tmp_path / "users.jar"
    with zipfile.ZipFile(extra_jar, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    spec = real_maintain_spec(
        tmp_path, spark_conf={"spark.jars": str(extra_jar), "spark.sql.shuffle.partitions": "7"}
    )
    conf = "spark.sparkContext.getConf().get"
    printed = submitted(
        spec,
        {
            "JARS": f"{conf}('spark.jars')",
            "PARTITIONS": f"{conf}('spark.sql.shuffle.partitions')",
            "EXTENSIONS": f"{conf}('spark.sql.extensions')",
        },
        tmp_path,
    )
    jars = printed["JARS"].split(",")
    assert any(j.endswith("users.jar") for j in jars)
    assert any("delta-spark" in j for j in jars)
    assert printed["PARTITIONS"] == "7"  # the jobs' conf says 16
    assert printed["EXTENSIONS"] == "io.delta.sql.DeltaSparkSessionExtension"


@pytest.mark.slow
@pytest.mark.spark
def test_a_job_keeps_what_the_clusters_spark_defaults_set(tmp_path) -> None:
    """On a cluster whose spark-defaults.conf gives the driver a JVM option and a Python
    module, and the jobs' sessions their shuffle partitions and memory, a job's driver has
    that option beside the jobs' thread stack, the module beside the jobs' library, and the
    cluster's settings, not the jobs'; its session is still Delta's, in UTC."""
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    module = tmp_path / "cluster_udfs.zip"
    with zipfile.ZipFile(module, "w") as archive:
        archive.writestr("cluster_udfs.py", "POLICY = 'shared'\n")
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.submit.pyFiles {module}\n"
        "spark.driver.extraJavaOptions -Dcluster.policy=kerberos\n"
        "spark.sql.shuffle.partitions 5\n"
        "spark.driver.memory 1g\n"
        "spark.sql.session.timeZone America/New_York\n",
        encoding="utf-8",
    )
    env = {"SPARK_CONF_DIR": str(conf_dir)}
    spec = real_maintain_spec(tmp_path, spark_defaults=spark_defaults(env))
    conf = "spark.sparkContext.getConf().get"
    jvm = "spark.sparkContext._jvm"
    printed = submitted(
        spec,
        {
            "POLICY": f"{jvm}.System.getProperty('cluster.policy')",
            "STACK": f"'-Xss8m' in {jvm}.java.lang.management.ManagementFactory"
            ".getRuntimeMXBean().getInputArguments().toString()",
            "PARTITIONS": "spark.conf.get('spark.sql.shuffle.partitions')",
            "MEMORY": f"{conf}('spark.driver.memory')",
            "ZONE": "spark.conf.get('spark.sql.session.timeZone')",
            "CATALOG": f"{conf}('spark.sql.catalog.spark_catalog')",
            "MODULE": "__import__('cluster_udfs').POLICY",
        },
        tmp_path,
        env,
    )
    assert printed == {
        "POLICY": "kerberos",
        "STACK": "True",
        "PARTITIONS": "5",
        "MEMORY": "1g",
        "ZONE": "UTC",
        "CATALOG": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "MODULE": "shared",
    }


def test_a_stopped_try_stops_the_job_it_submitted(tmp_path, monkeypatch) -> None:
    """Airflow calls ``on_kill`` when it stops a try (its timeout, a task marked failed):
    the job's spark-submit JVM ends, and with it the Python driver that drives it (as a job
    does, it calls the JVM), rather than writing the tables beside the retry's job."""
    import contextlib
    import textwrap
    import threading
    import time

    import psutil

    from airflow_cdc.operators.maintain import CdcMaintenanceOperator

    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"})
    )
    started = tmp_path / "driver.pid"
    app = tmp_path / "job.py"
    app.write_text(
        textwrap.dedent(
            f"""
            import os, time
            from pyspark.java_gateway import launch_gateway

            gateway = launch_gateway()  # the spark-submit JVM's, as a job's session is
            open({str(started)!r}, "w").write(str(os.getpid()))
            while True:
                gateway.jvm.java.lang.System.currentTimeMillis()
                time.sleep(0.1)
            """
        )
    )
    op = CdcMaintenanceOperator(
        task_id="m",
        warehouse=str(tmp_path / "wh"),
        source="s",
        ddl="CREATE TABLE t (id int PRIMARY KEY)",
        spark_conn_id="spark_local",
    )
    spec = SubmitSpec(
        application=str(app), application_args=[], conf={}, py_files=[], name="stop-me"
    )
    failed: list[BaseException] = []

    def submit() -> None:
        try:
            op.submit(spec)
        except Exception as err:  # the hook reports the killed spark-submit
            failed.append(err)

    thread = threading.Thread(target=submit, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 180
        while not started.exists() or not started.read_text():
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.2)
        driver = psutil.Process(int(started.read_text()))
        op.on_kill()
        thread.join(60)
        assert not thread.is_alive() and failed
        with contextlib.suppress(psutil.NoSuchProcess):
            driver.wait(60)
        assert not driver.is_running() or driver.status() == psutil.STATUS_ZOMBIE
    finally:
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):  # gone, or a zombie
                if any("stop-me" in part or str(app) in part for part in child.cmdline()):
                    child.kill()
