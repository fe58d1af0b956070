"""`make demo`: Aurora DSQL on Kinesis to Delta Lake, through the example DAG, end to end.

Starts kinesis-local, generates a realistic DSQL stream (fragments across shards,
redeliveries, out-of-order arrival, ops c/u/d and an unknown one, every column type, bad
input), puts it into a 4-shard stream, runs the hourly example DAG for 2026-01-01 00:00-01:00
with `airflow dags test`, then the maintenance DAG's task for the stream once (what it
compacted and expired), prints the tables and checks them against the generator.

`make demo DEMO_ARGS="--format cockroachdb"` (or ydb, ydb-debezium, arcion, cdl, debezium)
does the same from Kafka: a KRaft broker, a 3-partition topic, the ``kafka_to_delta`` DAG.

``--warehouse s3`` puts the warehouse in a bucket of a local S3-compatible server (S3Proxy),
``s3a://lake/warehouse``: the jobs reach it through hadoop-aws, the sensor and the checks
through s3fs and delta-rs, all with the credentials in their environment.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cdc_demo import kinesis  # noqa: E402
from cdc_demo.change_stream import FORMATS, TOPIC  # noqa: E402
from cdc_demo.dsql_stream import TABLES, differences, generate  # noqa: E402
from cdc_demo.environment import STREAM, airflow_env, migrate  # noqa: E402
from cdc_demo.kinesis import REGION  # noqa: E402

WORK = REPO / ".cache" / "demo"
INTERVAL_END = "2026-01-01T01:00:00+00:00"
COMMIT_START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--format", default="dsql", choices=["dsql", *FORMATS])
    parser.add_argument(
        "--warehouse",
        default="local",
        choices=["local", "s3"],
        help="a local directory, or a bucket on a local S3 server (s3a://)",
    )
    args = parser.parse_args()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    with warehouse_at(args.warehouse) as (warehouse, storage_env):
        if args.format != "dsql":
            return kafka_demo(args.format, warehouse, storage_env)
        return dsql_demo(warehouse, storage_env)


def dsql_demo(warehouse: str, storage_env: dict[str, str]) -> int:
    stream = generate(
        2000,
        seed=2026,
        start_ns=int(COMMIT_START.timestamp()) * 10**9,
        span_ns=50 * 60 * 10**9,
    )
    print(f"generated {len(stream.deliveries)} Kinesis records: {json.dumps(stream.counts)}")
    with kinesis.kinesis_local(log_path=str(WORK / "kinesis-local.log")) as endpoint:
        client = kinesis.client(endpoint)
        kinesis.create_stream(client, STREAM, shards=4)
        kinesis.put(client, STREAM, stream.deliveries)
        print(f"put them into {STREAM} (4 shards) on kinesis-local at {endpoint}")
        env = {
            **os.environ,
            **airflow_env(WORK / "airflow", WORK / "warehouse", endpoint),
            **storage_env,
        }
        if storage_env:
            # The landing job runs with the Kinesis connection's keys as its AWS_* variables,
            # which S3A would take for the bucket too: without keys in the connection, boto3
            # and S3A both take the environment's (kinesis-local accepts any).
            env["AIRFLOW_CONN_KINESIS_DEFAULT"] = json.dumps(
                {"conn_type": "cdc_kinesis", "host": endpoint, "extra": {"region_name": REGION}}
            )
        migrate(env)
        if not run_dag(env, "dsql_to_delta"):
            return 1
    if not maintain(env):
        return 1
    return report(stream, warehouse)


@contextmanager
def warehouse_at(kind: str) -> Iterator[tuple[str, dict[str, str]]]:
    """The demo's warehouse, and the environment (over ``airflow_env``'s) under which its
    processes reach it: ``.cache/demo/warehouse``, or ``s3a://lake/warehouse`` on a local
    S3Proxy for as long as the block runs.

    For S3, the jobs find hadoop-aws and the non-secret S3A settings (endpoint, path-style
    buckets, no TLS) in a ``spark-defaults.conf`` of their own (``SPARK_CONF_DIR``), as a
    cluster's would hold them; the credentials are only in the environment. This process
    takes the same environment, for its own Spark session, s3fs and delta-rs.
    """
    if kind == "local":
        yield str(WORK / "warehouse"), {}
        return
    from airflow_cdc.storage import (
        S3Settings,
        delta_rs_storage_options,
        hadoop_aws_jars,
        s3a_spark_conf,
    )
    from cdc_demo.s3 import create_bucket, s3_server

    jars = hadoop_aws_jars()
    if jars is None:
        raise SystemExit("hadoop-aws is not in the cache: run `make setup`")
    with s3_server() as server:
        warehouse = f"{create_bucket(server, 'lake')}/warehouse"
        conf = {
            "spark.driver.extraClassPath": os.pathsep.join(jars),
            "spark.executor.extraClassPath": os.pathsep.join(jars),
            **s3a_spark_conf(S3Settings(server.endpoint_url, server.region), jars=[]),
        }
        conf_dir = WORK / "spark-conf"
        conf_dir.mkdir()
        (conf_dir / "spark-defaults.conf").write_text(
            "".join(f"{key} {value}\n" for key, value in conf.items()), encoding="utf-8"
        )
        env = {
            **server.environment(),
            "SPARK_CONF_DIR": str(conf_dir),
            "AIRFLOW_VAR_CDC_WAREHOUSE": warehouse,
        }
        os.environ.update(env)
        # delta-rs (the last check) reads the endpoint under its own names.
        os.environ.update(delta_rs_storage_options(S3Settings.from_env()))
        print(f"the warehouse is {warehouse}, on S3Proxy at {server.endpoint_url}")
        yield warehouse, env


def maintain(env: dict[str, str]) -> bool:
    """Run the maintenance DAG's task for the stream once and print what it did."""
    print(f"running: airflow tasks test cdc_maintenance maintain_dsql {INTERVAL_END}")
    started = time.perf_counter()
    log_path = WORK / "maintenance.log"
    with open(log_path, "w") as log:
        result = subprocess.run(
            ["airflow", "tasks", "test", "cdc_maintenance", "maintain_dsql", INTERVAL_END],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    print(f"maintenance took {time.perf_counter() - started:.0f} s wall time")
    marker = "maintain counts: "
    lines = [line for line in log_path.read_text().splitlines() if marker in line]
    if result.returncode != 0 or not lines:
        print(f"the maintenance task failed; see {log_path}")
        return False
    # The log line goes on after the JSON (the logger's name and call site).
    stats, _ = json.JSONDecoder().raw_decode(lines[-1].split(marker, 1)[1])
    print("compacted (files before -> after, bytes rewritten, files vacuumed):")
    for table, done in sorted(stats["tables"].items()):
        print(
            f"  {table}: {done['files_before']} -> {done['files_after']} files,"
            f" {done.get('bytes_rewritten', 0)} bytes rewritten,"
            f" {done['files_vacuumed']} vacuumed"
        )
    print(f"bookkeeping rows expired: {json.dumps(stats.get('expired', {}))}")
    return True


def run_dag(env: dict[str, str], dag_id: str) -> bool:
    """``airflow dags test`` of one interval, logged to the demo's work directory."""
    print(f"running: airflow dags test {dag_id} {INTERVAL_END}")
    started = time.perf_counter()
    with open(WORK / "dag-test.log", "w") as log:
        result = subprocess.run(
            ["airflow", "dags", "test", dag_id, INTERVAL_END],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    print(f"the DAG run (one hourly batch) took {time.perf_counter() - started:.0f} s wall time")
    if result.returncode != 0:
        print(f"the DAG run failed; see {WORK / 'dag-test.log'}")
    return result.returncode == 0


def kafka_demo(fmt: str, warehouse: str, storage_env: dict[str, str]) -> int:
    from cdc_demo.change_stream import generate
    from cdc_demo.kafka import create_topic, kafka_broker, produce

    end_us = int(dt.datetime.fromisoformat(INTERVAL_END).timestamp()) * 1_000_000
    stream = generate(
        fmt, 2000, partitions=3, seed=2026, span_us=50 * 60 * 10**6, final_marker_us=end_us + 5
    )
    messages = [json.loads(line) for line in stream.lines]
    print(f"generated {len(messages)} {fmt} messages for {len(stream.expected)} live rows")
    with kafka_broker() as bootstrap:
        create_topic(bootstrap, TOPIC, 3)
        produce(bootstrap, messages)
        print(f"produced them to {TOPIC} (3 partitions) on the Kafka broker at {bootstrap}")
        env = {
            **os.environ,
            **airflow_env(WORK / "airflow", WORK / "warehouse", ""),
            **storage_env,
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "cdc_kafka", "host": bootstrap}),
            "AIRFLOW_VAR_CDC_TOPIC": TOPIC,
            "AIRFLOW_VAR_CDC_FORMAT": fmt,
        }
        migrate(env)
        if not run_dag(env, "kafka_to_delta"):
            return 1
    from spark_jobs.session import get_session

    spark = get_session("airflow-cdc-demo", master="local[2]")
    table = spark.read.format("delta").load(f"{warehouse}/shop/items")
    live = table.where("NOT _cdc_deleted")
    print(f"\n== shop.items: {live.count()} live rows, {table.count() - live.count()} tombstones")
    live.orderBy("id").select("id", "name", "qty", "price", "updated_at", "_cdc_sequence").show(
        5, 40
    )
    got = {r["id"]: (r["name"], r["qty"]) for r in live.collect()}
    want = {k: (v["name"], v["qty"]) for k, v in stream.expected.items()}
    failures = 0 if got == want else 1
    print("matches the generator's expected state" if not failures else "MISMATCH")
    failures += accounting(spark, warehouse)
    spark.stop()
    print("demo OK" if not failures else "demo FAILED")
    return 1 if failures else 0


