"""Which output a consumer group feeds, as its commits' metadata says (core/group_owner.py)."""

from __future__ import annotations

import pytest

from kafka_batch_provider.core.group_owner import GroupCommit, adopted_group, another_output, commit_metadata, commit_of
from kafka_batch_provider.core.offsets import PartitionOffsets
from kafka_batch_provider.errors import GroupMismatchError


def state(metadata: str | None, committed: int | None = 5) -> PartitionOffsets:
    return PartitionOffsets("orders", 0, committed, 0, 10, metadata)


def test_a_commits_metadata_names_its_batch_and_output_and_reads_back():
    text = commit_metadata("b-1", "s3://lake/orders")
    assert commit_of(text) == GroupCommit("b-1", "s3://lake/orders"), f"found {commit_of(text)}"
    assert len(text) < 4096, "Kafka keeps at most offset.metadata.max.bytes (4096 by default)"


@pytest.mark.parametrize(
    "metadata, expected",
    [
        ("b-0a1b2c3d4e5f60718293", GroupCommit("b-0a1b2c3d4e5f60718293", None)),  # an earlier build's: no output
        ("", None),
        (None, None),
        ("some other tool's note", None),
        ('{"output": 7}', None),
    ],
)
def test_commits_of_earlier_builds_and_other_tools_name_no_output(metadata, expected):
    assert commit_of(metadata) == expected, f"expected {expected} for {metadata!r}, found {commit_of(metadata)}"


def test_only_a_committed_offset_of_another_output_counts():
    mine, theirs = commit_metadata("b-1", "file:///lake/a"), commit_metadata("b-2", "file:///lake/b")
    assert another_output([state(mine)], "file:///lake/a") is None
    assert another_output([state(theirs, committed=None)], "file:///lake/a") is None, "no offset: nothing committed"
    assert another_output([state(mine), state(theirs)], "file:///lake/a") == GroupCommit("b-2", "file:///lake/b")


def test_a_new_output_meeting_another_outputs_group_is_refused_in_one_line_unless_it_adopts_it():
    theirs = [state(commit_metadata("b-2", "file:///lake/b"))]
    with pytest.raises(GroupMismatchError) as refused:
        adopted_group("ingest", theirs, "file:///lake/a", adopt=False)
    message = str(refused.value)
    for part in ("file:///lake/b", "file:///lake/a", "batch b-2", "adopt_group=True", "nothing was changed"):
        assert part in message, f"expected {part!r} in {message!r}"
    assert "\n" not in message and not refused.value.transient, "one line, terminal"
    assert adopted_group("ingest", theirs, "file:///lake/a", adopt=True) == GroupCommit("b-2", "file:///lake/b")
    assert adopted_group("ingest", [state(None)], "file:///lake/a", adopt=False) is None, "a group of no output"


def test_an_output_uri_too_long_for_kafkas_metadata_is_kept_as_its_digest_and_still_recognised():
    from kafka_batch_provider.core.group_owner import METADATA_LIMIT, another_output, commit_metadata, output_digest
    from kafka_batch_provider.core.offsets import PartitionOffsets

    short = "s3://lake/orders"
    assert commit_of(commit_metadata("b-1", short)).output == short
    non_ascii = "file:///lake/" + "ü" * 1000  # kept as characters, not as \\u escapes
    assert (
        len(commit_metadata("b-1", non_ascii)) < METADATA_LIMIT
        and commit_of(commit_metadata("b-1", non_ascii)).output == non_ascii
    )
    long = "abfs://container@account.dfs.core.windows.net/" + "deep/" * 1000
    metadata = commit_metadata("b-2", long)
    assert len(metadata) <= METADATA_LIMIT, (
        f"expected the metadata within Kafka's limit, got {len(metadata)} characters"
    )
    assert commit_of(metadata).output == output_digest(long), metadata
    state = PartitionOffsets("t", 0, 5, 0, 9, metadata)
    assert another_output([state], long) is None, "the same output, named by its digest, is not another output"
    assert another_output([state], short) is not None, "a different output is still told apart"
