"""The ``kafka-batch`` command line, as a user runs it: its own processes (forked from a process
that imported the heavy libraries already, tests/support/cli_runner.py; the installed script itself
in the first test), real broker, real Spark.

spark-submit where it is the subject (``write`` and ``run``, a table per topic, the storage secret
kept out of its command line); the other batches run on the worker's Spark Connect server
(``--spark-remote``), whose Spark step is the same ``write_batch``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.dev.local_servers import free_port
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.testing.producers import Record, produce, sample_records
from tests.integration.helpers import Output, assert_exactly_once, dataset_keys
from tests.support import cli_runner

pytestmark = pytest.mark.integration

SECRET = "hunter2-not-for-logs"


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300, fork: bool | None = None
) -> subprocess.CompletedProcess:
    """``kafka-batch ARGS`` (tests/support/cli_runner.py); ``fork=False``: the installed script itself."""
    return cli_runner.run(list(args), {**os.environ, **(env or {})}, timeout=timeout, fork=fork)


def last_json(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, f"exit {result.returncode}, stderr: {result.stderr[-2000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def assert_one_line_error(result: subprocess.CompletedProcess, expected: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0, f"expected a failure, got exit 0 and stdout {result.stdout!r}"
    assert len(lines) == 1 and lines[0].startswith("error: "), f"expected one 'error:' line, got {lines!r}"
    assert expected in lines[0], f"expected {expected!r} in {lines[0]!r}"
    assert "Traceback" not in result.stderr


def test_plan_write_commit_then_run_ingests_only_new_data_and_keeps_secrets_out(
    kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path
):
    # The installed kafka-batch script itself (fork=False), as a user runs it; the other tests fork.
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 20))
    out = str(tmp_path / "lake")
    secrets = tmp_path / "kafka.json"  # secrets in a file: not in ps, not in shell history
    secrets.write_text(json.dumps({"sasl.password": SECRET}))
    common = ["--bootstrap-servers", kafka_bootstrap_servers, "--kafka-config-file", str(secrets)]
    spark = ["--spark-master", "local[2]"]

    planned = last_json(cli("plan", *common, "--topic", topic, "--group", group_id, "--output", out, fork=False))
    assert planned["records"] == 20 and Path(planned["plan_path"]).exists()
    written = last_json(cli("write", "--plan", planned["plan_path"], *common, *spark, fork=False))
    assert written == {
        "batch_id": planned["batch_id"],
        "seq": 1,
        "records": 20,
        "dead_letters": 0,
        "location": str(Path(out) / f"batch_id={planned['batch_id']}"),
        "skipped": False,
    }
    committed = last_json(cli("commit", "--plan", planned["plan_path"], *common, fork=False))
    assert committed["committed"] == {f"{topic}:0": 10, f"{topic}:1": 10}

    produce(kafka_config, topic, sample_records(2, 6, first_id=20))
    run = cli("run", *common, "--topic", topic, "--group", group_id, "--output", out, *spark, fork=False)
    second = last_json(run)
    assert [(r["start"], r["end"]) for r in second["ranges"]] == [(10, 13), (10, 13)]
    assert second["records"] == 6 and second["committed"] == {f"{topic}:0": 13, f"{topic}:1": 13}
    assert "batch " in run.stderr, "progress lines must reach the user"
    assert_exactly_once(Path(out), {(topic, p, o) for p in (0, 1) for o in range(13)})
    # Where spark-submit's time went, phase by phase, within the step's own time.
    timings = second["timings"]
    phases = ["spark_launch_seconds", "spark_session_seconds", "spark_batch_seconds", "spark_exit_seconds"]
    found = {phase: timings.get(phase) for phase in phases}
    assert all(isinstance(v, float) and v >= 0 for v in found.values()), f"expected each phase's seconds: {timings}"
    assert sum(found.values()) <= timings["spark_seconds"], f"expected the phases within spark_seconds: {timings}"
    assert timings["read_write_seconds"] <= timings["spark_batch_seconds"], timings

    # The secret reaches neither output, nor any file of the dataset (plans, manifests, commits).
    assert SECRET not in run.stdout + run.stderr
    for path in Path(out).rglob("*"):
        if path.is_file() and path.suffix == ".json":
            assert SECRET not in path.read_text(), f"secret found in {path}"


def test_run_with_no_new_data_succeeds_without_starting_spark(kafka_bootstrap_servers, new_topic, group_id, tmp_path):
    topic = new_topic(partitions=1)
    result = cli(
        "run",
        "--bootstrap-servers",
        kafka_bootstrap_servers,
        "--topic",
        topic,
        "--group",
        group_id,
        "--new-partitions",
        "latest",
        "--output",
        str(tmp_path),
    )
    first = last_json(result)  # an empty, never-committed partition: only the offset is committed
    assert first["records"] == 0 and first["committed"] == {f"{topic}:0": 0}
    second = last_json(
        cli(
            "run",
            "--bootstrap-servers",
            kafka_bootstrap_servers,
            "--topic",
            topic,
            "--group",
            group_id,
            "--output",
            str(tmp_path),
        )
    )
    assert second["skipped"] is True and second["ranges"] == [] and second["committed"] == {}
    assert "spark-submit" not in result.stderr


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--topic", "no-such-topic"], "unknown topic(s) 'no-such-topic'"),
        (["--kafka-config", "enable.auto.commit=true"], "enable.auto.commit=true is not allowed"),
        (["--kafka-config", "novalue"], "--kafka-config expects key=value"),
        (["--max-records", "0"], "argument --max-records: expected a positive integer, got 0"),
        (["--max-records-per-partition", "many"], "expected a positive integer, got 'many'"),
        (["--partition", "7"], "has no partition(s) [7]"),
        (["--new-partitions", "sometimes"], "argument --new-partitions: invalid choice"),
        (["--value-format", "json"], "--value-format=json needs --value-schema"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    args, expected, kafka_bootstrap_servers, new_topic, group_id, tmp_path
):
    topic = new_topic(partitions=2)
    base = ["run", "--bootstrap-servers", kafka_bootstrap_servers, "--group", group_id, "--output", str(tmp_path)]
    if "--topic" not in args:
        base += ["--topic", topic]
    assert_one_line_error(cli(*base, *args), expected)
    assert not any(tmp_path.iterdir()), "nothing may be written"
    kafka = KafkaOffsets({"bootstrap.servers": kafka_bootstrap_servers})
    assert set(kafka.committed_offsets(group_id, [TopicPartition(topic, 0)]).values()) == {None}


def test_broker_down_is_one_line(tmp_path):
    result = cli(
        "plan",
        "--bootstrap-servers",
        f"127.0.0.1:{free_port()}",
        "--timeout",
        "2",
        "--topic",
        "t",
        "--group",
        "g",
        "--output",
        str(tmp_path),
    )
    assert_one_line_error(result, "did not answer list_topics within 2s")
    assert result.returncode == 3 and not any(tmp_path.iterdir())


def test_missing_group_and_missing_plan_file_are_one_line(kafka_bootstrap_servers, tmp_path):
    assert_one_line_error(
        cli("plan", "--topic", "t", "--output", str(tmp_path)), "the following arguments are required: --group"
    )
    assert_one_line_error(
        cli("commit", "--plan", str(tmp_path / "_plans" / "nope.json"), "--bootstrap-servers", kafka_bootstrap_servers),
        "does not exist",
    )


def test_commit_without_a_written_batch_is_refused_and_commits_nothing(
    kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path
):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 5))
    common = ["--bootstrap-servers", kafka_bootstrap_servers]
    planned = last_json(cli("plan", *common, "--topic", topic, "--group", group_id, "--output", str(tmp_path)))
    assert_one_line_error(cli("commit", "--plan", planned["plan_path"], *common), "is not in the output log")
    tp = TopicPartition(topic, 0)
    assert KafkaOffsets(kafka_config).committed_offsets(group_id, [tp]) == {tp: None}


def test_hand_edited_plan_is_refused(kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 5))
    common = ["--bootstrap-servers", kafka_bootstrap_servers]
    planned = last_json(cli("plan", *common, "--topic", topic, "--group", group_id, "--output", str(tmp_path)))
    path = Path(planned["plan_path"])
    data = json.loads(path.read_text())
    data["ranges"][0]["start"], data["ranges"][0]["end"] = 4, 2  # end before start
    path.write_text(json.dumps(data))
    assert_one_line_error(cli("write", "--plan", str(path), *common), "invalid offset range")


def test_embedded_broker_start_status_stop(tmp_path):
    env = {"KAFKA_BATCH_STATE_DIR": str(tmp_path)}
    port = free_port()
    started = last_json(cli("broker", "start", "--port", str(port), env=env))
    try:
        assert started["running"] and started["bootstrap_servers"] == f"127.0.0.1:{port}"
        assert last_json(cli("broker", "status", env=env))["running"] is True
        KafkaOffsets({"bootstrap.servers": started["bootstrap_servers"]}, timeout=5).topic_partitions([])
        assert_one_line_error(cli("broker", "start", "--port", str(port), env=env), "already running")
    finally:
        stopped = last_json(cli("broker", "stop", env=env))
    assert stopped["stopped"] is True
    assert last_json(cli("broker", "status", env=env))["running"] is False


def test_jvm_reader_without_the_connector_is_one_clear_line_and_commits_nothing(
    kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path
):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 3))
    no_tools = tmp_path / "tools"  # a tools folder where `make jvm-tools` never ran
    no_tools.mkdir()
    out = tmp_path / "lake"
    result = cli(
        "run",
        *("--bootstrap-servers", kafka_bootstrap_servers, "--topic", topic, "--group", group_id),
        *("--output", str(out), "--reader", "jvm", "--spark-master", "local[1]"),
        env={"KAFKA_BATCH_TOOLS_DIR": str(no_tools), "SPARK_HOME": ""},
    )
    # Refused before anything is planned: no Ivy download at run time, no plan for a batch that cannot run.
    expected = f"whose jars are not in {no_tools}/spark-kafka/jars: fetch them with `make jvm-tools`"
    assert_one_line_error(result, expected)
    assert result.returncode == 2, f"expected exit 2 (a configuration error, not retried), got {result.returncode}"
    tp = TopicPartition(topic, 0)
    assert KafkaOffsets(kafka_config).committed_offsets(group_id, [tp]) == {tp: None}
    assert not out.exists() or not any(out.rglob("*.json")), f"expected nothing planned, found {list(out.rglob('*'))}"


def test_discard_removes_an_unpublished_batch_and_refuses_a_logged_one(
    kafka_config, kafka_bootstrap_servers, spark_connect_remote, new_topic, group_id, tmp_path
):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 5))
    common = ["--bootstrap-servers", kafka_bootstrap_servers]
    planned = last_json(cli("plan", *common, "--topic", topic, "--group", group_id, "--output", str(tmp_path)))
    assert last_json(cli("discard", "--plan", planned["plan_path"]))["discarded"] is True
    assert not Path(planned["plan_path"]).exists()
    spark = ["--spark-remote", spark_connect_remote]
    ran = last_json(cli("run", *common, "--topic", topic, "--group", group_id, "--output", str(tmp_path), *spark))
    assert ran["batch_id"] == planned["batch_id"] and ran["reused"] is False, "planned anew, same ranges"
    refused = cli("discard", "--plan", ran["plan_path"])
    assert_one_line_error(refused, "logged batches are never removed")
    assert Path(ran["plan_path"]).exists() and (tmp_path / f"batch_id={ran['batch_id']}").is_dir()


STORAGE_SECRET = "storage-secret-not-for-logs"


def test_storage_credentials_stay_out_of_output_files_and_logs(
    kafka_config, kafka_bootstrap_servers, new_topic, group_id, s3_server, new_s3_output, tmp_path
):
    import s3fs

    from kafka_batch_provider.output.location import Location
    from kafka_batch_provider.spark.task_writer import TaskWriter

    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 5))
    output = new_s3_output()
    options = {**s3_server.storage_options(), "secret": STORAGE_SECRET}  # the S3 server accepts any secret
    options_file = tmp_path / "storage.json"
    options_file.write_text(json.dumps(options))
    run = cli(
        "run", "--bootstrap-servers", kafka_bootstrap_servers, "--topic", topic, "--group", group_id,
        "--output", output, "--storage-options-file", str(options_file), "--spark-master", "local[1]",
    )  # fmt: skip
    assert last_json(run)["records"] == 5
    assert STORAGE_SECRET not in run.stdout + run.stderr, "the storage secret leaked into the command's output"
    fs = s3fs.S3FileSystem(**options, skip_instance_cache=True)
    files = fs.find(output.removeprefix("s3://"))
    assert any("/_log/" in f for f in files) and any("/_plans/" in f for f in files), files
    for path in files:
        assert STORAGE_SECRET.encode() not in fs.cat_file(path), f"the storage secret leaked into {path}"
    for shown in (repr(Location(output, options)), repr(TaskWriter(output, "_staging/x", options))):
        assert STORAGE_SECRET not in shown, f"the storage secret is in a repr: {shown}"


def test_replay_writes_the_chosen_offsets_once_and_never_touches_a_group(
    kafka_config, kafka_bootstrap_servers, spark_connect_remote, new_topic, tmp_path
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 40))
    out = tmp_path / "replays"
    replay = [
        "replay",
        "--bootstrap-servers",
        kafka_bootstrap_servers,
        "--topic",
        topic,
        "--output",
        str(out),
        "--spark-remote",
        spark_connect_remote,
    ]
    offsets = ["--start-offsets", '{"0": 5, "1": 10}', "--end-offsets", '{"0": 15, "1": 12}']

    dry = last_json(cli(*replay, *offsets, "--dry-run"))
    assert dry["dry_run"] and dry["planned_offsets"] == 12 and dry["records"] == 0, dry
    assert not (out / "_plans").exists() or not list((out / "_plans").iterdir()), "a dry run leaves no plan"

    done = last_json(cli(*replay, *offsets))
    assert done["records"] == 12 and done["mode"] == "replay", f"expected 12 replayed records, found {done}"
    again = last_json(cli(*replay, *offsets))
    assert again["records"] == 0 and again["notes"] == [f"already replayed as batch {done['batch_id']}"], again
    # Asked for again read another way, it is refused: it would not be the batch the output holds.
    otherwise = cli(*replay, *offsets, "--value-format", "string")
    assert_one_line_error(otherwise, f"already replayed into {out} as batch {done['batch_id']}, read otherwise")
    assert "value_format bytes there, string now" in otherwise.stderr, otherwise.stderr
    assert_exactly_once(Output(str(out)), {(topic, 0, o) for o in range(5, 15)} | {(topic, 1, o) for o in (10, 11)})


@pytest.mark.parametrize(
    "extra, expected",
    [
        ([], "a replay needs a range"),
        (["--whole-topic", "--start-offsets", '{"0": 1}'], "whole_topic replays everything"),
        (["--start-offsets", "[1, 2]"], "--start-offsets must be an object of partition -> offset"),
        (["--start-time", "yesterday"], "--start-time must be an ISO 8601 time"),
        (["--start-offsets", '{"0": 1}', "--start-time", "2026-01-01T00:00:00Z"], "either start/end offsets or"),
    ],
)
def test_a_bad_replay_range_is_one_line_and_leaves_nothing(extra, expected, kafka_bootstrap_servers, tmp_path):
    out = tmp_path / "replays"
    refused = cli(
        "replay", "--bootstrap-servers", kafka_bootstrap_servers, "--topic", "t", "--output", str(out), *extra
    )
    assert_one_line_error(refused, expected)
    assert refused.returncode == 2 and not out.exists(), (
        f"a refused replay must leave nothing, found {list(out.rglob('*'))}"
    )


def test_a_replay_reaching_deleted_offsets_is_refused_or_lands_what_is_left_with_its_gap(
    kafka_config, kafka_bootstrap_servers, spark_connect_remote, new_topic, tmp_path
):
    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from confluent_kafka.admin import AdminClient

    from kafka_batch_provider.output.store import BatchStore

    topic = new_topic(partitions=1)
    hour = 3_600_000
    base = 1_767_225_600_000  # 2026-01-01T00:00Z: three windows of ten records, an hour each
    produce(
        kafka_config, topic, [Record(0, f"v{n}".encode(), timestamp_ms=base + (n // 10) * hour + n) for n in range(30)]
    )
    admin = AdminClient(kafka_config)  # kept in a variable: the future needs its client alive
    deleted = admin.delete_records([KafkaTopicPartition(topic, 0, 15)], request_timeout=10)
    list(deleted.values())[0].result()  # offsets [0, 15) are gone: half of the middle window
    window = ["--start-time", "2026-01-01T01:00:00Z", "--end-time", "2026-01-01T02:00:00Z"]
    by_offsets = ["--start-offsets", '{"0": 10}', "--end-offsets", '{"0": 20}']
    for name, chosen in [("by-time", window), ("by-offsets", by_offsets)]:
        out = tmp_path / name
        args = ["replay", "--bootstrap-servers", kafka_bootstrap_servers, "--topic", topic, "--output", str(out)]
        args += ["--spark-remote", spark_connect_remote]
        refused = cli(*args, *chosen)
        assert_one_line_error(refused, "were deleted (retention or DeleteRecords) and its range reaches into them")
        assert "--on-data-loss=earliest" in refused.stderr, refused.stderr
        assert not out.exists() or not list(out.rglob("*.json")), f"{name}: a refused replay left files"
        result = last_json(cli(*args, *chosen, "--on-data-loss", "earliest"))
        assert result["records"] == 5, f"{name}: expected offsets 15..19, what is left of the window: {result}"
        entry = BatchStore(str(out)).log.entry(1)
        gap = [(g["start"], g["end"]) for g in entry["gaps"]]
        expected = [(0, 15)] if name == "by-time" else [(10, 15)]
        assert gap == expected and result["gaps"] == entry["gaps"], f"{name}: expected gap {expected}, found {gap}"
        assert sorted(dataset_keys(Output(str(out)))) == [(topic, 0, o) for o in range(15, 20)], name


def test_plan_and_run_of_a_table_per_topic_print_what_they_did_and_fail_for_a_table_they_could_not(
    kafka_config, kafka_bootstrap_servers, group_id, tmp_path
):
    from kafka_batch_provider.core.group_owner import commit_metadata
    from kafka_batch_provider.testing.producers import create_topics

    prefix = f"cliplan{os.getpid()}{group_id[-6:]}"
    good, taken = f"{prefix}.good", f"{prefix}.taken"
    create_topics(kafka_config, {good: 1, taken: 1})
    for topic in (good, taken):
        produce(kafka_config, topic, [Record(0, b"v%d" % i) for i in range(4)])
    # The group's offset of one topic was committed by another output: its table is refused, not adopted.
    tp = TopicPartition(taken, 0)
    KafkaOffsets(kafka_config, timeout=10).commit(group_id, {tp: None}, {tp: 2}, commit_metadata("b-other", "/else"))
    lake = tmp_path / "lake"
    common = ["--bootstrap-servers", kafka_bootstrap_servers, "--group", group_id]
    planned = cli(
        "plan", *common, "--topic-pattern", rf"{prefix}\..*", "--format", "delta", "--output", f"{lake}/{{topic}}"
    )

    assert planned.returncode != 0, f"expected a failure for the refused table, got exit 0: {planned.stdout[-500:]}"
    errors = [line for line in planned.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and f"1 of 2 table(s) not planned (the others were): topic {taken!r}" in errors[0], errors
    summary = json.loads(planned.stdout.strip().splitlines()[-1])
    assert list(summary["tables"]) == [good] and summary["tables"][good]["records"] == 4, summary["tables"]
    assert list(summary["failed"]) == [taken], summary["failed"]

    # run: the good table written and committed (its plan reused), the refused one named after.
    ran = cli(
        "run", *common, "--topic-pattern", rf"{prefix}\..*", "--format", "delta", "--output", f"{lake}/{{topic}}",
        "--spark-master", "local[1]", timeout=600,
    )  # fmt: skip
    errors = [line for line in ran.stderr.splitlines() if line.startswith("error: ")]
    assert ran.returncode != 0 and len(errors) == 1, f"expected one error line, got exit {ran.returncode}: {errors}"
    assert f"1 of 2 table(s) not ingested (the others were): topic {taken!r}" in errors[0], errors
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert (list(result["committed"]), result["rows"], list(result["failed"])) == ([good], 4, [taken]), result
    found = KafkaOffsets(kafka_config, timeout=10).committed_offsets(group_id, [TopicPartition(good, 0), tp])
    assert found == {TopicPartition(good, 0): 4, tp: 2}, f"expected the good table committed, the other left: {found}"
