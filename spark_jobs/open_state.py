"""The open state a source carries from run to run: tables partitioned by source, each
rewritten whole for the source once per apply run (``_cdc/pending``, ``_cdc/held``,
``_cdc/transactions``)."""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


def read(spark: SparkSession, path: str, source: str) -> DataFrame | None:
    """The source's rows of the open-state table ``path``, materialized; ``None`` when it has
    none (or there is no table)."""
    if not DeltaTable.isDeltaTable(spark, path):
        return None
    rows = spark.read.format("delta").load(path).where(F.col("source") == source)
    rows = rows.localCheckpoint()
    return None if rows.isEmpty() else rows


def replace(path: str, source: str, rows: DataFrame, had_rows: bool) -> None:
    """Replace the source's rows of ``path`` with ``rows`` (one commit, columns added as they
    come; none when the source had no rows before and has none now). ``source`` is a plain
    name (:func:`~airflow_cdc.jobs.check_source`), safe to quote."""
    if not had_rows:
        rows = rows.localCheckpoint()  # computed once: for the check, then for the write
        if rows.isEmpty():
            return
    (
        rows.write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", f"source = '{source}'")
        .option("mergeSchema", "true")
        .partitionBy("source")
        .save(path)
    )