def accounting(spark, warehouse: str) -> int:
    """Print where every landed record ended; 1 if any has no outcome."""
    from spark_jobs.ledger import current_status

    ledger = current_status(spark.read.format("delta").load(f"{warehouse}/_cdc/ledger"))
    ledger = ledger.select("record_id", "status")
    raw = spark.read.format("delta").load(f"{warehouse}/_cdc/raw").where("kind = 'record'")
    counts = {
        r["status"]: r["count"]
        for r in raw.join(ledger, "record_id", "left").groupBy("status").count().collect()
    }
    landed = raw.count()
    print(
        f"\nlanded={landed} "
        + " ".join(f"{k}={v}" for k, v in sorted(counts.items(), key=lambda kv: str(kv[0])))
    )
    if sum(counts.values()) != landed or None in counts:
        print("ACCOUNTING BROKEN: some landed record has no final state")
        return 1
    return 0


def published(warehouse: str) -> int:
    """Print the consistent cut the run published; 1 if there is none."""
    from airflow_cdc.cuts import published_cut
    from cdc_demo.environment import STREAM

    cut = published_cut(warehouse, STREAM)
    if cut is None:
        print("NO CUT PUBLISHED")
        return 1
    kind = (
        "heuristic (lateness bound)" if cut.heuristic else "from the source's resolved timestamps"
    )
    print(f"\npublished cut at {cut.at.isoformat()} ({kind}):")
    for table, where in sorted(cut.tables.items()):
        print(f"  {table} version {where['version']} at {where['location']}")
    return 0


