"""Outputs on a real local filesystem: URIs, exclusive creation, the offset log and publishing."""

from __future__ import annotations

import json
import multiprocessing
import threading
from pathlib import Path

import pytest

from kafka_batch_provider.core.manifest import build_manifest
from kafka_batch_provider.core.offsets import PartitionOffsets
from kafka_batch_provider.core.planning import LogSlot, PlanPolicy, plan_incremental
from kafka_batch_provider.errors import ConfigError, LogConflictError, ManifestError
from kafka_batch_provider.output.location import INDENTED_UP_TO, Location, json_bytes, split_output
from kafka_batch_provider.output.offset_log import TAIL_HINT, entry_name
from kafka_batch_provider.output.parquet_layout import ParquetLayout
from kafka_batch_provider.output.store import BatchStore, split_plan_path


@pytest.mark.parametrize(
    "output, expected",
    [
        ("s3://bucket/lake/", ("s3", "bucket/lake")),
        ("s3a://bucket/a b/ü", ("s3", "bucket/a b/ü")),
        ("gs://b/x", ("gcs", "b/x")),
        ("abfs://c@acct.dfs.core.windows.net/x", ("abfs", "c@acct.dfs.core.windows.net/x")),
        ("file:///data/lake", ("file", "/data/lake")),
    ],
)
def test_outputs_are_local_paths_or_uris(output, expected):
    assert split_output(output) == expected


@pytest.mark.parametrize(
    "output, message",
    [
        ("ftp://x/y", "unsupported scheme ftp://"),
        ("s3://", "name a bucket"),
        ("file://rel/x", "absolute path"),
        ("", "empty"),
    ],
)
def test_bad_outputs_are_refused_with_one_line(output, message):
    with pytest.raises(ConfigError, match=message):
        split_output(output)


def test_delta_rs_settings_in_the_storage_options_do_not_reach_the_filesystem():
    """``delta_options`` (docs/formats.md's DynamoDB lock) is for delta-rs: s3fs refused the whole output."""
    options = {
        "key": "k",
        "secret": "s",
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"},
        "delta_options": {"AWS_S3_LOCKING_PROVIDER": "dynamodb"},
    }
    fs = Location("s3://bucket/lake", options).fs
    fs.connect()  # builds the client as the first request would, without sending one
    assert fs.key == "k" and fs.client_kwargs == {"endpoint_url": "http://127.0.0.1:9"}, vars(fs)


