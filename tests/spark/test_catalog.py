"""Tables by name (``--catalog``): the apply job registers each table in the session's catalog.

The end-to-end test runs Spark's own Hive support (a Derby metastore in a temp directory) in
two processes: the first lands a generated stream and applies it, registering the tables; the
second, a new session on the same metastore, runs the job again (which registers nothing new)
and reads the tables by name. The shared ``spark`` fixture has no metastore and stays so.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_cdc.core.events import TableRef
from cdc_demo.dsql_stream import DDL, differences, generate, write_ndjson
from spark_jobs import apply_changes
from spark_jobs.catalog import (
    FAILED,
    NAME_TAKEN,
    NOT_CREATED,
    PRESENT,
    REGISTERED,
    table_name,
)

REPO = Path(__file__).resolve().parents[2]
STREAM = {"changes": 120, "seed": 23}
BATCH = "2026-01-01T01:00:00+00:00"
# A declared table no change reaches: it has no Delta table to register yet.
UNTOUCHED = "CREATE TABLE public.refunds (id bigint PRIMARY KEY);"
# Names the DDL refuses, given to the registration itself: each must stay one literal part.
HOSTILE = [
    TableRef("public", "we`ird"),
    TableRef("public", "a.b"),
    TableRef("public", "o'brien"),
    TableRef("pub`lic.x", "t"),
]


def test_names_are_quoted_and_checked_before_any_work() -> None:
    assert table_name("spark_catalog", TableRef("pub`lic", "a.b'c")) == (
        "`spark_catalog`.`pub``lic`.`a.b'c`"
    )
    base = ["--warehouse", "/wh", "--batch-id", "b1", "--source", "s", "--ddl", DDL]
    for bad in ("a.b", "", "x y", "c`"):
        with pytest.raises(SystemExit):  # argparse: before any session starts
            apply_changes.main([*base, "--catalog", bad])

    from airflow_cdc.operators.apply import ApplyChangesOperator, registration_lines

    def args(**kwargs: Any) -> list[str]:
        return ApplyChangesOperator(
            task_id="a", warehouse="/wh", source="s", ddl=DDL, **kwargs
        ).job_args({})

    assert not any(a.startswith("--catalog") for a in args())
    assert args(catalog="spark_catalog")[-1] == "--catalog=spark_catalog"
    assert "catalog" in ApplyChangesOperator.template_fields
    for value in ("a.b", "", "x y", 5):
        with pytest.raises(ValueError, match="catalog must be a catalog name"):
            args(catalog=value)
    stats = {
        "catalog": {
            "public.a": {"name": "c.public.a", "outcome": REGISTERED},
            "public.b": {"name": "c.public.b", "outcome": PRESENT},
            "public.c": {"name": "c.public.c", "outcome": NAME_TAKEN, "location": "s3a://x/c"},
            "public.d": {"name": "c.public.d", "outcome": FAILED, "error": "[NO] no"},
        }
    }
    assert registration_lines(stats) == [
        (logging.INFO, "public.a: registered as c.public.a"),
        (logging.WARNING, "public.c: not registered, c.public.c already names s3a://x/c"),
        (logging.WARNING, "public.d: not registered as c.public.d: [NO] no"),
    ]


@pytest.mark.spark
def test_a_catalog_that_would_not_keep_the_names_is_refused(spark: Any) -> None:
    from spark_jobs.catalog import check_catalog

    # The shared session has no metastore: names registered there would end with the job.
    with pytest.raises(ValueError, match="in-memory"):
        check_catalog(spark, "spark_catalog")
    with pytest.raises(ValueError, match="names no catalog of the Spark session"):
        check_catalog(spark, "glue")


@pytest.mark.slow
@pytest.mark.spark
def test_tables_are_registered_by_name_in_a_hive_metastore(tmp_path: Path) -> None:
    from airflow_cdc.operators.apply import ApplyChangesOperator

    stream = generate(STREAM["changes"], seed=STREAM["seed"])
    write_ndjson(stream.deliveries, str(tmp_path / "dump"), files=2)
    # A quote and a space in the locations: the registration parses neither. (Not a backtick:
    # delta-spark's DeltaTableBuilder.location fails to parse such a path, so no target could be
    # created there.)
    warehouse = str(tmp_path / "wh 'q")
    job_args = ApplyChangesOperator(
        task_id="apply",
        warehouse=warehouse,
        source="dump",
        ddl=DDL + UNTOUCHED,
        history=["customers"],
        catalog="spark_catalog",
    ).job_args({})
    params = {
        "tmp": str(tmp_path),
        "warehouse": warehouse,
        "elsewhere": str(tmp_path / "elsewhere"),
        "job_args": job_args,
    }
    first = in_hive_session("first", params, tmp_path)
    registered = first["catalog"]
    assert {t: e["outcome"] for t, e in registered.items()} == {
        "public.customers": REGISTERED,
        "public.customers__history": REGISTERED,
        "public.order_items": NAME_TAKEN,
        "public.refunds": NOT_CREATED,
    }
    assert registered["public.customers"]["name"] == "spark_catalog.public.customers"
    assert registered["public.order_items"]["location"] == f"file:{params['elsewhere']}"

    second = in_hive_session("second", params, tmp_path)
    assert second["replayed"] == 0
    assert {t: e["outcome"] for t, e in second["catalog"].items()} == {
        "public.customers": PRESENT,
        "public.customers__history": PRESENT,
        "public.order_items": NAME_TAKEN,
        "public.refunds": NOT_CREATED,
    }
    # Rows by name, in a new session: the generator's expected state.
    assert second["customers"] == []
    assert second["history_rows"] == second["history_rows_at_location"] > 0
    # The name that was taken still points where it did.
    assert second["order_items"] == {"location": f"file:{params['elsewhere']}", "rows": 2}
    assert second["tables"] == ["customers", "customers__history", "order_items"]
    assert second["schemas"] == ["default", "public"]
    for table in HOSTILE:
        hostile = second["hostile"][table.qualified]
        assert hostile["parts"] == ["spark_catalog", table.schema, table.name]
        assert hostile["outcome"] == FAILED and hostile["error"]
    assert second["folded"] == [PRESENT, NAME_TAKEN]


def in_hive_session(step: str, params: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """Run ``step`` of the test in a process with a Hive-enabled session; its result."""
    out = tmp_path / f"{step}.json"
    code = "import sys; from tests.spark.test_catalog import session_step; session_step()"
    result = subprocess.run(
        [sys.executable, "-c", code, step, json.dumps({**params, "out": str(out)})],
        # Derby writes its log to the working directory.
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), "AIRFLOW_CDC_CACHE": cache()},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return json.loads(out.read_text(encoding="utf-8"))


def cache() -> str:
    return os.environ.get("AIRFLOW_CDC_CACHE", str(REPO / ".cache"))


def hive_session(tmp: str) -> Any:
    """A session with Delta and a Hive metastore (Derby) under ``tmp``."""
    from pyspark.sql import SparkSession

    from airflow_cdc.jobs import delta_spark_conf, resolved_jars

    conf = {
        **delta_spark_conf(resolved_jars()),
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": f"{tmp}/hive-warehouse",
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={tmp}/metastore_db;create=true"
        ),
    }
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers with this project's packages
    builder = SparkSession.builder.master("local[2]").appName("airflow-cdc-catalog-test")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def session_step() -> None:
    """The entry point of :func:`in_hive_session`'s process: ``<step> <params as JSON>``."""
    step, params = sys.argv[1], json.loads(sys.argv[2])
    spark = hive_session(params["tmp"])
    result = first_session(spark, params) if step == "first" else second_session(spark, params)
    Path(params["out"]).write_text(json.dumps(result, default=str), encoding="utf-8")
    spark.stop()


