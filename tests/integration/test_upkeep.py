"""Upkeep (``kafka-batch upkeep``, ``steps/upkeep.py``) on real tables and the Parquet layout:
fewer files, old control files gone, and the offsets kept: the next batch continues exactly
once, the log still lists every batch.

Real broker, Spark ``local[2]`` in this process, delta-rs and pyiceberg on a local disk. Two
hours cannot pass in a test: files are backdated (delta-rs's ``vacuum`` reads their times), and
the Iceberg step runs with its clock moved two hours on (pyiceberg's expiry takes the cutoff
from us).
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from kafka_batch_provider.core.planning import PlanPolicy
from kafka_batch_provider.core.upkeep import UpkeepSettings
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.output.store import COMMITS, PLANS
from kafka_batch_provider.steps.plan import plan_batch
from kafka_batch_provider.steps.upkeep import upkeep
from kafka_batch_provider.testing.producers import produce, sample_records
from tests.integration.helpers import (
    Output,
    assert_exactly_once,
    group_offsets,
    offsets_of,
    run_batch,
    write_without_commit,
)
from tests.integration.test_cli import cli, last_json
from tests.integration.test_output_log import delete_group
from tests.integration.test_tables import make_table

pytestmark = pytest.mark.integration

TWO_HOURS = 2 * 3600


def backdate(root: str, folder: str, seconds: float = TWO_HOURS) -> int:
    """Set every file's time below ``root/folder`` back by ``seconds``; how many files."""
    count = 0
    for dirpath, _, names in os.walk(os.path.join(root, folder)):
        for name in names:
            path = os.path.join(dirpath, name)
            then = os.path.getmtime(path) - seconds
            os.utime(path, (then, then))
            count += 1
    return count


def batches(spark, kafka_config, output, group_id, topic, count: int, partitions: int = 2, per_batch: int = 6) -> None:
    for i in range(count):
        produce(kafka_config, topic, sample_records(partitions, per_batch, first_id=i * per_batch))
        run_batch(spark, kafka_config, output, group_id, [topic])


def delta_files(output) -> list[str]:
    import pyarrow as pa

    return pa.table(output.store().sink.table().get_add_actions(flatten=True)).column("path").to_pylist()


def test_delta_upkeep_compacts_cleans_the_log_and_the_next_batch_continues_exactly_once(
    spark, kafka_config, new_topic, group_id, request, tmp_path
):
    output = make_table(request, tmp_path, "delta", "local")
    topic = new_topic(partitions=2)
    batches(spark, kafka_config, output, group_id, topic, 4)
    # A failed attempt's files, hours old: no commit names them.
    os.makedirs(f"{output.uri}/data/b-failed/0000", exist_ok=True)
    with open(f"{output.uri}/data/b-failed/0000/part-0.parquet", "wb") as f:
        f.write(b"PAR1 not a real file")
    backdate(output.uri, "data/b-failed")
    before = delta_files(output)
    # Forget old commits once checkpointed: the batches stay known from their saved manifests.
    output.store().sink.table().alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    plans_before = len(os.listdir(f"{output.uri}/_kafka_batch/{PLANS}"))

    upkeep_args = [
        "upkeep",
        "--format",
        "delta",
        "--output",
        output.uri,
        "--keep-batches",
        "1",
        "--retention-hours",
        "1",
    ]
    dry = last_json(cli(*upkeep_args, "--dry-run"))
    assert delta_files(output) == before, "a dry run changes nothing"
    assert len(os.listdir(f"{output.uri}/_kafka_batch/{PLANS}")) == plans_before, "a dry run prunes nothing"
    assert (dry["files_before"], dry["compacted_files"], dry["removed_files"]) == (len(before), len(before), 1), dry

    result = cli(*upkeep_args)
    done = last_json(result)
    after = delta_files(output)
    assert (done["files_before"], done["files_after"], len(after)) == (len(before), 1, 1), (
        f"expected {len(before)} files compacted into 1, found {done}"
    )
    assert (done["removed_files"], done["pruned_plans"], done["pruned_commit_records"]) == (1, 3, 3), done
    assert not os.path.exists(f"{output.uri}/data/b-failed/0000/part-0.parquet"), "the failed attempt's file is gone"
    assert "upkeep of delta output" in result.stderr.splitlines()[-1], result.stderr
    assert len(os.listdir(f"{output.uri}/_kafka_batch/_batches")) == 4, "saved manifests are the forgotten log"

    assert [e["seq"] for e in output.store().log.entries()] == [1, 2, 3, 4], "the log still lists every batch"
    produce(kafka_config, topic, sample_records(2, 6, first_id=24))
    _, committed = run_batch(spark, kafka_config, output, group_id, [topic])
    assert committed == {f"{topic}:0": 15, f"{topic}:1": 15}, committed
    assert output.store().log.tail()["seq"] == 5
    assert_exactly_once(output, offsets_of(topic, {0: 15, 1: 15}))


