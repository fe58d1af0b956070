"""The demo's last step: a result table queried without Spark, by delta-rs and DuckDB."""

from __future__ import annotations

from typing import Any

COUNTS = (
    "SELECT count(*) FILTER (WHERE NOT _cdc_deleted) AS live,"
    " count(*) FILTER (WHERE _cdc_deleted) AS tombstones"
    " FROM rows"
)


def count_without_spark(location: str) -> dict[str, Any]:
    """The live rows and tombstones of the target table at ``location`` (a path, or a URI
    delta-rs opens), counted by DuckDB over the Arrow stream of delta-rs's scan, which applies
    the table's deletion vectors and column mapping.

    DuckDB's own ``delta_scan`` needs its delta extension, which DuckDB downloads from its own
    host on first use; and deltalake's ``to_pyarrow_dataset`` refuses tables with deletion
    vectors: the scan's stream needs neither.
    """
    import deltalake
    import duckdb
    import pyarrow as pa

    table = deltalake.DeltaTable(location)
    # Only the column the query reads: the stream is consumed once, batch by batch.
    rows = pa.RecordBatchReader.from_stream(table.scan(columns=["_cdc_deleted"]))
    with duckdb.connect() as con:
        con.register("rows", rows)
        [(live, tombstones)] = con.execute(COUNTS).fetchall()
    return {
        "version": table.version(),
        "live": int(live),
        "tombstones": int(tombstones),
        "readers": f"deltalake {deltalake.__version__}, DuckDB {duckdb.__version__}",
    }
