from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_cdc.core.exceptions import DdlError
from airflow_cdc.operators.apply import ApplyChangesOperator, LandAndApplyOperator
from airflow_cdc.operators.land import (
    FilesLanding,
    KafkaLanding,
    KinesisLanding,
    LandFilesOperator,
    LandKafkaOperator,
    LandKinesisOperator,
)
from airflow_cdc.operators.maintain import CdcMaintenanceOperator
from tests.airflow.submits import argument, fake_submit

APPLICATION = "app-20260101000000-0003"


def test_kinesis_landing_arguments_come_from_the_connection(monkeypatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_KIN",
        json.dumps(
            {
                "conn_type": "cdc_kinesis",
                "host": "http://127.0.0.1:4568",
                "login": "AK",
                "password": "SECRET",
                "extra": {"region_name": "eu-west-1"},
            }
        ),
    )
    op = LandKinesisOperator(
        task_id="land",
        warehouse="/wh",
        stream="s",
        kinesis_conn_id="kin",
        lateness_seconds=60,
        max_records_per_shard=5,
    )
    assert op.job_args({}) == [
        "--stream=s",
        "--region=eu-west-1",
        "--lateness-seconds=60",
        "--max-records-per-shard=5",
        "--endpoint-url=http://127.0.0.1:4568",
    ]
    env = op.job_env()
    assert env == {
        "AWS_ACCESS_KEY_ID": "AK",
        "AWS_SECRET_ACCESS_KEY": "SECRET",
    }
    assert "SECRET" not in " ".join(op.job_args({}))


