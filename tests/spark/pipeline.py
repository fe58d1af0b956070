"""Run the jobs in-process on the shared session, as their operators would submit them."""

from __future__ import annotations

from typing import Any

from cdc_demo.dsql_stream import DDL
from spark_jobs import apply_changes, land_files


def land_dump(
    warehouse: str,
    path: str,
    batch: str,
    source: str = "dump",
    layout: str = "kinesis",
    fmt: str | None = None,
) -> dict[str, Any]:
    return land_files.main(
        [
            "--layout",
            layout,
            *(["--format", fmt] if fmt else []),
            "--warehouse",
            warehouse,
            "--batch-id",
            batch,
            "--path",
            path,
            "--source",
            source,
            "--lateness-seconds",
            "0",
        ]
    )


def process(
    warehouse: str,
    batch: str,
    ddl: str = DDL,
    source: str = "dump",
    max_pending_age: float = 3600.0,
    fmt: str = "dsql",
    options: tuple[str, ...] = (),
) -> dict[str, dict[str, Any]]:
    stats = apply_changes.main(
        [
            *("--warehouse", warehouse, "--batch-id", batch, "--source", source),
            *("--format", fmt, "--ddl", ddl),
            *("--max-pending-age-seconds", str(max_pending_age)),
            *options,
        ]
    )
    return {"apply": stats}


def live_rows(spark: Any, warehouse: str, table: str) -> list[dict[str, Any]]:
    frame = spark.read.format("delta").load(f"{warehouse}/public/{table}")
    return [r.asDict() for r in frame.where("NOT _cdc_deleted").collect()]
