"""Records that are valid Kafka but awkward: the product's documented, lossless behaviour.

* Keys and values that are not UTF-8, with ``--value-format string``: ``key`` and ``value``
  keep the exact bytes (keys are never decoded); ``value_string`` is Spark's cast, which
  replaces invalid sequences with U+FFFD. Nothing is refused, nothing is lost.
* A record larger than Kafka's default ``max.message.bytes`` (1 MB): read whole (the reader
  fetches at least one record whatever its size, up to librdkafka's
  ``receive.message.max.bytes``, 100 MB by default, raised with ``--kafka-config``).

One real ``kafka-batch run`` (on the worker's Spark Connect server) covers both.
"""

from __future__ import annotations

import uuid

import pyarrow.dataset as ds

from kafka_batch_provider.testing.producers import Record, create_topics, produce
from tests.bad_input.scene import Scene, cli

BAD_KEY = b"\xff\xfekey-\x80"
BAD_VALUE = b"caf\xc3\x28 \xe9t\xe9"  # an invalid two-byte sequence, then Latin-1 bytes
BIG_VALUE = bytes(range(256)) * (3 * 1024 * 1024 // 256)  # 3 MB, every byte value


def test_non_utf8_keys_and_values_and_a_3mb_record_are_kept_byte_for_byte(
    scene: Scene, spark_connect_remote: str, tmp_path
) -> None:
    topic = f"unusual-records-{uuid.uuid4().hex[:8]}"
    # Records over 1 MiB need the topic's leave on a real Kafka (tansu takes them as they come).
    create_topics(scene.kafka_config, {topic: 1}, topic_config={"max.message.bytes": 8 * 1024 * 1024})
    producer_config = {**scene.kafka_config, "message.max.bytes": 8 * 1024 * 1024}
    produce(
        producer_config,
        topic,
        [Record(0, BAD_VALUE, key=BAD_KEY), Record(0, BIG_VALUE, key=b"big"), Record(0, b"plain", key=b"k")],
    )
    out = tmp_path / "lake"
    result = cli(
        "run", "--bootstrap-servers", scene.bootstrap_servers, "--topic", topic, "--group", f"g-{topic}",
        "--output", str(out), "--value-format", "string", "--spark-remote", spark_connect_remote, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, f"expected the run to succeed, got exit {result.returncode}: {result.stderr[-1500:]}"
    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table().sort_by("offset")
    rows = table.select(["offset", "key", "value", "value_string"]).to_pylist()
    assert [r["offset"] for r in rows] == [0, 1, 2], f"expected offsets 0, 1, 2, found {[r['offset'] for r in rows]}"
    assert rows[0]["key"] == BAD_KEY, f"the non-UTF-8 key changed: {rows[0]['key']!r}"
    assert rows[0]["value"] == BAD_VALUE, f"the non-UTF-8 value changed: {rows[0]['value']!r}"
    assert "\ufffd" in rows[0]["value_string"], f"expected U+FFFD in value_string, found {rows[0]['value_string']!r}"
    assert rows[1]["value"] == BIG_VALUE, f"the 3 MB record came back as {len(rows[1]['value'] or b'')} bytes"
    assert rows[2]["value_string"] == "plain", f"expected 'plain', found {rows[2]['value_string']!r}"
