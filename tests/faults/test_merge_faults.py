"""Merged tables (``--mode upsert``) under faults: a batch's MERGE is applied exactly once.

* the process is killed after the MERGE commit, before the Kafka commit: the next run finds the
  batch in the table and only commits (Delta and Iceberg);
* two runs race for the same batch: one merges it, the other never merges it again (Delta);
* upkeep (compaction, expiry, cleanup) runs while a merge is about to commit: the merge commits
  once and the table holds every key's newest value (Iceberg).

The table must equal each key's newest record (a tombstone deleting it); a key missing counts
as lost, a key seen twice as duplicated.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from kafka_batch_provider.core.merging import ORDER_COLUMN, MergeSpec
from kafka_batch_provider.testing.producers import Record, produce
from tests.faults.harness import CliRun, race, run_cli
from tests.faults.tally import Outcome
from tests.integration.helpers import TableOutput, group_offsets
from tests.integration.test_merged_tables import merge_commits, newest_per_key
from tests.support import cli_runner

pytestmark = pytest.mark.integration


@dataclass
class MergedLake:
    """A merged table on the local disk, and the command line's flags for it."""

    output: TableOutput

    @classmethod
    def of(cls, table_format: str, folder: Path) -> MergedLake:
        merge = MergeSpec(mode="upsert")
        if table_format == "delta":
            return cls(TableOutput(str(folder / "table"), merge=merge))
        catalog = {"type": "sql", "uri": f"sqlite:///{folder}/catalog.db", "warehouse": f"file://{folder}/wh"}
        return cls(TableOutput("", format="iceberg", table="lake.merged", catalog=catalog, merge=merge))

    def args(self, kafka_config: dict, topic: str, group: str, remote: str) -> list[str]:
        return [
            "--bootstrap-servers", kafka_config["bootstrap.servers"], "--topic", topic, "--group", group,
            "--spark-remote", remote, "--timeout", "10", *self.output.cli_args(), "--mode", "upsert",
        ]  # fmt: skip

    def keys(self) -> Counter:
        table = self.output.read()
        return Counter(r["id"] for r in (table.to_pylist() if table is not None else []))

    def rows(self) -> dict[int, dict]:
        table = self.output.read()
        return {r["id"]: r for r in table.drop_columns([ORDER_COLUMN]).to_pylist()} if table is not None else {}


def keyed(partition: int, key: int, version: int | None) -> Record:
    value = None if version is None else json.dumps({"id": key, "version": version}).encode()
    return Record(partition, value, json.dumps({"id": key}).encode())


def burst(first: int, keys: int, version: int) -> list[Record]:
    """Every key of ``range(first, first + keys)`` at ``version`` (keys stay in one partition), every
    fifth deleted right after."""
    records = [keyed(k % 2, k, version) for k in range(first, first + keys)]
    return records + [keyed(k % 2, k, None) for k in range(first, first + keys, 5)]


def expect_the_newest_per_key(outcome: Outcome, lake: MergedLake, records: list[Record]) -> None:
    """The table holds each key's newest value once: counts go to the tally before asserting."""
    expected, seen = newest_per_key(records), lake.keys()
    outcome.checked = True
    outcome.lost += len(set(expected) - set(seen))
    outcome.duplicated += sum(n - 1 for n in seen.values() if n > 1)
    assert outcome.lost == 0 and outcome.duplicated == 0, (
        f"expected keys {sorted(expected)[:8]}... once each; missing {sorted(set(expected) - set(seen))[:5]}, "
        f"seen twice or more {sorted(k for k, n in seen.items() if n > 1)[:5]}"
    )
    found = lake.rows()
    assert found == expected, "expected each key's newest value; first difference at key " + str(
        next((k for k in sorted(set(found) | set(expected)) if found.get(k) != expected.get(k)), None)
    )


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_a_crash_after_the_merge_commit_is_only_committed_by_the_next_run(
    table_format, outcome, kafka_config, new_topic, group_id, spark_connect_remote, tmp_path
):
    lake = MergedLake.of(table_format, tmp_path)
    topic = new_topic(partitions=2)
    records = burst(0, 40, 1)
    more = burst(20, 40, 2)  # half the keys again, new keys, deletes: in the same batch
    produce(kafka_config, topic, records + more)
    args = lake.args(kafka_config, topic, group_id, spark_connect_remote)

    crashed = run_cli(args, fail_point="after-log-entry:kill")
    assert crashed.killed, f"expected the run killed at its fail point, got exit {crashed.process.returncode}"
    expect_the_newest_per_key(outcome, lake, records + more)
    finished = run_cli(args).result()

    assert finished["repaired"] and finished["skipped"], f"the next run must only commit the merged batch: {finished}"
    assert merge_commits(lake.output) == 1, f"expected 1 merge commit, found {merge_commits(lake.output)}"
    ends = {p: sum(1 for r in records + more if r.partition == p) for p in (0, 1)}
    assert group_offsets(kafka_config, group_id, topic, 2) == ends
    expect_the_newest_per_key(outcome, lake, records + more)


def test_two_runs_racing_for_one_merge_apply_it_once(
    outcome, kafka_config, new_topic, group_id, spark_connect_remote, tmp_path
):
    lake = MergedLake.of("delta", tmp_path)
    topic = new_topic(partitions=2)
    records = burst(0, 30, 1)
    produce(kafka_config, topic, records)
    args = lake.args(kafka_config, topic, group_id, spark_connect_remote)
    runs = race([CliRun(args, {}, fail_point="before-log-entry:stop").start() for _ in range(2)])

    merged = [run for run in runs if run.process.returncode == 0 and " rows in " in run.stderr]
    assert len(merged) >= 1, f"one run must merge the batch: {[r.stderr.splitlines()[-2:] for r in runs]}"
    assert merge_commits(lake.output) == 1, f"expected one merge commit, found {merge_commits(lake.output)}"
    assert group_offsets(kafka_config, group_id, topic, 2) == {
        p: sum(1 for r in records if r.partition == p) for p in (0, 1)
    }
    expect_the_newest_per_key(outcome, lake, records)


def test_upkeep_while_a_merge_is_about_to_commit_leaves_it_applied_once(
    outcome, kafka_config, new_topic, group_id, spark_connect_remote, tmp_path
):
    lake = MergedLake.of("iceberg", tmp_path)
    topic = new_topic(partitions=2)
    args = lake.args(kafka_config, topic, group_id, spark_connect_remote)
    records: list[Record] = []
    for version in (1, 2):  # two merges: files for upkeep to compact and snapshots to expire
        batch = burst(0, 30, version)
        produce(kafka_config, topic, batch)
        records += batch
        assert run_cli(args).process.returncode == 0
    last = burst(10, 30, 3)
    produce(kafka_config, topic, last)
    records += last

    frozen = CliRun(args, {}, fail_point="before-log-entry:stop").start()
    frozen.wait_stopped()
    upkeep = cli_runner.run(["upkeep", *lake.output.cli_args(), "--retention-hours", "1", "--keep-batches", "1"])
    assert upkeep.returncode == 0, upkeep.stderr[-800:]
    frozen.resume()
    frozen.finish()

    assert frozen.process.returncode == 0, f"the merge must commit after upkeep: {frozen.stderr[-800:]}"
    assert merge_commits(lake.output) == 3, f"expected 3 merge commits, found {merge_commits(lake.output)}"
    expect_the_newest_per_key(outcome, lake, records)
