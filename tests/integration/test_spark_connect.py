"""The Spark step through Spark Connect: a real local server (``spark_connect_remote``), real broker.

The protocol's main cases through ``kafka-batch run --spark-remote`` as a user runs it, the same
cases' in-process helpers with a Connect session, what the server can see of the secrets, a
server whose Python lacks this package (a server killed in the middle of a batch: tests/faults).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from kafka_batch_provider.core.planning import PlanPolicy
from kafka_batch_provider.dev.local_servers import free_port
from kafka_batch_provider.dev.spark_connect import SparkConnectServer
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.spark.connect import connect_session, write_through_connect
from kafka_batch_provider.spark.ingest import read_plan
from kafka_batch_provider.steps.plan import plan_batch
from kafka_batch_provider.testing.producers import produce, sample_records
from tests.integration.helpers import (
    Output,
    assert_exactly_once,
    dataset_keys,
    group_offsets,
    offsets_of,
    produce_committed_aborted_committed,
    read_dataset,
)
from tests.integration.test_cli import SECRET, assert_one_line_error, cli, last_json

pytestmark = pytest.mark.integration


def test_incremental_runs_through_spark_remote_ingest_only_new_records_exactly_once(
    kafka_config, kafka_bootstrap_servers, spark_connect_remote, new_topic, group_id, tmp_path
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 40))
    out = str(tmp_path / "lake")
    common = ["--bootstrap-servers", kafka_bootstrap_servers, "--topic", topic, "--group", group_id, "--output", out]

    first = last_json(cli("run", *common, "--spark-remote", spark_connect_remote))
    assert (first["records"], first["spark"]) == (40, "connect"), first
    produce(kafka_config, topic, sample_records(2, 10, first_id=40))
    # SPARK_REMOTE works like the flag.
    second = last_json(cli("run", *common, env={"SPARK_REMOTE": spark_connect_remote}))
    assert (second["records"], second["spark"]) == (10, "connect"), second

    assert_exactly_once(out, offsets_of(topic, {0: 25, 1: 25}))
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 25, 1: 25}
    assert first["timings"]["read_write_seconds"] > 0 and "spark_seconds" in second["timings"]


def test_a_crash_before_the_commit_is_finished_by_the_next_run_without_writing_again(
    kafka_config, kafka_bootstrap_servers, spark_connect_remote, new_topic, group_id, tmp_path
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 30))
    out = str(tmp_path / "lake")
    kafka = ["--bootstrap-servers", kafka_bootstrap_servers]
    planned = last_json(cli("plan", *kafka, "--topic", topic, "--group", group_id, "--output", out))
    written = last_json(cli("write", "--plan", planned["plan_path"], *kafka, "--spark-remote", spark_connect_remote))
    assert written["records"] == 30, written
    # ... and the process died before `kafka-batch commit`: the group has nothing.
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}
    files_before = sorted(p.name for p in Path(out).rglob("*.parquet"))

    repaired = last_json(
        cli(
            "run",
            *kafka,
            "--topic",
            topic,
            "--group",
            group_id,
            "--output",
            out,
            "--spark-remote",
            spark_connect_remote,
        )
    )

    assert repaired["repaired"], f"the run must say it finished the pending batch, got {repaired}"
    assert sorted(p.name for p in Path(out).rglob("*.parquet")) == files_before, "the batch was written again"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 15, 1: 15}
    assert_exactly_once(out, offsets_of(topic, {0: 15, 1: 15}))


def test_transactional_topic_through_spark_remote_skips_control_records(
    kafka_config, kafka_bootstrap_servers, kafka_broker_kind, spark_connect_remote, new_topic, group_id, tmp_path
):
    topic = new_topic(partitions=1)
    produce_committed_aborted_committed(kafka_config, topic)
    out = str(tmp_path / "lake")

    result = last_json(
        cli(
            "run",
            *("--bootstrap-servers", kafka_bootstrap_servers, "--topic", topic, "--group", group_id),
            *("--output", out, "--spark-remote", spark_connect_remote),
        )
    )

    assert result["committed"] == {f"{topic}:0": 8}, result
    values = {r["value"] for r in read_dataset(out, ["value"]).to_pylist()}
    assert {b"committed-0", b"committed-1", b"committed-2", b"committed-3"} <= values
    assert not {o for (_, _, o) in dataset_keys(out)} & {3, 5, 7}, "control records must never be rows"
    if kafka_broker_kind != "tansu":  # tansu hands aborted records to read_committed readers
        assert b"aborted" not in values, "read_committed: the aborted record is not a row"


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--spark-remote", "sc://127.0.0.1:{closed}/;token=hunter2"], "would show it in ps"),
        (["--spark-remote", "http://127.0.0.1:15002"], "--spark-remote must look like sc://host:port"),
        (["--spark-remote", "sc://127.0.0.1:{closed}"], "no Spark Connect server answers at sc://127.0.0.1:{closed}"),
        (["--spark-remote", "sc://127.0.0.1:{closed}", "--spark-master", "local[2]"], "choose spark-submit or Spark"),
        (["--spark-remote", "{remote}", "--spark-conf", "spark.x=1"], "--spark-conf is for spark-submit"),
    ],
    ids=["token-in-argv", "not-sc-url", "no-server", "remote-and-master", "spark-conf-with-remote"],
)
def test_bad_spark_remote_flags_fail_in_one_line_and_change_nothing(
    flags, expected, kafka_config, kafka_bootstrap_servers, spark_connect_remote, new_topic, group_id, tmp_path
):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 5))
    out = tmp_path / "lake"
    closed = str(free_port())
    flags = [f.format(closed=closed, remote=spark_connect_remote) for f in flags]

    result = cli(
        "run",
        "--bootstrap-servers",
        kafka_bootstrap_servers,
        "--topic",
        topic,
        "--group",
        group_id,
        "--output",
        str(out),
        *flags,
    )

    assert_one_line_error(result, expected.format(closed=closed))
    assert not out.exists() or not any(out.rglob("*")), f"a refused run left {sorted(out.rglob('*'))}"
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: None}


def test_secrets_are_not_in_the_session_conf_the_query_plan_or_the_server_log(
    kafka_config, spark_connect_server, spark_connect_remote, new_topic, group_id, tmp_path
):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 10))
    output = Output(str(tmp_path / "lake"))
    secret_config = {**kafka_config, "sasl.password": SECRET}  # plaintext broker: librdkafka ignores it
    store = output.store()
    plan = plan_batch(KafkaOffsets(kafka_config), store, group_id, [topic], PlanPolicy()).plan

    entry = write_through_connect(spark_connect_remote, plan, store, secret_config)
    assert entry["rows"] == 10

    spark = connect_session(spark_connect_remote)
    try:
        visible_conf = json.dumps(spark.conf.getAll)
        # The server's own rendering of the plan, as explain() and the Spark UI show it.
        plan_text = read_plan(spark, plan, secret_config, receipts=True)._explain_string(extended=True)
    finally:
        spark.client.close()
    assert "kafka_batch_read" in plan_text, f"expected the reader in the plan, got {plan_text[:500]}"
    assert SECRET not in plan_text, "the Kafka password is in the query plan's text"
    assert SECRET not in visible_conf, "the Kafka password is in the Connect session's conf"
    if spark_connect_server is not None:  # a local server: its log is here to read
        log_text = spark_connect_server.log_path.read_text(errors="replace")
        assert "ExecuteHolder" in log_text, f"expected the server's INFO log of executions, got {log_text[-300:]}"
        assert SECRET not in log_text, "the Kafka password is in the Spark Connect server's log"


def test_a_server_whose_python_lacks_the_package_fails_in_one_line(
    kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path
):
    # A venv that sees pyspark, pyarrow and confluent-kafka (a .pth to this venv's site-packages)
    # but not this package (an editable install's finder is not loaded through a plain .pth).
    bare = tmp_path / "bare-venv"
    venv.create(bare, with_pip=False)
    site = next((bare / "lib").glob("python3*/site-packages"))
    ours = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "pyspark").is_dir())
    (site / "deps.pth").write_text(ours + "\n")
    probe = subprocess.run(
        [str(bare / "bin" / "python"), "-c", "import pyspark, pyarrow; import kafka_batch_provider"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert "No module named 'kafka_batch_provider'" in probe.stderr, f"the probe venv is not bare: {probe.stderr}"
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 5))
    env = {**os.environ, "PYSPARK_PYTHON": str(bare / "bin" / "python")}
    env.pop("PYTHONPATH", None)
    server = SparkConnectServer(master="local[1]", log_path=tmp_path / "server.log", lean=True)
    server.environment = lambda: env  # this server's workers run the bare venv
    server.start(timeout=180)
    try:
        result = cli(
            "run",
            *("--bootstrap-servers", kafka_bootstrap_servers, "--topic", topic, "--group", group_id),
            *("--output", str(tmp_path / "lake"), "--spark-remote", server.remote),
        )
    finally:
        server.stop(timeout=30)
    # Progress lines come first (the batch was planned); the error is one last line.
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert lines[-1].startswith("error: Spark's Python workers cannot import kafka_batch_provider"), lines[-3:]
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: None}


def test_batches_share_a_server_session_and_a_closed_one_is_replaced(spark_connect_remote, monkeypatch):
    import uuid

    import kafka_batch_provider.spark.connect as connect

    shared = str(uuid.uuid4())  # this test's own "shared" id: the other tests' session stays open
    monkeypatch.setattr(connect, "shared_session_id", lambda now=None: shared)
    first = connect_session(spark_connect_remote)
    second = connect_session(spark_connect_remote)
    assert first.session_id == second.session_id == shared, (first.session_id, second.session_id)
    # pyspark marks the process as Spark Connect; a spark-submit started from it later would inherit that.
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ, "a Connect session left its mark in os.environ"
    second.client.close()
    first.stop()  # releases the session: the server refuses its id from now on

    replaced = connect_session(spark_connect_remote)
    try:
        assert replaced.session_id != shared, "a closed session's id must not be reused"
        assert replaced.range(3).count() == 3
    finally:
        replaced.stop()


def test_a_killed_batch_is_interrupted_in_its_own_session_after_the_shared_one_moved_on(
    kafka_config, spark_connect_remote, new_topic, group_id, tmp_path, monkeypatch
):
    import threading
    import time

    from kafka_batch_provider.core.write_options import WriteOptions
    from kafka_batch_provider.spark import connect as connect_module
    from kafka_batch_provider.spark.connect import interrupt_batch

    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 60_000, value_size=100))
    store = Output(str(tmp_path / "lake")).store()
    plan = plan_batch(KafkaOffsets(kafka_config), store, group_id, [topic], PlanPolicy()).plan
    sessions: list[str] = []
    outcome: dict[str, object] = {}

    def write() -> None:
        try:
            # Slow tasks (one per 500 offsets), so the job is still running when it is killed.
            options = WriteOptions(max_offsets_per_task=500)
            outcome["entry"] = write_through_connect(
                spark_connect_remote, plan, store, kafka_config, options, on_session=sessions.append
            )
        except Exception as exc:  # noqa: BLE001 - what the interrupted batch raised
            outcome["error"] = exc

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    deadline = time.monotonic() + 120

    def staged() -> bool:
        return any(name.startswith(plan.batch_id) for name in store.data.list_names("_staging"))

    while not (sessions and staged()) and "error" not in outcome and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sessions and staged(), f"the batch never started writing: {outcome}"
    # The shared session's 55-minute bucket moves on while the batch runs in the old one.
    monkeypatch.setattr(connect_module, "shared_session_id", lambda now=None: "00000000-0000-0000-0000-000000000000")
    interrupt_batch(spark_connect_remote, plan.batch_id, session_id=sessions[0])
    writer.join(timeout=120)

    assert not writer.is_alive(), "the batch's Spark job kept running after it was interrupted"
    finished = outcome.get("entry") or {}
    assert "error" in outcome, f"expected the interrupted batch to fail, it finished ({finished.get('rows')} rows)"
    assert store.log.entry(plan.seq) is None, "an interrupted batch must not be published"
