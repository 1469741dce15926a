"""The write step's driver half without Spark: a stage that stands in for the Spark tasks (the
real slice reader's receipts and the real task writer, only the Kafka fetch made up), then the
step's checks, log entry and publish on a local disk."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from kafka_batch_provider.core.offsets import PartitionOffsets
from kafka_batch_provider.core.planning import LogSlot, PlanPolicy, plan_incremental
from kafka_batch_provider.core.write_check import TaskReports
from kafka_batch_provider.errors import WriteCheckError
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.spark import kafka_reader
from kafka_batch_provider.spark.slice_reader import read_slice
from kafka_batch_provider.spark.task_writer import TaskWriter
from kafka_batch_provider.steps.write import StagedBatch, write_batch


def plan(end=5):
    states = [PartitionOffsets("t", 0, None, 0, end)]
    return plan_incremental("g", ["t"], states, PlanPolicy(), "read_committed", "now", slot=LogSlot(1, None))


def made_up_kafka(monkeypatch, stop_short: bool = False) -> None:
    """``read_range`` without a broker: the range's records, or with ``stop_short`` all but the
    last, the reader's position one short of the end (as a read that gave up would leave it)."""

    def read_range(kafka_config, offset_range, batch_size=0, poll_timeout=1.0, stall_timeout=1.0, stats=None, **_):
        offsets = list(range(offset_range.start, offset_range.end - (1 if stop_short else 0)))
        n = len(offsets)
        stamp = datetime(2026, 11, 24, tzinfo=timezone.utc)
        batch = pa.RecordBatch.from_pydict(
            {
                "key": [None] * n,
                "value": [f"v{o}".encode() for o in offsets],
                "topic": [offset_range.topic] * n,
                "partition": [offset_range.partition] * n,
                "offset": offsets,
                "timestamp": [stamp] * n,
                "timestampType": [0] * n,
                "headers": [None] * n,
            },
            schema=kafka_reader.KAFKA_ARROW_SCHEMA,
        )
        stats.count(batch)
        stats.position = offset_range.end - (1 if stop_short else 0)
        yield batch

    monkeypatch.setattr(kafka_reader, "read_range", read_range)


def stage(plan, store, kafka_config, options):
    """What the Spark tasks do, task by task, in this process."""
    staging = store.new_staging(plan.batch_id)
    data = store.data
    writer = TaskWriter(data.output, staging, data.storage_options)
    reports = []
    for piece in plan.readable_ranges:
        rows = writer(read_slice(kafka_config, piece, None, 1.0, receipts=True, reader="python"))
        reports += [json.loads(report) for batch in rows for report in batch.column("report").to_pylist()]
    return StagedBatch(staging, TaskReports.merge(reports), "struct<offset:bigint>", counted_at_source=True)


def test_what_the_tasks_staged_becomes_one_logged_and_published_batch(tmp_path, monkeypatch):
    made_up_kafka(monkeypatch)
    store, batch = BatchStore(tmp_path), plan()
    entry = write_batch(batch, store, {"bootstrap.servers": "127.0.0.1:9"}, stage)
    assert (entry["seq"], entry["rows"]) == (1, 5), f"expected entry 1 with 5 rows, found {entry}"
    assert store.log.tail()["batch_id"] == batch.batch_id, "expected the batch in the output's log"
    offsets = sorted(ds.dataset(tmp_path / f"batch_id={batch.batch_id}").to_table().column("offset").to_pylist())
    assert offsets == [0, 1, 2, 3, 4], f"expected every planned offset once in the published files, found {offsets}"
    again = write_batch(batch, store, {"bootstrap.servers": "127.0.0.1:9"}, stage)
    assert again["batch_id"] == batch.batch_id and store.log.tail_seq() == 1, "a logged batch is not written again"