def test_aws_itself_has_no_endpoint(monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_AWS_KIN", json.dumps({"conn_type": "cdc_kinesis"}))
    op = LandKinesisOperator(task_id="land", warehouse="/wh", stream="s", kinesis_conn_id="aws_kin")
    assert not any(a.startswith("--endpoint-url") for a in op.job_args({}))
    assert op.job_env() == {}  # no keys: the job's own credential chain


def test_validation_happens_at_execution_not_construction() -> None:
    op = LandFilesOperator(task_id="l", warehouse="/wh", path="/d", source="s", lateness_seconds=-1)
    with pytest.raises(ValueError, match="lateness_seconds must be >= 0, got -1"):
        op.job_args({})
    bad = ApplyChangesOperator(
        task_id="r", warehouse="/wh", source="s", ddl="CREATE TABLE t (id int)"
    )
    with pytest.raises(DdlError, match="no PRIMARY KEY"):
        bad.job_args({})
    ddl = "CREATE TABLE t (id int PRIMARY KEY)"
    with pytest.raises(ValueError, match="max_pending_age_seconds"):
        ApplyChangesOperator(
            task_id="x", warehouse="/wh", source="s", ddl=ddl, max_pending_age_seconds=0
        ).job_args({})


@pytest.mark.parametrize("source", ["../../tmp", "a/b", "", "x y", ".hidden"])
def test_a_source_that_is_not_a_plain_name_is_refused_at_submission(source: str) -> None:
    ddl = "CREATE TABLE t (id int PRIMARY KEY)"
    op = ApplyChangesOperator(task_id="a", warehouse="/wh", source=source, ddl=ddl)
    with pytest.raises(ValueError, match="source must match"):
        op.job_args({})
    land = LandFilesOperator(task_id="l", warehouse="/wh", path="/d", source=source)
    with pytest.raises(ValueError, match="source must match"):
        land.job_args({})


def test_templated_fields_are_kept_unrendered() -> None:
    op = ApplyChangesOperator(
        task_id="a",
        warehouse="{{ var.value.wh }}",
        ddl="{{ var.value.ddl }}",
        source="{{ var.value.src }}",
    )
    assert {"warehouse", "batch_id", "ddl", "source", "record_format"} <= set(op.template_fields)
    assert op.warehouse == "{{ var.value.wh }}"
    assert op.batch_id == "{{ data_interval_end | ts }}"


def test_apply_changes_arguments() -> None:
    ddl = "CREATE TABLE t (id int PRIMARY KEY)"
    op = ApplyChangesOperator(
        task_id="a",
        warehouse="/wh",
        source="src",
        ddl=ddl,
        record_format="debezium",
    )
    assert op.job_args({}) == [
        "--source=src",
        "--format=debezium",
        f"--ddl={ddl}",
        "--default-schema=public",
        "--max-pending-age-seconds=3600.0",
        "--max-pending-wall-seconds=86400.0",
        "--max-columns-per-record=1600",
        "--max-added-columns=200",
        "--max-fragments-per-image=10000",
        "--max-number-length=1000",
        f"--max-bytes-per-fragment-set={256 * 2**20}",
    ]
    for bad in ({"max_added_columns": 0}, {"max_columns_per_record": 1.5}):
        with pytest.raises(ValueError, match="whole number"):
            ApplyChangesOperator(task_id="b", warehouse="/wh", source="s", ddl=ddl, **bad).job_args(
                {}
            )
    with pytest.raises(ValueError, match="max_pending_wall_seconds"):
        ApplyChangesOperator(
            task_id="c", warehouse="/wh", source="s", ddl=ddl, max_pending_wall_seconds=0
        ).job_args({})
    mapped = ApplyChangesOperator(
        task_id="m", warehouse="/wh", source="s", ddl=ddl, column_mapping=True
    ).job_args({})
    assert mapped[-1] == "--column-mapping"
    for bad, message in (
        ({"max_number_length": 1001}, "characters per number must be 1 to 1,000"),
        ({"max_fragments_per_image": 10**7}, "fragments per image must be 1 to 1,000,000"),
        ({"max_bytes_per_fragment_set": 2**28 + 1}, "max_bytes_per_fragment_set must be at most"),
        ({"max_bytes_per_fragment_set": 0}, "whole number"),
    ):
        with pytest.raises(ValueError, match=message):
            ApplyChangesOperator(task_id="d", warehouse="/wh", source="s", ddl=ddl, **bad).job_args(
                {}
            )
    with pytest.raises(ValueError, match="format must be one of"):
        ApplyChangesOperator(
            task_id="b", warehouse="/wh", source="s", ddl=ddl, record_format="nope"
        ).job_args({})
    cut = ApplyChangesOperator(
        task_id="c",
        warehouse="/wh",
        source="s",
        ddl=ddl,
        consistent_cut=True,
        cut_at="2026-01-01T01:00:00+00:00",
        interval_start="2026-01-01T00:00:00+00:00",
    )
    assert {"cut_at", "interval_start"} <= set(cut.template_fields)
    assert cut.max_active_tis_per_dag == 1  # one apply of the source at a time
    assert cut.job_args({})[-2:] == [
        "--cut-at=2026-01-01T01:00:00+00:00",
        "--interval-start=2026-01-01T00:00:00+00:00",
    ]
    with pytest.raises(ValueError, match="cut_at must be an ISO 8601 time"):
        ApplyChangesOperator(
            task_id="c", warehouse="/wh", source="s", ddl=ddl, consistent_cut=True, cut_at="soon"
        ).job_args({})
    cut.transactions = True
    assert cut.job_args({})[-1] == "--transactions"
    from airflow_cdc.operators.apply import ReplayQuarantineOperator

    replay = ReplayQuarantineOperator(
        task_id="r", warehouse="/wh", source="s", ddl=ddl, reasons=["undeclared_table"]
    )
    assert replay.job_args({})[-2:] == ["--replay", "--replay-reasons=undeclared_table"]
    replay.batches = ["2026-01-01T01:00:00+00:00", "b2"]
    assert replay.job_args({})[-1] == "--replay-batches=2026-01-01T01:00:00+00:00,b2"
    for bad in ("undeclared_table", ["a,b"], [""]):
        replay.reasons = bad
        with pytest.raises(ValueError, match="reasons must be a list of names"):
            replay.job_args({})
    replay.reasons, replay.consistent_cut = None, True
    with pytest.raises(ValueError, match="a replay runs outside consistent cuts"):
        replay.job_args({})
    with pytest.raises(ValueError, match="transactions=True needs consistent_cut=True"):
        ApplyChangesOperator(
            task_id="t", warehouse="/wh", source="s", ddl=ddl, transactions=True
        ).job_args({})


def test_history_tables_are_named_to_the_job_and_checked_against_the_ddl() -> None:
    ddl = "CREATE TABLE s.a (id int PRIMARY KEY); CREATE TABLE b (id int PRIMARY KEY)"

    def args(history: object) -> list[str]:
        return ApplyChangesOperator(
            task_id="h", warehouse="/wh", source="s", ddl=ddl, history=history
        ).job_args({})

    assert not any(a.startswith("--history") for a in args(False))
    assert args(True)[-1] == "--history=s.a,public.b"
    assert args(["b"])[-1] == "--history=public.b"
    assert args("s.a, b")[-1] == "--history=s.a,public.b"  # one string, not its letters
    with pytest.raises(DdlError, match="for 'a': no CREATE TABLE declares it"):
        args(["a"])
    clash = ApplyChangesOperator(
        task_id="h",
        warehouse="/wh",
        source="s",
        ddl=ddl + "; CREATE TABLE b__history (id int PRIMARY KEY)",
        history=["public.b"],
    )
    with pytest.raises(DdlError, match="which the DDL declares as a table too"):
        clash.job_args({})


def test_kafka_landing_arguments_and_client_config_from_the_connection(monkeypatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAF",
        json.dumps(
            {
                "conn_type": "cdc_kafka",
                "host": "b1:9092,b2:9092",
                "extra": {"config": {"security.protocol": "SSL"}},
            }
        ),
    )
    op = LandKafkaOperator(
        task_id="land",
        warehouse="/wh",
        topics=["orders", "items"],
        kafka_conn_id="kaf",
        record_format="cockroachdb",
        lateness_seconds=0,
    )
    assert op.job_args({}) == [
        "--bootstrap-servers=b1:9092,b2:9092",
        "--topic=orders",
        "--topic=items",
        "--lateness-seconds=0",
        "--max-records-per-partition=1000000",
        "--format=cockroachdb",
    ]
    assert json.loads(op.job_env()["AIRFLOW_CDC_KAFKA_CONFIG"]) == {"security.protocol": "SSL"}
    with pytest.raises(ValueError, match="topics"):
        LandKafkaOperator(task_id="x", warehouse="/wh", topics=[], kafka_conn_id="kaf").job_args({})
    one = LandKafkaOperator(task_id="x", warehouse="/wh", topics="orders", kafka_conn_id="kaf")
    with pytest.raises(ValueError, match="topics must be a list of topic names, got 'orders'"):
        one.job_args({})


def test_file_layouts_for_kafka_dumps_and_sink_files() -> None:
    op = LandFilesOperator(
        task_id="l", warehouse="/wh", path="/d", source="s", layout="lines", record_format="ydb"
    )
    assert op.job_args({})[-3:] == ["--layout=lines", "--format=ydb", "--source=s"]
    waits = LandFilesOperator(
        task_id="l", warehouse="/wh", path="/d", source="s", unended_line_seconds=600
    )
    assert waits.job_args({})[-2:] == ["--unended-line-seconds=600", "--source=s"]
    for bad in (-1, float("nan")):
        never = LandFilesOperator(
            task_id="l", warehouse="/wh", path="/d", source="s", unended_line_seconds=bad
        )
        with pytest.raises(ValueError, match="unended_line_seconds must be >= 0"):
            never.job_args({})


def test_maintenance_arguments_and_delta_safety_floor() -> None:
    ddl = "CREATE TABLE t (id int PRIMARY KEY)"
    op = CdcMaintenanceOperator(task_id="m", warehouse="/wh", source="src", ddl=ddl)
    assert op.job == "maintain"
    assert op.job_args({}) == [
        "--source=src",
        f"--ddl={ddl}",
        "--default-schema=public",
        "--tombstone-retention-seconds=86400.0",
        "--vacuum-retention-hours=168.0",
        "--raw-retention-seconds=604800.0",
        "--quarantine-retention-seconds=2592000.0",
        "--cut-retention-seconds=604800.0",
        f"--cluster-above-bytes={2 * 1024**3}",
    ]
    with pytest.warns(DeprecationWarning, match="schedule CdcMaintenanceOperator"):
        ApplyChangesOperator(
            task_id="a", warehouse="/wh", source="s", ddl=ddl, tombstone_retention_seconds=60
        )
    with pytest.raises(ValueError, match="vacuum_retention_hours must be >= 168"):
        CdcMaintenanceOperator(
            task_id="m", warehouse="/wh", source="src", ddl=ddl, vacuum_retention_hours=24
        ).job_args({})
    with pytest.raises(ValueError, match="tombstone_retention_seconds must be >= 0"):
        CdcMaintenanceOperator(
            task_id="m", warehouse="/wh", source="src", ddl=ddl, tombstone_retention_seconds=-1
        ).job_args({})
    with pytest.raises(ValueError, match="quarantine_retention_seconds must be >= 0"):
        CdcMaintenanceOperator(
            task_id="m", warehouse="/wh", source="src", ddl=ddl, quarantine_retention_seconds=-5
        ).job_args({})
    with pytest.raises(ValueError, match="raw_retention_seconds must be >= 0 and <="):
        CdcMaintenanceOperator(
            task_id="m", warehouse="/wh", source="src", ddl=ddl, raw_retention_seconds=float("inf")
        ).job_args({})
    with pytest.raises(ValueError, match="cut_retention_seconds must be >= 0"):
        CdcMaintenanceOperator(
            task_id="m", warehouse="/wh", source="src", ddl=ddl, cut_retention_seconds=-1
        ).job_args({})
    with pytest.raises(ValueError, match="cluster_above_bytes must be a whole number"):
        CdcMaintenanceOperator(
            task_id="m", warehouse="/wh", source="src", ddl=ddl, cluster_above_bytes=-1
        ).job_args({})
    with pytest.raises(ValueError, match="source must match"):
        CdcMaintenanceOperator(task_id="m", warehouse="/wh", source="../x", ddl=ddl).job_args({})


def test_an_apply_run_logs_one_line_per_table() -> None:
    from airflow_cdc.operators.apply import table_lines

    counts = {"changes": 5, "applied": 4, "superseded": 1, "inserted": 3, "updated": 1}
    reasons = {"type_conflict": 2, "decode_error": 1}
    stats = {
        "tables": {
            "public.t": {
                **counts,
                "quarantined": 3,
                "quarantined_by_reason": reasons,
                "version": 7,
            },
            "public.a": {"changes": 0},
        }
    }
    assert table_lines(stats) == [
        "public.a: 0 inserted, 0 updated, 0 deleted; 0 changes: 0 applied, 0 superseded,"
        " 0 duplicate; 0 quarantined",
        "public.t: 3 inserted, 1 updated, 0 deleted; 5 changes: 4 applied, 1 superseded,"
        " 0 duplicate; 3 quarantined (decode_error 1, type_conflict 2); version 7",
    ]


def test_temporary_credentials_keep_their_session_token(monkeypatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_KIN",
        json.dumps(
            {
                "conn_type": "cdc_kinesis",
                "login": "ASIA",
                "password": "SECRET",
                "extra": {"region_name": "eu-west-1", "aws_session_token": "TOKEN"},
            }
        ),
    )
    op = LandKinesisOperator(task_id="land", warehouse="/wh", stream="s", kinesis_conn_id="kin")
    assert op.job_env() == {
        "AWS_ACCESS_KEY_ID": "ASIA",
        "AWS_SECRET_ACCESS_KEY": "SECRET",
        "AWS_SESSION_TOKEN": "TOKEN",
    }


def test_the_amazon_providers_aws_connection_serves_kinesis(monkeypatch) -> None:
    pytest.importorskip("airflow.providers.amazon", reason="the amazon provider (extra aws)")
    monkeypatch.setenv(
        "AIRFLOW_CONN_MY_AWS",
        json.dumps(
            {
                "conn_type": "aws",
                "login": "ASIA2",
                "password": "SECRET2",
                "extra": {
                    "region_name": "ap-south-1",
                    "aws_session_token": "TOKEN2",
                    "endpoint_url": "http://127.0.0.1:4568",
                },
            }
        ),
    )
    op = LandKinesisOperator(task_id="land", warehouse="/wh", stream="s", kinesis_conn_id="my_aws")
    args = op.job_args({})
    assert argument(args, "--region") == "ap-south-1"
    assert argument(args, "--endpoint-url") == "http://127.0.0.1:4568"
    assert op.job_env() == {
        "AWS_ACCESS_KEY_ID": "ASIA2",
        "AWS_SECRET_ACCESS_KEY": "SECRET2",
        "AWS_SESSION_TOKEN": "TOKEN2",
    }
    assert "SECRET2" not in " ".join(args) and "TOKEN2" not in " ".join(args)


def test_the_kafka_providers_connection_serves_kafka(monkeypatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_KP",
        json.dumps(
            {
                "conn_type": "kafka",
                "extra": {
                    "bootstrap.servers": "k1:9092,k2:9092",
                    "group.id": "their-group",
                    "security.protocol": "SASL_SSL",
                    "sasl.password": "PLANTED",
                },
            }
        ),
    )
    op = LandKafkaOperator(task_id="land", warehouse="/wh", topics=["t"], kafka_conn_id="kp")
    args = op.job_args({})
    assert args[0] == "--bootstrap-servers=k1:9092,k2:9092"
    assert "PLANTED" not in " ".join(args)
    # The client settings travel (landing sets its own offsets handling and servers).
    assert json.loads(op.job_env()["AIRFLOW_CDC_KAFKA_CONFIG"]) == {
        "group.id": "their-group",
        "security.protocol": "SASL_SSL",
        "sasl.password": "PLANTED",
    }
    monkeypatch.setenv(
        "AIRFLOW_CONN_KP",
        json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": "k:9", "oauth_cb": "m.f"}}
        ),
    )
    with pytest.raises(ValueError, match="callbacks \\['oauth_cb'\\] cannot reach a Spark job"):
        op.job_env()
    monkeypatch.setenv(
        "AIRFLOW_CONN_KP",
        json.dumps(
            {
                "conn_type": "kafka",
                "extra": {"bootstrap.servers": "k:9", "sasl.mechanism": "OAUTHBEARER"},
            }
        ),
    )
    with pytest.raises(ValueError, match="OAUTHBEARER needs a token callback"):
        op.job_env()


