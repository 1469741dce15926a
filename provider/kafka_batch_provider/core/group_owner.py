"""Which output a consumer group feeds, as its commits say. Pure, no I/O.

Kafka keeps a string beside each committed offset (the commit's metadata). Each batch's commit
puts there the batch id and the output the batch was written to (its location's URI, which
holds no credentials), so a group's offsets tell which output they mirror. A group feeds one
output: a second output started from the same group would take records the first never sees,
and each would miss what the other took. A new output (no batch in its log yet) that meets a
group last committed by another output is refused, unless it adopts the group on purpose; it
then records the adoption in its first log entry. Commits of builds before this one hold the
bare batch id: their output is unknown and nothing is refused for them. An output URI too long
for Kafka's metadata limit is kept as its SHA-256 digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kafka_batch_provider.core.offsets import PartitionOffsets
from kafka_batch_provider.core.settings import Advice, Setting
from kafka_batch_provider.errors import GroupMismatchError

ADOPT = Advice(keywords="adopt_group=True", flags="--adopt-group")


@dataclass(frozen=True)
class GroupCommit:
    """What a committed offset's metadata says: the batch and the output it was written to."""

    batch_id: str | None
    output: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"batch_id": self.batch_id, "output": self.output}


#: Kafka's default ``offset.metadata.max.bytes`` (it counts characters): a longer metadata is
#: refused (OFFSET_METADATA_TOO_LARGE), after the batch is in the output.
METADATA_LIMIT = 4096


def commit_metadata(batch_id: str, output: str) -> str:
    """The metadata of a batch's Kafka commit; an output URI too long to fit as its digest."""
    text = json.dumps({"batch_id": batch_id, "output": output}, ensure_ascii=False, separators=(",", ":"))
    if len(text) <= METADATA_LIMIT:
        return text
    return json.dumps({"batch_id": batch_id, "output": output_digest(output)}, separators=(",", ":"))


def output_digest(output: str) -> str:
    """How a too long output URI is named in a commit's metadata."""
    return "sha256:" + hashlib.sha256(output.encode()).hexdigest()


def commit_of(metadata: str | None) -> GroupCommit | None:
    """The commit a committed offset's metadata names; ``None`` for none or someone else's."""
    if not metadata:
        return None
    try:
        found = json.loads(metadata)
    except ValueError:
        found = None
    if isinstance(found, dict) and isinstance(found.get("output"), str):
        return GroupCommit(str(found.get("batch_id") or "") or None, found["output"])
    if metadata.startswith("b-") and " " not in metadata:  # an earlier build's: the batch id alone
        return GroupCommit(metadata, None)
    return None


def another_output(states: Sequence[PartitionOffsets], output: str) -> GroupCommit | None:
    """The commit of another output that the group's committed offsets carry, if any."""
    for state in states:
        commit = commit_of(state.committed_metadata) if state.committed is not None else None
        if commit is not None and commit.output is not None and commit.output not in (output, output_digest(output)):
            return commit
    return None


def adopted_group(group_id: str, states: Sequence[PartitionOffsets], output: str, adopt: bool) -> GroupCommit | None:
    """For a new output: the other output whose group it adopts (``adopt``), or ``None``.

    :raises GroupMismatchError: the group was last committed by another output and ``adopt`` is off.
    """
    other = another_output(states, output)
    if other is None or adopt:
        return other
    raise GroupMismatchError(
        f"group {group_id!r} was last committed by another output, {other.output} (batch {other.batch_id}), and "
        f"{output} holds no batch yet: a group feeds one output, or each misses the records the other takes; "
        f"point this run at {other.output}, or start this output from the group's offsets on purpose with {ADOPT} "
        "(its first log entry records the adoption); nothing was changed",
        setting=Setting("adopt_group", "True"),
    )
