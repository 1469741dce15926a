"""Helpers for integration tests: run the protocol in-process and read the dataset back."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from kafka_batch_provider.batch_store import BatchStore
from kafka_batch_provider.kafka_offsets import KafkaOffsets
from kafka_batch_provider.planning import PlanPolicy
from kafka_batch_provider.protocol import PlanOutcome, commit_batch, plan_batch
from kafka_batch_provider.spark.ingest import write_batch
from kafka_batch_provider.spark.options import WriteOptions


def dataset_keys(output: Path) -> Counter:
    """How often each (topic, partition, offset) appears to a Parquet reader right now."""
    if not Path(output).exists():
        return Counter()
    dataset = ds.dataset(str(output), format="parquet", partitioning="hive")
    if not dataset.files:
        return Counter()
    table = dataset.to_table(columns=["topic", "partition", "offset"])
    return Counter(zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset"))))


def assert_exactly_once(output: Path, expected: set[tuple[str, int, int]]) -> None:
    seen = dataset_keys(output)
    doubled = {k: n for k, n in seen.items() if n > 1}
    assert not doubled, f"offsets seen more than once: {sorted(doubled)[:5]}"
    missing, extra = expected - set(seen), set(seen) - expected
    assert not missing and not extra, (
        f"expected {len(expected)} offsets; missing {sorted(missing)[:5]}, unexpected {sorted(extra)[:5]}"
    )


def run_batch(
    spark,
    kafka_config: dict[str, Any],
    output: Path,
    group_id: str,
    topics: list[str],
    policy: PlanPolicy = PlanPolicy(),
    partitions: list[int] | None = None,
    **write_options: Any,
) -> tuple[PlanOutcome, dict[str, int]]:
    """plan -> write -> commit, in-process, as ``kafka-batch run`` does with spark-submit."""
    kafka = KafkaOffsets(kafka_config, timeout=10)
    store = BatchStore(output)
    outcome = plan_batch(kafka, store, group_id, topics, policy, partitions)
    if not outcome.plan.ranges:
        return outcome, {}
    write_batch(spark, outcome.plan, str(output), kafka.kafka_config, WriteOptions(**write_options))
    return outcome, commit_batch(kafka, store, outcome.plan)
