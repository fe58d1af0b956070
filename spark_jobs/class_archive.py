"""Build a class data sharing (CDS) archive of the classes a Spark job's JVM loads:
``python -m spark_jobs.class_archive`` (``make setup`` runs it once).

A job's JVM spends much of its start-up loading and verifying Spark's and Delta's classes. A
dynamic CDS archive holds them parsed and verified: a JVM given it (``-XX:SharedArchiveFile``)
maps them instead. The operators' spark-submits give it to a driver on this machine when the
cache holds one written for the ``java`` and pyspark installed
(:func:`airflow_cdc.jobs.class_archive`). Measured on two cores, ``make demo``'s hourly batch
(land, gate, apply) of 2,583 DSQL records took 104-114 s without it and 93-94 s with it; of
2,056 Debezium messages, 100 s and 61 s. Build it again after upgrading the JDK or pyspark
(until then the jobs start without it). A driver whose class path differs from the
builder's (a non-empty ``SPARK_CONF_DIR`` on it, other jars) cannot map it and starts as
it would without it, silently.

The archive is written to ``$AIRFLOW_CDC_CACHE/spark-classes.jsa``. The workload that loads
the classes (a land and an apply of a small DSQL dump written here: every operation, a
chunked image and its fragments, a redelivery, a malformed record) runs in a child process
(``python -m spark_jobs.class_archive <scratch> <partial>``) whose JVM writes the archive as
it exits, to a temporary name renamed into place when it is whole.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from airflow_cdc.core.reassembly import checksum
from airflow_cdc.jobs import class_archive_path, partial_of, record_class_archive

REPO = Path(__file__).resolve().parent.parent

SAMPLE_DDL = """
CREATE TABLE public.sample (
    id bigint PRIMARY KEY,
    name text NOT NULL,
    amount numeric(12, 2),
    score double precision,
    active boolean,
    born date,
    seen_at timestamptz,
    prefs json,
    avatar bytea
);
"""
_START_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z


def _image(key: int, version: int) -> dict[str, object]:
    return {
        "id": key,
        "name": f"name {key}.{version}",
        "amount": f"{key * 100 + version}.25",
        "score": key / 7,
        "active": version % 2 == 0,
        "born": 7000 + key,
        "seen_at": _START_NS // 1000 + version * 1_000_000,
        "prefs": json.dumps({"v": version}),
        "avatar": base64.b64encode(bytes([key, version])).decode("ascii"),
    }


def _record(op: str, key: int, version: int, **fields: object) -> dict[str, object]:
    image = _image(key, version)
    return {
        "type": "full",
        "op": op,
        "before": image if op == "d" else None,
        "after": None if op == "d" else image,
        "source": {
            "ts_ns": _START_NS + (key * 10 + version) * 1_000_000,
            "schema": "public",
            "table": "sample",
        },
        **fields,
    }


def sample_records() -> list[str]:
    """The workload's DSQL records, as delivered."""
    records = [_record("c", key, 0) for key in range(1, 21)]
    records += [_record("u", key, 1) for key in range(1, 11)]
    records += [_record("d", key, 2) for key in range(1, 4)]
    records.append(records[5])  # a redelivery
    # A chunked image and its two fragments.
    chunked = _record("c", 30, 0)
    text = json.dumps(chunked.pop("after"))
    chunked["type"] = "chunked"
    chunked["chunked"] = {
        "after": {"chunk_id": "sample-30", "total_fragments": 2, "crc32c": str(checksum(text))}
    }
    half = len(text) // 2
    records.append(chunked)
    for index, data in enumerate((text[:half], text[half:])):
        records.append({"type": "fragment", "chunk_id": "sample-30", "index": index, "data": data})
    texts = [json.dumps(r) for r in records]
    texts.append('{"type": "full", "op": ')  # malformed: quarantined
    return texts


def write_sample(directory: str, shards: int = 2) -> None:
    """The sample as Kinesis shard dumps, as ``land_files --layout kinesis`` reads them."""
    os.makedirs(directory, exist_ok=True)
    arrival = dt.datetime(2026, 1, 1, 0, 5, tzinfo=dt.UTC)
    lines: list[list[str]] = [[] for _ in range(shards)]
    for n, text in enumerate(sample_records()):
        line = {
            "ShardId": f"shardId-{n % shards:012d}",
            "SequenceNumber": str(49_000_000_000_000_000_000_000_000_000 + n),
            "PartitionKey": str(n),
            "ApproximateArrivalTimestamp": (arrival + dt.timedelta(seconds=n)).isoformat(),
            "Data": base64.b64encode(text.encode("utf-8")).decode("ascii"),
        }
        lines[n % shards].append(json.dumps(line))
    for shard, shard_lines in enumerate(lines):
        Path(directory, f"shard-{shard:03d}.ndjson").write_text("\n".join(shard_lines) + "\n")


def workload(scratch: str, partial: str) -> None:
    """Land and apply the sample: the classes a job's JVM loads. ``partial`` is where the JVM
    writes the archive as it exits."""
    from spark_jobs import apply_changes, land_files

    dump, warehouse = f"{scratch}/dump", f"{scratch}/warehouse"
    write_sample(dump)
    common = ["--warehouse", warehouse, "--batch-id", "b1", "--source", "sample"]
    land_files.main([*common, "--layout", "kinesis", "--path", dump])
    # pyspark's launcher, a JVM of its own that exited before the driver started, wrote its
    # few classes there: only the driver's archive may be left to rename.
    Path(partial).unlink(missing_ok=True)
    apply_changes.main([*common, "--format", "dsql", "--ddl", SAMPLE_DDL])
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


def build(archive: Path) -> bool:
    """Write the archive, or leave the cache as it was and say why (jobs run without one,
    only slower to start); whether it was written."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    # The JVM writes the archive under a name of this build's own, renamed into place whole:
    # a job starting meanwhile maps the archive that was there, and two builds do not mix.
    partial = partial_of(archive)
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
            [sys.executable, "-m", "spark_jobs.class_archive", scratch, str(partial)],
            env=env,
            cwd=scratch,
            capture_output=True,
            text=True,
        )
        if done.returncode or not partial.is_file():
            cds = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
            print(
                f"warning: no class archive written (jobs start without a new one):\n"
                f"{done.stderr[-3000:]}\n{cds}",
                file=sys.stderr,
            )
            partial.unlink(missing_ok=True)
            return False
    os.replace(partial, archive)
    record_class_archive(archive)
    print(f"class archive: {archive} ({archive.stat().st_size:,} bytes)")
    return True


if __name__ == "__main__":
    if len(sys.argv) == 3:
        workload(*sys.argv[1:])
    else:
        sys.exit(0 if build(class_archive_path()) else 1)
