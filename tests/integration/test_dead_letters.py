"""``--on-bad-record dead-letter``: records whose value cannot be decoded are set aside whole, logged,
published and committed with their batch, exactly once, in each output format.

A real broker, the embedded schema registry, Spark ``local[2]``; the dead letters are read back by
DuckDB from their published folder, the data by each format's own reader.
"""

from __future__ import annotations

import json
import os

import duckdb
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_batch_provider.core.planning import PlanPolicy
from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.registry.reader_schema import ReaderSchemaRequest
from kafka_batch_provider.registry.settings import RegistrySettings
from kafka_batch_provider.spark.ingest import stage_with
from kafka_batch_provider.steps.commit import commit_batch
from kafka_batch_provider.steps.plan import plan_batch
from kafka_batch_provider.steps.write import write_batch
from kafka_batch_provider.testing.producers import Record, produce
from tests.integration.helpers import Output, TableOutput

pytestmark = pytest.mark.integration

READING = {"type": "record", "name": "Reading", "fields": [{"name": "id", "type": "long"}]}


def framed(registry_url: str, topic: str, ids: list[int]) -> list[bytes]:
    serialize = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(READING))
    return [serialize({"id": n}, SerializationContext(topic, MessageField.VALUE)) for n in ids]


def corrupt(good: bytes) -> dict[str, bytes]:
    """Values no decoder can read, each for its own reason."""
    return {
        "magic byte 0x07": b"\x07" + good[1:],
        "shorter than the wire format": good[:3],
        "schema id 987654": b"\x00" + (987654).to_bytes(4, "big") + good[5:],
        "schema id": good[:5] + b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",  # a varint that never ends
    }


def ingest(spark, kafka_config, store, group_id, topic, registry, publish=True):
    """plan -> write -> commit (``publish=False``: the write stops right after its log entry, as a
    crash there would, and the commit step finishes the publish)."""
    kafka = KafkaOffsets(kafka_config, timeout=10)
    request = ReaderSchemaRequest("avro", registry)
    plan = plan_batch(kafka, store, group_id, [topic], PlanPolicy(), reader_schema=request)
    options = WriteOptions(value_format="avro", on_bad_record="dead-letter")
    publish_for_real = BatchStore.publish
    if not publish:
        BatchStore.publish = lambda self, entry: None  # the writer dies after the commit point
    try:
        entry = write_batch(plan.plan, store, kafka_config, stage_with(spark, registry), options)
    finally:
        BatchStore.publish = publish_for_real
    commit_batch(kafka, store, plan.plan)
    return plan.plan, entry


def published_dead_letters(store: BatchStore) -> list[tuple]:
    root = store.data.path(store.sink.dead_letter_root)
    files = os.path.join(root, "*", "*.parquet")
    query = f"select * from read_parquet('{files}', hive_partitioning=true) order by \"offset\""
    return duckdb.sql(query).fetchall()


def test_undecodable_records_become_dead_letters_logged_published_and_committed_once(
    spark, kafka_config, new_topic, group_id, schema_registry, any_output
):
    topic = new_topic(partitions=1)
    registry = RegistrySettings(schema_registry)
    good = framed(schema_registry, topic, list(range(6)))
    bad = corrupt(good[0])
    values = [good[0], bad["magic byte 0x07"], good[1], bad["shorter than the wire format"], good[2]]
    values += [bad["schema id 987654"], good[3], bad["schema id"]]
    produce(kafka_config, topic, [Record(0, v, b"k%d" % i, [("h", b"v")]) for i, v in enumerate(values)])

    store = any_output.store()
    plan, entry = ingest(spark, kafka_config, store, group_id, topic, registry, publish=False)
    assert entry["rows"] == 4 and entry["dead_letters"]["rows"] == 4, f"expected 4 + 4, found {entry}"
    assert entry["ranges"][0]["dead_letters"] == 4 and entry["options"]["on_bad_record"] == "dead-letter"
    store = any_output.store()
    data = store.data.path(entry["dead_letters"]["location"])
    assert sorted(os.listdir(data)) == sorted(f["name"] for f in entry["dead_letters"]["files"]), (
        "the commit step must finish the publish of the dead letters the entry lists"
    )
    letters = published_dead_letters(store)
    offsets = [row[2] for row in letters]
    assert offsets == [1, 3, 5, 7], f"expected the dead letters at offsets 1, 3, 5, 7, found {offsets}"
    first = dict(zip(["topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers",
                      "schema_id", "error", "batch_id"], letters[0]))  # fmt: skip
    assert (first["topic"], first["key"], first["value"]) == (topic, b"k1", bad["magic byte 0x07"]), first
    assert first["headers"] == [{"key": "h", "value": b"v"}] and first["schema_id"] is None, first
    assert first["batch_id"] == plan.batch_id, f"the folder names the batch: {first}"
    for (reason, _), row in zip(
        [("magic byte 0x07", 1), ("shorter than the wire format", 3), ("schema id 987654", 5), ("schema id", 7)],
        letters,
    ):
        assert reason in row[9], f"offset {row[2]}: expected an error naming {reason!r}, found {row[9]!r}"
    record = store.commit_record(plan.seq, plan.batch_id)
    assert record["dead_letters"] == {f"{topic}:0": [4, 4]}, f"the commit record counts them: {record}"
    root = store.sink.dead_letter_root + "/"
    strays = [n for n in store.data.files_below("") if "_dead_letters/" in n and not n.startswith(root)]
    assert strays == [], f"staged dead letters were left behind: {strays}"

    # Only dead letters in the next batch: no data files, the dead letters still published once.
    produce(kafka_config, topic, [Record(0, bad["magic byte 0x07"]), Record(0, bad["schema id 987654"])])
    _, only_dead = ingest(spark, kafka_config, any_output.store(), group_id, topic, registry)
    assert only_dead["rows"] == 0 and only_dead["dead_letters"]["rows"] == 2, f"found {only_dead}"
    offsets = [row[2] for row in published_dead_letters(any_output.store())]
    assert offsets == [1, 3, 5, 7, 8, 9], f"each dead letter once, found offsets {offsets}"
    rows = any_output.read().to_pylist() if isinstance(any_output, TableOutput) else read_layout(any_output)
    assert sorted(r["id"] for r in rows) == [0, 1, 2, 3], f"the data holds the good records once: {rows}"


def read_layout(output: Output) -> list[dict]:
    files = os.path.join(output.uri, "batch_id=*", "*.parquet")
    return duckdb.sql(f"select id from read_parquet('{files}')").fetch_arrow_table().to_pylist()
