"""A table per topic: the process dies after one table's batch is in its output and before the next's."""

from __future__ import annotations

import re
import uuid
from dataclasses import replace

import pytest

from kafka_batch_provider.testing.producers import create_topics, produce, sample_records
from tests.faults.harness import expect_exactly_once, run_cli
from tests.integration.helpers import group_offsets, offsets_of

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("lake", ["delta"], indirect=True)
def test_a_crash_between_two_tables_is_finished_by_the_next_run_without_a_duplicate(
    outcome, lake, kafka_config, group_id, spark_connect_remote
):
    prefix = f"tpc{uuid.uuid4().hex[:8]}"
    topics = [f"{prefix}.{name}" for name in ("a", "b", "c")]
    create_topics(kafka_config, {t: 2 for t in topics})
    for topic in topics:
        produce(kafka_config, topic, sample_records(2, 20))
    args = [
        "--bootstrap-servers", kafka_config["bootstrap.servers"], "--topic-pattern", re.escape(prefix) + r"\..*",
        "--group", group_id, "--spark-remote", spark_connect_remote, "--timeout", "10", "--format", "delta",
        "--output", lake.uri + "/{topic}", "--storage-options-file", str(lake.options_file),
    ]  # fmt: skip
    tables = {topic: replace(lake, uri=f"{lake.uri}/{topic}") for topic in topics}

    crashed = run_cli(args, lake.env(), fail_point="between-tables:kill")

    assert crashed.killed, f"expected the run killed at its fail point, got exit {crashed.process.returncode}"
    written = [t for t in topics if tables[t].log_entries()]
    assert written == topics[:1], f"expected only the first table written before the crash, found {written}"
    assert all(group_offsets(kafka_config, group_id, t, 2) == {0: None, 1: None} for t in topics), (
        "no table may be committed before every table was written"
    )
    # The next run commits the written table without reading it again and writes the other two once.
    finished = run_cli(args, lake.env()).result()

    repaired = sorted(t for t, facts in finished["tables"].items() if facts["repaired"])
    assert repaired == topics[:1], f"expected {topics[0]} finished without reading again: {finished['tables']}"
    for topic in topics:
        assert len(tables[topic].log_entries()) == 1, f"{topic}: expected one batch, {tables[topic].log_entries()}"
        assert group_offsets(kafka_config, group_id, topic, 2) == {0: 10, 1: 10}, topic
        expect_exactly_once(outcome, tables[topic], offsets_of(topic, {0: 10, 1: 10}))
