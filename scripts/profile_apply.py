"""Where a batch's land and apply_changes time goes: a developer's tool, not a test.

Generates a stream as `make bench` does (``--format``, about ``--records`` records), then lands
and applies it ``--reps`` times on one warm session (each run into a new warehouse), and
reports for the last run:

* the Spark jobs each stage ran, and their SQL executions grouped by description (count,
  seconds, jobs): which kind of query the time is in (checkpoints, Delta's file filtering,
  MERGE, writes);
* the driver's time in JVM calls, by the innermost line of ``spark_jobs`` that made them:
  which step of the job the time is in, planning included. Tables applied in parallel
  threads overlap (a call waits while the other thread's job runs): ``--serial`` applies
  one table at a time, for figures that add up to the wall time. The calls that run no
  Spark job (building columns and frames: thousands per table) are also summed together;
* the Spark stages, longest first, each named by the ``spark_jobs`` lines that ran it, with
  its tasks and task time: how busy the cores were, and where the work is;
* the classes of generated code Spark compiled (none for a plan in its cache of them);
* the JVM's CPU time by thread group (Linux: ``/proc``): the tasks, the driver's threads that
  answer Python (analysis, planning, Delta's log), the JIT compiler, the garbage collector.
  The JIT's share is the cost of code the JVM has not compiled yet: Spark's generated
  classes for each new plan, and in a fresh JVM (a spark-submit job) Spark's own code.

Example: ``.venv/bin/python scripts/profile_apply.py --format dsql --records 200000``.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import re
import shutil
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import bench  # noqa: E402

from cdc_demo import change_stream  # noqa: E402

UI = {
    "spark.ui.enabled": "true",
    "spark.ui.retainedJobs": "10000",
    "spark.ui.retainedStages": "10000",
    "spark.sql.ui.retainedExecutions": "10000",
}


# A JVM call shorter than this runs no Spark job: it builds a column or a frame (each
# ``F.`` function is a reflective lookup and a call), reads a conf, looks up a class.
QUICK_CALL = 0.02


class JvmCalls:
    """Wall time of the driver's JVM calls, by the innermost ``depth`` ``spark_jobs`` frames;
    and the calls quicker than :data:`QUICK_CALL`, together (how many, and their time)."""

    def __init__(self, depth: int = 2) -> None:
        self.depth = depth
        self.seconds: collections.defaultdict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter[str] = collections.Counter()
        self.quick_calls = 0
        self.quick_seconds = 0.0
        self._inside = False

    def install(self, context: Any = None) -> None:
        """Time every JVM call; with a SparkContext, also name each Spark stage after the
        ``spark_jobs`` lines that ran it."""
        from py4j.clientserver import ClientServerConnection

        send = ClientServerConnection.send_command
        profile = self

        def timed_send(connection: Any, command: str, *args: Any, **kwargs: Any) -> Any:
            if profile._inside:  # a call made while answering another one
                return send(connection, command, *args, **kwargs)
            profile._inside = True
            where = _caller(profile.depth)
            if context is not None and context._jsc is not None:  # name its stages by line
                context.setLocalProperty("callSite.short", where)
            started = time.perf_counter()
            try:
                return send(connection, command, *args, **kwargs)
            finally:
                profile._inside = False
                took = time.perf_counter() - started
                profile.seconds[where] += took
                profile.calls[where] += 1
                if took < QUICK_CALL:
                    profile.quick_calls += 1
                    profile.quick_seconds += took

        ClientServerConnection.send_command = timed_send

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()
        self.quick_calls = 0
        self.quick_seconds = 0.0

    def report(self, top: int) -> None:
        print(f"\nJVM calls by spark_jobs line: {sum(self.seconds.values()):.1f} s in all")
        print(
            f"of which {self.quick_calls:,} calls under {QUICK_CALL * 1000:.0f} ms (building"
            f" columns and frames, no Spark job): {self.quick_seconds:.1f} s"
        )
        print(f"{'seconds':>8}{'calls':>7}  line")
        for where, seconds in sorted(self.seconds.items(), key=lambda item: -item[1])[:top]:
            print(f"{seconds:>8.2f}{self.calls[where]:>7}  {where}")


class ThreadCpu:
    """CPU seconds of the JVM's threads between :meth:`start` and :meth:`report`, by thread
    name with its numbers taken out, as Linux keeps it (its first 15 characters: "Executor
    task i" for the tasks, "Thread-N" for py4j's, "CN CompilerThre" for the JIT); nothing
    where ``/proc`` has no such process."""

    def __init__(self, pid: int) -> None:
        self.tasks = Path(f"/proc/{pid}/task")
        self.before: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        seconds: collections.defaultdict[str, float] = collections.defaultdict(float)
        ticks = os.sysconf("SC_CLK_TCK")
        for stat in self.tasks.glob("*/stat"):
            try:
                text = stat.read_text()
            except OSError:  # the thread ended
                continue
            name = re.sub(r"\d+", "N", text[text.index("(") + 1 : text.rindex(")")])
            fields = text[text.rindex(")") + 2 :].split()
            seconds[name] += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        return seconds

    def start(self) -> None:
        self.before = self._now() if self.tasks.is_dir() else {}

    def report(self, top: int) -> None:
        if not self.tasks.is_dir():
            return
        now = self._now()
        used = {name: seconds - self.before.get(name, 0.0) for name, seconds in now.items()}
        print(f"\nJVM CPU by thread: {sum(used.values()):.1f} s in all")
        for name, seconds in sorted(used.items(), key=lambda item: -item[1])[:top]:
            if seconds >= 0.05:
                print(f"{seconds:>8.2f}  {name}")


class Compiles:
    """The classes of generated code Spark compiled between :meth:`start` and :meth:`report`
    (its codegen metrics, ``CodegenMetrics``): a plan found in Spark's cache of compiled
    classes (``spark.sql.codegen.cache.maxEntries``) compiles none, nor does the JIT compile
    it again. The mean compile time is the JVM's recent one (the metric's samples decay),
    not the job's alone."""

    def __init__(self, jvm: Any) -> None:
        self.histogram = (
            jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
        )
        self.before = 0

    def start(self) -> None:
        self.before = self.histogram.getCount()

    def report(self) -> None:
        compiled = self.histogram.getCount() - self.before
        mean = self.histogram.getSnapshot().getMean()
        print(f"\ngenerated classes compiled: {compiled:,} (recent mean in this JVM {mean:.0f} ms)")


