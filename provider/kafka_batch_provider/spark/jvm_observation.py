"""Spark's JVM Kafka source, counted: its rows per planned range as they leave it.

Spark's source sends no receipts (the python reader's slices end with one each,
:mod:`kafka_batch_provider.spark.slice_reader`), so its rows are counted in the JVM on their way
to the writing tasks (``Dataset.observe``), and the write check compares what was written with
what was read for this reader too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, Observation

from kafka_batch_provider.core.plan import OffsetPlan
from kafka_batch_provider.core.write_check import merge_written
from kafka_batch_provider.errors import WriteCheckError
from kafka_batch_provider.spark.session_kind import functions_of, is_connect

#: Planned ranges up to which the JVM source's rows are counted per range: three aggregates a range,
#: each evaluated for every row, so a row costs O(ranges). Beyond, the rows are counted in total.
OBSERVED_RANGES = 64


def observed(df: DataFrame, plan: OffsetPlan) -> tuple[DataFrame, Any]:
    """The JVM source's rows, counted as they leave it (``Dataset.observe``, classic and Spark Connect).

    Spark's source sends no receipts; per planned range (up to :data:`OBSERVED_RANGES`; beyond, in
    total) its rows and their first and last offset are aggregated in the JVM on their way to the
    writing tasks, so the write check compares what was written with what was read for this reader too.
    """
    F = functions_of(df)
    metrics = []
    ranges = plan.readable_ranges
    if len(ranges) > OBSERVED_RANGES:
        metrics = [F.count(F.lit(1)).alias("rows")]
    for i, r in enumerate(ranges if len(ranges) <= OBSERVED_RANGES else ()):
        here = (F.col("topic") == r.topic) & (F.col("partition") == r.partition)
        metrics += [
            F.count_if(here).alias(f"rows_{i}"),
            F.min(F.when(here, F.col("offset"))).alias(f"first_{i}"),
            F.max(F.when(here, F.col("offset"))).alias(f"last_{i}"),
        ]
    name = f"kafka_batch_read_{plan.seq}"
    if is_connect(df):  # as for functions_of
        from pyspark.sql.connect.observation import Observation as ConnectObservation

        observation = ConnectObservation(name)
    else:
        observation = Observation(name)
    return df.observe(observation, *metrics), observation


def observed_receipts(
    plan: OffsetPlan, metrics: Mapping[str, Any], reports: list[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """The write check's receipts from :func:`observed`'s metrics: one per planned range, read to
    its end (Spark's source reads up to ``endingOffsets`` or fails: ``failOnDataLoss``).

    Counted in total (more than :data:`OBSERVED_RANGES` ranges), the receipts are the writers'
    own counts per partition, once the total read equals the total they wrote.

    :raises WriteCheckError: the source handed on a different number of rows than were written.
    """
    if "rows" in metrics:
        written = merge_written(w for report in reports for w in report.get("written", ()))
        total = sum(w["rows"] for w in written.values())
        if int(metrics["rows"]) != total:
            raise WriteCheckError(
                f"batch {plan.batch_id}: Spark's Kafka source read {metrics['rows']} rows but {total} were written"
            )
        found = [written.get((r.topic, r.partition), {}) for r in plan.readable_ranges]
        counts = [(w.get("rows", 0), w.get("min_offset"), w.get("max_offset")) for w in found]
    else:
        counts = [
            (metrics[f"rows_{i}"], metrics[f"first_{i}"], metrics[f"last_{i}"])
            for i in range(len(plan.readable_ranges))
        ]
    return [
        {
            "topic": r.topic,
            "partition": r.partition,
            "start": r.start,
            "end": r.end,
            "position": r.end,
            "rows": int(rows),
            "first_offset": first,
            "last_offset": last,
        }
        for r, (rows, first, last) in zip(plan.readable_ranges, counts)
    ]
