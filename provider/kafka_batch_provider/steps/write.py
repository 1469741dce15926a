"""The write step's driver half: what the Spark tasks staged becomes one batch of the output.

1-2. ``stage`` reads the plan's ranges and writes them into a fresh staging folder (with Spark:
     :func:`kafka_batch_provider.spark.ingest.stage_with`); it is an argument, so this module
     never imports Spark and is tested without it.
3. The driver lists the staging folder, reads the files' footers and checks the reports
   against the plan: written must equal read (:mod:`kafka_batch_provider.core.write_check`).
4. The manifest is appended to the output's offset log, exclusively: the commit point.
5. The files are published (a rename on local disks, copies on object stores).

A crash before 4 leaves nothing in the log, so the batch is simply written again (into a
fresh staging folder); a crash after 4 is rolled forward by the next step that finds it. A
plan with nothing to read is recorded in the log without staging anything
(:func:`record_without_data`, also the commit step's way).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_batch_provider.core.manifest import build_manifest
from kafka_batch_provider.core.merging import planned_merge
from kafka_batch_provider.core.plan import REPLAY, OffsetPlan, legacy_replay_id
from kafka_batch_provider.core.reader_schema import PLAN_KEYS, check_plan_formats, planned_reader_schema
from kafka_batch_provider.core.replays import by_incarnation, refuse_overlaps
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.core.write_check import TaskReports, check_write
from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.errors import ColumnTypeError, LogConflictError, PlanError, SchemaError
from kafka_batch_provider.fail_points import fail_point
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.output.dead_letter_files import attempt_staging, staged_dead_letters
from kafka_batch_provider.output.store import BatchStore, utc_now
from kafka_batch_provider.steps.guards import check_group_unmoved, check_same_topics

log = logging.getLogger(__name__)


@dataclass
class StagedBatch:
    """What the Spark tasks left in the staging folder, and what they said about it."""

    staging: str
    reports: TaskReports
    schema: str
    counted_at_source: bool
    #: how many Spark tasks the job that read and wrote it had (the log entry's options say it)
    tasks: int | None = None
    #: the seconds of that job, when it staged it ahead of the write step (a table per topic)
    seconds: float | None = None


#: Steps 1-2: ``stage(plan, store, kafka_config, options)`` stages the plan's records.
Stage = Callable[[OffsetPlan, BatchStore, Mapping[str, Any], WriteOptions], StagedBatch]


def write_batch(
    plan: OffsetPlan,
    store: BatchStore,
    kafka_config: Mapping[str, Any],
    stage: Stage,
    options: WriteOptions = WriteOptions(),
    progress: Callable[[str], None] = log.info,
) -> dict[str, Any]:
    """Read the plan's ranges (``stage``) and make them one batch of the output, with its log entry.

    A batch already in the log is not written again (its publish is finished if it was cut
    short). A plan with nothing to read is recorded in the log without starting a Spark job.

    :returns: the batch's log entry (its manifest).
    """
    bid = plan.batch_id
    if plan.mode == REPLAY:
        plan, entry = replay_slot(store, plan, progress)
    else:
        entry = store.entry_of(plan)
    if entry is not None:
        store.publish(entry)
        progress(
            f"batch {bid} is already in the output log (entry {plan.seq}, {entry['rows']} rows); not reading again"
        )
        return entry
    previous = store.previous_entry(plan)  # fail before reading when the log moved on since planning
    if previous is not None:
        store.publish(previous)  # finishes a predecessor's publish cut short (replays have no commit step)
    check_plan_formats(bid, plan.extra, options.value_format, options.key_format)  # before anything is read or recorded
    if hasattr(store.sink, "merge"):  # a table: merged as the plan says (a step run need not repeat --mode)
        store.sink.merge = planned_merge(plan.extra, store.sink.merge, bid)
    kafka = KafkaOffsets(kafka_config)
    try:
        if not plan.has_data:
            entry = record_without_data(kafka, store, plan)
            progress(f"batch {bid} has nothing to read: recorded in the output log as entry {plan.seq}")
            return entry
        return read_check_publish(plan, store, kafka, stage, options, progress)
    finally:
        kafka.close()


def read_with(staged: StagedBatch) -> dict[str, int]:
    """Slices per reader that really read them, from the tasks' receipts (``{"native": 4}``)."""
    return dict(sorted(Counter(r["reader"] for r in staged.reports.receipts if r.get("reader")).items()))


