"""Records that cannot be merged into a table (``--mode upsert`` / ``changes``): the run fails in
one ``error:`` line naming the record and why, and nothing changes: no table commit, no deleted
keys, no group move. The batch's plan stays pending for a run that fixes the cause.

Each case: a topic of its own, ``kafka-batch run`` into a Delta table through the session's
Spark Connect server. A table that already merges by the Kafka key refuses a run naming another
key before anything is planned.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.testing.producers import Record, create_topics, produce
from tests.bad_input.scene import Scene, cli

#: id -> (the records, the run's merge flags, what the error line must say)
CASES: dict[str, tuple[list[Record], list[str], str]] = {
    "upsert-record-without-a-key": (
        [Record(0, b'{"id": 1}', b'{"id": 1}'), Record(0, b'{"id": 2}', None)],
        ["--mode", "upsert"],
        "@1: the record has no key (a null key or key column): it cannot name a row",
    ),
    "upsert-key-column-not-in-the-values": (
        [Record(0, b'{"id": 1, "name": "a"}', b"k1")],
        ["--mode", "upsert", "--merge-key", "customer_id"],
        "@0: key column 'customer_id' is not in the value's columns (id, name)",
    ),
    "changes-table-without-a-primary-key": (  # Debezium sends a null key for such a table
        [
            Record(
                0,
                json.dumps(
                    {
                        "before": None,
                        "after": {"id": 1, "name": "a"},
                        "op": "c",
                        "source": {"connector": "postgresql", "lsn": 5},
                    }
                ).encode(),
                None,
            )
        ],
        ["--mode", "changes", "--change-format", "debezium"],
        "@0: the record has no key (a null key or key column): it cannot name a row; for a source table without "
        "a primary key, name the value columns that identify a row with --merge-key",
    ),  # fmt: skip
    "changes-value-not-a-debezium-event": (
        [Record(0, b'{"id": 1, "name": "a"}', b'{"id": 1}')],
        ["--mode", "changes", "--change-format", "debezium"],
        "@0: the value is not a Debezium change event (it has no op and source)",
    ),
}


def run(scene: Scene, topic: str, table: Path, remote: str, *merge: str) -> subprocess.CompletedProcess:
    return cli(
        "run", "--bootstrap-servers", scene.bootstrap_servers, "--topic", topic, "--group", f"g-{topic}",
        "--format", "delta", "--output", str(table), "--spark-remote", remote, *merge, timeout=600,
    )  # fmt: skip


def merge_refusal_problems(result: subprocess.CompletedProcess, expected: str) -> list[str]:
    """A failed run: progress lines, then exactly one ``error:`` line (the last) saying ``expected``."""
    lines = result.stderr.strip().splitlines()
    if result.returncode == 0:
        return [f"expected a non-zero exit, got 0 (stderr {result.stderr.strip()[-300:]!r})"]
    if "Traceback" in result.stderr:
        return [f"expected no traceback, got {result.stderr.strip()[-800:]!r}"]
    errors = [line for line in lines if line.startswith("error: ")]
    if len(errors) != 1 or lines[-1] != errors[0]:
        return [f"expected one 'error: ...' line, the last, got {lines[-6:]!r}"]
    if expected not in errors[0]:
        return [f"expected the error line to say {expected!r}, got {errors[0]!r}"]
    return []


def table_state(table: Path) -> tuple[list[str], list[str]]:
    """The table's commits and its deleted keys' files (what a refused merge must not add to)."""
    log = sorted(p.name for p in (table / "_delta_log").glob("*.json")) if (table / "_delta_log").exists() else []
    deleted = table / "_kafka_batch" / "_deleted_keys"
    return log, sorted(p.name for p in deleted.glob("*")) if deleted.exists() else []


@pytest.mark.parametrize("case", [*CASES, "changed-merge-key-on-an-existing-table"])
def test_a_record_that_cannot_be_merged_fails_the_run_in_one_line_and_changes_nothing(
    case: str, scene: Scene, verdict, spark_connect_remote: str, tmp_path
) -> None:
    topic = f"unmergeable-{uuid.uuid4().hex[:8]}"
    create_topics(scene.kafka_config, {topic: 1})
    table = tmp_path / "table"
    if case in CASES:
        records, merge, expected = CASES[case]
        produce(scene.kafka_config, topic, records)
    else:  # a table merged by the Kafka key, then a run that names a value column as the key
        produce(scene.kafka_config, topic, [Record(0, json.dumps({"id": 1}).encode(), b'{"id": 1}')])
        first = run(scene, topic, table, spark_connect_remote, "--mode", "upsert")
        assert first.returncode == 0, f"the first, good run failed: {first.stderr[-1500:]}"
        produce(scene.kafka_config, topic, [Record(0, json.dumps({"id": 2}).encode(), b'{"id": 2}')])
        merge = ["--mode", "upsert", "--merge-key", "id"]
        expected = "a table keeps its mode, merge key and ordering"
    before = (
        scene.snapshot(),
        table_state(table),
        scene.kafka.committed_offsets(f"g-{topic}", [TopicPartition(topic, 0)]),
    )
    result = run(scene, topic, table, spark_connect_remote, *merge)
    after = (
        scene.snapshot(),
        table_state(table),
        scene.kafka.committed_offsets(f"g-{topic}", [TopicPartition(topic, 0)]),
    )
    verdict.judge(merge_refusal_problems(result, expected), before, after)
