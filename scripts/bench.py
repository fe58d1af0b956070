"""`make bench`: throughput of each pipeline stage, measured against a bare Spark pass.

For each --format (``dsql`` by default; ``all`` for every format): generates a stream of about
--records delivered records (DSQL: fragments, redeliveries, out-of-order arrival, bad input;
Kafka formats: redeliveries, arrival out of commit order, deletes, control messages, YDB's
partial updates), writes it as NDJSON dumps (Kinesis records, or Kafka messages), then on one
Spark session (local[*]) times:

* a bare pass: read the dump lines, decode each record and parse its JSON, count;
* land (files), reassemble, resolve and apply, each as its job's main() on the same session.

It prints records/s per stage and end to end, the ratio of end-to-end throughput to the bare
pass, and the peak resident memory of the whole process tree (driver JVM, Python workers).
Figures come from one run on this machine; nothing here is a test.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from airflow_cdc.demo import change_stream  # noqa: E402
from airflow_cdc.demo.dsql_stream import DDL, generate, write_ndjson  # noqa: E402


class PeakMemory:
    """Samples the RSS of this process and all its descendants."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for proc in [me, *me.children(recursive=True)]:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    continue
            self.peak = max(self.peak, total)
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def bare_pass(spark, dump: str, fmt: str) -> int:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    lines = spark.read.text(f"{dump}/*.ndjson")
    if fmt == "dsql":
        data = F.unbase64(F.get_json_object("value", "$.Data")).cast("string")
        record = F.from_json(
            data,
            "type STRING, op STRING, source STRUCT<ts_ns: BIGINT,"
            " `schema`: STRING, `table`: STRING>, after MAP<STRING, STRING>,"
            " before MAP<STRING, STRING>",
        )
        return int(lines.select(record.alias("r")).where(F.col("r").isNotNull()).count())
    value = F.get_json_object("value", "$.value")
    record = F.from_json(value, "MAP<STRING, STRING>")
    parsed = lines.select(value.alias("v"), record.alias("r"))
    return int(parsed.where(F.col("r").isNotNull() | F.col("v").isNull()).count())


def write_stream(fmt: str, records: int, dump: str, files: int) -> int:
    """Generate and write about ``records`` delivered records of ``fmt``; how many there are."""
    if fmt == "dsql":
        # About 1.3 delivered records per change (fragments, redeliveries).
        stream = generate(max(1, int(records / 1.3)), seed=1, customers=50_000, orders=200_000)
        write_ndjson(stream.deliveries, dump, files=files)
        return len(stream.deliveries)
    changes = change_stream.generate(fmt, max(1, int(records / 1.06)), partitions=files, seed=1)
    Path(dump).mkdir(parents=True)
    size = -(-len(changes.lines) // files)
    for number in range(files):
        part = changes.lines[number * size : (number + 1) * size]
        Path(dump, f"part-{number:03d}.ndjson").write_text("\n".join(part) + "\n")
    return len(changes.lines)


def run(spark, fmt: str, args: argparse.Namespace) -> bool:  # type: ignore[no-untyped-def]
    from spark_jobs import apply, land_files, reassemble, resolve
    from spark_jobs.common import STATUSES

    work = Path(args.work) / fmt
    shutil.rmtree(work, ignore_errors=True)
    dump, warehouse = str(work / "dump"), str(work / "warehouse")
    started = time.perf_counter()
    total = write_stream(fmt, args.records, dump, args.files)
    print(
        f"\nformat={fmt} records={total:,} files={args.files} "
        f"(generated in {time.perf_counter() - started:.0f}s)"
    )
    ddl = DDL if fmt == "dsql" else change_stream.DDL
    layout = ["--layout", "kinesis"] if fmt == "dsql" else ["--layout", "kafka", "--format", fmt]
    common = ["--warehouse", warehouse, "--batch-id", "bench"]
    stages = [
        ("land", land_files.main, ["--path", dump, "--source", "bench", *layout]),
        ("reassemble", reassemble.main, ["--format", fmt]),
        ("resolve", resolve.main, ["--ddl", ddl]),
        ("apply", apply.main, ["--ddl", ddl, "--resolved-source", "bench"]),
    ]
    with PeakMemory() as memory:
        t0 = time.perf_counter()
        parsed = bare_pass(spark, dump, fmt)
        bare = time.perf_counter() - t0
        timings = {}
        stats = {}
        for name, job, extra in stages:
            t0 = time.perf_counter()
            stats[name] = job([*common, *extra])
            timings[name] = time.perf_counter() - t0
    end_to_end = sum(timings.values())
    accounting = stats["apply"]["accounting"]
    print(f"{'stage':<12}{'seconds':>10}{'records/s':>14}")
    print(f"{'bare pass':<12}{bare:>10.1f}{total / bare:>14,.0f}   (parsed {parsed:,})")
    for name, seconds in timings.items():
        print(f"{name:<12}{seconds:>10.1f}{total / seconds:>14,.0f}")
    print(f"{'end to end':<12}{end_to_end:>10.1f}{total / end_to_end:>14,.0f}")
    print(f"end-to-end throughput / bare pass = {bare / end_to_end:.3f}")
    print(f"peak memory (driver JVM + Python workers) = {memory.peak / 2**30:.2f} GiB")
    print("accounting: " + " ".join(f"{k}={v:,}" for k, v in sorted(accounting.items())))
    balanced = (
        accounting["landed"] == total
        and accounting["unprocessed"] == 0
        and sum(accounting[k] for k in STATUSES) == accounting["landed"]
    )
    print(f"landed = {' + '.join(STATUSES)}:", "yes" if balanced else "NO")
    shutil.rmtree(work, ignore_errors=True)
    return balanced


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--records",
        type=int,
        default=1_000_000,
        help="approximate number of delivered records per format (default 1,000,000)",
    )
    parser.add_argument(
        "--format",
        action="append",
        choices=["dsql", *change_stream.FORMATS, "all"],
        help="format to measure (repeat for several; default dsql; all for every one)",
    )
    parser.add_argument("--files", type=int, default=8, help="dump files (parallel shards)")
    parser.add_argument("--work", default=str(REPO / ".cache" / "bench"))
    args = parser.parse_args()
    formats = args.format or ["dsql"]
    if "all" in formats:
        formats = ["dsql", *change_stream.FORMATS]

    from spark_jobs.session import get_session

    spark = get_session("airflow-cdc-bench", master="local[*]")
    results = {fmt: run(spark, fmt, args) for fmt in formats}
    spark.stop()
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
