"""The batch manifest, which is also the entry of the output's offset log.

A manifest says what one batch wrote (ranges, rows, offset and timestamp bounds per
partition, files, schema) and where the output stands after it: ``offsets`` holds, for
every partition the log knows, the offset after this batch, so the newest entry alone
answers "where do we resume?". Entries are numbered (``seq``) and link to their predecessor
(``previous``). Creating entry *n* is the storage-side commit point of a batch; it is
created only if absent, so of two writers only one can publish a batch as entry *n*.

Everything here is pure: building, checking and reading entries. Storage I/O lives in
:mod:`kafka_batch_provider.output.offset_log` and :mod:`kafka_batch_provider.output.store`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kafka_batch_provider.core.offsets import OffsetGap, OffsetRange, TopicPartition
from kafka_batch_provider.core.plan import INCREMENTAL, OffsetPlan
from kafka_batch_provider.core.reconcile import LogPosition
from kafka_batch_provider.core.topic_patterns import PATTERN_PLAN_KEY
from kafka_batch_provider.errors import ManifestError

MANIFEST_FORMAT_VERSION = 2


def data_dir_name(batch_id: str) -> str:
    """The published location of a batch, relative to the output (Hive-style: adds a batch_id column)."""
    return f"batch_id={batch_id}"


def offsets_after(previous: Mapping[str, Any] | None, plan: OffsetPlan) -> tuple[dict[str, int], dict[str, str]]:
    """The log's offsets and topic ids after ``plan``: the predecessor's, updated with the plan's ends.

    A topic whose id changed since the predecessor was recreated: its old offsets are dropped.
    Replays have no position (they are not a stream of the group), so their entries hold none.
    """
    if plan.mode != INCREMENTAL:
        return {}, dict(plan.topic_ids)
    offsets = dict((previous or {}).get("offsets", {}))
    topic_ids = dict((previous or {}).get("topic_ids", {}))
    for topic, topic_id in plan.topic_ids.items():
        if topic_ids.get(topic) not in (None, topic_id):
            offsets = {k: v for k, v in offsets.items() if TopicPartition.from_key(k).topic != topic}
        topic_ids[topic] = topic_id
    offsets.update({r.tp.key: r.end for r in plan.ranges})
    return dict(sorted(offsets.items())), topic_ids


def build_manifest(
    plan: OffsetPlan,
    previous: Mapping[str, Any] | None,
    partition_stats: Iterable[Mapping[str, Any]] = (),
    files: Iterable[Mapping[str, Any]] = (),
    staging: str | None = None,
    location: str | None = None,
    schema: str | None = None,
    written_at: str = "",
    options: Mapping[str, Any] | None = None,
    timings: Mapping[str, float] | None = None,
    dead_letters: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The log entry of ``plan``.

    :param previous: the log entry before it (``None`` for the first).
    :param partition_stats: per Kafka partition: ``topic``, ``partition``, ``rows``,
        ``min_offset``, ``max_offset``, ``min_timestamp``, ``max_timestamp``.
    :param files: ``{"name", "bytes", "rows"}`` of each data file (names inside the batch's folder).
    :param staging: where the files wait until they are published (relative to the output).
    :param location: where the files are read once published (default ``batch_id=<id>``).
    :param dead_letters: (``--on-bad-record dead-letter``) the batch's dead-letter ``files``
        (``{"name", "bytes", "rows"}``), where they are ``staging`` and their ``location`` once
        published; each partition's count is the ``dead_letters`` of its stats.
    """
    stats = {(s["topic"], int(s["partition"])): s for s in partition_stats}
    unplanned = sorted(set(stats) - {(r.topic, r.partition) for r in plan.readable_ranges})
    if unplanned:
        raise ManifestError(f"batch {plan.batch_id}: written data holds unplanned partitions {unplanned}")
    ranges = []
    for r in plan.ranges:
        s = stats.get((r.topic, r.partition), {})
        ranges.append(
            {
                **r.to_dict(),
                "rows": int(s.get("rows", 0)),
                "min_offset": s.get("min_offset"),
                "max_offset": s.get("max_offset"),
                "min_timestamp": s.get("min_timestamp"),
                "max_timestamp": s.get("max_timestamp"),
                **({"dead_letters": int(s.get("dead_letters", 0))} if dead_letters is not None else {}),
            }
        )
    offsets, topic_ids = offsets_after(previous, plan)
    files = sorted(files, key=lambda f: f["name"])
    manifest = {
        "format_version": MANIFEST_FORMAT_VERSION,
        "seq": plan.seq,
        "batch_id": plan.batch_id,
        "previous": None if previous is None else {"seq": previous["seq"], "batch_id": previous["batch_id"]},
        "mode": plan.mode,
        "group_id": plan.group_id,
        "topic_ids": topic_ids,
        "offsets": offsets,
        "ranges": ranges,
        "gaps": [g.to_dict() for g in plan.gaps],
        "rows": sum(r["rows"] for r in ranges),
        "location": (location or data_dir_name(plan.batch_id)) if files else None,
        "files": files,
        "staging": staging if files else None,
        "schema": schema,
        "written_at": written_at,
        "options": dict(options or {}),
        "timings": dict(timings or {}),
        # the group this output adopted from another output (core/group_owner.py), in its first entry
        **({"adopted": plan.extra["adopted"]} if plan.extra.get("adopted") else {}),
        # the topic pattern's topics that came and left since the previous batch (core/topic_patterns.py)
        **({PATTERN_PLAN_KEY: plan.extra[PATTERN_PLAN_KEY]} if plan.extra.get(PATTERN_PLAN_KEY) else {}),
    }
    if dead_letters is not None:
        letter_files = sorted(dead_letters.get("files", []), key=lambda f: f["name"])
        manifest["dead_letters"] = {
            "rows": sum(r["dead_letters"] for r in ranges),
            "files": letter_files,
            "staging": dead_letters.get("staging") if letter_files else None,
            "location": dead_letters.get("location") if letter_files else None,
        }
    verify_manifest(plan, manifest)
    return manifest