def _caller(depth: int) -> str:
    frame = sys._getframe(2)
    lines: list[str] = []
    while frame is not None and len(lines) < depth:
        if "/spark_jobs/" in frame.f_code.co_filename:
            name = Path(frame.f_code.co_filename).name
            lines.append(f"{name}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back  # type: ignore[assignment]
    return " < ".join(lines) or "(outside spark_jobs)"


def _api(spark: Any, path: str) -> Any:
    context = spark.sparkContext
    url = f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}/{path}"
    with urllib.request.urlopen(url) as answer:
        return json.load(answer)


def last_job(spark: Any) -> int:
    return max(spark.sparkContext.statusTracker().getJobIdsForGroup(None) or [-1])


def report_queries(spark: Any, after: int, top: int) -> None:
    """The SQL executions whose jobs came after job ``after``, grouped by description."""
    jobs = {j["jobId"] for j in _api(spark, "jobs") if j["jobId"] > after}
    executions: collections.Counter[str] = collections.Counter()
    ran: collections.Counter[str] = collections.Counter()
    seconds: collections.defaultdict[str, float] = collections.defaultdict(float)
    for query in _api(spark, "sql?details=false&length=100000"):
        ids = {*query.get("successJobIds", []), *query.get("failedJobIds", [])}
        if not ids & jobs:
            continue
        description = query["description"][:90]
        executions[description] += 1
        ran[description] += len(ids)
        seconds[description] += query["duration"] / 1000
    print(f"\n{len(jobs)} Spark jobs; SQL executions by description")
    print(f"{'seconds':>8}{'count':>7}{'jobs':>6}  description")
    for description in sorted(seconds, key=lambda d: -seconds[d])[:top]:
        print(
            f"{seconds[description]:>8.2f}{executions[description]:>7}{ran[description]:>6}"
            f"  {description}"
        )


def _seconds(stamp: str) -> float:
    """A UI time (``2026-11-27T07:05:42.123GMT``) in seconds since the epoch."""
    parsed = dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f%Z")  # naive, in GMT
    return parsed.replace(tzinfo=dt.UTC).timestamp()


