"""The output: its sink (data and offset log), plus plans and Kafka commit records.

The sink (:mod:`kafka_batch_provider.output`) holds the data and the offset log. Beside it,
in the output's control folder (the output itself for the Parquet layout, ``_kafka_batch/``
inside a Delta or Iceberg table's location)::

    _plans/<seq>-<id>.json           the plan, written before anything is read
    _commits/<seq>-<id>.json         the batch's Kafka commit, once it succeeded

A batch becomes part of the output when the sink appends its log entry (exclusively);
what remains to make its files readable is rolled forward by whoever finds it unfinished.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from kafka_batch_provider.core.manifest import build_manifest
from kafka_batch_provider.core.plan import REPLAY, OffsetPlan
from kafka_batch_provider.errors import CommitConflictError, ConfigError, LogConflictError, ManifestError
from kafka_batch_provider.fail_points import fail_point
from kafka_batch_provider.output.dead_letter_files import (
    attempt_staging,
    check_dead_letters_published,
    dead_letter_folder,
    publish_dead_letters,
)
from kafka_batch_provider.output.location import Location, json_bytes
from kafka_batch_provider.output.parquet_layout import ParquetLayout
from kafka_batch_provider.output.sink import Sink

PLANS = "_plans"
COMMITS = "_commits"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def numbered_name(folder: str, seq: int, batch_id: str) -> str:
    """``<folder>/<seq>-<batch id>.json``: sorted by sequence, found by name without reading."""
    return f"{folder}/{seq:020d}-{batch_id}.json"


def parse_numbered(name: str) -> tuple[int, str] | None:
    stem, _, batch_id = name.removesuffix(".json").partition("-")
    return (int(stem), batch_id) if name.endswith(".json") and stem.isdigit() and batch_id else None


class BatchStore:
    """Plans, the offset log, commit records and published data of one output.

    :param output: the control folder: a local path or a URI (``s3://``, ``gs://``,
        ``abfs://``, ``file://``); for the Parquet layout, the output itself.
    :param storage_options: fsspec options for that filesystem (credentials, endpoint).
    :param sink: where the data and the offset log live (default: the Parquet layout in ``output``).
    """

    def __init__(
        self,
        output: str | os.PathLike[str],
        storage_options: dict[str, Any] | None = None,
        sink: Sink | None = None,
    ) -> None:
        self.location = Location(str(output), storage_options or {})
        self.sink: Sink = sink if sink is not None else ParquetLayout(self.location)
        self.log: Sink = self.sink  # the sink is the offset log

    @property
    def root(self) -> str:
        """The output as users name it (a path for local disks, else the URI; a table's name)."""
        return getattr(self.sink, "name", None) or str(self.location)

    @property
    def format(self) -> str:
        return self.sink.format

    # -- the data (the sink's; callers never reach into the sink) ------------------------------

    @property
    def data(self) -> Location:
        """Where the Spark tasks write the batches' files (the table's location for a table)."""
        return self.sink.data

    @property
    def partition_by(self) -> str | None:
        """How the files are split: the existing table's partitioning, not a run's flags."""
        return getattr(self.sink, "partition_by", None)

    @property
    def merge(self) -> dict[str, Any] | None:
        """How batches become rows when the table merges them (``None``: appended)."""
        spec = getattr(self.sink, "merge", None)
        return spec.describe() if spec is not None and spec.merges else None

    def data_uri(self, entry: dict[str, Any]) -> str | None:
        """Where a logged batch's files are (``None`` for a batch without files)."""
        return self.data.uri_of(entry["location"]) if entry.get("location") else None

    def batch_location(self, batch_id: str, sealed: str) -> str:
        """The location a batch's manifest records for its sealed files."""
        return self.sink.batch_location(batch_id, sealed)

    # -- plans -------------------------------------------------------------------------------

    def plan_uri(self, plan: OffsetPlan) -> str:
        return self.location.uri_of(numbered_name(PLANS, plan.seq, plan.batch_id))

    def save_plan(self, plan: OffsetPlan) -> str:
        self.location.put_atomic(numbered_name(PLANS, plan.seq, plan.batch_id), json_bytes(plan.to_dict()))
        return self.plan_uri(plan)

    def move_plan(self, plan: OffsetPlan, moved: OffsetPlan) -> None:
        """A replay's plan, taking another entry of the log (its new file first, then the old one goes)."""
        self.save_plan(moved)
        self.location.delete([numbered_name(PLANS, plan.seq, plan.batch_id)])

    def load_plan(self, seq: int, batch_id: str) -> OffsetPlan:
        name = numbered_name(PLANS, seq, batch_id)
        uri = self.location.uri_of(name)
        try:
            return OffsetPlan.from_json(self.location.read_bytes(name).decode())
        except FileNotFoundError:
            raise ManifestError(f"batch {batch_id} has no plan at {uri}") from None
        except (ConfigError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"plan file {uri} cannot be used ({exc}); remove it with kafka-batch discard --plan {uri}"
            ) from None

    def numbered_files(self, folder: str) -> list[tuple[int, str]]:
        """``(seq, batch id)`` of every file of ``folder`` (plans, commit records), by sequence;
        read from the names alone."""
        return sorted(p for p in map(parse_numbered, self.location.list_names(folder)) if p)

    def plan_files(self) -> list[tuple[int, str]]:
        return self.numbered_files(PLANS)

    def plans_after(self, seq: int, files: list[tuple[int, str]] | None = None) -> list[OffsetPlan]:
        """The plans for entries after ``seq`` (candidates for the next entry), oldest first.

        A plan file gone between the listing and its read is left out: a replay moved it to a later
        entry meanwhile (the moved file is listed by the next look), or it was discarded.

        :param files: :meth:`plan_files` when the caller listed them already.
        """
        plans = []
        for s, b in self.plan_files() if files is None else files:
            if s <= seq:
                continue
            try:
                plans.append(self.load_plan(s, b))
            except ManifestError:
                if self.location.exists(numbered_name(PLANS, s, b)):
                    raise
        return plans

    # -- the offset log ----------------------------------------------------------------------

    def entry_of(self, plan: OffsetPlan) -> dict[str, Any] | None:
        """The plan's log entry, ``None`` when its slot is free (a replay's: while it is not logged;
        replays running at once may each take a later entry than they planned, so it is found by
        its batch id from the planned entry on).

        :raises LogConflictError: when another batch took the plan's slot in the log.
        """
        if plan.mode == REPLAY:
            later = (self.log.entry(seq) for seq in range(plan.seq, self.log.tail_seq() + 1))
            return next((e for e in later if e is not None and e.get("batch_id") == plan.batch_id), None)
        entry = self.log.entry(plan.seq)
        if entry is not None and entry.get("batch_id") != plan.batch_id:
            raise LogConflictError(
                f"output log entry {plan.seq} of {self.root} holds batch {entry.get('batch_id')}, not batch "
                f"{plan.batch_id}: another run published first, so this batch is never published; plan again"
            )
        return entry

    def previous_entry(self, plan: OffsetPlan) -> dict[str, Any] | None:
        """The log entry the plan follows; it must still be the one it was planned after.

        :raises LogConflictError: when the log changed since the plan was made.
        """
        previous = self.log.entry(plan.seq - 1)
        found = None if previous is None else previous.get("batch_id")
        if found != plan.previous:
            raise LogConflictError(
                f"the output log of {self.root} changed since batch {plan.batch_id} was planned: entry {plan.seq - 1} "
                f"is {found!r}, the plan followed {plan.previous!r}; this batch is never published; plan again"
            )
        return previous

    def commit_entry(self, plan: OffsetPlan, manifest: dict[str, Any]) -> dict[str, Any]:
        """The storage commit: create the plan's log entry, then publish its files.

        When another attempt of the *same* batch created the entry first, its entry wins and
        this attempt's staged files are dropped.

        :returns: the entry now in the log.
        :raises LogConflictError: when another batch took the plan's entry first.
        """
        if not self.log.append(manifest):
            winner = self.entry_of(plan)  # raises for another batch (a replay: None)
            # The entry may be this very attempt's: a conditional write whose answer was lost
            # is retried by the client and then refused (412) for the entry it created.
            # Only another attempt's entry makes this attempt's staged files redundant.
            if winner is None and plan.mode == REPLAY:
                raise LogConflictError(
                    f"output log entry {plan.seq} of {self.root} was taken by another batch before replay batch "
                    f"{plan.batch_id}"
                )
            if winner is None:
                raise ManifestError(
                    f"{self.root} refused output log entry {plan.seq} as existing, yet it cannot be read back"
                )
            mine = attempt_staging(manifest)
            if mine and attempt_staging(winner) != mine:
                self.data.delete_tree(mine)
                self.sink.drop_saved_manifest(manifest)
            manifest = winner
        fail_point("before-publish")
        self.publish(manifest)
        return manifest

    def commit_without_data(self, plan: OffsetPlan) -> dict[str, Any]:
        """A plan with nothing to read becomes an entry without files: its offsets still move the log."""
        return self.commit_entry(plan, build_manifest(plan, self.previous_entry(plan), written_at=utc_now()))

    # -- staging and publishing (the sink's) -------------------------------------------------

    def new_staging(self, batch_id: str) -> str:
        return self.sink.staging_folder(batch_id)

    def clean_staging(self, batch_id: str, keep: str | None = None) -> None:
        self.sink.clean_staging(batch_id, keep)

    def seal(self, staging: str, names: list[str]) -> str:
        return self.sink.seal(staging, names)

    def check_columns(self, schema: pa.Schema) -> None:
        """The batch's columns, checked against what the output's format can hold (before reading)."""
        self.sink.check_columns(schema)

    def dead_letter_location(self, batch_id: str) -> str:
        """Where a batch's dead letters are published, relative to the data's location."""
        return dead_letter_folder(self.sink.dead_letter_root, batch_id)

    def publish(self, entry: dict[str, Any]) -> None:
        # Dead letters first: publishing the Parquet layout's data removes its staging folder.
        publish_dead_letters(self.data, entry)
        self.sink.publish(entry)

    def check_published(self, entry: dict[str, Any]) -> None:
        check_dead_letters_published(self.data, entry)
        self.sink.check_published(entry)

    def remove_unpublished(self, plan: OffsetPlan) -> None:
        """Remove a batch that is not in the log: its staged files, then its plan."""
        self.remove_unpublished_plan_file(plan.seq, plan.batch_id)

    def remove_unpublished_plan_file(self, seq: int, batch_id: str) -> None:
        """Remove a plan file (readable or not) whose batch is not in the log, with its staged files.

        :raises CommitConflictError: when the batch is in the log (logged batches stay).
        """
        entry = self.log.entry(seq)
        if entry is not None and entry.get("batch_id") == batch_id:
            raise CommitConflictError(
                f"batch {batch_id} is entry {seq} of the output log: logged batches are never removed; finish it "
                f"with kafka-batch commit --plan {self.location.uri_of(numbered_name(PLANS, seq, batch_id))}"
            )
        self.clean_staging(batch_id)
        self.location.delete([numbered_name(PLANS, seq, batch_id)])

    # -- Kafka commit records ----------------------------------------------------------------

    def record_commit(
        self,
        plan: OffsetPlan,
        committed: dict[str, int],
        rows: int,
        dead_letters: dict[str, list[int]] | None = None,
        committed_by: str = "commit",
    ) -> None:
        """:param dead_letters: ``{"topic:partition": [dead letters, rows]}`` where the batch has any.
        :param committed_by: ``commit`` (the batch's commit step) or ``plan`` (a later plan step that
            finished the commit: its task announced the batch, so the commit task does not again)."""
        self.location.put_atomic(
            numbered_name(COMMITS, plan.seq, plan.batch_id),
            json_bytes(
                {
                    "batch_id": plan.batch_id,
                    "seq": plan.seq,
                    "group_id": plan.group_id,
                    "committed": committed,
                    "previous": {r.tp.key: r.expected_committed for r in plan.ranges},
                    "rows": rows,
                    **({"dead_letters": dead_letters} if dead_letters else {}),
                    "committed_at": utc_now(),
                    "committed_by": committed_by,
                }
            ),
        )

    def commit_record(self, seq: int, batch_id: str) -> dict[str, Any] | None:
        name = numbered_name(COMMITS, seq, batch_id)
        try:
            return json.loads(self.location.read_bytes(name))
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise ManifestError(f"commit record {self.location.uri_of(name)} is not valid JSON: {exc}") from None

    def commit_recorded(self, entry: dict[str, Any]) -> bool:
        """Whether a log entry's Kafka commit is recorded (its commit step, or a later plan, finished it)."""
        return self.commit_record(int(entry["seq"]), entry["batch_id"]) is not None

    def commit_records(self, group_id: str | None = None, last: int | None = None) -> list[dict[str, Any]]:
        """Commit history, oldest first (what lag health reads); ``last`` keeps only the newest ones."""
        names = self.numbered_files(COMMITS)
        if last is not None:
            names = names[-last:]
        records = [self.commit_record(seq, batch_id) for seq, batch_id in names]
        return [r for r in records if r is not None and (group_id is None or r.get("group_id") == group_id)]

    # -- upkeep -------------------------------------------------------------------------------

    def prune_control(self, keep_batches: int, dry_run: bool = False) -> tuple[int, int]:
        """Remove the plans and Kafka commit records of batches older than the newest ``keep_batches``.

        Pending plans (after the log's newest entry) and the records the next run reconciles
        with (the newest entry's) always stay.

        :returns: how many plans and commit records were (or, ``dry_run``, would be) removed.
        """
        below = self.log.tail_seq() - keep_batches
        removed = []
        for folder in (PLANS, COMMITS):
            old = [(seq, batch_id) for seq, batch_id in self.numbered_files(folder) if seq <= below]
            if not dry_run:
                self.location.delete(numbered_name(folder, seq, batch_id) for seq, batch_id in old)
            removed.append(len(old))
        return removed[0], removed[1]


def load_plan_file(path: str, storage_options: dict[str, Any] | None = None) -> OffsetPlan:
    """A plan from its file (a local path or a URI); a replay's plan where it moved since
    (:meth:`BatchStore.move_plan`: the same batch id, another entry)."""
    output, name = split_plan_path(path)
    location = Location(output, storage_options or {})
    try:
        text = location.read_bytes(name).decode()
    except FileNotFoundError:
        moved = moved_plan_name(location, name)
        if moved is None:
            raise ConfigError(f"plan file {path} does not exist") from None
        return load_plan_file(location.uri_of(moved), storage_options)
    except UnicodeDecodeError:
        raise ConfigError(f"plan file {path} is not a plan (not UTF-8 text)") from None
    try:
        return OffsetPlan.from_json(text)
    except ConfigError as exc:
        raise ConfigError(f"plan file {path}: {exc}") from None


def moved_plan_name(location: Location, name: str) -> str | None:
    """The plan file of the same batch under another entry number, if there is one."""
    parsed = parse_numbered(name.rpartition("/")[2])
    if parsed is None:
        return None
    found = sorted(p for p in map(parse_numbered, location.list_names(PLANS)) if p and p[1] == parsed[1])
    return numbered_name(PLANS, *found[-1]) if found and found[-1] != parsed else None


def split_plan_path(path: str) -> tuple[str, str]:
    """``<output>/_plans/<file>`` -> ``(<output>, "_plans/<file>")``."""
    text = str(path).rstrip("/")
    head, _, file_name = text.rpartition("/")
    output, _, folder = head.rpartition("/")
    if folder != PLANS or not file_name:
        raise ConfigError(f"{path} is not a plan file inside an output's {PLANS}/ folder")
    return output or "/", f"{PLANS}/{file_name}"


def output_of_plan_file(path: str) -> str:
    return split_plan_path(path)[0]
