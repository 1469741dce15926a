"""The shipped DAGs run with dag.test() against the real broker and real Spark.

Connections and Variables come from the environment, as a deployment would set them:
AIRFLOW_CONN_KAFKA_DEFAULT (a ``kafka`` connection whose extra is the librdkafka config),
AIRFLOW_CONN_SPARK_DEFAULT (spark-submit, ``local[2]``) or AIRFLOW_CONN_SPARK_CONNECT_DEFAULT
(the session's Spark Connect server, :func:`through_spark_connect`) and AIRFLOW_VAR_KAFKA_BATCH_*.
The tests about spark-submit itself (the first-run test, the Iceberg catalog's private file)
submit; the others take the warm Connect server, whose Spark step is the same ``write_batch``.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.testing.producers import Record, broker_supports_offsets_for_times, produce, sample_records
from tests.dags.conftest import DAGS
from tests.integration.helpers import assert_exactly_once, dataset_keys

pytestmark = pytest.mark.integration


@pytest.fixture
def airflow_env(airflow_db, kafka_bootstrap_servers, monkeypatch, tmp_path, group_id):
    """Connections and Variables for one test; returns the output directory."""
    output = tmp_path / "lake"
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap_servers}}),
    )
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_GROUP", group_id)
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_OUTPUT", str(output))
    # A sensor that gives up quickly, so a run with nothing to do is skipped in seconds.
    monkeypatch.setenv("KAFKA_BATCH_SENSOR_TIMEOUT_SECONDS", "3")
    monkeypatch.setenv("KAFKA_BATCH_SENSOR_POKE_SECONDS", "1")
    return output


@pytest.fixture
def through_spark_connect(spark_connect_remote, monkeypatch) -> str:
    """The DAGs' Spark step through the session's warm Spark Connect server (no JVM start per run).

    Every DAG test that is not about spark-submit uses it; the Spark step is the same
    ``write_batch`` either way (``test_ingest_dag_first_run_then_nothing_new_then_only_new_data``
    and the secrets module keep spark-submit).
    """
    use_spark_connect(monkeypatch, spark_connect_remote)
    return spark_connect_remote


def use_spark_connect(monkeypatch, remote: str) -> None:
    host, port = remote.removeprefix("sc://").split(":")
    connection = {"conn_type": "spark_connect", "host": host, "port": int(port)}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_DEFAULT", json.dumps(connection))
    monkeypatch.setenv("KAFKA_BATCH_SPARK_CONNECT_CONN_ID", "spark_connect_default")  # read when the DAG is parsed


def run(dag_id: str, **kwargs) -> dict[str, str]:
    """dag.test() of a freshly parsed DAG, retries off (a retry would wait its delay).

    Fresh, because dag.test() renders templates into the operator objects it runs, as no
    real worker would: a second run of the same objects would see the first run's values.
    Returns {task_id: state}.
    """
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    dag = DagBag(str(DAGS)).dags[dag_id]
    for task in dag.tasks:
        task.retries = 0
    dag_run = dag.test(**kwargs)
    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag.dag_id, TaskInstance.run_id == dag_run.run_id)
        ).all()
        return {ti.task_id: str(ti.state) for ti in tis}


def record_spark_submits(monkeypatch) -> list[tuple[list[str], dict[str, str]]]:
    """Record the argv and environment of every spark-submit the Spark hook starts."""
    import airflow.providers.apache.spark.hooks.spark_submit as hook_module

    launched: list[tuple[list[str], dict[str, str]]] = []
    real_popen = hook_module.subprocess.Popen

    def popen(args, *rest, **kwargs):
        if isinstance(args, (list, tuple)) and str(args[0]).endswith("spark-submit"):
            launched.append((list(args), dict(kwargs.get("env") or {})))
        return real_popen(args, *rest, **kwargs)

    monkeypatch.setattr(hook_module.subprocess, "Popen", popen)
    return launched


def metadata_db_text(table: str, column: str) -> str:
    """Everything one column of the Airflow metadata DB holds, as text (to look for secrets)."""
    from airflow.utils.session import create_session
    from sqlalchemy import text

    with create_session() as session:
        values = session.execute(text(f"SELECT {column} FROM {table}")).scalars().all()
    assert values, f"the metadata DB has no {table} rows to check"
    return "\n".join(str(v) for v in values)


def committed(kafka_config, group_id, topic, partitions) -> dict[int, int | None]:
    found = KafkaOffsets(kafka_config).committed_offsets(group_id, [TopicPartition(topic, p) for p in partitions])
    return {tp.partition: offset for tp, offset in found.items()}


SECRET = "s3cret-in-the-connection"


def test_ingest_dag_first_run_then_nothing_new_then_only_new_data(
    airflow_env, kafka_config, kafka_bootstrap_servers, new_topic, group_id, monkeypatch, capfd
):
    topic = new_topic(partitions=2)
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_TOPICS", topic)
    # A secret in the connection must reach Spark without reaching any log, XCom or file.
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap_servers, "sasl.password": SECRET}}
        ),
    )
    produce(kafka_config, topic, sample_records(2, 40))
    launched = record_spark_submits(monkeypatch)
    # As when Airflow runs from a virtualenv nobody activated (systemd): PATH has no spark-submit,
    # and the operator finds the one pip installed next to its Python.
    java = shutil.which("java")
    without = [p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "spark-submit").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(without))
    if java and not os.environ.get("JAVA_HOME") and shutil.which("java") is None:  # a system Spark beside java
        monkeypatch.setenv("JAVA_HOME", str(Path(java).resolve().parent.parent))
    assert shutil.which("spark-submit") is None, "this test needs a PATH without spark-submit"

    first = run("kafka_batch_ingest")
    assert first == {
        "ingest.wait_for_data": "success",
        "ingest.plan": "success",
        "ingest.spark_write": "success",
        "ingest.commit": "success",
        "ingest.lag_health": "success",
    }
    assert committed(kafka_config, group_id, topic, [0, 1]) == {0: 20, 1: 20}
    assert_exactly_once(airflow_env, {(topic, p, o) for p in (0, 1) for o in range(20)})

    quiet = run("kafka_batch_ingest")
    assert quiet["ingest.wait_for_data"] == "skipped", "the sensor skips a run with nothing to do"
    assert quiet["ingest.spark_write"] == "skipped", "no new data must not submit Spark"
    assert quiet["ingest.commit"] == "skipped"

    produce(kafka_config, topic, sample_records(2, 6, first_id=40))
    third = run("kafka_batch_ingest")
    assert set(third.values()) == {"success"}
    assert committed(kafka_config, group_id, topic, [0, 1]) == {0: 23, 1: 23}
    assert_exactly_once(airflow_env, {(topic, p, o) for p in (0, 1) for o in range(23)})
    assert len(list(Path(airflow_env).glob("batch_id=*"))) == 2
    # Airflow masks known secrets in logs, so the logs alone cannot prove much: the command
    # line and environment that spark-submit really got must not hold the secret either.
    assert len(launched) == 2, f"expected two spark-submit runs, saw {len(launched)}"
    for argv, env in launched:
        # The hook passes the worker's own environment on (here it holds the connection, as
        # AIRFLOW_CONN_*): only what the operator adds must be secret-free.
        added = {k: v for k, v in env.items() if os.environ.get(k) != v}
        assert SECRET not in " ".join(argv), "the Kafka secret is on the spark-submit command line"
        assert not [k for k, v in added.items() if SECRET in str(v)], f"secret in spark-submit env {sorted(added)}"
        assert "KAFKA_BATCH_KAFKA_CONFIG_FILE" in added, "the config must travel as a file named in the environment"
    task_logs = capfd.readouterr()
    assert "spark-submit" in task_logs.out + task_logs.err, "the task logs must have been captured"
    assert SECRET not in task_logs.out + task_logs.err, "the Kafka secret leaked into the task logs"
    assert not [p for p in Path(airflow_env).rglob("*.json") if SECRET in p.read_text()]
    stored = metadata_db_text("xcom", "value") + metadata_db_text("rendered_task_instance_fields", "rendered_fields")
    assert SECRET not in stored, "the Kafka secret leaked into XCom or rendered template fields"


def test_ingest_dag_through_a_spark_connect_connection_twice_without_spark_submit(
    airflow_env, kafka_config, kafka_bootstrap_servers, through_spark_connect, new_topic, group_id, monkeypatch, capfd
):
    topic = new_topic(partitions=2)
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_TOPICS", topic)
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap_servers, "sasl.password": SECRET}}
        ),
    )
    launched = record_spark_submits(monkeypatch)
    produce(kafka_config, topic, sample_records(2, 30))

    first = run("kafka_batch_ingest")
    produce(kafka_config, topic, sample_records(2, 8, first_id=30))
    second = run("kafka_batch_ingest")

    assert set(first.values()) == {"success"} and set(second.values()) == {"success"}, (first, second)
    assert committed(kafka_config, group_id, topic, [0, 1]) == {0: 19, 1: 19}
    assert_exactly_once(airflow_env, {(topic, p, o) for p in (0, 1) for o in range(19)})
    assert launched == [], f"the Spark Connect path must not start spark-submit, saw {len(launched)}"
    logs = capfd.readouterr()
    assert "through Spark Connect at sc://" in logs.out + logs.err, "the task log must say which path it took"
    assert SECRET not in logs.out + logs.err, "the Kafka secret leaked into the task logs"
    stored = metadata_db_text("xcom", "value") + metadata_db_text("rendered_task_instance_fields", "rendered_fields")
    assert SECRET not in stored, "the Kafka secret leaked into XCom or rendered template fields"
    check_asset_events_and_downstream_counts(airflow_env, topic, [30, 8])


def test_a_batch_whose_commit_task_failed_is_announced_by_the_next_runs_plan_as_its_commit_would_have(
    airflow_env, kafka_config, through_spark_connect, new_topic, group_id, monkeypatch
):
    import kafka_batch_provider.operators.commit as commit_operator
    from kafka_batch_provider.errors import KafkaUnavailableError

    topic = new_topic(partitions=2)
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_TOPICS", topic)
    produce(kafka_config, topic, sample_records(2, 30))

    def coordinator_away(*args, **kwargs):
        raise KafkaUnavailableError("Kafka commit(g) failed: Broker: Coordinator not available")

    # The first run's commit fails on every retry: the batch is in the output, the group unmoved.
    with monkeypatch.context() as patched:
        patched.setattr(commit_operator, "commit_batch", coordinator_away)
        first = run("kafka_batch_ingest")
    assert (first["ingest.spark_write"], first["ingest.commit"]) == ("success", "failed"), first
    uri = output_asset_uri_of(airflow_env)
    assert asset_events(uri) == [], "a batch whose commit failed must not be announced yet"

    produce(kafka_config, topic, sample_records(2, 8, first_id=30))
    second = run("kafka_batch_ingest")
    assert set(second.values()) == {"success"}, second
    entries = list(BatchStore(str(airflow_env)).log.entries())
    events = asset_events(uri)
    spans = lambda ranges: [(r["topic"], r["partition"], r["start"], r["end"]) for r in ranges]  # noqa: E731
    expected = [(e["batch_id"], e["seq"], e["rows"], False, spans(e["ranges"])) for e in entries]
    found = [(e["batch_id"], e["seq"], e["rows"], e["replay"], spans(e["ranges"])) for e in events]
    assert found == expected, f"expected one event per committed batch, the repaired one first: {found}"
    assert set(events[0]) == set(events[1]), f"a repaired batch's event has a commit's facts: {events}"
    assert committed(kafka_config, group_id, topic, [0, 1]) == {0: 19, 1: 19}
    # Who committed each: the first run's commit task, if cleared, must not announce the batch again.
    store = BatchStore(str(airflow_env))
    by = [store.commit_record(e["seq"], e["batch_id"]).get("committed_by") for e in entries]
    assert by == ["plan", "commit"], f"expected the repaired batch recorded as committed by the plan: {by}"


def output_asset_uri_of(output: Path) -> str:
    from kafka_batch_provider.operators.assets import output_asset_uri

    return output_asset_uri({"format": "parquet", "output": str(output)})


def check_asset_events_and_downstream_counts(output: Path, topic: str, batches: list[int]) -> None:
    """One asset event per committed batch on the output's asset, with the batch's facts; the
    downstream DAG's task, on those events, counts exactly each batch (and a rerun nothing twice)."""
    import sqlite3
    from types import SimpleNamespace

    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import Asset

    from kafka_batch_provider.operators.assets import output_asset_uri

    uri = output_asset_uri({"format": "parquet", "output": str(output)})
    events = asset_events(uri)
    store = BatchStore(str(output))
    entries = list(store.log.entries())
    assert [e["rows"] for e in entries] == batches, f"expected batches of {batches}, found {entries}"
    assert [(e["batch_id"], e["seq"], e["rows"], e["replay"]) for e in events] == [
        (x["batch_id"], x["seq"], x["rows"], False) for x in entries
    ], f"expected one event per committed batch on {uri}, found {events}"
    ends = {(r["topic"], r["partition"]): r["end"] for r in events[0]["ranges"]}
    assert all(r["start"] == ends[(r["topic"], r["partition"])] for r in events[1]["ranges"]), (
        f"the second batch starts where the first ended: {events}"
    )
    report = output.parent / "report.sqlite"
    count = DagBag(str(DAGS)).dags["kafka_batch_downstream"].task_dict["count_batch"]
    count.report_db = str(report)
    triggering = {Asset(uri=uri): [SimpleNamespace(extra=e, asset=SimpleNamespace(uri=uri)) for e in events]}
    counted = count.execute({"triggering_asset_events": triggering})
    assert [c["rows_by_topic"] for c in counted] == [{topic: n} for n in batches], counted
    count.execute({"triggering_asset_events": triggering})  # a rerun of the same run counts nothing twice
    with sqlite3.connect(report) as db:
        rows = db.execute("select batch_id, topic, rows from batch_rows order by seq").fetchall()
    assert rows == [(e["batch_id"], topic, n) for e, n in zip(events, batches)], rows