def submitted_process(
    monkeypatch, spark_extra: dict[str, str], spark_conf: dict[str, str] | None = None
) -> dict[str, object]:
    """What the Spark provider's hook would start for a Kinesis landing with a planted
    secret: the command line and the process environment."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_KIN",
        json.dumps({"conn_type": "cdc_kinesis", "login": "AK", "password": "PLANTED-SECRET"}),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_TEST",
        json.dumps({"conn_type": "spark", "host": "yarn", "extra": spark_extra}),
    )
    started: dict[str, object] = {}

    def submit(hook: SparkSubmitHook, application: str, **kwargs: object) -> None:
        started["command"] = hook._build_spark_submit_command(application)
        started["env"] = kwargs.get("env")

    monkeypatch.setattr(SparkSubmitHook, "submit", submit)
    op = LandKinesisOperator(
        task_id="land",
        warehouse="/wh",
        stream="s",
        kinesis_conn_id="kin",
        spark_conn_id="spark_test",
        spark_conf=spark_conf,
    )
    submit_its_job(op)
    return started


def submit_its_job(op: Any) -> None:
    """``op``'s submission of its job, through the Spark provider's hook."""
    from airflow_cdc.submit import job_spec

    spec = job_spec(
        op.job,
        warehouse="/wh",
        batch_id="b",
        run_id="r",
        stats_file="/wh/s.json",
        job_args=op.job_args({}),
        library="/lib.zip",
        spark_conf=op.spark_conf,
        env_vars=op.job_env(),
    )
    op.submit(spec)


def test_credentials_reach_spark_submit_in_its_environment_not_its_command_line(
    monkeypatch,
) -> None:
    # The Airflow worker's own temporary credentials must not pair with the job's keys.
    monkeypatch.setenv("AWS_SESSION_TOKEN", "WORKERS-OWN-TOKEN")
    # On YARN the Spark provider's hook would turn env_vars into --conf options.
    started = submitted_process(monkeypatch, {})
    assert "PLANTED-SECRET" not in " ".join(started["command"])  # type: ignore[arg-type]
    env = started["env"]
    assert isinstance(env, dict) and env["AWS_SECRET_ACCESS_KEY"] == "PLANTED-SECRET"
    assert env["PATH"]  # the rest of the environment stays
    assert "AWS_SESSION_TOKEN" not in env


def test_cluster_deploy_mode_refuses_credentials_it_would_put_on_a_command_line(
    monkeypatch,
) -> None:
    with pytest.raises(ValueError, match=r"cluster deploy mode .* command line"):
        submitted_process(monkeypatch, {"deploy-mode": "cluster"})


def test_cluster_deploy_mode_in_the_spark_conf_refuses_credentials_too(monkeypatch) -> None:
    """spark-submit takes the deploy mode from the conf where the connection names none."""
    with pytest.raises(ValueError, match=r"cluster deploy mode .* command line"):
        submitted_process(monkeypatch, {}, {"spark.submit.deployMode": "cluster"})
    # The connection's mode is spark-submit's --deploy-mode, which wins over the conf.
    started = submitted_process(
        monkeypatch, {"deploy-mode": "client"}, {"spark.submit.deployMode": "cluster"}
    )
    assert "PLANTED-SECRET" not in " ".join(started["command"])  # type: ignore[arg-type]


def test_cluster_deploy_mode_in_the_clusters_spark_defaults_refuses_credentials_too(
    monkeypatch, tmp_path
) -> None:
    """spark-submit takes the deploy mode from its spark-defaults.conf where neither the
    connection nor a --conf names one, then from its environment's DEPLOY_MODE."""
    (tmp_path / "spark-defaults.conf").write_text(
        "spark.submit.deployMode  cluster\n", encoding="utf-8"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    with pytest.raises(ValueError, match=r"cluster deploy mode .* command line"):
        submitted_process(monkeypatch, {})
    started = submitted_process(monkeypatch, {}, {"spark.submit.deployMode": "client"})
    assert started["env"]["AWS_SECRET_ACCESS_KEY"] == "PLANTED-SECRET"  # type: ignore[index]
    # And from its environment's DEPLOY_MODE, last.
    monkeypatch.delenv("SPARK_CONF_DIR")
    monkeypatch.setenv("DEPLOY_MODE", "cluster")
    with pytest.raises(ValueError, match=r"cluster deploy mode .* command line"):
        submitted_process(monkeypatch, {})


@pytest.mark.parametrize(
    ("extra", "spark_conf", "defaults", "env"),
    [
        ({"deploy-mode": "cluster"}, {}, "", {}),
        ({}, {"spark.submit.deployMode": "cluster"}, "", {}),
        ({}, {}, "spark.submit.deployMode  cluster\n", {}),
        ({}, {}, "", {"DEPLOY_MODE": "cluster"}),
    ],
)
def test_a_driver_deployed_to_the_cluster_is_stopped_with_the_task_wherever_its_mode_is_set(
    monkeypatch, tmp_path, extra, spark_conf, defaults, env
) -> None:
    """The Spark provider's hook finds a YARN application's id in spark-submit's log, and
    on_kill stops that application, only in the cluster deploy mode it knows of: killing
    spark-submit alone leaves the driver writing the tables beside the retry's job."""
    import airflow.providers.apache.spark.hooks.spark_submit as spark_submit

    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_YARN",
        json.dumps({"conn_type": "spark", "host": "yarn", "extra": extra}),
    )
    (tmp_path / "spark-defaults.conf").write_text(defaults, encoding="utf-8")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    started: list[list[str]] = []
    stopped: list[str] = []

    class Running:  # spark-submit, still waiting for its application
        def poll(self) -> None:
            return None

        def kill(self) -> None:
            stopped.append("spark-submit")

    def submit(hook: Any, application: str, **kwargs: object) -> None:
        started.append(hook._build_spark_submit_command(application))
        log = ["INFO Client: Submitted application application_1700000000000_0042"]
        hook._process_spark_submit_log(iter(log))
        hook._submit_sp = Running()

    class Kill:  # the hook's `yarn application -kill`
        def __init__(self, command: list[str], **kwargs: object) -> None:
            stopped.append(" ".join(command))

        def __enter__(self) -> Kill:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(spark_submit.SparkSubmitHook, "submit", submit)
    monkeypatch.setattr(spark_submit.subprocess, "Popen", Kill)
    op = CdcMaintenanceOperator(
        task_id="m",
        warehouse="/wh",
        source="src",
        ddl="CREATE TABLE t (id int PRIMARY KEY)",
        spark_conn_id="spark_yarn",
        spark_conf=spark_conf,
    )
    submit_its_job(op)
    op.on_kill()
    assert stopped == ["spark-submit", "yarn application -kill application_1700000000000_0042"]
    assert started[0][started[0].index("--deploy-mode") + 1] == "cluster"