def report_stages(spark: Any, after: int, wall: float, top: int) -> None:
    """The stages of the jobs after job ``after``, longest first: their tasks, and how busy
    they kept the executor's cores (task time over wall time); then the whole stage's use of
    the cores, which shows how much of ``wall`` ran on one core or none."""
    jobs = [j for j in _api(spark, "jobs") if j["jobId"] > after]
    ids = {s for j in jobs for s in j["stageIds"]}
    cores = spark.sparkContext.defaultParallelism
    stages = []
    for stage in _api(spark, "stages?details=false"):
        if stage["stageId"] not in ids or stage["status"] != "COMPLETE":
            continue
        took = _seconds(stage["completionTime"]) - _seconds(stage["submissionTime"])
        stages.append((took, stage["executorRunTime"] / 1000, stage["numTasks"], stage))
    busy = sum(s[1] for s in stages)
    print(
        f"\n{len(stages)} stages; task time {busy:.1f} s over {wall:.1f} s of wall time"
        f" on {cores} cores: {busy / (wall * cores):.0%} of the cores busy"
    )
    print(f"{'seconds':>8}{'task s':>8}{'tasks':>7}  stage")
    for took, run, tasks, stage in sorted(stages, key=lambda s: -s[0])[:top]:
        print(f"{took:>8.2f}{run:>8.2f}{tasks:>7}  {stage['stageId']} {stage['name']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--format", default="dsql", choices=["dsql", *change_stream.FORMATS])
    parser.add_argument("--records", type=int, default=200_000, help="about this many records")
    parser.add_argument("--reps", type=int, default=2, help="runs (the first warms the JVM)")
    parser.add_argument("--files", type=int, default=8, help="dump files (parallel shards)")
    parser.add_argument("--top", type=int, default=40, help="lines and groups to print")
    parser.add_argument(
        "--depth",
        type=int,
        default=2,
        help="spark_jobs frames that name a call or stage (more tell apart the callers of a"
        " shared helper, such as the checkpoints)",
    )
    parser.add_argument("--work", default=str(REPO / ".cache" / "profile"))
    parser.add_argument(
        "--serial", action="store_true", help="apply one table at a time (see above)"
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the session (repeatable), to compare one against the default",
    )
    args = parser.parse_args()
    if args.depth < 1:
        parser.error(f"--depth takes 1 or more frames, got {args.depth}")

    from spark_jobs import apply_changes, frames, land_files
    from spark_jobs.session import get_session

    if args.serial:
        frames.PARALLEL_TABLES = 1

    work = Path(args.work) / args.format
    shutil.rmtree(work, ignore_errors=True)
    dump = str(work / "dump")
    total = bench.write_stream(args.format, args.records, dump, args.files)
    ddl, layout = bench.job_inputs(args.format)
    # The UI's REST API is the source of the job and SQL execution figures.
    settings = dict(UI)
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--conf takes KEY=VALUE, got {item!r}")
        settings[key] = value
    spark = get_session("airflow-cdc-profile", master="local[*]", conf=settings)
    calls = JvmCalls(args.depth)
    calls.install(spark.sparkContext)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    cpu = ThreadCpu(jvm.java.lang.ProcessHandle.current().pid())
    compiles = Compiles(jvm)
    for rep in range(1, args.reps + 1):
        common = ["--warehouse", str(work / f"warehouse-{rep}"), "--batch-id", "profile"]
        common += ["--source", "profile"]
        timings = {}
        for stage, job, stage_args in (
            ("land", land_files.main, [*common, "--path", dump, *layout]),
            ("apply", apply_changes.main, [*common, "--format", args.format, "--ddl", ddl]),
        ):
            first, started = last_job(spark), time.perf_counter()
            calls.reset()
            cpu.start()
            compiles.start()
            job(stage_args)
            timings[stage] = time.perf_counter() - started
            if rep == args.reps:
                print(f"\n== {stage} of {total:,} {args.format} records: {timings[stage]:.1f} s")
                report_queries(spark, first, args.top)
                report_stages(spark, first, timings[stage], args.top)
                calls.report(args.top)
                cpu.report(args.top)
                compiles.report()
        print(f"run {rep}: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
