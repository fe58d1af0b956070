"""`make bench`: the pipeline's throughput against three baselines, measured in one run.

For each --format (``dsql`` by default; ``all`` for every format): generates a stream of about
--records delivered records (DSQL: fragments, redeliveries, out-of-order arrival, bad input;
Kafka formats: redeliveries, arrival out of commit order, deletes, control messages, YDB's
partial updates), writes it as NDJSON dumps (Kinesis records, or Kafka messages), then on one
Spark session (local[*]) times:

* the bare pass: read the dump lines, decode each record, parse its JSON envelope, count;
* the floor: the same parse, then one Delta append of every record and its envelope fields,
  the least any pipeline that lands the records durably must do;
* the AUTO CDC baseline (DSQL): Spark 4.2's open-source AUTO CDC SCD1 algorithm on the
  ``full`` records, ported to Delta (``scripts/baselines.py``);
* land (files) and apply_changes, each as its job's main() on the same session;

all of that --rounds times (default 2): the first round runs each plan for the first time in
the JVM (code generation and JIT included, as in a spark-submit job), the later ones warm.
Then:

* table size: the same --size-changes DSQL changes applied to targets of --size-small and
  --size-large rows (a MERGE whose cost follows the changes keeps them close);
* growth: --growth-batches successive batches of --growth-changes DSQL changes into one
  warehouse, each landed and applied and timed (the tenth against the second: bookkeeping
  that follows the batch, not the history, keeps them equal); then the maintain job on that
  warehouse (bookkeeping retention, compaction, VACUUM): its time, rows expired and files
  per table before and after.

It prints records/s per stage and end to end, one line per ratio (baseline time over the
project's end-to-end time, higher is faster), and the peak memory of the driver, its JVM and
the Python workers (proportional set size: :class:`PeakMemory`).
Figures come from one run on this machine; nothing here is a test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import baselines  # noqa: E402

from cdc_demo import change_stream  # noqa: E402
from cdc_demo.dsql_stream import DDL, generate, write_ndjson  # noqa: E402


class PeakMemory:
    """Samples the memory of this process, the driver JVM and the Python workers: their
    proportional set size (a page shared by several processes counts a share in each: the
    Python workers fork from one daemon).

    Nothing else the JVM starts counts: Hadoop's local file system runs ``chmod`` and
    ``readlink`` for files it writes (without its native library), and until such a process
    runs its program it shares the JVM's memory and reports all of it (a sample that met one
    counted the JVM twice: 7.86 GiB against 5.74 GiB for the same run sampled without it)."""

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
                    if proc is me or _counted(proc):
                        total += proc.memory_full_info().pss
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


def _counted(proc: psutil.Process) -> bool:
    """Whether a descendant is the driver JVM or a Python process (not a command the JVM
    runs, whatever its name before it runs its program: its thread's)."""
    name = proc.name()
    if name.startswith("python"):
        return True
    parent = proc.parent()
    return name == "java" and (parent is None or parent.name() != "java")


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


def job_inputs(fmt: str) -> tuple[str, list[str]]:
    """The DDL of ``fmt``'s generated stream, and the landing job's layout arguments."""
    if fmt == "dsql":
        return DDL, ["--layout", "kinesis"]
    return change_stream.DDL, ["--layout", "kafka", "--format", fmt]


def timed(job, *args):
    started = time.perf_counter()
    result = job(*args)
    return result, time.perf_counter() - started


def run(spark, fmt: str, args: argparse.Namespace) -> bool:
    """``args.rounds`` rounds of the baselines and the project on ``fmt``'s stream, one after
    the other on the session; whether every round's accounting balanced."""
    work = Path(args.work) / fmt
    shutil.rmtree(work, ignore_errors=True)
    dump = str(work / "dump")
    started = time.perf_counter()
    total = write_stream(fmt, args.records, dump, args.files)
    print(
        f"\nformat={fmt} records={total:,} files={args.files} "
        f"(generated in {time.perf_counter() - started:.0f}s)"
    )
    balanced = True
    for number in range(1, args.rounds + 1):
        print(f"round {number} of {args.rounds}: {ROUNDS[min(number, 2)]}")
        balanced = one_round(spark, fmt, total, dump, work / f"round-{number}") and balanced
    shutil.rmtree(work, ignore_errors=True)
    return balanced


# What a round measures. The first runs the format's plans for the first time in this JVM
# (for a format measured after another, those the other did not run): Spark generates and
# compiles their code, and the JIT compiles that and the share of Spark's own code they use,
# as a spark-submit job pays on every batch. Later rounds run warm, as the figures of the
# issue that set the goals were measured.
ROUNDS = {
    1: "the format's first run in this JVM (code generation and JIT included)",
    2: "warm: the same plans again",
}


def one_round(spark: Any, fmt: str, total: int, dump: str, work: Path) -> bool:
    """The baselines, then land and apply_changes, timed on one stream into new tables;
    prints the figures and ratios and the accounting; whether the accounting balanced."""
    from spark_jobs import apply_changes, land_files
    from spark_jobs.ledger import STATUSES

    shutil.rmtree(work, ignore_errors=True)
    warehouse = str(work / "warehouse")
    ddl, layout = job_inputs(fmt)
    common = ["--warehouse", warehouse, "--batch-id", "bench"]
    land_args = [*common, "--path", dump, "--source", "bench", *layout]
    apply_args = [*common, "--source", "bench", "--format", fmt, "--ddl", ddl]
    with PeakMemory() as memory:
        # Baselines and the project interleaved on one session.
        parsed, bare = timed(baselines.bare_pass, spark, dump, fmt)
        _, floor = timed(baselines.floor, spark, dump, fmt, str(work / "floor"))
        auto = None
        if fmt == "dsql":
            _, auto = timed(baselines.auto_cdc, spark, dump, ddl, str(work / "auto_cdc"))
        _, land = timed(land_files.main, land_args)
        stats, process = timed(apply_changes.main, apply_args)
    end_to_end = land + process
    accounting = stats["accounting"]
    print(f"{'stage':<22}{'seconds':>10}{'records/s':>14}")
    rows = [
        ("bare pass", bare),
        ("floor", floor),
        ("AUTO CDC baseline", auto),
        ("land", land),
        ("apply_changes", process),
        ("end to end", end_to_end),
    ]
    for name, seconds in rows:
        if seconds is not None:
            print(f"{name:<22}{seconds:>10.1f}{total / seconds:>14,.0f}")
    print(f"(bare pass parsed {parsed:,})")
    if auto is not None:
        print(f"end-to-end / AUTO CDC baseline = {auto / end_to_end:.2f}")
    print(f"end-to-end / floor = {floor / end_to_end:.2f}")
    print(f"end-to-end / bare pass = {bare / end_to_end:.2f}")
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


def growth(spark: Any, args: argparse.Namespace) -> None:
    """Successive DSQL batches into one warehouse: does a batch cost more as history grows?
    With ``--growth-maintenance``, the maintain job after each batch, as an hourly DAG runs
    it (nothing past its retention: what it costs to find that out)."""
    from spark_jobs import apply_changes, land_files, maintain

    batches, changes = args.growth_batches, args.growth_changes
    work = Path(args.work) / "growth"
    shutil.rmtree(work, ignore_errors=True)
    stream = generate(changes * batches, seed=2, customers=50_000, orders=200_000)
    size = -(-len(stream.deliveries) // batches)
    warehouse = str(work / "warehouse")
    print(
        f"\ngrowth: {batches} batches of {changes:,} changes (about {size:,} records) into one"
        " warehouse, land + apply_changes per batch"
    )
    print(
        "each with a consistent cut at its records' 90th percentile of commit time (about a"
        " tenth held back, applied by the next batch's cut)"
    )
    header = f"{'batch':<8}{'seconds':>10}{'records/s':>14}{'held rows':>11}"
    if args.growth_maintenance:
        header += f"{'maintain s':>12}{'batches read':>14}"
    print(header)
    seconds = []
    upkeep = []
    cut = None
    for number in range(1, batches + 1):
        part = stream.deliveries[(number - 1) * size : number * size]
        dump = str(work / f"dump-{number:02d}")
        write_ndjson(part, dump, files=args.files)
        common = ["--warehouse", warehouse, "--batch-id", f"g{number:02d}", "--source", "growth"]
        cut = percentile_cut(part, 0.9, after=cut)
        started = time.perf_counter()
        land_files.main([*common, "--path", dump, "--layout", "kinesis"])
        apply_changes.main([*common, "--format", "dsql", "--ddl", DDL, "--cut-at", cut.isoformat()])
        seconds.append(time.perf_counter() - started)
        held = spark.read.format("delta").load(f"{warehouse}/_cdc/held").count()
        line = f"{number:<8}{seconds[-1]:>10.1f}{len(part) / seconds[-1]:>14,.0f}{held:>11,}"
        if args.growth_maintenance:
            stats, spent = timed(maintain.main, [*common, "--ddl", DDL])
            upkeep.append(spent)
            line += f"{spent:>12.1f}{stats['batches']['batches_read']:>14}"
        print(line)
    if batches >= 10:
        print(f"tenth batch / second batch = {seconds[9] / seconds[1]:.2f} (goal <= 1.2)")
        if upkeep:
            print(f"tenth maintenance / second maintenance = {upkeep[9] / upkeep[1]:.2f}")
    maintenance(warehouse)
    shutil.rmtree(work, ignore_errors=True)


def percentile_cut(
    records: list[str], fraction: float, after: dt.datetime | None = None
) -> dt.datetime:
    """The commit time below which ``fraction`` of the records' changes lie (past ``after``)."""
    stamps = sorted(
        json.loads(text)["source"]["ts_ns"] for text in records if '"source"' in text[:4000]
    )
    chosen = dt.datetime.fromtimestamp(stamps[int(len(stamps) * fraction)] / 1e9, dt.UTC)
    if after is not None and chosen <= after:
        chosen = after + dt.timedelta(microseconds=1)
    return chosen


def cut_cost(spark: Any, args: argparse.Namespace) -> None:
    """The same batch applied without a cut and with one that holds back a tenth of it."""
    from spark_jobs import apply_changes, land_files

    work = Path(args.work) / "cut"
    shutil.rmtree(work, ignore_errors=True)
    stream = generate(args.cut_changes, seed=7, customers=args.cut_changes // 2, orders=5_000)
    dump = str(work / "dump")
    write_ndjson(stream.deliveries, dump, files=args.files)
    cut = percentile_cut(stream.deliveries, 0.9)
    print(
        f"\nconsistent cut: {args.cut_changes:,} changes ({len(stream.deliveries):,} records)"
        " applied without a cut, and with a cut that holds back a tenth"
    )
    timings = {}
    for name, extra in (("no cut", []), ("cut", ["--cut-at", cut.isoformat()])):
        warehouse = str(work / name.replace(" ", "-"))
        common = ["--warehouse", warehouse, "--batch-id", "cut", "--source", "cut"]
        land_files.main([*common, "--path", dump, "--layout", "kinesis"])
        stats, timings[name] = timed(
            apply_changes.main, [*common, "--format", "dsql", "--ddl", DDL, *extra]
        )
        held = stats["accounting"]["pending"]
        print(f"  {name:<8} apply {timings[name]:6.1f} s, {held:,} records pending")
    print(f"apply with a cut / without = {timings['cut'] / timings['no cut']:.2f}")
    shutil.rmtree(work, ignore_errors=True)


def maintenance(warehouse: str) -> None:
    """The maintain job on the growth warehouse, with a bookkeeping retention of 0 s (every
    final record's bookkeeping expires): its time, rows expired and files per table."""
    from spark_jobs import maintain

    stats, seconds = timed(
        maintain.main,
        [
            *("--warehouse", warehouse, "--batch-id", "maintain", "--source", "growth"),
            *("--ddl", DDL, "--raw-retention-seconds", "0"),
        ],
    )
    expired = stats["expired"]
    print(
        f"\nmaintenance of the growth warehouse: {seconds:.1f} s;"
        f" {expired['records_expired']:,} records' bookkeeping expired"
        f" (raw {expired['raw_rows']:,}, ledger {expired['ledger_rows']:,},"
        f" quarantine {expired['quarantine_rows']:,} rows)"
    )
    print(f"{'table':<20}{'files before':>14}{'files after':>13}{'MB rewritten':>14}")
    for name, report in stats["tables"].items():
        print(
            f"{name:<20}{report['files_before']:>14,}{report['files_after']:>13,}"
            f"{report['bytes_rewritten'] / 2**20:>14.1f}"
        )


def table_size(spark: Any, args: argparse.Namespace) -> None:
    """The same batch of DSQL changes applied to targets of --size-small and --size-large rows.

    A first run of the batch in a scratch warehouse gives each target table its schema and
    rows. Each size's targets are those rows with the stored sequence set below every change
    (so that the batch applies again), copied under shifted keys up to the size; the batch
    touches only the first copy. The raw input is the same for both: only the tables differ.
    """
    from pyspark.sql import functions as F

    from airflow_cdc.core.ddl import parse_tables
    from spark_jobs import apply_changes, land_files
    from spark_jobs.apply import ensure_target

    changes = args.size_changes
    work = Path(args.work) / "size"
    shutil.rmtree(work, ignore_errors=True)
    stream = generate(changes, seed=5, customers=changes // 2, orders=changes // 8)
    dump = str(work / "dump")
    write_ndjson(stream.deliveries, dump, files=args.files)
    specs = parse_tables(DDL)

    def land_and_apply(warehouse: str) -> tuple[float, float]:
        common = ["--warehouse", warehouse, "--batch-id", "size", "--source", "size"]
        _, land = timed(land_files.main, [*common, "--path", dump, "--layout", "kinesis"])
        _, apply = timed(apply_changes.main, [*common, "--format", "dsql", "--ddl", DDL])
        return land, apply

    scratch = str(work / "scratch")
    land_and_apply(scratch)
    print(
        f"\ntable size: the same {changes:,} changes ({len(stream.deliveries):,} records),"
        " landed and applied to targets of two sizes"
    )
    print(f"{'target rows':>14}{'land s':>10}{'apply s':>10}")
    applied = {}
    for size in (args.size_small, args.size_large):
        warehouse = str(work / f"rows-{size}")
        rows = 0
        # The scratch tables hold about changes / 2 customers: copies to reach ``size``.
        copies = max(1, round(size / (changes // 2)))
        for spec in specs:
            relative = f"{spec.table.schema}/{spec.table.name}"
            source = spark.read.format("delta").load(f"{scratch}/{relative}")
            base = source.count()
            first = spec.primary_key[0]
            span = source.agg(F.max(first)).first()[0] or 0
            shifted = (
                source.crossJoin(spark.range(copies).withColumnRenamed("id", "_copy"))
                .withColumn(
                    first,
                    (F.col(first) + F.col("_copy") * (span + 1)).cast(
                        source.schema[first].dataType
                    ),
                )
                .withColumn("_cdc_sequence", F.lit("0"))
                .withColumn("_cdc_deleted", F.lit(False))
                .drop("_copy")
            )
            path = f"{warehouse}/{relative}"
            ensure_target(spark, path, source.schema)
            shifted.write.format("delta").mode("append").save(path)
            rows += base * copies
        land, apply = land_and_apply(warehouse)
        applied[size] = apply
        print(f"{rows:>14,}{land:>10.1f}{apply:>10.1f}")
    small, large = applied[args.size_small], applied[args.size_large]
    print(
        f"apply into {args.size_large:,} rows / into {args.size_small:,} rows"
        f" = {large / small:.2f} (goal <= 2)"
    )
    shutil.rmtree(work, ignore_errors=True)


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
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="rounds of the baselines and the project per format, one after the other: the"
        " first is each plan's first run in the JVM, the later ones warm (default 2)",
    )
    parser.add_argument("--work", default=str(REPO / ".cache" / "bench"))
    parser.add_argument(
        "--growth-batches",
        type=int,
        default=10,
        help="successive DSQL batches into one warehouse, timed each (0: skip)",
    )
    parser.add_argument("--growth-changes", type=int, default=20_000, help="changes per batch")
    parser.add_argument(
        "--growth-maintenance",
        action="store_true",
        help="run and time the maintain job after each growth batch",
    )
    parser.add_argument(
        "--size-changes",
        type=int,
        default=20_000,
        help="changes applied to a small and a large table, timed each (0: skip)",
    )
    parser.add_argument("--size-small", type=int, default=20_000, help="rows of the small table")
    parser.add_argument("--size-large", type=int, default=1_000_000, help="rows of the large one")
    parser.add_argument(
        "--cut-changes",
        type=int,
        default=20_000,
        help="changes applied with and without a consistent cut (0: skip)",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    formats = args.format or ["dsql"]
    if "all" in formats:
        formats = ["dsql", *change_stream.FORMATS]

    from spark_jobs.session import get_session

    spark = get_session("airflow-cdc-bench", master="local[*]")
    results = {fmt: run(spark, fmt, args) for fmt in formats}
    if args.growth_batches > 0:
        growth(spark, args)
    if args.size_changes > 0:
        table_size(spark, args)
    if args.cut_changes > 0:
        cut_cost(spark, args)
    spark.stop()
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