def test_driver_credentials_travel_to_executors_without_ever_printing(monkeypatch) -> None:
    import pickle

    from spark_jobs.land_kinesis import Credentials, KinesisShardReader

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AK")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "PLANTED-SECRET")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "PLANTED-TOKEN")
    found = Credentials.of_driver()
    assert found is not None
    assert "PLANTED" not in repr(found) and "PLANTED" not in str(found)
    reader = KinesisShardReader("s", None, "us-east-1", 10, credentials=found)
    # An executor's environment has none of the driver's: the reader brings them.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    shipped = pickle.loads(pickle.dumps(reader))
    given = shipped.client()._request_signer._credentials.get_frozen_credentials()
    assert (given.access_key, given.secret_key, given.token) == (
        "AK",
        "PLANTED-SECRET",
        "PLANTED-TOKEN",
    )


def test_credentials_found_elsewhere_than_the_environment_stay_behind(monkeypatch, tmp_path):
    """A profile (or an instance role, IRSA) refreshes itself and each executor's own chain
    finds its machine's: nothing frozen travels."""
    from spark_jobs.land_kinesis import Credentials

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    shared = tmp_path / "credentials"
    shared.write_text("[default]\naws_access_key_id = AK\naws_secret_access_key = SK\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(shared))
    assert Credentials.of_driver() is None


@pytest.mark.parametrize("ending", ["fails", "writes no counts"])
def test_a_run_that_ends_without_its_counts_still_names_its_application(
    ending: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A job writes its application as it starts and its counts as it ends: a run that dies
    between the two fails its task, whose page still links to the application's executors;
    the stats directory is gone either way."""
    from airflow_cdc.links import SparkApplicationLink

    failed = RuntimeError("spark-submit exited with 1") if ending == "fails" else None
    fake_submit(monkeypatch, lambda op, spec: {"application_id": APPLICATION}, failed)
    cluster = {"conn_type": "spark", "host": "spark://10.0.0.5", "port": 7077}
    monkeypatch.setenv("AIRFLOW_CONN_CLUSTER", json.dumps(cluster))
    warehouse = tmp_path / "wh"
    op = LandFilesOperator(
        task_id="l",
        warehouse=str(warehouse),
        path="/in",
        source="s",
        batch_id="b1",
        spark_conn_id="cluster",
        resolved_target=None,
    )
    error = "exited with 1" if ending == "fails" else "ended without writing its counts"
    with pytest.raises(RuntimeError, match=error):
        op.execute({"run_id": "r"})  # type: ignore[arg-type]
    assert SparkApplicationLink().get_link(op, ti_key=None) == (
        f"http://10.0.0.5:8080/app/?appId={APPLICATION}"
    )
    assert list((warehouse / "_cdc" / "stats").iterdir()) == []


def test_land_and_apply_gives_each_step_its_own_arguments(monkeypatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_KIN",
        json.dumps(
            {
                "conn_type": "cdc_kinesis",
                "host": "http://kin:4567",
                "login": "AK",
                "password": "SECRET",
            }
        ),
    )
    ddl = "CREATE TABLE t (id int PRIMARY KEY)"
    landing = KinesisLanding(stream="s", kinesis_conn_id="kin", lateness_seconds=60)
    op = LandAndApplyOperator(
        task_id="t",
        warehouse="/wh",
        source="src",
        ddl=ddl,
        land=landing,
        resolved_target="2026-01-01T01:00:00+00:00",
    )
    args = op.job_args({})
    alone = ApplyChangesOperator(task_id="a", warehouse="/wh", source="src", ddl=ddl)
    assert args == [
        "--source=src",
        "--land-job=land_kinesis",
        f"--land-args={json.dumps(landing.job_args())}",
        f"--apply-args={json.dumps(alone.job_args({}))}",
        "--resolved-target=2026-01-01T01:00:00+00:00",
    ]
    # The landing operator submits the same arguments, with its source.
    land = LandKinesisOperator(
        task_id="l", warehouse="/wh", stream="s", kinesis_conn_id="kin", lateness_seconds=60
    )
    assert land.job_args({}) == landing.job_args()
    assert op.job_env() == {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SECRET"}
    assert "SECRET" not in " ".join(args)
    # A landing without a format lands in the operator's; one with its own keeps it.
    files = LandAndApplyOperator(
        task_id="k",
        warehouse="/wh",
        source="src",
        ddl=ddl,
        record_format="cockroachdb",
        land=FilesLanding(path="/in", layout="lines"),
        resolved_target="2026-01-01T01:00:00",
    ).job_args({})
    assert json.loads(argument(files, "--land-args"))[-1] == "--format=cockroachdb"
    monkeypatch.setenv("AIRFLOW_CONN_KAF", json.dumps({"conn_type": "cdc_kafka", "host": "b:9092"}))
    topics = KafkaLanding(topics=["t"], kafka_conn_id="kaf", lateness_seconds=30)
    assert topics.job_args("ydb")[-1] == "--format=ydb"
    assert topics.lateness("ydb") == 0  # in-band markers: exact
    assert topics.lateness("debezium") == 30 and landing.lateness("debezium") == 60
    assert landing.lateness("cockroachdb") == 60  # land_kinesis always subtracts it
    for bad, error in (
        ({"land": LandFilesOperator(task_id="x", warehouse="/wh", path="/d", source="s")}, "land"),
        ({"land": landing, "resolved_target": "soon"}, "resolved_target"),
        ({"land": landing, "poke_interval": 0}, "poke_interval"),
        ({"land": landing, "timeout": -1}, "timeout"),
    ):
        given = {"resolved_target": "2026-01-01T01:00:00", **bad}
        with pytest.raises((TypeError, ValueError), match=error):
            LandAndApplyOperator(
                task_id="b", warehouse="/wh", source="src", ddl=ddl, **given
            ).job_args({})


def test_the_landing_inside_land_and_apply_is_templated() -> None:
    import datetime as dt

    op = LandAndApplyOperator(
        task_id="t",
        warehouse="/wh",
        source="src",
        ddl="CREATE TABLE t (id int PRIMARY KEY)",
        land=KinesisLanding(stream="{{ params.stream }}"),
        resolved_target="{{ params.target }}",
    )
    end = dt.datetime(2026, 1, 1, 1, tzinfo=dt.UTC)
    context = {"data_interval_start": end - dt.timedelta(hours=1), "data_interval_end": end}
    op.render_template_fields({**context, "params": {"stream": "orders", "target": "2026-01-01"}})
    assert op.land.stream == "orders" and op.resolved_target == "2026-01-01"


class FirstTry:
    """A task instance whose first try (of a task that rescheduled itself) began ``at``."""

    def __init__(self, at: Any) -> None:
        self.at = at

    def get_first_reschedule_date(self, context: Any) -> Any:
        return self.at


def land_and_apply_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stats: dict[str, Any], **kwargs: Any
) -> LandAndApplyOperator:
    """A LandAndApplyOperator whose spark-submit writes ``stats`` as the job's counts."""
    fake_submit(monkeypatch, lambda op, spec: stats)
    return LandAndApplyOperator(
        task_id="t",
        warehouse=str(tmp_path / "wh"),
        source="src",
        ddl="CREATE TABLE t (id int PRIMARY KEY)",
        batch_id="b1",
        **kwargs,
    )


@pytest.mark.parametrize(
    ("waited_minutes", "target_in", "lateness", "again_in"),
    [
        (None, -3600, 0, 120),  # a past target: land again after poke_interval
        (None, 600, 300, 900),  # a live stream: not before the target plus the lateness
        (60, -3600, 300, 120),
        (359, 3600, 0, 60),  # never past the timeout
        (360, -3600, 0, None),  # timed out
    ],
)
def test_land_and_apply_lands_again_later_while_the_resolved_timestamp_is_short(
    waited_minutes: int | None,
    target_in: int,
    lateness: int,
    again_in: int | None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    import datetime as dt

    from airflow.sdk.exceptions import AirflowRescheduleException, AirflowSensorTimeout

    now = dt.datetime.now(dt.UTC)
    target = (now + dt.timedelta(seconds=target_in)).isoformat()
    stats = {"job": "land_and_apply", "waiting": "short of it", "resolved_target": target}
    op = land_and_apply_run(
        monkeypatch,
        tmp_path,
        stats,
        land=FilesLanding(path="/in", lateness_seconds=lateness),
        resolved_target=target,
        poke_interval=120,
        timeout=6 * 3600,
    )
    first = None if waited_minutes is None else now - dt.timedelta(minutes=waited_minutes)
    context = {"run_id": "r", "ti": FirstTry(first)}
    if again_in is None:
        with pytest.raises(AirflowSensorTimeout, match="short of it"):
            op.execute(context)  # type: ignore[arg-type]
        return
    with pytest.raises(AirflowRescheduleException) as raised:
        op.execute(context)  # type: ignore[arg-type]
    delay = (raised.value.reschedule_date - now).total_seconds()
    assert again_in - 1 < delay < again_in + 30


def test_land_and_apply_reports_an_applied_batch_as_the_apply_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    shards = {"shard-0": {"landed": 3, "closed": False, "horizon_ts": None}}
    stats = {
        "job": "land_and_apply",
        "land": {"landed": 3, "shards": shards},
        "tables": {"public.t": {"inserted": 3, "changes": 3, "applied": 3, "version": 1}},
        "accounting": {"landed": 3, "applied": 3},
    }
    op = land_and_apply_run(
        monkeypatch,
        tmp_path,
        stats,
        land=FilesLanding(path="/in"),
        resolved_target="2026-01-01T01:00:00+00:00",
    )
    assert op.execute({"run_id": "r", "ti": FirstTry(None)})["tables"] == stats["tables"]  # type: ignore[arg-type]
    logged = "".join(capfd.readouterr())
    assert "public.t: 3 inserted" in logged  # the apply's line per table
    assert "shard shard-0: 3 records landed" in logged  # and the landing's per shard


def files_landing(tmp_path: Path, **kwargs: Any) -> LandFilesOperator:
    """A LandFilesOperator of batch ``b1`` into a warehouse under ``tmp_path``."""
    return LandFilesOperator(
        task_id="l", warehouse=str(tmp_path / "wh"), path="/in", source="s", batch_id="b1", **kwargs
    )


@pytest.mark.parametrize(
    ("resolved_in", "target_in", "lateness", "again_in"),
    [
        (-60, -3600, 300, None),  # reached: the task ends with the landing's counts
        (-3660, -3600, 0, 120),  # short of a past target: land again after poke_interval
        (-600, 0, 300, 300),  # a live stream: not before the target plus the lateness
        (None, -3600, 0, 120),  # no resolved timestamp yet
    ],
)
def test_a_landing_lands_its_batch_again_until_it_reaches_the_interval_end(
    resolved_in: int | None,
    target_in: int,
    lateness: int,
    again_in: int | None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The apply of batch H reads batch H and earlier ones: a change committed before H's
    end that a later interval's landing lands is not in them, even though the source's
    resolved timestamp (what a sensor sees) then passes H's end. So the landing of H ends only
    once its own resolved timestamp reaches the target."""
    import datetime as dt

    from airflow.sdk.exceptions import AirflowRescheduleException

    now = dt.datetime.now(dt.UTC)
    resolved = None if resolved_in is None else (now + dt.timedelta(seconds=resolved_in))
    stats = {
        "job": "land_files",
        "landed": 1,
        "resolved_ts": None if resolved is None else resolved.isoformat(),
    }
    specs = fake_submit(monkeypatch, lambda op, spec: stats)
    op = files_landing(
        tmp_path,
        lateness_seconds=lateness,
        resolved_target=(now + dt.timedelta(seconds=target_in)).isoformat(),
        poke_interval=120,
    )
    context = {"run_id": "r", "ti": FirstTry(None)}
    if again_in is None:
        assert op.execute(context)["landed"] == 1  # type: ignore[arg-type]
        return
    with pytest.raises(AirflowRescheduleException) as raised:
        op.execute(context)  # type: ignore[arg-type]
    assert len(specs) == 1  # it landed before it waits
    delay = (raised.value.reschedule_date - now).total_seconds()
    assert again_in - 1 < delay < again_in + 30


def test_a_landing_told_no_target_lands_once(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    stats = {"job": "land_files", "landed": 1, "resolved_ts": None}
    fake_submit(monkeypatch, lambda op, spec: stats)
    op = files_landing(tmp_path, resolved_target=None)
    assert op.execute({"run_id": "r"})["landed"] == 1  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="resolved_target"):
        files_landing(tmp_path, resolved_target="soon").execute({"run_id": "r"})  # type: ignore[arg-type]


def test_a_submission_extends_the_spark_defaults_of_its_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """The operator reads the spark-defaults.conf that its spark-submit will read
    (``SPARK_CONF_DIR`` here) and submits the jobs' conf over it."""
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "spark.driver.extraJavaOptions -Dcluster.policy=kerberos\nspark.driver.memory 12g\n"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    specs = fake_submit(monkeypatch, lambda op, spec: {"job": "land_files", "landed": 1})
    files_landing(tmp_path, resolved_target=None).execute({"run_id": "r"})  # type: ignore[arg-type]
    (spec,) = specs
    options = spec.conf["spark.driver.extraJavaOptions"].split()
    assert options[:3] == ["-Dcluster.policy=kerberos", "-XX:+UseParallelGC", "-Xss8m"]
    assert "spark.driver.memory" not in spec.conf  # the cluster's 12g, which spark-submit reads


def test_land_and_apply_pins_and_reports_the_version_of_every_job_it_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A version string pins the job submitted (land_and_apply), a mapping any job the run
    runs; the counts name the version of each."""
    from airflow_cdc.core.exceptions import JobVersionError
    from airflow_cdc.jobs import installed_job_version

    installed = {
        job: installed_job_version(job) for job in ("land_and_apply", "land_files", "apply_changes")
    }
    stats = {"job": "land_and_apply", "land": {"landed": 0}, "accounting": {"landed": 0}}
    context = {"run_id": "r", "ti": FirstTry(None)}
    target = "2026-01-01T01:00:00+00:00"
    land = FilesLanding(path="/in")
    ran = land_and_apply_run(
        monkeypatch, tmp_path, stats, land=land, resolved_target=target, job_version=installed
    ).execute(context)  # type: ignore[arg-type]
    assert ran["job_version"] == installed["land_and_apply"]
    assert ran["job_versions"] == installed
    wrapper = {"job_version": installed["land_and_apply"]}
    op = land_and_apply_run(
        monkeypatch, tmp_path, stats, land=land, resolved_target=target, **wrapper
    )
    assert op.execute(context)["job_versions"] == installed  # type: ignore[arg-type]
    for pinned, error, match in (
        (
            {"apply_changes": "0.0.1"},
            JobVersionError,
            "'apply_changes' is pinned to version '0.0.1'",
        ),
        ({"land_files": "0.0.1"}, JobVersionError, "'land_files' is pinned"),
        ("0.0.1", JobVersionError, "'land_and_apply' is pinned"),
        ({"land_kafka": installed["land_files"]}, ValueError, r"does not run .*'land_files'"),
    ):
        op = land_and_apply_run(
            monkeypatch, tmp_path, stats, land=land, resolved_target=target, job_version=pinned
        )
        with pytest.raises(error, match=match):
            op.execute(context)  # type: ignore[arg-type]