def test_a_stage_whose_read_stopped_short_is_refused_and_nothing_is_logged(tmp_path, monkeypatch):
    made_up_kafka(monkeypatch, stop_short=True)
    store, batch = BatchStore(tmp_path), plan()
    with pytest.raises(WriteCheckError, match=batch.batch_id):
        write_batch(batch, store, {"bootstrap.servers": "127.0.0.1:9"}, stage)
    assert store.log.tail() is None, "expected no log entry after a refused write"
    assert not list(tmp_path.glob("batch_id=*")), "expected nothing published"


def replay(start: int, end: int):
    from kafka_batch_provider.core.offsets import OffsetRange
    from kafka_batch_provider.core.planning import plan_replay

    states = [PartitionOffsets("t", 0, None, 0, 100)]
    # Each planned while the log was empty: all of them planned entry 1, as replays run at once do.
    return plan_replay([OffsetRange("t", 0, start, end)], states, "read_committed", "now", slot=LogSlot(1, None))


def test_replays_planned_at_once_each_take_the_next_free_entry_and_land_once(tmp_path, monkeypatch):
    from kafka_batch_provider.output.store import load_plan_file

    made_up_kafka(monkeypatch)
    store = BatchStore(tmp_path)
    plans = [replay(0, 10), replay(10, 20), replay(20, 30)]
    paths = [store.save_plan(p) for p in plans]
    entries = [write_batch(p, store, {"bootstrap.servers": "127.0.0.1:9"}, stage) for p in plans]
    assert [e["seq"] for e in entries] == [1, 2, 3], f"expected entries 1, 2, 3, found {[e['seq'] for e in entries]}"
    assert [e["batch_id"] for e in entries] == [p.batch_id for p in plans], "each replay keeps its batch id"
    offsets = sorted(ds.dataset(tmp_path, partitioning="hive").to_table().column("offset").to_pylist())
    assert offsets == list(range(30)), f"expected offsets 0..29 once each, found {offsets}"
    moved = load_plan_file(paths[2])  # where the plan task's XCom names it: it moved to entry 3
    assert (moved.batch_id, moved.seq) == (plans[2].batch_id, 3), f"expected the plan at entry 3, found {moved}"
    again = write_batch(plans[2], store, {"bootstrap.servers": "127.0.0.1:9"}, stage)  # a cleared task
    assert again["seq"] == 3 and store.log.tail_seq() == 3, "a replay already logged is not written again"


def test_a_replay_that_loses_its_entry_while_publishing_takes_the_next(tmp_path, monkeypatch):
    made_up_kafka(monkeypatch)
    store = BatchStore(tmp_path)
    first, second = replay(0, 10), replay(10, 20)

    def stage_while_another_publishes(plan, store, kafka_config, options):
        staged = stage(plan, store, kafka_config, options)
        write_batch(first, store, kafka_config, stage)  # publishes into entry 1 after the second read
        return staged

    entry = write_batch(second, store, {"bootstrap.servers": "127.0.0.1:9"}, stage_while_another_publishes)
    assert (entry["seq"], entry["previous"]["batch_id"]) == (2, first.batch_id), f"found {entry}"
    offsets = sorted(ds.dataset(tmp_path, partitioning="hive").to_table().column("offset").to_pylist())
    assert offsets == list(range(20)), f"expected offsets 0..19 once each, found {offsets}"


def test_a_replay_overlapping_one_published_since_it_was_planned_is_refused(tmp_path, monkeypatch):
    from kafka_batch_provider.errors import PlanError

    made_up_kafka(monkeypatch)
    store = BatchStore(tmp_path)
    write_batch(replay(0, 10), store, {"bootstrap.servers": "127.0.0.1:9"}, stage)
    with pytest.raises(PlanError, match=r"overlaps .*published since this replay was planned"):
        write_batch(replay(5, 15), store, {"bootstrap.servers": "127.0.0.1:9"}, stage)
    assert store.log.tail_seq() == 1, "the refused replay must not be logged"
    offsets = sorted(ds.dataset(tmp_path, partitioning="hive").to_table().column("offset").to_pylist())
    assert offsets == list(range(10)), f"expected only the first replay's offsets, found {offsets}"
    assert not list((tmp_path / "_staging").glob("*")), "the refused replay's staged files must be removed"
