"""Bad flags, values and config of ``kafka-batch plan/run/lag``: one ``error:`` line, nothing changed.

Each row: the command (built from the scene), and what the one error line must say.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from kafka_batch_provider.dev.local_servers import free_port
from tests.bad_input.scene import Scene, cli, cli_refusal_problems

pytestmark = pytest.mark.check  # in make check's tier


@dataclass(frozen=True)
class Case:
    id: str
    args: Callable[[Scene], list[str]]
    expected: str


def run(s: Scene, *extra: str) -> list[str]:
    """``kafka-batch run`` of the scene's topic, group and lake, plus ``extra`` (later flags win)."""
    return ["run", "--bootstrap-servers", s.bootstrap_servers, "--topic", s.topic, "--group", s.group,
            "--output", str(s.lake), *extra]  # fmt: skip


def plan(s: Scene, *extra: str) -> list[str]:
    return ["plan", "--bootstrap-servers", s.bootstrap_servers, "--group", s.group, "--output", str(s.lake), *extra]


def upkeep(s: Scene, *extra: str) -> list[str]:
    """``kafka-batch upkeep`` of the scene's lake (it holds batches, plans and commit records)."""
    return ["upkeep", "--output", str(s.lake), *extra]


def lag(s: Scene, *extra: str) -> list[str]:
    return ["lag", "--bootstrap-servers", s.bootstrap_servers, "--group", s.group, "--topic", s.topic, *extra]