def test_a_delta_batch_whose_files_upkeep_compacted_away_is_still_committed(
    spark, kafka_config, new_topic, group_id, request, tmp_path
):
    output = make_table(request, tmp_path, "delta", "local")
    topic = new_topic(partitions=1)
    batches(spark, kafka_config, output, group_id, topic, 1, partitions=1)
    produce(kafka_config, topic, sample_records(1, 5, first_id=100))
    pending = write_without_commit(spark, kafka_config, output, group_id, [topic])  # its Kafka commit never ran
    entry = output.store().log.tail()
    upkeep(output.store(), UpkeepSettings(retention_hours=1))
    for name in (f["name"] for f in entry["files"]):  # what vacuum does once the retention has passed
        os.remove(f"{output.uri}/{entry['location']}/{name}")

    _, committed = run_batch(spark, kafka_config, output, group_id, [topic])  # the plan step repairs first
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: 11}, f"batch {pending.batch_id} must be committed"
    assert committed == {}, f"nothing new to read after the repair, found {committed}"
    assert_exactly_once(output, offsets_of(topic, {0: 11}))


def test_iceberg_upkeep_expires_snapshots_removes_orphans_and_keeps_the_offsets(
    spark, kafka_config, new_topic, group_id, request, tmp_path, monkeypatch
):
    from kafka_batch_provider.output import iceberg_upkeep

    output = make_table(request, tmp_path, "iceberg", "local")
    topic = new_topic(partitions=2)
    batches(spark, kafka_config, output, group_id, topic, 3)
    store = output.store()
    orphan = "data/b-failed/0000/part-0.parquet"
    with store.data.write_stream(orphan) as f:
        f.write(b"PAR1 not a real file")
    snapshots = len(store.sink.table().snapshots())
    metadata_before = len(store.data.files_below("metadata"))

    real_time = time.time
    monkeypatch.setattr(iceberg_upkeep.time, "time", lambda: real_time() + TWO_HOURS)
    report = upkeep(output.store(), UpkeepSettings(retention_hours=1, keep_batches=2))

    table = output.store().sink.table()
    assert (report.expired_snapshots, len(table.snapshots())) == (snapshots - 1, 1), report
    assert store.data.exists(orphan) is False and report.removed_files > 1, report
    metadata_after = len(store.data.files_below("metadata"))
    assert metadata_after < metadata_before, f"expired snapshots' files stay: {metadata_before} -> {metadata_after}"
    assert output.read(["offset"]).num_rows == 18, "every file the table names is still there"
    logged = sum(len(e["files"]) for e in output.store().log.entries())
    assert report.files_before == report.files_after == logged and "cannot compact" in report.notes[0], report
    assert [e["seq"] for e in output.store().log.entries()] == [1, 2, 3], "expired batches stay in the log"
    monkeypatch.undo()
    produce(kafka_config, topic, sample_records(2, 6, first_id=18))
    _, committed = run_batch(spark, kafka_config, output, group_id, [topic])
    assert committed == {f"{topic}:0": 12, f"{topic}:1": 12}, committed
    assert_exactly_once(output, offsets_of(topic, {0: 12, 1: 12}))