def verify_manifest(plan: OffsetPlan, manifest: Mapping[str, Any]) -> None:
    """Raise :class:`ManifestError` unless the entry is the plan's and covers exactly its ranges.

    Rows may be fewer than offsets (transaction markers, compaction), never more, and every
    written offset must lie inside its planned range; the files' rows add up to the total.
    """
    bid = plan.batch_id
    if manifest.get("format_version") != MANIFEST_FORMAT_VERSION:
        raise ManifestError(f"batch {bid}: unsupported manifest format_version {manifest.get('format_version')!r}")
    if manifest.get("batch_id") != bid or manifest.get("seq") != plan.seq:
        raise ManifestError(
            f"output log entry {manifest.get('seq')} is batch {manifest.get('batch_id')!r}, "
            f"not batch {bid} planned as entry {plan.seq}"
        )
    linked = (manifest.get("previous") or {}).get("batch_id")
    if linked != plan.previous:
        raise ManifestError(f"batch {bid}: the log entry follows batch {linked!r}, the plan followed {plan.previous!r}")
    planned = {(r.topic, r.partition): (r.start, r.end) for r in plan.ranges}
    written = {(m["topic"], int(m["partition"])): m for m in manifest.get("ranges", [])}
    if set(planned) != set(written):
        raise ManifestError(
            f"batch {bid}: manifest partitions {sorted(written)} differ from the plan's {sorted(planned)}"
        )
    for key, (start, end) in planned.items():
        m = written[key]
        where = f"batch {bid} {key[0]}[{key[1]}]"
        if (int(m["start"]), int(m["end"])) != (start, end):
            raise ManifestError(
                f"{where}: manifest range [{m['start']}, {m['end']}) differs from plan [{start}, {end})"
            )
        rows = int(m["rows"])
        if rows + int(m.get("dead_letters", 0)) > end - start:
            raise ManifestError(
                f"{where}: {rows} rows and {m.get('dead_letters', 0)} dead letters written for {end - start} "
                "planned offsets (duplicates?)"
            )
        if rows and not (start <= int(m["min_offset"]) and int(m["max_offset"]) < end):
            raise ManifestError(
                f"{where}: written offsets [{m['min_offset']}, {m['max_offset']}] fall outside [{start}, {end})"
            )
    total = sum(int(m["rows"]) for m in written.values())
    if total != int(manifest.get("rows", -1)) or total != sum(int(f["rows"]) for f in manifest.get("files", [])):
        raise ManifestError(f"batch {bid}: the manifest's row counts (ranges, total, files) do not agree")
    letters = manifest.get("dead_letters")
    if letters is not None:
        counted = sum(int(m.get("dead_letters", 0)) for m in written.values())
        if not counted == int(letters["rows"]) == sum(int(f["rows"]) for f in letters["files"]):
            raise ManifestError(f"batch {bid}: the manifest's dead-letter counts (ranges, total, files) do not agree")


