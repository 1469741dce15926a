"""Where a batch's dead letters live, and how they are published with the batch.

The Spark tasks write them into their attempt's staging folder, under ``_dead_letters/``.
The batch's log entry lists them (``dead_letters``: rows, files, where they are staged and
where they go), so they are part of the batch exactly when its data is: the same log entry,
Delta commit or Iceberg snapshot. After that commit point they are moved (a rename per file on
a local disk, a server-side copy on an object store) to one folder per batch::

    <output>/_dead_letters/batch_id=<id>/part-*.parquet                (the Parquet layout)
    <table>/_kafka_batch/_dead_letters/batch_id=<id>/part-*.parquet    (Delta, Iceberg)

Only files a log entry lists ever get there, so reading ``_dead_letters/*/*.parquet`` sees each
dead letter once (while a publish is under way, part of a batch's). Like the data's, publishing
is rolled forward by whoever finds it unfinished. The folder starts with ``_``: Parquet and Spark
readers of the output skip it, and neither Delta's ``vacuum`` nor our Iceberg orphan removal
(which looks under ``data/``) touches it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_batch_provider.core.manifest import dead_letter_files
from kafka_batch_provider.errors import ManifestError
from kafka_batch_provider.output.location import Location

#: The dead letters' folder inside an attempt's staging folder.
STAGED = "_dead_letters"


def staged_dead_letters(staging: str) -> str:
    """Where the tasks of the attempt staged in ``staging`` write their dead letters."""
    return f"{staging}/{STAGED}"


def attempt_staging(manifest: Mapping[str, Any]) -> str | None:
    """The staging folder of the attempt a manifest is (``None``: it staged nothing): where its data
    files wait, or for a batch of only dead letters, where those do."""
    staged = (manifest.get("dead_letters") or {}).get("staging")
    return manifest.get("staging") or (staged.removesuffix(f"/{STAGED}") if staged else None)


def dead_letter_folder(root: str, batch_id: str) -> str:
    """A batch's published dead letters: ``<root>/batch_id=<id>`` (``root``: the sink's ``dead_letter_root``)."""
    return f"{root}/batch_id={batch_id}"


def publish_dead_letters(data: Location, entry: Mapping[str, Any]) -> None:
    """Move a logged batch's dead letters from staging into their folder; idempotent, so it also
    finishes a publish cut short (and two publishers of one entry are fine).

    :raises ManifestError: when a listed file is neither published nor staged.
    """
    files = dead_letter_files(entry)
    if not files:
        return
    letters = entry["dead_letters"]
    final, staged = letters["location"], letters["staging"]
    found = data.file_sizes(final)  # one listing when (as mostly) the batch is published already
    strays = sorted(set(found) - set(files))
    if strays:  # another attempt's, whose entry was lost: never counted with this entry's
        data.delete(f"{final}/{name}" for name in strays)
    missing = sorted(name for name, size in files.items() if found.get(name) != size)
    if missing:
        try:
            staged_sizes = data.file_sizes(staged)
            lost = sorted(name for name in missing if staged_sizes.get(name) != files[name])
            if lost:
                raise ManifestError(
                    f"batch {entry['batch_id']} (output log entry {entry['seq']}) lists {len(lost)} dead-letter "
                    f"file(s) that are neither published nor staged, e.g. {final}/{lost[0]}: the output lost them"
                )
            if data.is_local:
                data.move_into(staged, final, missing)
            else:
                for name in missing:
                    data.copy(f"{staged}/{name}", f"{final}/{name}")
        except (FileNotFoundError, ManifestError):
            if unpublished(data, entry):  # else another publisher finished between our listings
                raise
    data.delete_tree(staged)  # moved, or copied: the staged copies are never read


def unpublished(data: Location, entry: Mapping[str, Any]) -> list[str]:
    """The entry's dead-letter files that are not in their folder with their size."""
    files = dead_letter_files(entry)
    if not files:
        return []
    found = data.file_sizes(entry["dead_letters"]["location"])
    return sorted(name for name, size in files.items() if found.get(name) != size)


def check_dead_letters_published(data: Location, entry: Mapping[str, Any]) -> None:
    """Raise :class:`ManifestError` unless every dead letter the entry lists is in place."""
    wrong = unpublished(data, entry)
    if wrong:
        raise ManifestError(
            f"batch {entry['batch_id']}: {len(wrong)} of its {len(dead_letter_files(entry))} dead-letter file(s) "
            f"are missing or changed in {data.uri_of(entry['dead_letters']['location'])} (e.g. {wrong[0]}); "
            "its offsets are not committed"
        )
