"""A year of batches, measured (``make bench``'s ``year`` keys; issue 20).

* ``iceberg_metadata_bytes_per_batch``: how much an Iceberg table's metadata.json grows per
  batch at 2,000 partitions (offsets-only batches through the real sink: pyiceberg commits);
* ``files_per_100_batches``: a Delta table's data files after 100 small batches, before and
  after ``upkeep`` (compaction), and upkeep's seconds;
* ``soak``: ``--soak-batches`` batches (1,000) of plan -> write -> commit into the Parquet
  layout, each reading its records from the broker (the write step's real reader and task
  writer in this process, instead of a Spark job per batch: Spark's fixed cost is measured
  apart), upkeep (compaction) every 100 batches, the group deleted half-way (resumed from the
  log), then a replay of everything into a second output; every offset must be read back
  exactly once from both. The plan and commit steps' median seconds over the first and the
  last 100 batches, and around batch 10 and the last: their ratios show whether a step grows
  with the history.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_batch_provider.core.write_check import TaskReports
from kafka_batch_provider.output.formats import OutputSpec, open_store
from kafka_batch_provider.output.tables import KAFKA_SCHEMA


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def manifest(seq: int, offsets: dict[str, int], location: str | None = None, files: list | None = None) -> dict:
    previous = {"seq": seq - 1, "batch_id": f"b-{seq - 1:04d}"} if seq > 1 else None
    return {
        "format_version": 2, "seq": seq, "batch_id": f"b-{seq:04d}", "previous": previous, "mode": "incremental",
        "group_id": "bench", "offsets": offsets, "ranges": [], "rows": sum(f["rows"] for f in files or []),
        "location": location, "staging": location, "files": files or [],
    }  # fmt: skip


def iceberg_metadata_bytes_per_batch(work: Path, partitions: int = 2000, batches: int = 5) -> int:
    catalog = {"type": "sql", "uri": f"sqlite:///{work}/year-catalog.db", "warehouse": f"file://{work}/year-wh"}
    spec = OutputSpec(format="iceberg", table="bench.year", catalog_properties=catalog)
    sizes = []
    for seq in range(1, batches + 1):
        store = open_store(spec)
        assert store.log.append(manifest(seq, {f"t:{p}": seq * 10 for p in range(partitions)}))
        location = store.sink.table().metadata_location.removeprefix("file://")
        sizes.append(os.path.getsize(location))
    return round((sizes[-1] - sizes[0]) / (batches - 1))


def files_per_100_batches(work: Path, batches: int = 100) -> dict[str, Any]:
    from kafka_batch_provider.core.upkeep import UpkeepSettings
    from kafka_batch_provider.steps.upkeep import upkeep

    spec = OutputSpec(format="delta", output=str(work / "year-delta"))
    for seq in range(1, batches + 1):
        store = open_store(spec)
        folder = f"data/b-{seq:04d}/a"
        rows = 100
        columns = {f.name: pa.nulls(rows, f.type) for f in KAFKA_SCHEMA}
        columns.update(topic=pa.array(["t"] * rows), partition=pa.array([0] * rows, pa.int32()))
        columns["offset"] = pa.array(range((seq - 1) * rows, seq * rows), pa.int64())
        with store.data.write_stream(f"{folder}/part-0.parquet") as f:
            pq.write_table(pa.table(columns, schema=KAFKA_SCHEMA), f)
        size = store.data.file_sizes(folder)["part-0.parquet"]
        files = [{"name": "part-0.parquet", "bytes": size, "rows": rows}]
        assert store.log.append(manifest(seq, {"t:0": seq * rows}, folder, files))
    started = time.perf_counter()
    report = upkeep(open_store(spec), UpkeepSettings(retention_hours=1), progress=lambda line: None)
    return {
        "before": report.files_before,
        "after": report.files_after,
        "upkeep_seconds": round(time.perf_counter() - started, 3),
    }


def soak(config: dict, topic: str, work: Path, batches: int) -> dict[str, Any]:
    from collections import Counter

    from kafka_batch_provider.core.planning import PlanPolicy
    from kafka_batch_provider.core.upkeep import UpkeepSettings
    from kafka_batch_provider.kafka.client import KafkaOffsets
    from kafka_batch_provider.output.store import BatchStore
    from kafka_batch_provider.spark.slice_reader import read_slice
    from kafka_batch_provider.spark.task_writer import TaskWriter
    from kafka_batch_provider.steps.commit import commit_batch
    from kafka_batch_provider.steps.plan import plan_batch
    from kafka_batch_provider.steps.replay import plan_replay_batch
    from kafka_batch_provider.steps.upkeep import upkeep
    from kafka_batch_provider.steps.write import StagedBatch, write_batch
    from kafka_batch_provider.testing.producers import create_topics, produce, sample_records

    def stage(plan, store, kafka_config, options):
        """What the Spark tasks do, in this process: the real reader and task writer."""
        staging = store.new_staging(plan.batch_id)
        writer = TaskWriter(store.data.output, staging, store.data.storage_options)
        reports = []
        for piece in plan.readable_ranges:
            for batch in writer(read_slice(kafka_config, piece, None, 1.0, receipts=True, reader="native")):
                reports += [json.loads(r) for r in batch.column("report").to_pylist()]
        return StagedBatch(staging, TaskReports.merge(reports), "struct<offset:bigint>", counted_at_source=True)

    def offsets_read(output: Path) -> Counter:
        counts: Counter = Counter()
        for path in BatchStore(str(output)).sink.readable_files():
            counts.update(pq.read_table(path, columns=["offset"]).column("offset").to_pylist())
        return counts

    quiet = dict(progress=lambda line: None)
    create_topics(config, {topic: 1})
    kafka = KafkaOffsets(config)
    store = BatchStore(str(work / "soak"))
    plans, commits, files_before, files_after = [], [], [], []
    started = time.perf_counter()
    for n in range(batches):
        produce(config, topic, sample_records(1, 10, first_id=n * 10))
        if n == batches // 2:  # the group lost (deleted, or expired): the output's log resumes it
            kafka.admin.delete_consumer_groups(["bench-soak"], request_timeout=10)["bench-soak"].result()
        t0 = time.perf_counter()
        plan = plan_batch(kafka, store, "bench-soak", [topic], PlanPolicy(), **quiet).plan
        t1 = time.perf_counter()
        write_batch(plan, store, config, stage, **quiet)
        t2 = time.perf_counter()
        commit_batch(kafka, store, plan, **quiet)
        plans.append(t1 - t0)
        commits.append(time.perf_counter() - t2)
        if (n + 1) % 100 == 0:
            report = upkeep(store, UpkeepSettings(keep_batches=100), **quiet)
            files_before.append(report.files_before)
            files_after.append(report.files_after)
            say(f"soak: {n + 1}/{batches} batches, {time.perf_counter() - started:.0f}s, upkeep: {report.summary()}")
    counts = offsets_read(work / "soak")
    expected = set(range(batches * 10))
    replay = BatchStore(str(work / "soak-replay"))
    replayed = plan_replay_batch(kafka, replay, [topic], start_offsets={0: 0}, end_offsets={0: batches * 10}, **quiet)
    write_batch(replayed.plan, replay, config, stage, **quiet)
    replay_counts = offsets_read(work / "soak-replay")
    result = {
        "batches": batches,
        "log_entries": store.log.tail_seq(),
        "seconds": round(time.perf_counter() - started, 1),
        "exactly_once": set(counts) == expected and max(counts.values()) == 1,
        "replay_exactly_once": set(replay_counts) == expected and max(replay_counts.values()) == 1,
        "files_before_upkeep_median": statistics.median(files_before) if files_before else None,
        "files_after_upkeep_median": statistics.median(files_after) if files_after else None,
        "plan_seconds_first_100": round(statistics.median(plans[:100]), 4),
        "plan_seconds_last_100": round(statistics.median(plans[-100:]), 4),
        "commit_seconds_first_100": round(statistics.median(commits[:100]), 4),
        "commit_seconds_last_100": round(statistics.median(commits[-100:]), 4),
        # Batch 10's and the last batch's plan as medians of their neighbours (one run is noise).
        "plan_seconds_batch_10": round(statistics.median(plans[4:15]), 4),
        "plan_seconds_last_batch": round(statistics.median(plans[-11:]), 4),
    }
    result["plan_growth"] = round(result["plan_seconds_last_100"] / result["plan_seconds_first_100"], 2)
    result["commit_growth"] = round(result["commit_seconds_last_100"] / result["commit_seconds_first_100"], 2)
    result["plan_growth_batch_10_to_last"] = round(
        result["plan_seconds_last_batch"] / result["plan_seconds_batch_10"], 2
    )
    return result


def year_measures(config: dict, topic: str, work: Path, soak_batches: int) -> dict[str, Any]:
    say("a year of batches: Iceberg metadata per batch at 2,000 partitions ...")
    result: dict[str, Any] = {"iceberg_metadata_bytes_per_batch": iceberg_metadata_bytes_per_batch(work)}
    say(f"  {result['iceberg_metadata_bytes_per_batch']:,} bytes per batch")
    say("a year of batches: a Delta table's files after 100 batches, before and after upkeep ...")
    result["files_per_100_batches"] = files_per_100_batches(work)
    say(f"  {result['files_per_100_batches']}")
    if soak_batches >= 200:
        say(f"a year of batches: soak, {soak_batches} batches of plan -> write -> commit ...")
        result["soak"] = soak(config, f"{topic}-soak", work, soak_batches)
        say(f"  {result['soak']}")
    return result