def test_parquet_upkeep_prunes_old_control_files_and_failed_attempts_only(
    spark, kafka_config, new_topic, group_id, tmp_path
):
    output = Output(str(tmp_path / "lake"))
    topic = new_topic(partitions=1)
    batches(spark, kafka_config, output, group_id, topic, 4, partitions=1)
    os.makedirs(f"{output.uri}/_staging/b-failed.0000", exist_ok=True)
    for name in ("part-0.parquet", "part-1.parquet"):
        with open(f"{output.uri}/_staging/b-failed.0000/{name}", "wb") as f:
            f.write(b"x")
    backdate(output.uri, "_staging")
    os.makedirs(f"{output.uri}/_staging/b-recent.0000", exist_ok=True)  # a batch in flight, minutes old
    open(f"{output.uri}/_staging/b-recent.0000/part-0.parquet", "wb").close()
    # A batch planned and being written for hours (a long catch-up): its files are old, yet in flight.
    produce(kafka_config, topic, sample_records(1, 3, first_id=24))
    pending = plan_batch(KafkaOffsets(kafka_config), output.store(), group_id, [topic], PlanPolicy()).plan
    os.makedirs(f"{output.uri}/_staging/{pending.batch_id}.0000", exist_ok=True)
    open(f"{output.uri}/_staging/{pending.batch_id}.0000/part-0.parquet", "wb").close()
    backdate(output.uri, f"_staging/{pending.batch_id}.0000")

    report = upkeep(output.store(), UpkeepSettings(retention_hours=1, keep_batches=2))

    # Removed: the failed attempt's 2 files, and the 3 small batches compaction replaced.
    assert (report.pruned_plans, report.pruned_commit_records, report.removed_files) == (2, 2, 2 + 3), report
    assert (report.files_before, report.files_after) == (4, 2), report
    left = sorted(os.listdir(f"{output.uri}/_staging"))
    assert left == sorted(["b-recent.0000", f"{pending.batch_id}.0000"]), f"only the failed attempt goes: {left}"
    seqs = sorted(int(n.split("-")[0]) for n in os.listdir(f"{output.uri}/{COMMITS}"))
    assert seqs == [3, 4], f"the newest two batches' commit records stay, found {seqs}"
    outcome, committed = run_batch(spark, kafka_config, output, group_id, [topic])
    assert outcome.plan.batch_id == pending.batch_id and committed == {f"{topic}:0": 27}, committed
    assert_exactly_once(output, offsets_of(topic, {0: 27}))


def test_a_delta_batch_partly_replaced_by_a_later_commit_is_published_only_while_its_named_files_are_there(
    request, tmp_path
):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from kafka_batch_provider.errors import ManifestError
    from kafka_batch_provider.output.tables import KAFKA_SCHEMA
    from tests.integration.test_tables import staged_attempt

    output = make_table(request, tmp_path, "delta", "local")
    entry = staged_attempt(output, "b-1", "aaaa", 5)  # part-0: offsets 0-4
    columns = {f.name: pa.nulls(5, f.type) for f in KAFKA_SCHEMA}
    columns.update(topic=pa.array(["t"] * 5), partition=pa.array([0] * 5, pa.int32()))
    columns["offset"] = pa.array(range(5, 10), pa.int64())
    pq.write_table(pa.table(columns, schema=KAFKA_SCHEMA), f"{output.uri}/data/b-1/aaaa/part-1.parquet")
    size = os.path.getsize(f"{output.uri}/data/b-1/aaaa/part-1.parquet")
    entry["files"].append({"name": "part-1.parquet", "bytes": size, "rows": 5})
    entry.update(
        rows=10, offsets={"t:0": 10}, ranges=[{"topic": "t", "partition": 0, "start": 0, "end": 10, "rows": 10}]
    )
    assert output.store().log.append(entry) is True
    # A later commit that is not a batch rewrites only part-0 (as optimize does with the small
    # files of a batch whose other file is large); vacuum then deletes the replaced file.
    DeltaTable(output.uri).delete('"offset" = 0')
    os.remove(f"{output.uri}/data/b-1/aaaa/part-0.parquet")

    store = output.store()
    store.check_published(store.log.tail())  # part-0 left the table; part-1 is in place
    os.remove(f"{output.uri}/data/b-1/aaaa/part-1.parquet")  # still named by the table: really lost
    with pytest.raises(ManifestError) as refused:
        output.store().check_published(output.store().log.tail())
    assert "2 of its 2 file(s) are missing" in str(refused.value), str(refused.value)