def asset_events(uri: str) -> list[dict]:
    """The extras of the asset events on ``uri``, oldest first (the metadata DB's rows)."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id).where(AssetModel.uri == uri)
        return [dict(e.extra) for e in session.scalars(query.order_by(AssetEvent.id)).all()]


def test_spark_failure_leaves_offsets_untouched_and_the_next_run_replays_the_same_plan(
    airflow_env, kafka_config, new_topic, group_id, spark_connect_remote, monkeypatch
):
    topic = new_topic(partitions=1)
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_TOPICS", topic)
    produce(kafka_config, topic, sample_records(1, 10))
    # A Spark connection whose binary does not exist: spark-submit cannot start.
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT",
        json.dumps({"conn_type": "spark", "host": "local[2]", "extra": {"spark-binary": "spark3-submit"}}),
    )
    failed = run("kafka_batch_ingest")
    assert failed["ingest.spark_write"] == "failed" and failed["ingest.commit"] == "upstream_failed"
    assert failed["ingest.lag_health"] == "upstream_failed", "a failed batch must fail the run"
    assert committed(kafka_config, group_id, topic, [0]) == {0: None}
    store = BatchStore(airflow_env)
    [pending] = store.plans_after(0)

    produce(kafka_config, topic, sample_records(1, 5, first_id=10))  # arrives before the retry
    # The next run takes the Spark Connect path: the plan is the output's, whichever Spark reads it.
    use_spark_connect(monkeypatch, spark_connect_remote)
    retried = run("kafka_batch_ingest")
    assert set(retried.values()) == {"success"}
    assert committed(kafka_config, group_id, topic, [0]) == {0: 10}, "the retry must commit the same plan's end"
    assert store.commit_record(pending.seq, pending.batch_id) is not None, (
        "the pending batch is the one that was finished"
    )
    assert_exactly_once(airflow_env, {(topic, 0, o) for o in range(10)})


def test_backfill_dag_by_offsets_replays_the_range_and_leaves_the_group_alone(
    airflow_env, kafka_config, new_topic, group_id, tmp_path, through_spark_connect
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 40))
    tp = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    KafkaOffsets(kafka_config).commit(group_id, {t: None for t in tp}, {t: 20 for t in tp})
    replay_out = tmp_path / "replay"
    conf = {"topic": topic, "start_offsets": {"0": 5}, "end_offsets": {"0": 15, "1": 3}, "output_path": str(replay_out)}

    dry = run("kafka_batch_backfill", run_conf={**conf, "dry_run": True})
    assert dry == {"plan_replay": "success", "spark_write": "skipped"}
    assert not replay_out.exists(), "a dry run writes nothing"

    states = run("kafka_batch_backfill", run_conf=conf)
    assert states == {"plan_replay": "success", "spark_write": "success"}
    assert_exactly_once(replay_out, {(topic, 0, o) for o in range(5, 15)} | {(topic, 1, o) for o in range(0, 3)})
    states = run("kafka_batch_backfill", run_conf=conf)  # the same range again replaces its batch
    assert_exactly_once(replay_out, {(topic, 0, o) for o in range(5, 15)} | {(topic, 1, o) for o in range(0, 3)})
    assert committed(kafka_config, group_id, topic, [0, 1]) == {0: 20, 1: 20}


@pytest.mark.parametrize(
    "conf, expected",
    [
        ({"start_offsets": {"0": 15}, "end_offsets": {"0": 5}}, "end offset 5 is before start offset 15"),
        ({"end_offsets": {"0": 500}}, "end offset 500 is beyond the end offset 20"),
        ({"topic": "no-such-topic-here", "whole_topic": True}, "unknown topic(s) 'no-such-topic-here'"),
        (
            {"start_offsets": {"0": 1}, "start_time": "2026-01-01T00:00:00Z", "end_time": "2026-01-02T00:00:00Z"},
            "either start/end offsets or start/end times",
        ),
    ],
)
def test_backfill_dag_semantic_errors_fail_the_first_task_with_one_line(
    airflow_env, kafka_config, new_topic, tmp_path, conf, expected, capfd
):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 20))
    replay_out = tmp_path / "replay"
    states = run("kafka_batch_backfill", run_conf={"topic": topic, "output_path": str(replay_out), **conf})
    assert states == {"plan_replay": "failed", "spark_write": "upstream_failed"}
    assert not replay_out.exists()
    task_log = capfd.readouterr().out
    assert expected in task_log, f"the task log has no line with {expected!r}"


def test_backfill_dag_by_time_replays_exactly_the_window(
    airflow_env, kafka_config, new_topic, tmp_path, through_spark_connect
):
    if not broker_supports_offsets_for_times(kafka_config, new_topic(partitions=1, prefix="probe")):
        pytest.skip("this broker cannot map times to offsets (tansu); the default broker, Apache Kafka, can")
    topic = new_topic(partitions=1)
    base = datetime(2026, 3, 1, tzinfo=timezone.utc)
    for hour in range(4):
        stamp = int((base + timedelta(hours=hour)).timestamp() * 1000)
        produce(kafka_config, topic, [Record(0, b"h%d" % hour, timestamp_ms=stamp) for _ in range(3)])
    replay_out = tmp_path / "replay"
    conf = {
        "topic": topic,
        "start_time": (base + timedelta(hours=1)).isoformat(),
        "end_time": (base + timedelta(hours=3)).isoformat(),
        "output_path": str(replay_out),
    }
    assert run("kafka_batch_backfill", run_conf=conf) == {"plan_replay": "success", "spark_write": "success"}
    assert_exactly_once(replay_out, {(topic, 0, o) for o in range(3, 9)})


def test_airflow_backfill_run_of_the_ingest_dag_replays_its_interval_without_committing(
    airflow_env, kafka_config, new_topic, group_id, monkeypatch, through_spark_connect
):
    """A run of type backfill (what `airflow backfill create` makes) plans a replay of its data interval."""
    import airflow.models.dagrun as dagrun_module
    from airflow.timetables.base import DataInterval
    from airflow.utils.types import DagRunType

    topic = new_topic(partitions=1)
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_TOPICS", topic)
    timestamps_work = broker_supports_offsets_for_times(kafka_config, new_topic(partitions=1, prefix="probe"))
    interval_start = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
    for minute in (-5, 3, 7, 20):  # 15-minute interval [12:00, 12:15): two of these fall inside
        stamp = int((interval_start + timedelta(minutes=minute)).timestamp() * 1000)
        produce(kafka_config, topic, [Record(0, b"m%d" % minute, timestamp_ms=stamp)])

    original = dagrun_module.get_or_create_dagrun

    def as_backfill(*, dag, run_id, **kwargs):
        # dag.test() always makes a manual run; make the run a backfill as the scheduler would.
        run = dag.create_dagrun(
            run_id=DagRunType.BACKFILL_JOB.generate_run_id(suffix=kwargs["logical_date"].isoformat()),
            run_type=DagRunType.BACKFILL_JOB,
            logical_date=kwargs["logical_date"],
            # What the scheduler gives a backfill run of a 15-minute data-interval schedule.
            data_interval=DataInterval(kwargs["logical_date"], kwargs["logical_date"] + timedelta(minutes=15)),
            run_after=kwargs["run_after"],
            conf=kwargs.get("conf"),
            state="running",
            triggered_by=kwargs["triggered_by"],
            session=kwargs["session"],
            start_date=kwargs["start_date"],
        )
        return run

    monkeypatch.setattr(dagrun_module, "get_or_create_dagrun", as_backfill)
    try:
        states = run("kafka_batch_ingest", logical_date=interval_start)
    finally:
        monkeypatch.setattr(dagrun_module, "get_or_create_dagrun", original)

    assert states["ingest.plan"] == "success" and states["ingest.commit"] == "skipped"
    assert states["ingest.lag_health"] == "skipped", "a backfill run leaves the live group's health alone"
    assert committed(kafka_config, group_id, topic, [0]) == {0: None}, "a backfill run must not commit the group"
    replay_out = Path(str(airflow_env) + "_replay")
    assert not list(Path(airflow_env).glob("batch_id=*")), "a backfill run must not write the incremental dataset"
    if timestamps_work:
        assert states["ingest.spark_write"] == "success"
        assert_exactly_once(replay_out, {(topic, 0, 1), (topic, 0, 2)})
    else:
        # tansu answers every timestamp lookup with offset 0: the interval maps to an empty range.
        assert states["ingest.spark_write"] == "skipped" and dataset_keys(replay_out) == {}


STORAGE_SECRET = "lake-secret-in-the-aws-connection"


def test_ingest_dag_on_s3_with_an_aws_connection_resumes_a_deleted_group(
    airflow_env, kafka_config, new_topic, group_id, s3_server, new_s3_output, through_spark_connect, monkeypatch, capfd
):
    from confluent_kafka.admin import AdminClient

    from tests.integration.helpers import Output

    topic = new_topic(partitions=2)
    lake = new_s3_output()
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_TOPICS", topic)
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_OUTPUT", lake)
    # The lake's credentials live in an Airflow `aws` connection (the S3 server accepts any secret).
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE",
        json.dumps(
            {
                "conn_type": "aws",
                "login": s3_server.access_key,
                "password": STORAGE_SECRET,
                "extra": {"endpoint_url": s3_server.endpoint_url, "region_name": s3_server.region},
            }
        ),
    )
    monkeypatch.setenv("KAFKA_BATCH_STORAGE_CONN_ID", "lake")  # read when the DAG file is parsed
    produce(kafka_config, topic, sample_records(2, 20))
    assert set(run("kafka_batch_ingest").values()) == {"success"}

    admin = AdminClient(kafka_config)  # the group's offsets expire, or someone deletes the group
    admin.delete_consumer_groups([group_id], request_timeout=10)[group_id].result()
    produce(kafka_config, topic, sample_records(2, 6, first_id=20))
    assert set(run("kafka_batch_ingest").values()) == {"success"}

    output = Output(lake, {**s3_server.storage_options(), "secret": STORAGE_SECRET})
    assert_exactly_once(output, {(topic, p, o) for p in (0, 1) for o in range(13)})
    entries = list(output.store().log.entries())
    assert [e["rows"] for e in entries] == [20, 6], "the second batch resumed from the output: only new records"
    assert committed(kafka_config, group_id, topic, [0, 1]) == {0: 13, 1: 13}, "the commit restored the group"
    # How the secret reaches spark-submit (a private file, never argv): tests/integration/test_secrets_everywhere.py.
    stored = metadata_db_text("xcom", "value") + metadata_db_text("rendered_task_instance_fields", "rendered_fields")
    assert STORAGE_SECRET not in stored, "the storage secret leaked into XCom or rendered template fields"
    task_logs = capfd.readouterr()
    assert "through Spark Connect at sc://" in task_logs.out + task_logs.err, "the task logs must have been captured"
    assert STORAGE_SECRET not in task_logs.out + task_logs.err, "the storage secret leaked into the task logs"


# -- Delta and Iceberg tables through the task group ------------------------------------------


def test_ingest_dag_into_a_delta_table_twice_every_offset_exactly_once(
    airflow_env, kafka_config, new_topic, group_id, through_spark_connect, monkeypatch
):
    from tests.integration.helpers import TableOutput

    topic = new_topic(partitions=2)
    table = TableOutput(str(airflow_env.parent / "delta table"), format="delta")
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_TOPICS", topic)
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_FORMAT", "delta")
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_OUTPUT", table.uri)
    produce(kafka_config, topic, sample_records(2, 20))
    assert set(run("kafka_batch_ingest").values()) == {"success"}

    produce(kafka_config, topic, sample_records(2, 8, first_id=20))
    second = run("kafka_batch_ingest")
    assert set(second.values()) == {"success"}, f"expected every task to succeed, got {second}"
    assert committed(kafka_config, group_id, topic, [0, 1]) == {0: 14, 1: 14}, "the group is committed to the end"
    assert_exactly_once(table, {(topic, p, o) for p in (0, 1) for o in range(14)})
    assert [e["rows"] for e in table.store().log.entries()] == [20, 8], "one table commit per batch"
    plans = list(Path(table.uri, "_kafka_batch", "_plans").glob("*.json"))
    assert len(plans) == 2, f"expected the two plans in the table's _kafka_batch/_plans, found {plans}"
    assert not list(Path(airflow_env).parent.glob("lake*")), "nothing may be written to the parquet default output"

    # The upkeep DAG on the same Variables: the three files become one, the offsets stay.
    monkeypatch.setenv("KAFKA_BATCH_UPKEEP_RETENTION_HOURS", "1")
    monkeypatch.setenv("KAFKA_BATCH_UPKEEP_KEEP_BATCHES", "1")
    files_before = len(delta_paths(table))
    assert run("kafka_batch_upkeep") == {"upkeep": "success"}
    # The first batch wrote a file per partition, the second (small, sized by the first) one file.
    assert (files_before, len(delta_paths(table))) == (3, 1), f"expected 3 files compacted into 1, {files_before}"
    plans = sorted(p.name.split("-")[0] for p in Path(table.uri, "_kafka_batch", "_plans").glob("*.json"))
    assert plans == [f"{2:020d}"], f"only the newest batch's plan stays, found {plans}"
    produce(kafka_config, topic, sample_records(2, 4, first_id=28))
    assert set(run("kafka_batch_ingest").values()) == {"success"}
    assert_exactly_once(table, {(topic, p, o) for p in (0, 1) for o in range(16)})


def delta_paths(table) -> list[str]:
    import pyarrow as pa

    return pa.table(table.store().sink.table().get_add_actions(flatten=True)).column("path").to_pylist()


CATALOG_SECRET = "catalog-token-in-the-connection"


def test_ingest_dag_into_an_iceberg_table_with_the_catalog_from_a_connection(
    airflow_env, kafka_config, new_topic, group_id, monkeypatch, tmp_path, capfd
):
    from tests.integration.helpers import TableOutput

    topic = new_topic(partitions=2)
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    # The secret is harmless for a SQL catalog on a local warehouse; it must reach Spark only.
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE_CATALOG", json.dumps({"conn_type": "generic", "extra": {**catalog, "token": CATALOG_SECRET}})
    )
    monkeypatch.setenv("KAFKA_BATCH_CATALOG_CONN_ID", "lake_catalog")  # read when the DAG file is parsed
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_TOPICS", topic)
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_FORMAT", "iceberg")
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_TABLE", "lake.orders")
    launched = record_spark_submits(monkeypatch)
    produce(kafka_config, topic, sample_records(2, 12))

    states = run("kafka_batch_ingest")
    assert set(states.values()) == {"success"}, f"expected every task to succeed, got {states}"
    assert committed(kafka_config, group_id, topic, [0, 1]) == {0: 6, 1: 6}, "the group is committed to the end"
    assert_exactly_once(
        TableOutput("", format="iceberg", table="lake.orders", catalog=catalog),
        {(topic, p, o) for p in (0, 1) for o in range(6)},
    )
    assert not Path(airflow_env).exists(), "an Iceberg run must not write the parquet output setting's folder"
    assert len(launched) == 1, f"expected one spark-submit run, saw {len(launched)}"
    [(argv, env)] = launched
    added = {k: v for k, v in env.items() if os.environ.get(k) != v}
    assert "KAFKA_BATCH_CATALOG_PROPERTIES_FILE" in added, f"the catalog must travel in a private file: {added}"
    where = argv[argv.index("--format") : argv.index("--format") + 4]
    assert where == ["--format", "iceberg", "--table", "lake.orders"], f"expected the table in argv, got {where}"
    assert CATALOG_SECRET not in json.dumps([argv, added]), "the catalog secret reached spark-submit's argv or env"
    stored = metadata_db_text("xcom", "value") + metadata_db_text("rendered_task_instance_fields", "rendered_fields")
    assert CATALOG_SECRET not in stored, "the catalog secret leaked into XCom or rendered template fields"
    assert '"format": "iceberg"' in stored and '"table": "lake.orders"' in stored, "the plan XCom names the output"
    task_logs = capfd.readouterr()
    assert "spark-submit" in task_logs.out + task_logs.err, "the task logs must have been captured"
    assert CATALOG_SECRET not in task_logs.out + task_logs.err, "the catalog secret leaked into the task logs"


def test_ingest_dag_into_a_mariadb_table_then_a_backfill_into_its_replay_table(
    airflow_env, kafka_config, new_topic, group_id, through_spark_connect, monkeypatch, mariadb_database, capfd
):
    from tests.support.databases import PASSWORD

    db = mariadb_database
    topic = new_topic(partitions=2)
    connection = {"conn_type": "mysql", "host": "127.0.0.1", "port": db.port, "login": db.name,
                  "password": PASSWORD, "schema": db.name}  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", json.dumps(connection))
    monkeypatch.setenv("KAFKA_BATCH_DATABASE_CONN_ID", "warehouse")  # (read when the DAGs are parsed)
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_TOPICS", topic)
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_FORMAT", "mysql")
    monkeypatch.setenv("AIRFLOW_VAR_KAFKA_BATCH_TABLE", f"{db.name}.events")
    produce(kafka_config, topic, sample_records(2, 20))
    states = run("kafka_batch_ingest")
    assert set(states.values()) == {"success"}, f"expected every task to succeed, got {states}"
    assert committed(kafka_config, group_id, topic, [0, 1]) == {0: 10, 1: 10}
    rows = sorted(db.rows("SELECT `partition`, `offset` FROM events"))
    assert rows == [(p, o) for p in (0, 1) for o in range(10)], f"expected each offset once, found {rows}"

    conf = {"topic": topic, "start_offsets": {"0": 2}, "end_offsets": {"0": 6}, "output_format": "mysql",
            "table": f"{db.name}.events_replay"}  # fmt: skip
    states = run("kafka_batch_backfill", run_conf=conf)
    assert states == {"plan_replay": "success", "spark_write": "success"}, states
    replayed = sorted(db.rows("SELECT `partition`, `offset` FROM events_replay"))
    assert replayed == [(0, o) for o in range(2, 6)], f"expected partition 0's offsets 2-5 once, found {replayed}"
    assert committed(kafka_config, group_id, topic, [0, 1]) == {0: 10, 1: 10}, "a backfill moved the group"
    assert db.rows("SELECT count(*) FROM events") == [(20,)], "a backfill changed the ingest table"
    out, err = capfd.readouterr()
    assert PASSWORD not in out + err, "the database's password was shown"