CASES = [
    # -- topics, partitions, group
    Case("unknown-topic", lambda s: plan(s, "--topic", "no-such-topic-here"), "unknown topic(s) 'no-such-topic-here'"),
    Case("unknown-partition", lambda s: run(s, "--partition", "7"), "has no partition(s) [7]"),
    Case("repeated-topic", lambda s: run(s, "--topic", s.topic), "given more than once"),
    Case("repeated-topic-lag", lambda s: lag(s, "--topic", s.topic), "given more than once"),
    Case("illegal-topic-name", lambda s: plan(s, "--topic", "orders and more"), "is not a legal Kafka topic name"),
    Case("empty-topic-name", lambda s: plan(s, "--topic", ""), "is not a legal Kafka topic name"),
    Case("empty-group", lambda s: run(s, "--group", ""), "consumer group id is required"),
    Case(
        "topic-pattern-not-a-regex",
        lambda s: plan(s, "--topic-pattern", "orders("),
        "--topic-pattern 'orders(' is not a regular expression",
    ),
    Case("topic-and-topic-pattern", lambda s: run(s, "--topic-pattern", "o.*"), "not allowed with argument"),
    Case(
        "new-topic-start-error",
        lambda s: plan(s, "--topic-pattern", "o.*", "--new-topic-start", "error"),
        "invalid choice: 'error'",
    ),
    Case("negative-partition", lambda s: run(s, "--partition", "-1"), "expected an integer >= 0, got -1"),
    Case("non-numeric-partition", lambda s: run(s, "--partition", "first"), "expected an integer >= 0, got 'first'"),
    # -- numbers: negative, non-numeric, nan, inf
    Case("max-records-zero", lambda s: run(s, "--max-records", "0"), "expected a positive integer, got 0"),
    Case("max-records-nan", lambda s: run(s, "--max-records", "nan"), "expected a positive integer, got 'nan'"),
    Case(
        "max-records-per-partition-negative",
        lambda s: run(s, "--max-records-per-partition", "-5"),
        "expected a positive integer, got -5",
    ),
    Case("timeout-nan", lambda s: run(s, "--timeout", "nan"), "argument --timeout: the value must be a positive"),
    Case("timeout-inf", lambda s: run(s, "--timeout", "inf"), "argument --timeout: the value must be a positive"),
    Case("timeout-negative", lambda s: plan(s, "--topic", s.topic, "--timeout", "-1"), "--timeout: the value must"),
    Case("timeout-zero", lambda s: lag(s, "--timeout", "0"), "--timeout: the value must be a positive"),
    Case("stall-timeout-nan", lambda s: run(s, "--stall-timeout", "nan"), "stall timeout must be a positive, finite"),
    Case("stall-timeout-inf", lambda s: run(s, "--stall-timeout", "inf"), "stall timeout must be a positive, finite"),
    Case("max-offsets-per-task-zero", lambda s: run(s, "--max-offsets-per-task", "0"), "max offsets per task"),
    Case(
        "table-per-topic-with-jvm-reader",
        lambda s: run(s, "--format", "delta", "--output", f"{s.lake}/{{topic}}", "--reader", "jvm"),
        "a table per topic is read and written in one pass by --reader=python",
    ),
    Case(
        "template-twice",
        lambda s: run(s, "--format", "delta", "--output", f"{s.lake}/{{topic}}/{{topic}}"),
        "must hold {topic} once to name a table per topic",
    ),
    Case("max-tasks-zero", lambda s: run(s, "--max-tasks", "0"), "--max-tasks must be a positive integer, got 0"),
    Case(
        "target-file-mb-zero", lambda s: run(s, "--target-file-mb", "0"), "--target-file-mb must be between 1 and 4096"
    ),
    Case("lag-stop-after-nan", lambda s: lag(s, "--stop-after", "nan"), "--stop-after: the value must be a positive"),
    Case("lag-retention-risk-above-one", lambda s: lag(s, "--retention-risk", "2"), "must be a fraction in (0, 1]"),
    Case("lag-window-zero", lambda s: lag(s, "--window", "0"), "argument --window: expected a positive integer"),
    # -- Kafka: broker, settings
    Case(
        "unreachable-broker",
        lambda s: run(s, "--bootstrap-servers", f"127.0.0.1:{free_port()}", "--timeout", "1"),
        "did not answer list_topics within 1s",
    ),
    Case("auto-commit", lambda s: run(s, "--kafka-config", "enable.auto.commit=true"), "enable.auto.commit=true"),
    Case(
        "auto-commit-in-config-file",
        lambda s: run(s, "--kafka-config-file", s.file("kafka.json", json.dumps({"enable.auto.commit": "TRUE"}))),
        "enable.auto.commit=true is not allowed",
    ),
    Case(
        "unknown-librdkafka-key",
        lambda s: run(s, "--kafka-config", "no.such.setting=1"),
        'Kafka configuration refused: No such configuration property: "no.such.setting"',
    ),
    Case(
        "bad-librdkafka-value",
        lambda s: run(s, "--kafka-config", "socket.timeout.ms=soon"),
        'Invalid value for configuration property "socket.timeout.ms"',
    ),
    Case("bad-isolation-level", lambda s: run(s, "--kafka-config", "isolation.level=dirty"), "isolation.level must be"),
    # -- KEY=VALUE pairs and config files
    Case("kafka-config-pair-without-equals", lambda s: run(s, "--kafka-config", "acks"), "--kafka-config expects key="),
    Case("kafka-config-pair-without-key", lambda s: run(s, "--kafka-config", "=1"), "--kafka-config expects key=value"),
    Case("spark-conf-pair-without-equals", lambda s: run(s, "--spark-conf", "spark.ui"), "--spark-conf expects key="),
    Case(
        "catalog-property-pair-without-equals",
        lambda s: run(s, "--catalog-property", "uri"),
        "--catalog-property expects key=value",
    ),
    Case(
        "storage-option-pair-without-equals",
        lambda s: run(s, "--storage-option", "anon"),
        "--storage-option expects key=value",
    ),
    Case(
        "kafka-config-file-missing",
        lambda s: run(s, "--kafka-config-file", str(s.root / "no-such.json")),
        "cannot read Kafka config file",
    ),
    Case(
        "kafka-config-file-not-json",
        lambda s: run(s, "--kafka-config-file", s.file("kafka.json", "{'acks': 1}")),
        "is not valid JSON",
    ),
    Case(
        "kafka-config-file-not-an-object",
        lambda s: run(s, "--kafka-config-file", s.file("kafka.json", "[1, 2]")),
        "Kafka config must be a JSON object",
    ),
    Case(
        "storage-options-file-missing",
        lambda s: run(s, "--storage-options-file", str(s.root / "no-such.json")),
        "cannot read storage options file",
    ),
    Case(
        "storage-options-file-not-json",
        lambda s: run(s, "--storage-options-file", s.file("storage.json", "key=AKIA")),
        "storage options file",
    ),
    # -- the output and how values are decoded
    Case("unknown-value-format", lambda s: run(s, "--value-format", "xml"), "argument --value-format: invalid choice"),
    Case(
        "bad-value-schema-ddl",
        lambda s: run(s, "--value-format", "json", "--value-schema", "id lon g,,"),
        "is not a Spark DDL schema",
    ),
    Case(
        "value-schema-without-json",
        lambda s: run(s, "--value-schema", "id long"),
        "--value-schema is only used with --value-format=json",
    ),
    Case("json-without-value-schema", lambda s: run(s, "--value-format", "json"), "--value-format=json needs"),
    # The scene's group feeds the scene's lake (its commits say so): a second output is refused for it.
    Case(
        "new-output-for-another-outputs-group",
        lambda s: run(s, "--output", str(s.root / "second-lake")),
        "was last committed by another output",
    ),
    Case(
        "unwritable-output",
        # A group of its own: the scene's feeds the scene's lake, and a real Kafka hands back the
        # commits' metadata, so a new output would be refused for the group first (tansu drops it).
        lambda s: run(s, "--output", "/proc/kafka-batch/lake", "--group", f"{s.group}-unwritable"),
        "cannot write _plans/",
    ),
    Case(
        "output-below-a-file",
        lambda s: run(s, "--output", str(s.file("a-file", "not a folder")) + "/lake"),
        "access refused",
    ),
    Case("hdfs-output", lambda s: run(s, "--output", "hdfs://namenode/lake"), "hdfs:// outputs are not supported"),
    Case(
        "unknown-storage-option",
        lambda s: run(s, "--output", "s3://lake/x", "--storage-option", "bogus_option=1"),
        "bad storage option for s3://lake/x",
    ),
    Case("partition-by-on-parquet", lambda s: run(s, "--partition-by", "date"), "--partition-by applies to"),
    Case(
        "iceberg-without-table",
        lambda s: run(s, "--format", "iceberg"),
        "--format=iceberg needs --table=NAMESPACE.NAME",
    ),
    # -- schema registry formats: refused before anything is planned (no registry needs to answer)
    Case(
        "avro-without-registry",
        lambda s: run(s, "--value-format", "avro"),
        "value format avro decodes with a schema registry: set --schema-registry-url",
    ),
    Case(
        "avro-plan-without-registry",
        lambda s: plan(s, "--topic", s.topic, "--value-format", "avro"),
        "value format avro decodes with a schema registry: set --schema-registry-url",
    ),
    Case(
        "registry-url-with-credentials",
        lambda s: run(s, "--value-format", "avro", "--schema-registry-url", "http://ingest:pw-123@127.0.0.1:8081"),
        "the schema registry URL carries credentials",
    ),
    # a slash too few or too many puts the credentials outside the URL's authority: still refused as such
    Case(
        "registry-url-one-slash-with-credentials",
        lambda s: run(s, "--value-format", "avro", "--schema-registry-url", "http:/ingest:pw-123@127.0.0.1:8081"),
        "the schema registry URL carries credentials",
    ),
    Case(
        "registry-url-three-slashes-with-credentials",
        lambda s: run(s, "--value-format", "avro", "--schema-registry-url", "http:///ingest:pw-123@127.0.0.1:8081"),
        "the schema registry URL carries credentials",
    ),
    Case(
        "registry-url-not-http",
        lambda s: run(s, "--value-format", "avro", "--schema-registry-url", "ftp://127.0.0.1:8081"),
        "is not an http:// or https:// URL",
    ),
    Case(
        "registry-settings-file-missing",
        lambda s: run(
            s,
            "--value-format",
            "avro",
            "--schema-registry-url",
            "http://127.0.0.1:8081",
            "--schema-registry-config-file",
            str(s.root / "no-such-registry.json"),
        ),  # fmt: skip
        "cannot read schema registry settings file",
    ),
    Case(
        "registry-settings-file-with-url",
        lambda s: run(
            s,
            "--value-format",
            "avro",
            "--schema-registry-url",
            "http://127.0.0.1:8081",
            "--schema-registry-config-file",
            s.file("registry.json", '{"url": "http://x:8081"}'),
        ),  # fmt: skip
        "the schema registry's URL belongs in --schema-registry-url (a connection: its host), not among",
    ),
    Case(
        "registry-settings-file-without-url",
        lambda s: run(s, "--value-format", "avro", "--schema-registry-config-file", s.file("registry.json", "{}")),
        "--schema-registry-url is required with a schema registry settings file",
    ),
    Case(
        "schema-version-zero",
        lambda s: run(
            s, "--value-format", "avro", "--schema-registry-url", "http://127.0.0.1:8081", "--value-schema-version", "0"
        ),  # fmt: skip
        "argument --value-schema-version: expected a positive integer, got 0",
    ),
    Case(
        "subject-without-registry-format",
        lambda s: run(s, "--value-subject", "orders-value"),
        "--value-subject is only used with a schema registry format",
    ),
    Case(
        "jvm-reader-with-avro",
        lambda s: run(s, "--reader", "jvm", "--value-format", "avro", "--schema-registry-url", "http://127.0.0.1:8081"),
        "--reader=jvm cannot decode avro values: use --reader=python",
    ),
    Case(
        "keep-raw-value-without-registry-format",
        lambda s: run(s, "--keep-raw-value"),
        "--keep-raw-value is only used with a schema registry format",
    ),
    Case(
        "dead-letters-without-registry-format",
        lambda s: run(s, "--on-bad-record", "dead-letter"),
        "--on-bad-record=dead-letter is only used with a schema registry format",
    ),
    Case("on-bad-record-unknown", lambda s: run(s, "--on-bad-record", "skip"), "invalid choice: 'skip'"),
    # -- keys in a registry format
    Case("key-format-json", lambda s: run(s, "--key-format", "json"), "argument --key-format: invalid choice: 'json'"),
    Case(
        "key-format-without-registry",
        lambda s: plan(s, "--topic", s.topic, "--key-format", "protobuf"),
        "key format protobuf decodes with a schema registry: set --schema-registry-url",
    ),
    Case(
        "key-subject-without-registry-format",
        lambda s: run(s, "--key-format", "string", "--key-subject", "orders-key"),
        "--key-subject is only used with a schema registry format (--key-format",
    ),
    Case(
        "registry-key-beside-json-values",
        lambda s: run(
            s,
            "--value-format",
            "json",
            "--value-schema",
            "id long",
            "--key-format",
            "avro",
            "--schema-registry-url",
            "http://127.0.0.1:8081",
        ),  # fmt: skip
        "--key-format=avro cannot go with --value-format=json",
    ),
    Case("lag-dead-letter-share-nan", lambda s: lag(s, "--dead-letter-share", "nan"), "must be a share in [0, 1]"),
    Case(
        "registry-unreachable",
        lambda s: run(
            s, "--value-format", "avro", "--schema-registry-url", f"http://127.0.0.1:{free_port()}", "--timeout", "1"
        ),  # fmt: skip
        "did not answer the latest version of",
    ),
    # -- upkeep: what would remove files in flight, or the newest batch's records
    Case("upkeep-retention-under-an-hour", lambda s: upkeep(s, "--retention-hours", "0.5"), "at least 1, got 0.5"),
    Case("upkeep-retention-nan", lambda s: upkeep(s, "--retention-hours", "nan"), "--retention-hours must be"),
    Case("upkeep-retention-inf", lambda s: upkeep(s, "--retention-hours", "inf"), "--retention-hours must be"),
    Case("upkeep-retention-words", lambda s: upkeep(s, "--retention-hours", "a week"), "invalid float value"),
    Case("upkeep-target-zero", lambda s: upkeep(s, "--target-file-mb", "0"), "expected a positive integer, got 0"),
    Case("upkeep-target-huge", lambda s: upkeep(s, "--target-file-mb", "9999"), "between 1 and 4096 (MB)"),
    Case("upkeep-keep-zero", lambda s: upkeep(s, "--keep-batches", "0"), "expected a positive integer, got 0"),
    Case("upkeep-no-output", lambda s: ["upkeep"], "--format=parquet needs --output"),
    # -- metrics receivers
    Case(
        "metrics-statsd-no-port", lambda s: run(s, "--metrics-statsd", "localhost"), "--metrics-statsd takes HOST:PORT"
    ),
    Case(
        "metrics-otlp-not-a-url",
        lambda s: run(s, "--metrics-otlp", "127.0.0.1:4318"),
        "--metrics-otlp takes the receiver's URL",
    ),
    # -- merged tables (--mode)
    Case("upsert-into-parquet", lambda s: run(s, "--mode", "upsert"), "--mode=upsert needs a table: --format=delta"),
    Case("changes-without-format", lambda s: run(s, "--mode", "changes"), "--mode=changes needs --change-format"),
    Case("merge-key-without-mode", lambda s: run(s, "--merge-key", "id"), "--merge-key, --order-by and --change"),
    Case(
        "merge-partitioned-by-date",
        lambda s: run(s, "--format", "delta", "--mode", "upsert", "--partition-by", "date"),
        "--partition-by partitions by the Kafka timestamp, which a merged table's rows do not keep",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_flag_is_one_line_and_changes_nothing(case: Case, scene: Scene, verdict) -> None:
    args = case.args(scene)
    before = scene.snapshot()
    result = cli(*args)
    verdict.judge(cli_refusal_problems(result, case.expected), before, scene.snapshot())
