"""A committed batch's metrics, with the lag it left: the entry's numbers and one look at Kafka."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kafka_batch_provider.core.metrics import Metric, batch_metrics, lag_metrics
from kafka_batch_provider.core.plan import OffsetPlan
from kafka_batch_provider.errors import KafkaBatchError
from kafka_batch_provider.kafka.client import KafkaOffsets

log = logging.getLogger(__name__)


def committed_batch_metrics(
    kafka: KafkaOffsets,
    plan: OffsetPlan,
    entry: Mapping[str, Any],
    output: str,
    timings: Mapping[str, float] | None = None,
    with_steps: bool = True,
) -> list[Metric]:
    """The batch's metrics (:func:`~kafka_batch_provider.core.metrics.batch_metrics`) and its topics'
    lag before (the plan's snapshot) and after the commit (the end offsets now). A broker that does
    not answer costs the lag metrics, never the batch."""
    found = batch_metrics(entry, output, timings, with_steps)
    snapshot = plan.extra.get("snapshot") or {}
    if not snapshot or not plan.group_id:
        return found
    committed = {tp.key: end for tp, end in plan.end_offsets().items()}
    try:
        ends = {tp.key: end for tp, end in kafka.log_end_offsets(list(plan.end_offsets())).items()}
    except KafkaBatchError as exc:
        log.warning("lag after batch %s not measured: %s", plan.batch_id, exc)
        return found
    chosen = {key: value for key, value in snapshot.items() if key in committed}
    return found + lag_metrics(plan.group_id, output, chosen, ends, committed)
