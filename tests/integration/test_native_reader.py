"""The native reader against the python reader, on a real Apache Kafka: equal Arrow tables, by construction.

Both readers run the same loop (``kafka_reader.read_range``) over their own consumer
(``python_consumer``: confluent-kafka's messages into Python lists; ``native_consumer``: librdkafka's
messages into Arrow buffers in C). Every case reads the same range of the same log with both and
requires equal tables (every column: key, value, topic, partition, offset, timestamp, its type,
headers) and equal read statistics (rows, first and last offset, position reached):

* generated records (hypothesis, derandomized): keys and values null, empty, small and large (up to
  200 KB), many and repeated headers with null and empty values, create timestamps; ranges starting
  and ending inside the log; small batch sizes, so one range takes many consume calls and fetches
  run past the range's end;
* a log-append-time topic (the broker's timestamps and their type);
* a transactional log with aborted transactions, read committed and uncommitted (markers and
  aborted records are never delivered, and the range still ends at its planned end);
* a start offset the broker has deleted: the same one-line refusal from both.

The native reader also runs every other reading test of the suite: it is the default reader, so the
fault and bad-input matrices, the real-Kafka logs (compaction, partitions added, transactions) and
every ingest read through it (the python reader is read by the tests that name it).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.errors import ReadFailedError
from kafka_batch_provider.kafka.config import LIBRDKAFKA_LOGGER
from kafka_batch_provider.spark import native_consumer
from kafka_batch_provider.spark.kafka_reader import ReadStats, read_range
from kafka_batch_provider.testing.producers import Record, create_topics, produce

pytestmark = [pytest.mark.integration, pytest.mark.check]


def new_name(kind: str) -> str:
    return f"native-{kind}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module", autouse=True)
def native_reader_installed():
    reason = native_consumer.why_not({})
    assert reason is None, f"expected the native reader installed here (make native), found: {reason}"


def read(reader: str, config: Mapping[str, Any], offset_range: OffsetRange, batch_size: int) -> tuple[pa.Table, dict]:
    stats = ReadStats(offset_range.topic, offset_range.partition, offset_range.start, offset_range.end, 0)
    batches = list(read_range(config, offset_range, batch_size, stall_timeout=30.0, stats=stats, reader=reader))
    table = pa.Table.from_batches(batches, schema=batches[0].schema) if batches else None
    assert stats.reader == reader and not stats.not_native, f"expected the {reader} reader to read, found {stats}"
    return table, {k: v for k, v in stats.to_dict().items() if k not in ("transient_errors", "reader")}


def assert_same_reads(config: Mapping[str, Any], offset_range: OffsetRange, batch_size: int = 10_000) -> pa.Table:
    """Both readers' tables and statistics for ``offset_range``, required equal; the table."""
    python, python_stats = read("python", config, offset_range, batch_size)
    native, native_stats = read("native", config, offset_range, batch_size)
    assert native_stats == python_stats, f"expected the python reader's statistics {python_stats}, found {native_stats}"
    if python is None or native is None:
        assert python is native is None, f"expected no rows from either, found python {python} and native {native}"
        return pa.table({})
    assert native.schema == python.schema, f"expected the schema\n{python.schema}\nfound\n{native.schema}"
    for name in python.column_names:
        expected, found = python.column(name).combine_chunks(), native.column(name).combine_chunks()
        if not found.equals(expected):
            row = next(i for i in range(len(expected)) if expected[i] != found[i])
            raise AssertionError(
                f"{offset_range}: column {name!r} differs first at row {row} (offset "
                f"{python.column('offset')[row]}): expected {str(expected[row])[:200]}, found {str(found[row])[:200]}"
            )
    return python


# -- generated records ------------------------------------------------------------------------------