def test_local_paths_become_absolute_and_keep_spaces_and_non_ascii(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    location = Location("lake dir/ü ß")
    assert location.root == str(tmp_path / "lake dir" / "ü ß") and location.is_local
    location.put_atomic("_x/a b.json", b"{}")
    assert (tmp_path / "lake dir" / "ü ß" / "_x" / "a b.json").read_bytes() == b"{}"


def _race(path: str, name: str, payload: bytes, barrier, results) -> None:
    barrier.wait()
    results.put((payload, Location(path).create_exclusive(name, payload)))


@pytest.mark.parametrize("how", ["threads", "processes"])
def test_exclusive_create_lets_exactly_one_writer_win(tmp_path, how):
    contenders = 8
    for round_ in range(10 if how == "threads" else 3):  # a process takes ~0.2 s to spawn
        name = f"_log/{round_:03d}.json"
        if how == "threads":
            import queue

            barrier, results = threading.Barrier(contenders), queue.Queue()
            workers = [
                threading.Thread(target=_race, args=(str(tmp_path), name, b"w%d" % i, barrier, results))
                for i in range(contenders)
            ]
        else:
            context = multiprocessing.get_context("spawn")
            barrier, results = context.Barrier(contenders), context.Queue()
            workers = [
                context.Process(target=_race, args=(str(tmp_path), name, b"w%d" % i, barrier, results))
                for i in range(contenders)
            ]
        for w in workers:
            w.start()
        outcomes = [results.get(timeout=60) for _ in workers]
        for w in workers:
            w.join()
        winners = [payload for payload, won in outcomes if won]
        assert len(winners) == 1, f"round {round_}: expected exactly one winner, got {len(winners)}"
        assert (tmp_path / name).read_bytes() == winners[0], "the file must hold the winner's bytes"
    assert not list(tmp_path.glob("_log/.*.tmp")), "no temporary file may be left behind"


def entry(plan, previous=None, files=()):
    rows = sum(f["rows"] for f in files)
    stats = [{"topic": "t", "partition": 0, "rows": rows, "min_offset": 0, "max_offset": rows - 1}] if rows else []
    return build_manifest(plan, previous, stats, list(files), staging=f"_staging/{plan.batch_id}.1", written_at="now")


def plan_at(seq, previous, end=5):
    states = [PartitionOffsets("t", 0, None, 0, end)]
    return plan_incremental("g", ["t"], states, PlanPolicy(), "read_committed", "now", slot=LogSlot(seq, previous))


def test_the_log_appends_in_order_and_finds_its_tail_past_a_stale_hint(tmp_path):
    store = BatchStore(tmp_path)
    assert store.log.tail() is None and store.log.tail_seq() == 0
    first = plan_at(1, None)
    assert store.log.append(entry(first))
    second = plan_at(2, first.batch_id, end=9)
    assert store.log.append(entry(second, store.log.entry(1)))
    assert store.log.tail_seq() == 2
    Location(str(tmp_path)).put_atomic(TAIL_HINT, b'{"seq": 1}')  # a writer died before updating the hint
    assert store.log.tail()["batch_id"] == second.batch_id
    (tmp_path / TAIL_HINT).unlink()
    assert store.log.tail_seq() == 2, "without a hint the log is listed"
    assert [e["seq"] for e in store.log.entries()] == [1, 2]


def test_a_second_batch_for_the_same_entry_loses_and_changes_nothing(tmp_path):
    store = BatchStore(tmp_path)
    mine, theirs = plan_at(1, None, end=5), plan_at(1, None, end=6)
    assert store.commit_entry(theirs, entry(theirs))["batch_id"] == theirs.batch_id
    with pytest.raises(LogConflictError, match="holds batch .* another run published first"):
        store.commit_entry(mine, entry(mine))
    assert store.log.entry(1)["batch_id"] == theirs.batch_id
    with pytest.raises(ManifestError, match="entry 2 is missing"):
        store.log.append(entry(plan_at(3, "b-x"), {"seq": 2, "batch_id": "b-x", "offsets": {}}))


def test_an_entry_can_only_follow_the_entry_it_was_planned_after(tmp_path):
    store = BatchStore(tmp_path)
    store.log.append(entry(plan_at(1, None)))
    stale = plan_at(2, "b-not-the-tail")
    with pytest.raises(LogConflictError, match="changed since batch .* was planned"):
        store.previous_entry(stale)


def test_publish_is_one_rename_and_is_rolled_forward_after_a_crash(tmp_path):
    store = BatchStore(tmp_path)
    plan = plan_at(1, None)
    staged = tmp_path / "_staging" / f"{plan.batch_id}.1"
    staged.mkdir(parents=True)
    (staged / "part-0.parquet").write_bytes(b"x" * 10)
    manifest = entry(plan, files=[{"name": "part-0.parquet", "bytes": 10, "rows": 5}])
    assert store.log.append(manifest)  # ... the process dies before publishing
    assert not store.sink.is_published(manifest)
    store.publish(manifest)
    assert (tmp_path / f"batch_id={plan.batch_id}" / "part-0.parquet").read_bytes() == b"x" * 10
    assert not staged.exists() and store.sink.is_published(manifest)
    store.publish(manifest)  # idempotent
    store.check_published(manifest)


def test_files_that_vanished_are_never_published_or_committed(tmp_path):
    store = BatchStore(tmp_path)
    plan = plan_at(1, None)
    manifest = entry(plan, files=[{"name": "part-0.parquet", "bytes": 10, "rows": 5}])
    store.log.append(manifest)
    with pytest.raises(ManifestError, match="neither published nor staged.*the output lost data"):
        store.publish(manifest)
    with pytest.raises(ManifestError, match="missing or changed"):
        store.check_published(manifest)


def test_plan_files_are_found_by_name_and_their_output_is_derived(tmp_path):
    store = BatchStore(tmp_path)
    plan = plan_at(1, None)
    uri = store.save_plan(plan)
    assert store.plan_files() == [(1, plan.batch_id)]
    assert split_plan_path(uri) == (str(tmp_path), f"_plans/{Path(uri).name}")
    assert split_plan_path("s3://b/lake/_plans/x.json") == ("s3://b/lake", "_plans/x.json")
    with pytest.raises(ConfigError, match="not a plan file"):
        split_plan_path(str(tmp_path / "x.json"))
    assert entry_name(12) == "_log/00000000000000000012.json"


def staged_batch(tmp_path, plan, names=("part-0.parquet",)):
    staged = tmp_path / "_staging" / f"{plan.batch_id}.1"
    staged.mkdir(parents=True)
    for name in names:
        (staged / name).write_bytes(b"x" * 10)
    return entry(plan, files=[{"name": "part-0.parquet", "bytes": 10, "rows": 5}])


def test_an_append_answered_as_refused_for_its_own_entry_keeps_its_files(tmp_path):
    # A conditional PUT whose answer was lost is retried by the client and refused (412) for
    # the entry it created itself: that is this attempt's success, not another's.
    store = BatchStore(tmp_path)
    plan = plan_at(1, None)
    manifest = staged_batch(tmp_path, plan)
    assert store.log.append(manifest)
    assert store.commit_entry(plan, manifest) == manifest
    assert store.sink.is_published(manifest), "the batch's own staged files must be published, not deleted"


def test_sealing_publishes_exactly_the_reported_files_never_a_late_one(tmp_path):
    store = BatchStore(tmp_path)
    plan = plan_at(1, None)
    manifest = staged_batch(tmp_path, plan, names=("part-0.parquet", "part-9-late.parquet"))
    sealed = store.seal(f"_staging/{plan.batch_id}.1", ["part-0.parquet"])
    manifest["staging"] = sealed
    store.commit_entry(plan, manifest)
    published = sorted(p.name for p in (tmp_path / f"batch_id={plan.batch_id}").iterdir())
    assert published == ["part-0.parquet"], f"only reported files may become visible, found {published}"


def test_damaged_entries_plans_and_commit_records_are_one_clear_line(tmp_path):
    store = BatchStore(tmp_path)
    (tmp_path / "_log").mkdir()
    (tmp_path / entry_name(1)).write_text('{"seq": 1}')
    with pytest.raises(ManifestError, match=r"00000000000000000001.json is damaged \(missing batch_id"):
        store.log.entry(1)
    (tmp_path / "_plans").mkdir()
    (tmp_path / "_plans" / "00000000000000000002-b-x.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"plan file .*00000000000000000002-b-x.json cannot be used .* discard"):
        store.plans_after(1)
    (tmp_path / "_commits").mkdir()
    (tmp_path / "_commits" / "00000000000000000001-b-x.json").write_text("[")
    with pytest.raises(ManifestError, match="commit record .* is not valid JSON"):
        store.commit_record(1, "b-x")


class IgnoresConditions(Location):
    """An object store whose "create if absent" always succeeds (it ignores If-None-Match)."""

    is_local = False

    def create_exclusive(self, name, data):
        Path(self.path(name)).parent.mkdir(parents=True, exist_ok=True)
        Path(self.path(name)).write_bytes(data)
        return True

    def delete(self, names):
        for name in names:
            Path(self.path(name)).unlink(missing_ok=True)


def test_a_store_that_ignores_conditional_writes_is_refused_before_the_first_entry(tmp_path):
    from kafka_batch_provider.errors import StorageError
    from kafka_batch_provider.output.offset_log import OffsetLog

    log = OffsetLog(IgnoresConditions(str(tmp_path)))
    with pytest.raises(StorageError, match="accepts a second create of the same name"):
        log.append(entry(plan_at(1, None)))
    assert not (tmp_path / entry_name(1)).exists()


def test_a_publisher_that_loses_the_race_to_another_stops_quietly(tmp_path):
    class SlowObserver(ParquetLayout):
        """Sees the batch folder empty once, as a publisher does when another is just finishing."""

        stale = True

        def published_files(self, batch_id):
            if self.stale:
                self.stale = False
                BatchStore(self.data.output).publish(manifest)  # the other publisher finishes now
                return {}
            return super().published_files(batch_id)

    plan = plan_at(1, None)
    manifest = staged_batch(tmp_path, plan)
    store = BatchStore(tmp_path, sink=SlowObserver(Location(str(tmp_path))))
    store.log.append(manifest)
    store.publish(manifest)  # found nothing published, then nothing staged: the other one won
    assert store.sink.is_published(manifest)


def test_an_output_that_cannot_be_written_is_refused_access_not_an_outage(tmp_path):
    from kafka_batch_provider.errors import StorageAccessError

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    # Below /proc no folder can be created; below a file neither: no retry changes that.
    for output in ("/proc/kafka-batch/lake", str(blocker / "lake")):
        with pytest.raises(StorageAccessError) as refused:
            Location(output).put_atomic("_plans/1.json", b"{}")
        assert "cannot write _plans/1.json" in str(refused.value) and "access refused" in str(refused.value)


def test_an_unknown_storage_option_is_a_config_error_at_first_use():
    # s3fs hands its options to the session it creates on the first request.
    with pytest.raises(ConfigError, match="bad storage option for s3://lake/x: .*'bogus_option'"):
        Location("s3://lake/x", {"bogus_option": 1}).read_bytes("_log/_tail.json")


def test_files_below_names_files_relative_to_the_folder_however_the_filesystem_spells_paths():
    """adlfs lists ``container/lake/...`` for ``abfs://container@account.dfs.core.windows.net/lake``:
    names are cut by the base spelt the filesystem's way, not by the length of the URI."""
    from kafka_batch_provider.output.location import Location

    class AzureLikeFileSystem:
        def _strip_protocol(self, path: str) -> str:
            path = path.removeprefix("abfs://")
            container, _, rest = path.partition("/")
            return f"{container.split('@')[0]}/{rest}".rstrip("/")

        def invalidate_cache(self, path: str) -> None:
            pass

        def find(self, path, detail, withdirs):
            assert self._strip_protocol(path) == "container/lake/data", path
            return {
                "container/lake/data/b-1/a/part-0.parquet": {"type": "file", "size": 5, "last_modified": 1.0e9},
                "container/lake/data/b-1/a": {"type": "directory", "size": 0},
            }

    location = Location("abfs://container@account.dfs.core.windows.net/lake")
    location._fs = AzureLikeFileSystem()
    assert location.files_below("data") == {"b-1/a/part-0.parquet": (5, 1.0e9)}


def test_control_files_are_indented_for_people_until_a_plan_of_thousands_of_partitions():
    small = {"batch_id": "b1", "ranges": [{"partition": p, "start": 0, "end": 5} for p in range(3)]}
    large = {"batch_id": "b2", "ranges": [{"partition": p, "start": 0, "end": 5} for p in range(10_000)]}
    small_text, large_text = json_bytes(small), json_bytes(large)
    assert b"\n  " in small_text, f"expected an indented small file, found {small_text[:80]!r}"
    assert b"\n" not in large_text, f"expected a 10,000-partition plan on one line, found {large_text[:80]!r}"
    assert len(large_text) > INDENTED_UP_TO
    assert json.loads(small_text) == small and json.loads(large_text) == large
