"""The batch manifest: what was written, and the check that it is what was planned.

The manifest is written last, after the data is published; its presence is the storage-side
commit point. The commit step moves the group's offsets only after :func:`verify_manifest`
agrees with the plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kafka_batch_provider.errors import ManifestError
from kafka_batch_provider.plan import OffsetPlan

MANIFEST_FORMAT_VERSION = 1


def build_manifest(
    plan: OffsetPlan,
    partition_stats: Iterable[Mapping[str, Any]],
    files: Iterable[Mapping[str, Any]],
    location: str,
    schema: str,
    written_at: str,
    options: Mapping[str, Any],
    timings: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Assemble a manifest from per-partition statistics of the written data.

    :param partition_stats: per Kafka partition: ``topic``, ``partition``, ``rows``,
        ``min_offset``, ``max_offset``, ``min_timestamp``, ``max_timestamp``.
    :param files: ``{"path": relative path, "bytes": size}`` of each data file.
    """
    stats = {(s["topic"], int(s["partition"])): s for s in partition_stats}
    ranges = []
    for r in plan.readable_ranges:
        s = stats.get((r.topic, r.partition), {})
        ranges.append(
            {
                "topic": r.topic,
                "partition": r.partition,
                "start": r.start,
                "end": r.end,
                "rows": int(s.get("rows", 0)),
                "min_offset": s.get("min_offset"),
                "max_offset": s.get("max_offset"),
                "min_timestamp": s.get("min_timestamp"),
                "max_timestamp": s.get("max_timestamp"),
            }
        )
    unplanned = sorted(set(stats) - {(r.topic, r.partition) for r in plan.readable_ranges})
    if unplanned:
        raise ManifestError(f"batch {plan.batch_id}: written data holds unplanned partitions {unplanned}")
    manifest = {
        "format_version": MANIFEST_FORMAT_VERSION,
        "batch_id": plan.batch_id,
        "mode": plan.mode,
        "group_id": plan.group_id,
        "location": location,
        "ranges": ranges,
        "rows": sum(r["rows"] for r in ranges),
        "files": sorted(files, key=lambda f: f["path"]),
        "schema": schema,
        "written_at": written_at,
        "options": dict(options),
        "timings": dict(timings or {}),
    }
    verify_manifest(plan, manifest)
    return manifest


def verify_manifest(plan: OffsetPlan, manifest: Mapping[str, Any]) -> None:
    """Raise :class:`ManifestError` unless the manifest covers exactly the plan's ranges.

    Rows may be fewer than offsets (transaction markers, compaction), never more, and
    every written offset must lie inside its planned range.
    """
    bid = plan.batch_id
    if manifest.get("format_version") != MANIFEST_FORMAT_VERSION:
        raise ManifestError(f"batch {bid}: unsupported manifest format_version {manifest.get('format_version')!r}")
    if manifest.get("batch_id") != bid:
        raise ManifestError(f"manifest is for batch {manifest.get('batch_id')!r}, plan is {bid}")
    planned = {(r.topic, r.partition): (r.start, r.end) for r in plan.readable_ranges}
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
        if rows > end - start:
            raise ManifestError(f"{where}: {rows} rows written for {end - start} planned offsets (duplicates?)")
        if rows and not (start <= int(m["min_offset"]) and int(m["max_offset"]) < end):
            raise ManifestError(
                f"{where}: written offsets [{m['min_offset']}, {m['max_offset']}] fall outside [{start}, {end})"
            )
    if sum(int(m["rows"]) for m in written.values()) != int(manifest.get("rows", -1)):
        raise ManifestError(f"batch {bid}: manifest row total does not match its ranges")
