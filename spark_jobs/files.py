"""Small files and directories on any Hadoop file system (the warehouse's state files, a
landing run's staging)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from pyspark.sql import SparkSession

from spark_jobs.warehouse import JobContext


def hadoop_path(ctx: JobContext, path: str) -> Any:
    """``path`` as a Hadoop path, and the file system it is on."""
    return hadoop_path_in(ctx.spark, path)


def hadoop_path_in(spark: SparkSession, path: str) -> Any:
    """``path`` as a Hadoop path, and the file system it is on, from ``spark``'s conf."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    return hpath, hpath.getFileSystem(conf)


def write_text(ctx: JobContext, path: str, text: str) -> None:
    """Write a small file atomically (aside, then rename) on any Hadoop file system."""
    write_file(ctx.spark, path, text)


def write_file(spark: SparkSession, path: str, text: str) -> None:
    target, fs = hadoop_path_in(spark, path)
    partial, _ = hadoop_path_in(spark, f"{path}.{uuid.uuid4().hex}.tmp")
    stream = fs.create(partial, True)
    stream.write(bytearray(text.encode("utf-8")))
    stream.close()
    fs.delete(target, False)
    fs.rename(partial, target)


def exists(ctx: JobContext, path: str) -> bool:
    """Whether a file or directory is at ``path`` (any Hadoop file system)."""
    target, fs = hadoop_path(ctx, path)
    return bool(fs.exists(target))


def read_text(ctx: JobContext, path: str) -> str | None:
    """A small file's text, or ``None`` if it does not exist."""
    if not exists(ctx, path):
        return None
    return "\n".join(r[0] for r in ctx.spark.read.text(path).collect())


def delete_path(ctx: JobContext, path: str) -> None:
    target, fs = hadoop_path(ctx, path)
    fs.delete(target, True)


def dated_name() -> str:
    """A unique directory name that carries its creation time: ``<epoch seconds>-<hex>``
    (object stores report no modification time for directories)."""
    return f"{int(time.time())}-{uuid.uuid4().hex}"


def delete_stale(ctx: JobContext, path: str, older_than: float) -> list[str]:
    """Delete the entries of directory ``path`` whose :func:`dated_name` is over
    ``older_than`` seconds old (or that carry no date); the paths deleted."""
    target, fs = hadoop_path(ctx, path)
    if not fs.exists(target):
        return []
    cutoff = time.time() - older_than
    deleted = []
    for status in fs.listStatus(target):
        created, _, _ = status.getPath().getName().partition("-")
        if not created.isdigit() or int(created) < cutoff:
            fs.delete(status.getPath(), True)
            deleted.append(str(status.getPath()))
    return deleted