def apply_batch(params: dict[str, Any], stats: str, *more: str) -> dict[str, Any]:
    return apply_changes.main(
        [
            *("--warehouse", params["warehouse"], "--batch-id", BATCH, "--run-id", "t"),
            *("--stats-file", stats),
            *params["job_args"],
            *more,
        ]
    )


def first_session(spark: Any, params: dict[str, Any]) -> dict[str, Any]:
    """Take ``public.order_items`` for another table, land the stream, apply it."""
    from spark_jobs import land_files

    spark.range(2).write.format("delta").save(params["elsewhere"])
    spark.sql("CREATE SCHEMA public")
    spark.sql(f"CREATE TABLE public.order_items USING delta LOCATION '{params['elsewhere']}'")
    land_files.main(
        [
            *("--layout", "kinesis", "--warehouse", params["warehouse"], "--batch-id", BATCH),
            *("--path", f"{params['tmp']}/dump", "--source", "dump", "--lateness-seconds", "0"),
        ]
    )
    return apply_batch(params, f"{params['tmp']}/first-stats.json")


def second_session(spark: Any, params: dict[str, Any]) -> dict[str, Any]:
    """Run the job again, then read every table by name."""
    from spark_jobs.catalog import register

    # The cheapest run of the job: a replay of a reason nothing was quarantined for (a re-run
    # of the batch would take as long as the first run; its registration is the same step).
    stats = apply_batch(
        params, f"{params['tmp']}/second-stats.json", "--replay", "--replay-reasons", "column_limit"
    )
    stream = generate(STREAM["changes"], seed=STREAM["seed"])
    live = spark.sql("SELECT * FROM public.customers WHERE NOT _cdc_deleted")
    history_path = f"{params['warehouse']}/public/customers__history"
    detail = spark.sql("DESCRIBE TABLE EXTENDED public.order_items").collect()
    parser = spark._jsparkSession.sessionState().sqlParser()
    hostile = {}
    customers = f"{params['warehouse']}/public/customers"
    for table in HOSTILE:
        parts = parser.parseMultipartIdentifier(table_name("spark_catalog", table))
        entry = register(spark, "spark_catalog", table, customers)
        hostile[table.qualified] = {**entry, "parts": [parts.apply(i) for i in range(parts.size())]}
    return {
        "catalog": stats["catalog"],
        "replayed": stats["replay"]["records"],
        "customers": differences(stream, "customers", [r.asDict() for r in live.collect()]),
        "history_rows": spark.table("public.customers__history").count(),
        "history_rows_at_location": spark.read.format("delta").load(history_path).count(),
        "order_items": {
            "location": next(r["data_type"] for r in detail if r["col_name"] == "Location"),
            "rows": spark.table("public.order_items").count(),
        },
        "tables": sorted(r["tableName"] for r in spark.sql("SHOW TABLES IN public").collect()),
        "schemas": sorted(r[0] for r in spark.sql("SHOW SCHEMAS").collect()),
        "hostile": hostile,
        # The metastore folds names to lower case: the name of a location, or of another.
        "folded": [
            register(spark, "spark_catalog", TableRef("public", name), customers)["outcome"]
            for name in ("Customers", "Order_Items")
        ],
    }