def log_position(entry: Mapping[str, Any], kafka_commit_recorded: bool) -> LogPosition:
    """What reconciliation needs from the log's newest entry."""
    unfinished: dict[TopicPartition, tuple[int | None, int]] = {}
    if not kafka_commit_recorded and entry.get("mode") == INCREMENTAL:
        unfinished = {
            TopicPartition(r["topic"], int(r["partition"])): (r["expected_committed"], int(r["end"]))
            for r in entry["ranges"]
        }
    return LogPosition(
        seq=int(entry["seq"]),
        batch_id=str(entry["batch_id"]),
        offsets={TopicPartition.from_key(k): int(v) for k, v in entry.get("offsets", {}).items()},
        topic_ids=dict(entry.get("topic_ids", {})),
        unfinished=unfinished,
    )


def entry_files(entry: Mapping[str, Any]) -> dict[str, int]:
    """``{name: bytes}`` of the entry's data files (names inside the batch's folder)."""
    return {f["name"]: int(f["bytes"]) for f in entry.get("files", [])}


def dead_letter_files(entry: Mapping[str, Any]) -> dict[str, int]:
    """``{name: bytes}`` of the entry's dead-letter files (names inside their folder)."""
    return {f["name"]: int(f["bytes"]) for f in (entry.get("dead_letters") or {}).get("files", [])}


def dead_letter_count(entry: Mapping[str, Any]) -> int:
    """How many of the batch's records are dead letters (0 for batches written without them)."""
    return int((entry.get("dead_letters") or {}).get("rows", 0))


def dead_letters_by_partition(entry: Mapping[str, Any]) -> dict[str, list[int]]:
    """``{"topic:partition": [dead letters, rows]}`` of the partitions where the batch has dead letters."""
    return {
        TopicPartition(r["topic"], int(r["partition"])).key: [int(r["dead_letters"]), int(r["rows"])]
        for r in entry.get("ranges", [])
        if r.get("dead_letters")
    }


def recorded_dead_letters(record: Mapping[str, Any]) -> int:
    """How many dead letters a Kafka commit record counts (its ``dead_letters``: :func:`dead_letters_by_partition`)."""
    return sum(int(dead) for dead, _ in (record.get("dead_letters") or {}).values())


def plan_of_entry(entry: Mapping[str, Any]) -> OffsetPlan:
    """The plan a log entry was written for (what the commit step needs when the plan file is gone)."""
    ranges = tuple(OffsetRange.from_dict(r) for r in entry["ranges"])
    return OffsetPlan(
        batch_id=str(entry["batch_id"]),
        mode=str(entry["mode"]),
        group_id=entry.get("group_id"),
        topics=tuple(sorted({r.topic for r in ranges})),
        isolation_level="read_committed",
        ranges=ranges,
        seq=int(entry["seq"]),
        previous=(entry.get("previous") or {}).get("batch_id"),
        topic_ids={t: i for t, i in entry.get("topic_ids", {}).items() if t in {r.topic for r in ranges}},
        gaps=tuple(OffsetGap.from_dict(g) for g in entry.get("gaps", [])),
    )