def log_keys(output) -> Counter:
    """How often each (topic, partition, offset) appears to a reader that follows the log."""
    import pyarrow.parquet as pq

    found: Counter = Counter()
    fs = output.location.fs
    for uri in output.store().sink.readable_files():
        with fs.open(uri, "rb") as f:
            table = pq.read_table(f, columns=["topic", "partition", "offset"])
        found.update(zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset"))))
    return found


def assert_log_readers_see_exactly_once(output, expected: set) -> None:
    found = log_keys(output)
    twice = sorted(k for k, n in found.items() if n > 1)
    missing, extra = expected - set(found), set(found) - expected
    assert not (twice or missing or extra), (
        f"expected {len(expected)} offsets once through the log; twice {twice[:3]}, missing {sorted(missing)[:3]}, "
        f"unexpected {sorted(extra)[:3]}"
    )


def data_folders(output) -> list[str]:
    return sorted(n for n in output.location.list_names("") if n.startswith("batch_id="))


def test_parquet_compaction_rewrites_small_batches_and_the_offsets_hold(
    spark, kafka_config, new_topic, group_id, output
):
    topic = new_topic(partitions=2)
    batches(spark, kafka_config, output, group_id, topic, 5)  # 3 records per partition each
    store = output.store()
    newest = store.log.tail()
    logged = sum(len(e["files"]) for e in store.log.entries())

    report = upkeep(store, UpkeepSettings(keep_batches=10))

    kept = len(newest["files"])  # the newest batch is never compacted: the next write reads it
    assert (report.files_before, report.compacted_files, report.written_files) == (logged, logged - kept, 1), report
    assert report.files_after == 1 + kept, f"expected the compacted file and the newest batch's, found {report}"
    folders = data_folders(output)
    assert len(folders) == 2 and folders[1].startswith("batch_id=compaction-000001-"), folders
    assert_exactly_once(output, offsets_of(topic, {0: 15, 1: 15}))
    assert_log_readers_see_exactly_once(output, offsets_of(topic, {0: 15, 1: 15}))
    assert [e["seq"] for e in output.store().log.entries()] == [1, 2, 3, 4, 5], "compaction never touches the log"
    if output.location.is_local:  # the CLI reaches the S3 server only with an options file
        table = last_json(cli("table", "--output", output.uri))
        assert [b["seq"] for b in table["batches"]] == [1, 2, 3, 4, 5], table

    again = upkeep(output.store(), UpkeepSettings(keep_batches=10))
    assert (again.compacted_files, again.files_after) == (0, report.files_after), f"nothing new to compact: {again}"

    # The next batch, then a deleted group: both continue from the log, exactly once.
    produce(kafka_config, topic, sample_records(2, 6, first_id=30))
    _, committed = run_batch(spark, kafka_config, output, group_id, [topic])
    assert committed == {f"{topic}:0": 18, f"{topic}:1": 18}, committed
    delete_group(kafka_config, group_id)
    produce(kafka_config, topic, sample_records(2, 4, first_id=36))
    outcome, committed = run_batch(spark, kafka_config, output, group_id, [topic])
    assert [(r.start, r.end) for r in outcome.plan.readable_ranges] == [(18, 20), (18, 20)], outcome.plan
    assert committed == {f"{topic}:0": 20, f"{topic}:1": 20}, committed

    # The compaction's small file is merged again with the batches since (the newest stays).
    third = upkeep(output.store(), UpkeepSettings(keep_batches=10))
    assert third.written_files == 1 and len(data_folders(output)) == 2, (third, data_folders(output))
    assert_exactly_once(output, offsets_of(topic, {0: 20, 1: 20}))
    assert_log_readers_see_exactly_once(output, offsets_of(topic, {0: 20, 1: 20}))


@pytest.mark.parametrize("point", ["compaction-before-record", "compaction-after-record"])
def test_a_crash_mid_compaction_loses_and_doubles_nothing_for_log_readers_and_the_next_upkeep_finishes_it(
    point, spark, kafka_config, new_topic, group_id, local_output
):
    topic = new_topic(partitions=2)
    batches(spark, kafka_config, local_output, group_id, topic, 4)
    expected = offsets_of(topic, {0: 12, 1: 12})
    before = data_folders(local_output)

    crashed = cli("upkeep", "--output", local_output.uri, env={"KAFKA_BATCH_FAIL_POINT": f"{point}:kill"})

    assert crashed.returncode == -9, f"expected the upkeep killed at {point}, exit {crashed.returncode}"
    assert_log_readers_see_exactly_once(local_output, expected)
    records = local_output.location.list_names("_log/compactions")
    if point == "compaction-before-record":
        assert records == [] and data_folders(local_output) == before, (records, data_folders(local_output))
        assert_exactly_once(local_output, expected)  # the staged files are invisible
    else:
        assert len(records) == 1, f"expected the compaction recorded before the kill, found {records}"

    done = last_json(cli("upkeep", "--output", local_output.uri))

    folders = data_folders(local_output)
    assert len(folders) == 2 and folders[1].startswith("batch_id=compaction-"), (folders, done)
    assert_exactly_once(local_output, expected)
    assert_log_readers_see_exactly_once(local_output, expected)
    produce(kafka_config, topic, sample_records(2, 4, first_id=24))
    _, committed = run_batch(spark, kafka_config, local_output, group_id, [topic])
    assert committed == {f"{topic}:0": 14, f"{topic}:1": 14}, committed
    assert_exactly_once(local_output, offsets_of(topic, {0: 14, 1: 14}))
