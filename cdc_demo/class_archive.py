"""Build a class data sharing (CDS) archive of the classes a Spark job's JVM loads, for the
tests' many short-lived JVMs: ``make setup`` runs it once.

A job's JVM spends much of its start-up loading and verifying Spark's classes. A dynamic CDS
archive holds them parsed and verified: a JVM given it (``-XX:SharedArchiveFile``) maps them
instead. A land and an apply of a few hundred records, started cold, took 42 s without it
and 34 s with it on two cores. The archive is bound to this JDK and to the class path it was
written with (pyspark's jars): a JVM started otherwise (another JDK, a standalone cluster's
own conf directory, the Kafka broker) cannot map it and runs as it would without it.

``python -m cdc_demo.class_archive`` writes it to :func:`archive_path`. The workload runs in
a child process (``python -m cdc_demo.class_archive <scratch> <partial>``) whose JVM writes
the archive as it exits, to a temporary name renamed into place when it is whole.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# A JVM that cannot map the archive (or write it) says nothing of it.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def archive_path() -> Path:
    from airflow_cdc.jobs import cache_dir

    return cache_dir() / "spark-classes.jsa"


def use_options() -> str | None:
    """JVM options that map the archive, or None when ``make setup`` has not written it."""
    archive = archive_path()
    return f"-XX:SharedArchiveFile={archive} {QUIET}" if archive.is_file() else None


def workload(scratch: str, partial: str) -> None:
    """Land and apply a small generated DSQL dump: the classes a job's JVM loads. ``partial``
    is where the JVM writes the archive as it exits."""
    from cdc_demo.dsql_stream import DDL, generate, write_ndjson
    from spark_jobs import apply_changes, land_files

    dump, warehouse = f"{scratch}/dump", f"{scratch}/warehouse"
    write_ndjson(generate(300, seed=3).deliveries, dump, files=2)
    common = ["--warehouse", warehouse, "--batch-id", "b1", "--source", "dump"]
    land_files.main([*common, "--layout", "kinesis", "--path", dump])
    # pyspark's launcher, a JVM of its own that exited before the driver started, wrote its
    # few classes there: only the driver's archive may be left to rename.
    Path(partial).unlink(missing_ok=True)
    apply_changes.main([*common, "--format", "dsql", "--ddl", DDL])
    # The JVM writes the archive as it exits, after this process would have: stop it here
    # (it exits when its standard input closes) and wait for it.
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    assert gateway is not None
    SparkContext.getOrCreate().stop()
    gateway.shutdown()
    jvm = gateway.proc
    jvm.stdin.close()
    if jvm.wait(timeout=900):
        raise RuntimeError(f"the driver's JVM exited with {jvm.returncode}")


def build(archive: Path) -> None:
    """Write the archive, or leave none and say why: the tests run without it, only slower,
    so a JDK that cannot write one (no base CDS archive) does not fail ``make setup``."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f".{archive.name}.partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="airflow-cdc-cds-") as scratch:
        log = Path(scratch, "cds.log")
        env = {
            **os.environ,
            "JAVA_TOOL_OPTIONS": f"-XX:ArchiveClassesAtExit={partial} "
            f"-Xlog:cds=warning,cds+dynamic=warning:file={log}",
        }
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        done = subprocess.run(
            [sys.executable, "-m", "cdc_demo.class_archive", scratch, str(partial)],
            env=env,
            cwd=scratch,
            capture_output=True,
            text=True,
        )
        if done.returncode or not partial.is_file():
            cds = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
            print(
                f"warning: no class archive (the tests' JVMs start without one):\n"
                f"{done.stderr[-3000:]}\n{cds}",
                file=sys.stderr,
            )
            archive.unlink(missing_ok=True)
            return
    partial.rename(archive)
    print(f"class archive: {archive} ({archive.stat().st_size:,} bytes)")


if __name__ == "__main__":
    if len(sys.argv) == 3:
        workload(*sys.argv[1:])
    else:
        build(archive_path())
