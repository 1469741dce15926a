"""Files near a target size (``--target-file-mb``), not one per Spark task: real broker, real Spark.

The first batch of an output has nothing to estimate its size by and keeps one task per slice;
from then on a small batch is written by one task (one file), and a large one rolls its files
at the target size.
"""

from __future__ import annotations

import random

import pytest

from kafka_batch_provider.testing.producers import Record, produce
from tests.integration.helpers import assert_exactly_once, offsets_of, run_batch

pytestmark = pytest.mark.integration


def batch_files(output, seq: int) -> list[dict]:
    entry = output.store().log.entry(seq)
    assert entry is not None, f"expected output log entry {seq}"
    return entry["files"]


def test_a_small_batch_over_many_partitions_writes_one_file(spark, kafka_config, new_topic, group_id, local_output):
    topic = new_topic(partitions=8)
    produce(kafka_config, topic, [Record(p, b"first %d" % i) for p in range(8) for i in range(5)])
    run_batch(spark, kafka_config, local_output, group_id, [topic])
    first = batch_files(local_output, 1)
    assert len(first) == 8, f"expected the first batch (no size to go by) to keep one file per slice, found {first}"
    assert local_output.store().log.entry(1)["options"]["tasks"] == 8, "the entry should record the 8 tasks"

    produce(kafka_config, topic, [Record(p, b"second %d" % i) for p in range(8) for i in range(5)])
    run_batch(spark, kafka_config, local_output, group_id, [topic])
    second = batch_files(local_output, 2)
    assert len(second) == 1, f"expected 80 small records of 8 partitions in one file, found {second}"
    assert_exactly_once(local_output, offsets_of(topic, {p: 10 for p in range(8)}))


def test_a_large_batch_rolls_its_files_at_the_target_size(spark, kafka_config, new_topic, group_id, local_output):
    topic = new_topic(partitions=1)
    noise = random.Random(7)
    produce(kafka_config, topic, [Record(0, noise.randbytes(1_000)) for _ in range(3_500)])  # ~3.5 MB, incompressible
    run_batch(spark, kafka_config, local_output, group_id, [topic], target_file_mb=1)
    files = batch_files(local_output, 1)
    sizes = sorted(f["bytes"] for f in files)
    assert len(files) >= 3, f"expected ~3.5 MB rolled into files of ~1 MB, found sizes {sizes}"
    assert sizes[-1] < 2 * 1024 * 1024, f"expected no file far above the 1 MB target, found sizes {sizes}"
    assert_exactly_once(local_output, offsets_of(topic, {0: 3_500}))


def test_max_tasks_packs_the_partitions_and_splits_a_hot_one(spark, kafka_config, new_topic, group_id, local_output):
    topic = new_topic(partitions=8)
    counts = {0: 60, **{p: 5 for p in range(1, 8)}}  # 95 offsets: partition 0 is more than a task's share
    produce(kafka_config, topic, [Record(p, b"r %d" % i) for p, n in counts.items() for i in range(n)])
    run_batch(spark, kafka_config, local_output, group_id, [topic], max_tasks=3)
    entry = local_output.store().log.entry(1)
    assert entry["options"]["tasks"] == 3, f"expected 3 reading tasks, the entry says {entry['options']}"
    rows = sorted(f["rows"] for f in entry["files"])
    assert len(rows) == 3 and rows[-1] <= 35, f"expected 3 files of about 32 rows (one a task), found rows {rows}"
    assert_exactly_once(local_output, offsets_of(topic, counts))