payloads = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(min_size=1, max_size=64),
    st.integers(100_000, 200_000).map(lambda n: bytes(range(256)) * (n // 256)),
)
header_values = st.one_of(st.none(), st.just(b""), st.binary(min_size=1, max_size=32))
headers = st.lists(st.tuples(st.sampled_from(["a", "b", "", "trace-id", "é"]), header_values), max_size=12)
records = st.lists(
    st.builds(
        lambda key, value, hs, ts: Record(0, value, key=key, headers=tuple(hs), timestamp_ms=ts),
        payloads,
        payloads,
        headers,
        st.integers(1, 4_102_444_800_000),  # to 2100
    ),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=12,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    produced=records, cut=st.tuples(st.floats(0, 0.5), st.floats(0.5, 1)), batch_size=st.sampled_from([1, 3, 10_000])
)
def test_generated_records_read_the_same_with_both_readers(kafka_config, produced, cut, batch_size):
    topic = new_name("generated")
    # Any create timestamp is kept (Apache Kafka 4 refuses those over an hour ahead by default).
    create_topics(kafka_config, {topic: 1}, topic_config={"message.timestamp.after.max.ms": 2**63 - 1})
    produce(kafka_config, topic, produced)
    n = len(produced)
    start, end = int(cut[0] * n), max(int(cut[1] * n), int(cut[0] * n) + 1)
    table = assert_same_reads(kafka_config, OffsetRange(topic, 0, start, min(end, n)), batch_size)
    assert table.num_rows == min(end, n) - start, f"expected {min(end, n) - start} rows, found {table.num_rows}"
    assert table.column("value").to_pylist() == [r.value for r in produced[start : min(end, n)]], "values differ"


# -- timestamps, transactions, refusals ------------------------------------------------------------


def test_a_log_append_time_topic_reads_the_brokers_timestamps_the_same(kafka_config):
    topics = {"create": new_name("create-time"), "append": new_name("log-append-time")}
    create_topics(kafka_config, {topics["create"]: 1})
    create_topics(kafka_config, {topics["append"]: 1}, topic_config={"message.timestamp.type": "LogAppendTime"})
    kinds = {}
    for name, topic in topics.items():
        produce(kafka_config, topic, [Record(0, b"v%d" % i, timestamp_ms=1_000 + i) for i in range(20)])
        table = assert_same_reads(kafka_config, OffsetRange(topic, 0, 0, 20), batch_size=7)
        kinds[name] = set(table.column("timestampType").to_pylist())
        stamps = {t.timestamp() * 1000 for t in table.column("timestamp").to_pylist()}
        assert (min(stamps) > 1_000_000) == (name == "append"), f"{name}: unexpected timestamps {sorted(stamps)[:3]}"
    assert len(kinds["create"]) == len(kinds["append"]) == 1 and kinds["create"] != kinds["append"], (
        f"expected one timestamp type per topic, different, found {kinds}"
    )


def test_aborted_transactions_and_markers_read_the_same_committed_and_uncommitted(kafka_config):
    topic = new_name("transactions")
    create_topics(kafka_config, {topic: 1})
    producer = Producer({**kafka_config, "transactional.id": f"tx-{topic}", "logger": LIBRDKAFKA_LOGGER})
    producer.init_transactions(30)
    expected_committed = []
    for round_, commit in enumerate([True, False, True, False, False, True]):
        producer.begin_transaction()
        for i in range(5):
            value = b"%d-%d" % (round_, i)
            producer.produce(topic, value, key=b"k", headers=[("round", str(round_).encode())])
            expected_committed += [value] if commit else []
        producer.flush(30)  # in the log before the abort (an abort drops what is not sent yet)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    producer.flush(30)
    probe = Consumer({**kafka_config, "group.id": "probe", "logger": LIBRDKAFKA_LOGGER})
    _, end = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    probe.close()
    committed = assert_same_reads(
        {**kafka_config, "isolation.level": "read_committed"}, OffsetRange(topic, 0, 0, end), 4
    )
    assert committed.column("value").to_pylist() == expected_committed, "expected only the committed records"
    everything = assert_same_reads(
        {**kafka_config, "isolation.level": "read_uncommitted"}, OffsetRange(topic, 0, 0, end), 4
    )
    assert everything.num_rows == 30, f"expected all 30 records uncommitted, found {everything.num_rows}"


def test_a_deleted_start_offset_is_refused_in_the_same_line_by_both(kafka_config):
    topic = new_name("deleted")
    create_topics(kafka_config, {topic: 1})
    produce(kafka_config, topic, [Record(0, b"v") for _ in range(10)])
    admin = AdminClient({**kafka_config, "logger": LIBRDKAFKA_LOGGER})
    for future in admin.delete_records([TopicPartition(topic, 0, 5)], request_timeout=30).values():
        future.result(30)
    lines = {}
    for reader in ("python", "native"):
        with pytest.raises(ReadFailedError) as refused:
            list(read_range(kafka_config, OffsetRange(topic, 0, 0, 10), stall_timeout=30.0, reader=reader))
        lines[reader] = str(refused.value)
    assert lines["native"] == lines["python"], f"expected the python reader's line {lines['python']!r}, found {lines}"
    assert f"{topic}[0]: reading [0, 10) failed at offset 0" in lines["native"], lines


# -- a whole batch through spark-submit ------------------------------------------------------------


def run_batch_cli(bootstrap: str, topic: str, group: str, out: str, env: Mapping[str, str] | None = None):
    """``kafka-batch run`` of ``topic`` to the Parquet layout with the default reader; its output and log entry."""
    import json
    import os

    from kafka_batch_provider.output.formats import OutputSpec, open_store
    from tests.support import cli_runner

    args = ["run", "--bootstrap-servers", bootstrap, "--topic", topic, "--group", group, "--output", out]
    ran = cli_runner.run([*args, "--spark-master", "local[2]"], {**os.environ, **(env or {})}, timeout=300)
    assert ran.returncode == 0, f"kafka-batch run failed (exit {ran.returncode}):\n{ran.stderr[-3000:]}"
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    entry = open_store(OutputSpec(format="parquet", output=out)).log.entry(result["seq"])
    return ran, result, entry


def test_a_batch_reads_with_the_native_reader_and_its_log_entry_says_so(
    kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, [Record(i % 2, b"v%d" % i, key=b"k") for i in range(40)])
    ran, result, entry = run_batch_cli(kafka_bootstrap_servers, topic, group_id, str(tmp_path / "lake"))
    assert result["records"] == 40, result
    assert entry["options"]["reader"] == "native" and entry["options"].get("read_with") == {"native": 2}, (
        f"expected both slices read by the native reader, the entry's options say {entry['options']}"
    )
    assert "python reader" not in ran.stdout + ran.stderr, f"unexpected fallback:\n{ran.stderr[-2000:]}"


def test_without_the_native_package_a_batch_reads_with_the_python_reader_and_says_why(
    kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path
):
    # A package of the same name that fails to import, first on the path of the driver and its workers.
    hidden = tmp_path / "hidden" / "kafka_batch_native"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ImportError("kafka_batch_native is hidden by the test")\n')
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, [Record(i % 2, b"v%d" % i, key=b"k") for i in range(40)])
    ran, result, entry = run_batch_cli(
        kafka_bootstrap_servers, topic, group_id, str(tmp_path / "lake"), {"PYTHONPATH": str(hidden.parent)}
    )
    assert result["records"] == 40, result
    assert entry["options"].get("read_with") == {"python": 2}, f"expected the python reader, found {entry['options']}"
    said = ran.stdout + ran.stderr
    assert "2 of 2 slice(s) read with the python reader" in said, f"expected the batch to say so:\n{said[-3000:]}"
    assert "kafka_batch_native is hidden by the test" in said, f"expected the reason in one line:\n{said[-3000:]}"


def test_a_timestamp_beyond_microseconds_fails_both_readers_never_wraps(kafka_config):
    topic = new_name("far-timestamp")
    create_topics(kafka_config, {topic: 1}, topic_config={"message.timestamp.after.max.ms": 2**63 - 1})
    produce(kafka_config, topic, [Record(0, b"now"), Record(0, b"far", timestamp_ms=2**62)])
    for reader in ("python", "native"):
        with pytest.raises(OverflowError):
            list(read_range(kafka_config, OffsetRange(topic, 0, 0, 2), stall_timeout=30.0, reader=reader))