def record_without_data(kafka: KafkaOffsets, store: BatchStore, plan: OffsetPlan) -> dict[str, Any]:
    """A plan with nothing to read becomes its log entry directly, once the plan still holds."""
    check_same_topics(kafka, plan)
    if plan.commits_group:
        check_group_unmoved(kafka, plan)  # before the entry: a refused commit must not move the log
    return store.commit_without_data(plan)


def read_check_publish(
    plan: OffsetPlan,
    store: BatchStore,
    kafka: KafkaOffsets,
    stage: Stage,
    options: WriteOptions,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Steps 1-5 for a plan with something to read."""
    bid = plan.batch_id
    progress(
        f"batch {bid}: reading {len(plan.readable_ranges)} range(s), up to {plan.planned_offsets} offsets, "
        f"with the {options.reader} reader"
    )
    clock = time.perf_counter()
    try:
        staged = stage(plan, store, kafka.kafka_config, options)
        readers = read_with(staged)
        if readers.get("python") and options.reader == "native":
            why = sorted({r["not_native"] for r in staged.reports.receipts if r.get("not_native")})
            progress(
                f"batch {bid}: {readers['python']} of {sum(readers.values())} slice(s) read with the python reader: "
                f"the native reader does not load where they ran ({'; '.join(why) or 'no reason given'})"
            )
        seconds = staged.seconds if staged.seconds is not None else round(time.perf_counter() - clock, 3)
        timings = {"read_write_seconds": seconds}
        check_same_topics(kafka, plan)  # a topic recreated while Spark read would pass every other check
        entry = publish_staged(store, plan, staged, options, timings, progress)
    except Exception as exc:
        # The batch may be in the log all the same: another attempt of it (a retry racing a
        # slow first try, which may also have cleaned this attempt's files up) or this one,
        # whose publish then failed. Either way only its publish can remain to be done.
        entry = store.entry_of(plan)
        if entry is None:
            if plan.mode == REPLAY and isinstance(exc, PlanError):
                store.clean_staging(bid)  # refused for good (an overlap): its files can never be published
            raise
        store.publish(entry)
        progress(f"batch {bid} is in the output log (entry {entry['seq']}) and published; this attempt stops here")
        return entry
    store.clean_staging(bid, keep=entry.get("staging"))  # leftovers of crashed attempts of this batch
    staged_any = staged.reports.files or staged.reports.dead_letter_files
    if staged_any and not str(attempt_staging(entry) or "").startswith(staged.staging):
        progress(
            f"batch {bid}: another attempt of the same batch logged it first (output log entry {entry['seq']}); "
            "this attempt's files were dropped"
        )
        return entry
    letters = entry.get("dead_letters") or {}
    aside = ""
    if letters.get("rows"):
        aside = f"; {letters['rows']} dead letter(s) to {store.data.uri_of(letters['location'])}"
    progress(
        f"batch {bid}: wrote {entry['rows']} rows in {len(entry['files'])} file(s) to "
        f"{store.data_uri(entry) or store.root} "
        f"(output log entry {entry['seq']}, {store.format}){aside}"
    )
    return entry


def publish_staged(
    store: BatchStore,
    plan: OffsetPlan,
    staged: StagedBatch,
    options: WriteOptions,
    timings: Mapping[str, float] | None = None,
    progress: Callable[[str], None] = log.info,
) -> dict[str, Any]:
    """Steps 3-5: check the staged files, append the manifest to the log, publish the files.

    :raises WriteCheckError: when what was written does not match what was read (nothing
        is published, the plan stays pending).
    :raises LogConflictError: when another batch took the plan's entry of the log first.
    """
    data = store.data
    found = data.file_sizes(staged.staging)
    reported = {f["name"] for f in staged.reports.files}
    footers = {name: footer_rows(store, f"{staged.staging}/{name}") for name in sorted(reported & set(found))}
    letters = staged_dead_letters(staged.staging)
    letters_found = data.file_sizes(letters) if options.on_bad_record == "dead-letter" else {}
    letters_reported = {f["name"] for f in staged.reports.dead_letter_files}
    letters_footers = {name: footer_rows(store, f"{letters}/{name}") for name in letters_reported & set(letters_found)}
    stats = check_write(plan, staged.reports, found, footers, staged.counted_at_source, letters_found, letters_footers)
    # Files of task attempts that failed or were superseded are never part of the batch.
    data.delete(f"{staged.staging}/{name}" for name in sorted(set(found) - reported))
    data.delete(f"{letters}/{name}" for name in sorted(set(letters_found) - letters_reported))
    staging = store.seal(staged.staging, sorted(reported))
    for s in stats:
        s["min_timestamp"], s["max_timestamp"] = (
            iso_from_micros(s["min_timestamp"]),
            iso_from_micros(s["max_timestamp"]),
        )
    readers = read_with(staged)

    def manifest_of(plan: OffsetPlan) -> dict[str, Any]:
        return build_manifest(
            plan,
            store.previous_entry(plan),
            stats,
            staged.reports.files,
            staging=staging,
            location=store.batch_location(plan.batch_id, staging),
            schema=staged.schema,
            written_at=utc_now(),
            options={
                "reader": options.reader,
                "value_format": options.value_format,
                "value_schema": options.value_schema,
                **({"key_format": options.key_format} if options.key_format != "bytes" else {}),
                **reader_schema_options(plan, options),
                **({"on_bad_record": options.on_bad_record} if options.on_bad_record != "fail" else {}),
                **({"tasks": staged.tasks} if staged.tasks is not None else {}),
                **({"read_with": readers} if readers else {}),
                "partition_by": store.partition_by,
                **({"merge": store.merge} if store.merge else {}),
            },
            timings=timings,
            dead_letters=(
                {
                    "files": staged.reports.dead_letter_files,
                    "staging": staged_dead_letters(staging),
                    "location": store.dead_letter_location(plan.batch_id),
                }
                if options.on_bad_record == "dead-letter"
                else None
            ),
        )

    fail_point("before-log-entry")
    for _ in range(REPLAY_SLOT_ATTEMPTS):
        manifest = None
        try:
            manifest = manifest_of(plan)
            return store.commit_entry(plan, manifest)
        except ColumnTypeError as exc:
            raise in_schema_words(exc, plan, store.previous_entry(plan)) from None
        except LogConflictError:
            if plan.mode != REPLAY:
                raise
            if manifest is not None:
                store.sink.drop_saved_manifest(manifest)  # a table's saved manifest of the entry it lost
            plan, entry = replay_slot(store, plan, progress)
            if entry is not None:
                return entry
    raise LogConflictError(
        f"replay batch {plan.batch_id}: other batches took {REPLAY_SLOT_ATTEMPTS} entries of the output log of "
        f"{store.root} in a row before it could take one; run it again"
    )


#: How often a replay takes the next free entry while other replays keep publishing first.
REPLAY_SLOT_ATTEMPTS = 20


def replay_slot(store: BatchStore, plan: OffsetPlan, progress: Callable[[str], None]) -> tuple[OffsetPlan, Any]:
    """A replay's place in the output's log: its entry when it is logged already (with the plan as
    it was published), else the plan for the next free entry.

    Replays of disjoint ranges run at once (an Airflow backfill runs several intervals, each
    planning the same next entry): the first to publish takes it, and each of the others takes the
    next free one, once the batches published since it was planned are found not to overlap it.
    Its plan file moves along, so a retry finds it where it now waits.

    :raises PlanError: a batch published since this replay was planned holds some of its offsets.
    """
    tail = store.log.tail()
    tail_seq = int(tail["seq"]) if tail else 0
    since = [e for e in map(store.log.entry, range(plan.seq, tail_seq + 1)) if e is not None]
    mine = next((e for e in since if e.get("batch_id") == plan.batch_id), None)  # (store.entry_of, read once)
    if mine is not None:
        return replace(plan, seq=int(mine["seq"]), previous=previous_batch(mine)), mine
    published = " (published since this replay was planned)"
    refuse_overlaps(
        store.root, plan, [(e["batch_id"], by_incarnation(e, plan.topic_ids)[0], published, "") for e in since]
    )
    previous = tail["batch_id"] if tail else None
    if (tail_seq + 1, previous) == (plan.seq, plan.previous):
        return plan, None
    if plan.batch_id == legacy_replay_id(plan):  # planned by an earlier build: its id names its entry
        raise LogConflictError(
            f"output log entry {plan.seq} of {store.root} was taken by another batch: replay batch {plan.batch_id}, "
            "planned by an earlier version, is never published; plan it again"
        )
    # Every batch published since: its own publish may have been cut short (a replay whose driver
    # died after its log entry), and only the tail's predecessor is finished by the next write.
    for entry in since:
        store.publish(entry)
    moved = replace(plan, seq=tail_seq + 1, previous=previous)
    store.move_plan(plan, moved)
    progress(
        f"replay batch {plan.batch_id}: output log entry {plan.seq} was taken by another batch meanwhile; "
        f"it takes entry {moved.seq}"
    )
    return moved, None


def previous_batch(entry: Mapping[str, Any]) -> str | None:
    """The batch id an entry names as its predecessor."""
    link = entry.get("previous")
    return link.get("batch_id") if isinstance(link, Mapping) else link


def in_schema_words(exc: ColumnTypeError, plan: OffsetPlan, previous: Mapping[str, Any] | None) -> Exception:
    """A column whose type a batch in a registry format would change, refused in the schemas' words:
    the subject, the version this batch reads with, the one the table was last written with, the field."""
    part = "key" if exc.column == "key" or exc.column.startswith("key.") else "value"
    pinned = planned_reader_schema(plan.extra, part)
    if pinned is None:
        return exc
    if exc.column == "key" and "binary" in str(exc.table_type):  # raw keys so far: no version can match them
        return SchemaError(
            f"{exc.where}: the table's keys were written as bytes, and {pinned.subject} decodes them as "
            f"{exc.batch_type}: a table's column keeps its type, so batch {plan.batch_id} was not written and the "
            f"group did not move; keep {Setting('key_format', 'bytes')} for this table, or write to a new table"
        )
    before = ((previous or {}).get("options") or {}).get(PLAN_KEYS[part]) or {}
    written_with = f"version {before['version']}" if before.get("subject") == pinned.subject else "an earlier batch"
    return SchemaError(
        f"{exc.where}: {pinned.subject} version {pinned.version} makes field {exc.column} {exc.batch_type}, but the "
        f"table holds it as {exc.table_type} (written with {written_with}): a table's column keeps its type, so "
        f"batch {plan.batch_id} was not written and the group did not move; register a version that keeps the "
        f"type, pin an earlier one ({Setting(f'{part}_schema_version')}), or write to a new table"
    )


def reader_schema_options(plan: OffsetPlan, options: WriteOptions) -> dict[str, Any]:
    """What a batch in a registry format records about its decoding: the reader schemas, raw values kept."""
    found: dict[str, Any] = {}
    key = planned_reader_schema(plan.extra, "key")
    if key is not None:
        found[PLAN_KEYS["key"]] = key.to_dict()
    pinned = planned_reader_schema(plan.extra)
    if pinned is not None:
        found.update({PLAN_KEYS["value"]: pinned.to_dict(), "keep_raw_value": options.keep_raw_value})
    return found


def footer_rows(store: BatchStore, name: str) -> int | None:
    """Rows in a staged file's Parquet footer; ``None`` when it is gone or unreadable (the check says so)."""
    try:
        with store.data.open_input(name) as f:
            return pq.ParquetFile(f).metadata.num_rows
    except (OSError, pa.ArrowException):
        return None


def iso_from_micros(micros: int | None) -> str | None:
    if micros is None:
        return None
    moment = datetime.fromtimestamp(micros // 1_000_000, tz=timezone.utc).replace(microsecond=micros % 1_000_000)
    return moment.isoformat(timespec="milliseconds")