def history(spark: Any, warehouse: str) -> int:
    """Print the customers' history table (SCD type 2); 1 if its open versions are not the
    table's live rows."""
    versions = spark.read.format("delta").load(f"{warehouse}/public/customers__history")
    closed = versions.where("__end_at IS NOT NULL").count()
    print(
        f"\n== public.customers__history: {versions.count()} versions, {closed} closed by a"
        " later change"
    )
    changed = versions.groupBy("id").count().where("count > 2").select("id").limit(1)
    versions.join(changed, "id").orderBy("__start_at").select(
        "id", "name", "__start_at", "__end_at", "_cdc_deleted"
    ).show(10, 30)
    current = versions.where("__end_at IS NULL AND NOT _cdc_deleted").select("id", "name")
    table = spark.read.format("delta").load(f"{warehouse}/public/customers")
    live = table.where("NOT _cdc_deleted").select("id", "name")
    same = current.exceptAll(live).isEmpty() and live.exceptAll(current).isEmpty()
    print("its open versions are the table's live rows" if same else "MISMATCH with the table")
    return 0 if same else 1


def report(stream, warehouse: str) -> int:
    from spark_jobs.session import get_session

    spark = get_session("airflow-cdc-demo", master="local[2]")
    failures = 0
    live_rows = {}
    for table in TABLES:
        frame = spark.read.format("delta").load(f"{warehouse}/public/{table}")
        live = frame.where("NOT _cdc_deleted")
        live_rows[table] = live.count()
        print(
            f"\n== public.{table}: {live.count()} live rows, "
            f"{frame.count() - live.count()} tombstones"
        )
        columns = [c for c in frame.columns if not c.startswith("_cdc_")][:6]
        live.orderBy(*columns[:2]).select(*columns, "_cdc_sequence", "_cdc_op").show(5, 30)
        problems = differences(stream, table, [r.asDict() for r in live.collect()])
        if problems:
            failures += 1
            print("MISMATCH against the generator's expected state:")
            for problem in problems:
                print("  ", problem)
        else:
            print(f"matches the generator's expected state ({len(stream.expected[table])} rows)")
    failures += history(spark, warehouse)
    failures += accounting(spark, warehouse)
    failures += published(warehouse)
    quarantine = spark.read.format("delta").load(f"{warehouse}/_cdc/quarantine")
    print("\nquarantine reasons:")
    quarantine.groupBy("stage", "reason").count().orderBy("stage", "reason").show(20, False)
    spark.stop()
    failures += without_spark(warehouse, live_rows["customers"])
    print("demo OK" if not failures else "demo FAILED")
    return 1 if failures else 0


def without_spark(warehouse: str, live: int) -> int:
    """Query public.customers with delta-rs and DuckDB; 1 unless they count what Spark did."""
    from cdc_demo.readers import count_without_spark

    found = count_without_spark(f"{warehouse}/public/customers")
    print(
        f"\nwithout Spark ({found['readers']}): public.customers at version"
        f" {found['version']} has {found['live']} live rows and {found['tombstones']} tombstones"
    )
    if found["live"] != live:
        print(f"MISMATCH: Spark counted {live} live rows")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
