"""The Parquet layout's compaction: runs of small batch folders rewritten into files near a target size.

Beside the offset log, a second exclusive-create log records compactions::

    _log/compactions/<n>.json      compaction n: the folders it supersedes and the files replacing them
    batch_id=<compaction id>/      the compacted files (their batch_id column names the compaction)

A compaction goes like a batch:

1. the small folders' files are copied row by row into ``_staging/<compaction id>.<attempt>/``
   (invisible), rolled at the target size, and their rows counted against the folders';
2. record *n* is created only if its name is free (the commit point: of two upkeeps racing,
   one compacts, the other stops);
3. the compacted folder is published as a batch is (one rename on a local disk, a copy per
   file on an object store), then the superseded folders are deleted.

Whoever finds the newest record unfinished (the next upkeep) finishes steps 3. Readers that
follow the log (:meth:`ParquetLayout.readable_files`) see each row exactly once at every
moment: the superseded folders until the record exists, the compacted one after. A plain
folder reader may see the compacted rows twice between the publish and the deletes (on a
local disk a few renames; after a crash there, until the next upkeep).

The newest log entry is never compacted: the next batch's write and the commit step's checks
read its files. Offsets live in the log entries, which compaction never touches.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_batch_provider.core.manifest import data_dir_name, entry_files
from kafka_batch_provider.core.upkeep import Unit, UpkeepReport, UpkeepSettings, compaction_runs, settled_through
from kafka_batch_provider.errors import ManifestError
from kafka_batch_provider.fail_points import fail_point
from kafka_batch_provider.output.location import fsync_dir, json_bytes
from kafka_batch_provider.output.offset_log import LOG_DIR
from kafka_batch_provider.output.parquet_files import PartFiles

COMPACTIONS = f"{LOG_DIR}/compactions"
#: Rows copied per read from a source file (bounded memory, whatever the folder's size).
COPY_ROWS = 65_536


def record_name(n: int) -> str:
    return f"{COMPACTIONS}/{n:020d}.json"


class Compactions:
    """The compaction records of one Parquet layout, and what they make readable.

    :param layout: the :class:`~kafka_batch_provider.output.parquet_layout.ParquetLayout`.
    """

    def __init__(self, layout: Any) -> None:
        self.layout = layout
        self.data = layout.data

    def records(self) -> list[dict[str, Any]]:
        """Every compaction record, oldest first."""
        found = []
        for name in self.data.list_names(COMPACTIONS):
            stem = name.removesuffix(".json")
            if name.endswith(".json") and stem.isdigit():
                found.append(self.record(int(stem)))
        return found

    def record(self, n: int) -> dict[str, Any]:
        where = self.data.uri_of(record_name(n))
        try:
            record = json.loads(self.data.read_bytes(record_name(n)))
        except ValueError as exc:
            raise ManifestError(f"compaction record {where} is not valid JSON: {exc}") from None
        if not isinstance(record, dict) or record.get("n") != n or "supersedes" not in record:
            raise ManifestError(f"compaction record {where} is damaged; was the log edited by hand?")
        return record

    def superseded(self) -> set[str]:
        """The folders a compaction replaced (readers skip them)."""
        return replaced(self.records())

    # -- readers ------------------------------------------------------------------------------

    def readable_units(self, entries: list[dict[str, Any]], records: list[dict[str, Any]]) -> list[Unit]:
        """The folders readers read: compactions not superseded since, then batches not compacted."""
        gone = replaced(records)
        units = [unit_of(record) for record in records if data_dir_name(record["batch_id"]) not in gone]
        return units + [unit_of(e) for e in entries if e.get("files") and data_dir_name(e["batch_id"]) not in gone]

    # -- upkeep -------------------------------------------------------------------------------

    def finish(self, progress: Callable[[str], None], records: list[dict[str, Any]] | None = None) -> int:
        """Finish every compaction a crash cut short (or another upkeep is finishing now: both
        steps are idempotent): publish its folder, delete the folders it replaced.

        :returns: files removed.
        """
        records = self.records() if records is None else records
        if not records:
            return 0
        listed = set(self.data.list_names(""))  # one listing for all records
        staged = {f"_staging/{name}" for name in self.data.list_names("_staging")}
        removed = 0
        for record in records:
            unpublished = bool(record.get("files")) and (
                record["location"] not in listed or record.get("staging") in staged
            )
            left = sorted(set(record["supersedes"]) & listed)
            if unpublished:
                self.layout.publish(record)
            if left:
                files = sum(len(self.data.file_sizes(folder)) for folder in left)
                progress(
                    f"finishing compaction {record['n']}: removing {len(left)} replaced folder(s), {files} file(s)"
                )
                for folder in left:
                    self.data.delete_tree(folder)
                removed += files
        return removed

    def compact(self, settings: UpkeepSettings, report: UpkeepReport, progress: Callable[[str], None]) -> None:
        """Rewrite the runs of small folders (all but the newest log entry's) into files near the target."""
        records = self.records()
        if not settings.dry_run:
            # A compaction recorded since upkeep began (another upkeep's, maybe cut short): its
            # folder must be in place before it can be read again.
            report.removed_files += self.finish(progress, records)
        tail_seq = self.layout.tail_seq()
        through = max((int(r["through_seq"]) for r in records), default=0)
        # Entries up to the mark are settled (compacted, large, without files, or never mergeable).
        window = [e for e in (self.layout.entry(seq) for seq in range(through + 1, tail_seq)) if e]
        runs = compaction_runs(self.readable_units(window, records), settings.target_bytes)
        merged = replaced(records) | {u.folder for run in runs for u in run}
        mark = settled_through(
            [(int(e["seq"]), unit_of(e)) for e in window], merged, settings.target_bytes, tail_seq - 1
        )
        compacted = [sum(len(u.files) for u in run) for run in runs]
        if settings.dry_run:
            written = sum(-(-sum(u.bytes for u in run) // settings.target_bytes) for run in runs)  # ceil
            count_compacted(report, sum(compacted), written)
            return
        n = records[-1]["n"] if records else 0
        for index, run in enumerate(runs):
            n += 1
            # Only the last run moves the mark: the earlier ones' entries all lie below it.
            record = self.compact_run(n, run, settings, mark if index == len(runs) - 1 else through, progress)
            if record is None:
                report.notes.append(f"another upkeep took compaction {n} first; the rest is left to it")
                return
            count_compacted(report, compacted[index], len(record["files"]))
        if not runs and mark > through:
            # Nothing to merge: remember where this look ended, so the next one starts there.
            self.compact_run(n + 1, [], settings, mark, progress)

    def compact_run(
        self, n: int, run: list[Unit], settings: UpkeepSettings, through_seq: int, progress: Callable[[str], None]
    ) -> dict[str, Any] | None:
        """Compaction ``n`` of ``run``; ``None`` when another upkeep created record ``n`` first."""
        cid = f"compaction-{n:06d}-{uuid.uuid4().hex[:8]}"
        staging = f"_staging/{cid}.{uuid.uuid4().hex[:8]}"
        rows = sum(u.rows for u in run)
        files = PartFiles(self.data, staging, "part", "snappy", target_bytes=settings.target_bytes)
        if run:
            progress(
                f"compaction {n}: rewriting {len(run)} folder(s), {sum(len(u.files) for u in run)} file(s), "
                f"{rows} rows, into files of ~{settings.target_file_mb} MB"
            )
        try:
            schema = self.run_schema(run)
            for unit in run:
                for name in unit.files:
                    with self.data.open_input(f"{unit.folder}/{name}") as source:
                        for batch in pq.ParquetFile(source).iter_batches(batch_size=COPY_ROWS):
                            files.write(None, batch.cast(schema))
        except BaseException:
            files.close(finish=False)
            self.data.delete_tree(staging)
            raise
        files.close()
        if files.files and self.data.is_local:  # the record will rely on these names being on disk
            fsync_dir(self.data.path(staging))
        written = files.report()
        copied = sum(f["rows"] for f in written)
        if copied != rows:  # a folder whose files disagree with its log entry: never replace it
            self.data.delete_tree(staging)
            raise ManifestError(f"compaction {n}: copied {copied} rows, the folders' log entries list {rows}")
        record = {
            "n": n,
            "what": f"compaction {n}",
            "batch_id": cid,
            "supersedes": [u.folder for u in run],
            "through_seq": through_seq,
            "files": written,
            "rows": copied,
            "schema": run[0].schema if run else None,
            "staging": staging if written else None,
            "location": data_dir_name(cid) if written else None,
        }
        fail_point("compaction-before-record")
        if not self.data.create_exclusive(record_name(n), json_bytes(record)):
            self.data.delete_tree(staging)
            return None
        fail_point("compaction-after-record")
        self.layout.publish(record)
        for unit in run:
            self.data.delete_tree(unit.folder)
        return record

    def run_schema(self, run: list[Unit]) -> pa.Schema | None:
        """The schema a run's merged files are written with: the folders' own, which are alike but
        for nullability (a later schema version made a nested field optional), nullable wherever any
        folder's is (Spark's schema string, which runs are grouped by, does not tell)."""
        found = []
        for unit in run:
            for name in unit.files:
                with self.data.open_input(f"{unit.folder}/{name}") as source:
                    found.append(pq.read_schema(source))
        return pa.unify_schemas(found) if found else None


def replaced(records: list[dict[str, Any]]) -> set[str]:
    """The folders these compactions replaced."""
    return {folder for record in records for folder in record["supersedes"]}


def unit_of(entry: dict[str, Any]) -> Unit:
    """A log entry's or compaction record's folder."""
    files = entry_files(entry)
    folder = data_dir_name(entry["batch_id"])
    return Unit(
        folder,
        tuple(sorted(files)),
        sum(files.values()),
        int(entry["rows"]),
        str(entry.get("schema")),
        entry.get("staging"),
    )


def count_compacted(report: UpkeepReport, compacted: int, written: int) -> None:
    """Add one compaction's files to the report (a compaction deletes the files it replaced)."""
    report.compacted_files += compacted
    report.written_files += written
    report.removed_files += compacted
    report.files_after += written - compacted
