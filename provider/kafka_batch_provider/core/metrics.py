"""What one committed batch says in numbers, as metrics a platform's monitoring takes. Pure.

Every name starts with ``kafka_batch.``; tags say the consumer group, the output and (where the
number is a topic's) the topic. The vocabulary follows the peers': kafka-delta-ingest's
``messages.*``/``delta.write.*``, Kafka Connect's ``sink-record-*`` and ``offset-commit-*``.

==========================================  =======  ===========================================
name                                        kind     what
==========================================  =======  ===========================================
``kafka_batch.records.read``                count    records read, per topic
``kafka_batch.offsets.committed``           count    offsets the batch moved the group by, per topic
``kafka_batch.rows.written``                count    rows the batch wrote (appended or merged)
``kafka_batch.bytes.written``               count    bytes of the batch's files
``kafka_batch.files.added``                 count    files the batch added
``kafka_batch.dead_letters``                count    records set aside as dead letters
``kafka_batch.merge.upserts`` / ``.deletes`` count    a merged table's applied changes
``kafka_batch.plan.seconds``                timing   the plan step
``kafka_batch.write.seconds``               timing   reading and writing (the Spark step)
``kafka_batch.commit.seconds``              timing   the Kafka commit
``kafka_batch.batches``                     count    1 per committed batch
``kafka_batch.lag.before``                  gauge    records behind when the batch was planned, per topic
``kafka_batch.lag.after``                   gauge    records behind right after its commit, per topic
``kafka_batch.lag.records``                 gauge    records behind at a lag health check, per topic
``kafka_batch.lag.health``                  gauge    the check's status: 0 OK, 1 WARN, 2 DEAD_LETTERS,
                                                     3 STALL, 4 STOP, 5 REWIND, 6 RETENTION_RISK,
                                                     7 DATA_LOSS (tag ``status``)
==========================================  =======  ===========================================

Tags: ``group`` (the consumer group), ``output`` (the table or folder), ``topic`` where the number
is one topic's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_batch_provider.core.lag_health import LagStatus
from kafka_batch_provider.core.manifest import dead_letter_count

PREFIX = "kafka_batch"
COUNT, GAUGE, TIMING = "count", "gauge", "timing"


@dataclass(frozen=True)
class Metric:
    name: str
    value: float
    kind: str = COUNT
    tags: Mapping[str, str] = field(default_factory=dict)


def batch_metrics(
    entry: Mapping[str, Any], output: str, timings: Mapping[str, float] | None = None, with_steps: bool = True
) -> list[Metric]:
    """The metrics of one committed batch (its log entry), tagged by group, output and topic.

    :param with_steps: with the steps' seconds; a table per topic sends them once for the run
        (:func:`step_metrics`): every table's entry holds the one Spark job's time.
    """
    base = {"group": str(entry.get("group_id") or "-"), "output": output}
    found: list[Metric] = [Metric(f"{PREFIX}.batches", 1, COUNT, base)]
    records: Counter[str] = Counter()
    offsets: Counter[str] = Counter()
    for r in entry.get("ranges", []):
        records[str(r["topic"])] += int(r.get("rows") or 0)
        offsets[str(r["topic"])] += max(0, int(r["end"]) - int(r["start"]))
    for topic in sorted(set(records) | set(offsets)):
        tags = {**base, "topic": topic}
        found.append(Metric(f"{PREFIX}.records.read", records[topic], COUNT, tags))
        found.append(Metric(f"{PREFIX}.offsets.committed", offsets[topic], COUNT, tags))
    files = entry.get("files") or []
    found += [
        Metric(f"{PREFIX}.rows.written", int(entry.get("rows") or 0), COUNT, base),
        Metric(f"{PREFIX}.bytes.written", sum(int(f.get("bytes") or 0) for f in files), COUNT, base),
        Metric(f"{PREFIX}.files.added", len(files), COUNT, base),
        Metric(f"{PREFIX}.dead_letters", dead_letter_count(entry), COUNT, base),
    ]
    merged = entry.get("merged") or {}
    for key in ("upserts", "deletes"):
        if key in merged:
            found.append(Metric(f"{PREFIX}.merge.{key}", int(merged[key]), COUNT, base))
    if with_steps:
        found += step_metrics(base["group"], output, {**(entry.get("timings") or {}), **(timings or {})})
    return found


def step_metrics(group: str, output: str, seconds: Mapping[str, float]) -> list[Metric]:
    """``plan.seconds``, ``write.seconds`` and ``commit.seconds`` of a run, of those ``seconds`` has."""
    found = []
    for step, keys in (
        ("plan", ("plan_seconds",)),
        ("write", ("spark_seconds", "read_write_seconds")),
        ("commit", ("commit_seconds",)),
    ):
        value = next((seconds[k] for k in keys if k in seconds), None)
        if value is not None:
            found.append(Metric(f"{PREFIX}.{step}.seconds", float(value), TIMING, {"group": group, "output": output}))
    return found


def statsd_lines(metrics: list[Metric]) -> list[str]:
    """DogStatsD lines (``name:value|c|#tag:value,...``), which StatsD servers without tags take as plain."""
    kinds = {COUNT: "c", GAUGE: "g", TIMING: "ms"}
    lines = []
    for m in metrics:
        value = m.value * 1000 if m.kind == TIMING else m.value
        text = f"{value:g}" if isinstance(value, float) else str(value)
        tags = ",".join(f"{k}:{clean(v)}" for k, v in sorted(m.tags.items()))
        lines.append(f"{m.name}:{text}|{kinds[m.kind]}" + (f"|#{tags}" if tags else ""))
    return lines


def clean(value: str) -> str:
    """A tag value without the characters DogStatsD's line format uses."""
    return "".join("_" if ch in "|,#: \n" else ch for ch in str(value))


def lag_metrics(
    group: str, output: str, snapshot: Mapping[str, Any], ends_after: Mapping[str, int], committed: Mapping[str, int]
) -> list[Metric]:
    """``lag.before`` (the plan's snapshot: ``{"topic:partition": [committed, log_start, log_end]}``)
    and ``lag.after`` (the end offsets read right after the commit, less the committed offsets), per topic."""
    before: Counter[str] = Counter()
    after: Counter[str] = Counter()
    for key, (was, log_start, log_end) in snapshot.items():
        topic = key.rpartition(":")[0]
        before[topic] += max(0, int(log_end) - int(was if was is not None else log_start))
    for key, end in ends_after.items():
        topic = key.rpartition(":")[0]
        after[topic] += max(0, int(end) - int(committed.get(key, end)))
    base = {"group": group, "output": output}
    return [
        Metric(f"{PREFIX}.lag.{when}", float(counts[topic]), GAUGE, {**base, "topic": topic})
        for when, counts in (("before", before), ("after", after))
        for topic in sorted(counts)
    ]


def health_metrics(report: Mapping[str, Any], output: str = "-") -> list[Metric]:
    """A lag health check's metrics (its ``HealthReport.to_dict()``): records behind per topic, and
    the status as a number (its severity, the order of :class:`~kafka_batch_provider.core.lag_health.LagStatus`)."""
    base = {"group": str(report.get("group_id") or "-"), "output": output}
    behind: Counter[str] = Counter()
    for p in report.get("partitions", []):
        behind[str(p["topic"])] += int(p.get("lag") or 0)
    status = LagStatus(report.get("status", "OK"))
    found = [Metric(f"{PREFIX}.lag.records", float(behind[t]), GAUGE, {**base, "topic": t}) for t in sorted(behind)]
    return [*found, Metric(f"{PREFIX}.lag.health", float(status.severity), GAUGE, {**base, "status": status.value})]
