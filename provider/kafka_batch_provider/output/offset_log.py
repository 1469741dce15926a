"""The output's offset log: ``<output>/_log/<seq>.json``, one manifest per batch, append-only.

An entry is created only if its name is free (:meth:`Location.create_exclusive`: ``link(2)``
on local disks, a conditional write on object stores), so of two writers appending entry *n*
exactly one succeeds; the other learns it lost and publishes nothing. Entries are never
changed or removed by this package.

Finding the newest entry must not list a long history on every batch: ``_log/_tail.json``
remembers the newest sequence seen (written after each append, best effort), and the log is
probed forward from there until a sequence is free. The hint may lag behind (a writer that
died after its append) but never runs ahead, so probing always ends at the true tail.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from kafka_batch_provider.errors import ManifestError, StorageError
from kafka_batch_provider.output.location import Location, json_bytes

LOG_DIR = "_log"
TAIL_HINT = f"{LOG_DIR}/_tail.json"
#: What every entry holds (checked when read, so a damaged entry is one clear line).
ENTRY_KEYS = ("seq", "batch_id", "mode", "ranges", "offsets", "files", "rows")


def entry_name(seq: int) -> str:
    return f"{LOG_DIR}/{seq:020d}.json"


class OffsetLog:
    """The offset log of one output.

    :param location: the output's location.
    """

    def __init__(self, location: Location) -> None:
        self.location = location

    def entry(self, seq: int) -> dict[str, Any] | None:
        """Entry ``seq``, or ``None`` when there is none."""
        if seq < 1:
            return None
        try:
            data = self.location.read_bytes(entry_name(seq))
        except FileNotFoundError:
            return None
        where = self.location.uri_of(entry_name(seq))
        try:
            entry = json.loads(data)
        except ValueError as exc:
            raise ManifestError(f"output log entry {where} is not valid JSON: {exc}") from None
        missing = [key for key in ENTRY_KEYS if not isinstance(entry, dict) or key not in entry]
        if missing or entry.get("seq") != seq:
            problem = f"missing {', '.join(missing)}" if missing else f"it says seq {entry.get('seq')}"
            raise ManifestError(f"output log entry {where} is damaged ({problem}); was the log edited by hand?")
        return entry

    def seqs(self) -> list[int]:
        """Every entry's sequence number, ascending (lists the log folder)."""
        found = []
        for name in self.location.list_names(LOG_DIR):
            stem = name.removesuffix(".json")
            if name.endswith(".json") and stem.isdigit():
                found.append(int(stem))
        return sorted(found)

    def tail_seq(self) -> int:
        """The newest entry's sequence number (0 for an empty log)."""
        try:
            seq = int(json.loads(self.location.read_bytes(TAIL_HINT))["seq"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            seq = 0
        if seq and not self.location.exists(entry_name(seq)):
            seq = 0  # a hint without its entry: trust only a listing
        if not seq:
            seqs = self.seqs()
            seq = seqs[-1] if seqs else 0
        while self.location.exists(entry_name(seq + 1)):
            seq += 1
        return seq

    def tail(self) -> dict[str, Any] | None:
        """The newest entry, or ``None`` for an empty log."""
        return self.entry(self.tail_seq())

    def append(self, entry: dict[str, Any]) -> bool:
        """Create entry ``entry["seq"]`` if no entry has that sequence yet; ``False`` when one has.

        The predecessor must exist: the log has no holes.
        """
        seq = int(entry["seq"])
        if seq > 1 and not self.location.exists(entry_name(seq - 1)):
            raise ManifestError(f"output log entry {seq - 1} is missing in {self.location}: cannot append entry {seq}")
        if seq == 1:
            self.location.require_exclusive_create(LOG_DIR, "the offset log")
        if not self.location.create_exclusive(entry_name(seq), json_bytes(entry)):
            return False
        try:
            self.location.put_atomic(TAIL_HINT, json_bytes({"seq": seq}))
        except (OSError, StorageError):
            pass  # only a hint: the next reader probes forward from an older one
        return True

    def entries(self, last: int | None = None) -> Iterator[dict[str, Any]]:
        """Every entry (``last``: the newest ones), oldest first."""
        seqs = self.seqs()
        for seq in seqs if last is None else seqs[-last:]:
            entry = self.entry(seq)
            if entry is not None:
                yield entry
