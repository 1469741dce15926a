"""The Parquet layout: one folder of Parquet files per batch, manifests as the offset log.

Layout (every name starting with ``_`` is invisible to Parquet readers)::

    <output>/
      batch_id=<id>/part-*.parquet     published data, one folder per batch
      _log/<seq>.json                  the offset log: one manifest per batch, the commit point
      _staging/<id>.<attempt>/         what the Spark tasks wrote, until it is published
      _dead_letters/batch_id=<id>/     the batch's dead letters, once published

A batch becomes part of the output when its log entry is created (exclusively, see
:mod:`kafka_batch_provider.output.offset_log`). Publishing its files follows the entry and is
rolled forward by whoever finds it unfinished: on a local disk one atomic rename of the
staging folder (readers see all of the batch or none of it); on an object store a
server-side copy of each file into ``batch_id=<id>/`` (a reader listing the folder meanwhile
may see part of the batch, never a file of a batch that is not in the log, and never a file
twice). Upkeep rewrites runs of small batch folders into larger files
(:mod:`kafka_batch_provider.output.parquet_compaction`); :meth:`ParquetLayout.readable_files`
is what a reader that wants every row exactly once at every moment reads.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from kafka_batch_provider.core.manifest import data_dir_name, entry_files
from kafka_batch_provider.errors import ManifestError, StorageError, WriteCheckError
from kafka_batch_provider.output.dead_letter_files import staged_dead_letters
from kafka_batch_provider.output.location import Location
from kafka_batch_provider.output.offset_log import OffsetLog
from kafka_batch_provider.output.sink import PARQUET

STAGING = "_staging"
#: readable_files reads the log and lists the output again when a file moved between the two.
READ_ATTEMPTS = 3


class ParquetLayout:
    """The default sink (``--format parquet``).

    :param location: the output folder.
    """

    format = PARQUET
    dead_letter_root = "_dead_letters"

    def __init__(self, location: Location) -> None:
        from kafka_batch_provider.output.parquet_compaction import Compactions

        self.data = location
        self.log = OffsetLog(location)
        self.compactions = Compactions(self)

    # -- the offset log ----------------------------------------------------------------------

    def entry(self, seq: int) -> dict[str, Any] | None:
        return self.log.entry(seq)

    def tail_seq(self) -> int:
        return self.log.tail_seq()

    def tail(self) -> dict[str, Any] | None:
        return self.log.tail()

    def entries(self, last: int | None = None) -> Iterator[dict[str, Any]]:
        return self.log.entries(last)

    def append(self, manifest: dict[str, Any]) -> bool:
        return self.log.append(manifest)

    # -- staging and publishing --------------------------------------------------------------

    def staging_folder(self, batch_id: str) -> str:
        """A fresh folder per attempt, so a retry never writes into a crashed attempt's files."""
        return f"{STAGING}/{batch_id}.{uuid.uuid4().hex[:8]}"

    def clean_staging(self, batch_id: str, keep: str | None = None) -> None:
        """Remove what earlier attempts of ``batch_id`` left (never another batch's)."""
        for name in self.data.list_names(STAGING):
            if name.startswith(f"{batch_id}.") and f"{STAGING}/{name}" != keep:
                self.data.delete_tree(f"{STAGING}/{name}")

    def old_staging(self, before: float, in_flight: set[str]) -> dict[str, int]:
        """``{folder: files}`` of the staging folders whose newest file is older than ``before``
        (epoch seconds): attempts that failed, or publishes that left their folder; never those
        of the ``in_flight`` batches (planned, not yet in the log). Call after the log's newest
        batch is published: every older logged batch was published by the plan step that
        followed it."""
        newest: dict[str, float] = {}
        files: dict[str, int] = {}
        for name, (_, modified) in self.data.files_below(STAGING).items():
            folder = name.split("/", 1)[0]  # <batch id>.<attempt>, see staging_folder
            if folder.split(".", 1)[0] in in_flight:
                continue
            newest[folder] = max(newest.get(folder, 0.0), modified)
            files[folder] = files.get(folder, 0) + 1
        return {
            f"{STAGING}/{folder}": files[folder] for folder, modified in sorted(newest.items()) if modified < before
        }

    def data_file_count(self) -> int:
        """The published files (one listing of the output, not a read per log entry)."""
        return sum(1 for name in self.data.files_below("") if name.startswith("batch_id=") and "/" in name)

    def readable_files(self) -> list[str]:
        """The data files as the log has them, each row exactly once even while upkeep compacts
        or a publish is cut short (URIs, or paths on a local disk): a plain listing of the output
        may show a batch in part on an object store, or a compaction's rows twice."""
        for _ in range(READ_ATTEMPTS):
            records = self.compactions.records()
            units = self.compactions.readable_units(list(self.entries()), records)
            listed = self.data.files_below("")  # one listing, not one per folder
            found, missing = [], []
            for unit in units:
                for name in unit.files:
                    # A publish cut short (a crash, or one still copying): the staged file is complete.
                    path = next((p for p in (f"{unit.folder}/{name}", f"{unit.staging}/{name}") if p in listed), None)
                    (found if path else missing).append(path or f"{unit.folder}/{name}")
            if not missing:
                return [self.data.uri_of(path) for path in found]
            # A publish or a compaction that moved files between our reads: read the log again.
        raise ManifestError(
            f"{self.data.uri_of(missing[0])} is in the output's log but neither published nor staged "
            f"({len(missing)} file(s), {READ_ATTEMPTS} reads): the output lost data"
        )

    def compacted(self, entry: dict[str, Any]) -> bool:
        """Whether a compaction replaced the entry's folder (its rows are in the compaction's)."""
        return data_dir_name(entry["batch_id"]) in self.compactions.superseded()

    def drop_saved_manifest(self, manifest: dict[str, Any]) -> None:
        """Nothing to do: this layout's manifests exist only as log entries."""

    def check_columns(self, schema: pa.Schema) -> None:
        """Parquet takes every column type the decoders make."""

    def published_files(self, batch_id: str) -> dict[str, int]:
        return self.data.file_sizes(data_dir_name(batch_id))

    def is_published(self, entry: dict[str, Any]) -> bool:
        found = self.published_files(entry["batch_id"])
        return all(found.get(name) == size for name, size in entry_files(entry).items())

    def seal(self, staging: str, names: list[str]) -> str:
        """The folder to publish: exactly ``names`` of ``staging``.

        Local disks publish a whole folder with one rename, so the reported files move into a
        fresh folder no Spark task knows: a file that a lingering task attempt creates late in
        ``staging`` can never be renamed into place. Object stores copy file by file and need
        nothing of this.
        """
        if not self.data.is_local or not names:  # no files (e.g. only transaction markers read)
            return staging
        sealed = f"{staging}.sealed"
        try:
            self.data.move_files(staging, sealed, names)
            if self.data.exists(staged_dead_letters(staging)):  # they go with the batch (publish takes theirs)
                self.data.rename_folder(staged_dead_letters(staging), staged_dead_letters(sealed))
        except FileNotFoundError as exc:
            raise WriteCheckError(f"a file of {staging} vanished before it was published ({exc.filename})") from None
        try:
            self.data.delete_tree(staging)  # what is left: files no successful task reported
        except StorageError:
            pass  # a late writer still at it: invisible under _staging, removed with the batch's leftovers
        return sealed

    def batch_location(self, batch_id: str, sealed: str) -> str:
        """Where readers find the batch's files once published."""
        return data_dir_name(batch_id)

    def publish(self, entry: dict[str, Any]) -> None:
        """Make a logged batch's files visible; idempotent, so it also finishes a publish cut short.

        Two publishers of one entry (a plan step rolling it forward while its writer publishes)
        are fine: whoever finds the work done stops.

        :raises ManifestError: when files the entry lists are neither published nor staged.
        """
        try:
            self._publish(entry)
        except FileNotFoundError:
            if not self.is_published(entry) and not self.compacted(entry):
                raise ManifestError(
                    f"batch {entry['batch_id']} ({where(entry)}): its staged files disappeared "
                    "while it was being published, and it is not published"
                ) from None
        except ManifestError:
            # Else another publisher finished between our two listings, or upkeep compacted it.
            if not self.is_published(entry) and not self.compacted(entry):
                raise

    def _publish(self, entry: dict[str, Any]) -> None:
        files = entry_files(entry)
        if not files:
            return
        final, staging = data_dir_name(entry["batch_id"]), entry["staging"]
        found = self.published_files(entry["batch_id"])
        if all(found.get(n) == size for n, size in files.items()):
            if self.data.exists(staging):
                self.data.delete_tree(staging)
            return
        staged = self.data.file_sizes(staging)
        lost = sorted(n for n, size in files.items() if found.get(n) != size and staged.get(n) != size)
        if lost:
            raise ManifestError(
                f"batch {entry['batch_id']} ({where(entry)}) lists {len(lost)} file(s) that are "
                f"neither published nor staged, e.g. {data_dir_name(entry['batch_id'])}/{lost[0]}: the output lost data"
            )
        strays = sorted(set(found) - set(files))
        if strays and not self.data.is_local:
            # Files of an attempt whose log entry was lost: readers would count them with this
            # entry's files. The entry is the truth, and its files are copied after this.
            self.data.delete(f"{final}/{name}" for name in strays)
        if self.data.is_local:
            if found:  # never merge: set aside whatever a foreign hand left there
                self.data.rename_folder(final, f"{STAGING}/{entry['batch_id']}.displaced.{uuid.uuid4().hex[:8]}")
            self.data.rename_folder(staging, final)  # one rename: all of the batch or none of it
            return
        for name, size in files.items():
            if found.get(name) != size:
                self.data.copy(f"{staging}/{name}", f"{final}/{name}")
        self.data.delete_tree(staging)

    def check_published(self, entry: dict[str, Any]) -> None:
        """Raise :class:`ManifestError` unless every file the entry lists is in place with its size."""
        found = self.published_files(entry["batch_id"])
        wrong = sorted(n for n, size in entry_files(entry).items() if found.get(n) != size)
        if wrong and not self.compacted(entry):
            raise ManifestError(
                f"batch {entry['batch_id']}: {len(wrong)} of its {len(entry_files(entry))} file(s) are missing or "
                f"changed in {self.data.uri_of(data_dir_name(entry['batch_id']))} (e.g. {wrong[0]}); "
                "its offsets are not committed"
            )


def where(entry: dict[str, Any]) -> str:
    """Which record of the log an entry is, for messages: a batch's entry or a compaction's."""
    return entry.get("what") or f"output log entry {entry['seq']}"
