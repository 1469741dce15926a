"""Ordering a merged table can trust (issue 47): a change is applied only where it is newer than the
row, so whatever orders the changes must hold across the table's life. Offsets do not, once a topic
is deleted and recreated (they start again at 0), nor across partitions. Driven through the sinks'
own merge (tests/support/staged_merges.py), Delta and Iceberg alike.
"""

from __future__ import annotations

import json

import pytest

from kafka_batch_provider.core.merging import MergeSpec
from kafka_batch_provider.errors import ConfigError
from tests.support.staged_merges import Staged, debezium, staged_topic

pytestmark = pytest.mark.check  # in make check's tier: no Spark, no Kafka

UPSERT = MergeSpec(mode="upsert")
CHANGES = MergeSpec(mode="changes", change_format="debezium")
FORMATS = ["delta", "iceberg"]


def pg(op: str, row: dict, lsn: int) -> Staged:
    """A Debezium Postgres event of ``row`` (its key ``id``) at ``lsn`` (its own commit)."""
    after, before = (None, row) if op == "d" else (row, None)
    return Staged({"id": row["id"]}, debezium(op, after, before, lsn=lsn, sequence=json.dumps([str(lsn), str(lsn)])))


@pytest.mark.parametrize("offsets_only_between", [False, True], ids=["next-batch", "after-an-offsets-only-batch"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_recreated_topic_under_offset_ordering_is_refused_in_one_line_and_nothing_is_written(
    fmt, offsets_only_between, tmp_path
):
    topic = staged_topic(fmt, tmp_path, UPSERT)
    topic.commit([Staged({"id": k}, {"id": k, "v": f"old-{k}"}) for k in range(1, 5)])
    before = topic.rows()
    topic.recreate()
    if offsets_only_between:  # it records the new topic id: the check looks back to the last batch that read it
        topic.commit([])
    with pytest.raises(ConfigError) as refused:  # before: committed, claiming it applied what it ignored
        topic.commit([Staged({"id": 1}, {"id": 1, "v": "new-1"}), Staged({"id": 2}, None)])
    message = str(refused.value)
    assert "\n" not in message and "topic 't' was deleted and recreated" in message and "new table" in message, message
    assert topic.rows() == before, f"a refused batch changes nothing: {topic.rows()}"
    store = topic.output.store()
    assert store.log.tail()["seq"] == 1 + offsets_only_between, "the refused batch is not in the table's log"
    assert not store.data.list_names("_kafka_batch/_deleted_keys"), "a refused batch records no deleted key"


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_recreated_topic_of_changes_ordered_by_source_position_is_applied(fmt, tmp_path):
    topic = staged_topic(fmt, tmp_path, CHANGES)
    topic.commit([pg("r", {"id": 1, "v": "a"}, 100), pg("r", {"id": 2, "v": "b"}, 100)])
    topic.recreate()  # the connector writes on, into the new topic: its positions keep growing
    topic.commit([pg("u", {"id": 1, "v": "a2"}, 200), pg("d", {"id": 2}, 210)])
    assert topic.rows() == {1: {"id": 1, "v": "a2"}}, topic.rows()


@pytest.mark.parametrize("fmt", FORMATS)
def test_changes_ordered_by_offsets_refuse_a_key_in_two_partitions(fmt, tmp_path):
    topic = staged_topic(fmt, tmp_path, CHANGES)
    events = [
        Staged({"id": 1}, debezium("c", {"id": 1, "v": "new"}, connector="sqlserver"), partition=0),
        Staged({"id": 1}, debezium("u", {"id": 1, "v": "newer"}, connector="sqlserver"), partition=1),
    ]
    with pytest.raises(ConfigError) as refused:  # before: accepted, and the older change could win
        topic.commit(events)
    message = str(refused.value)
    assert "\n" not in message and "offsets cannot order records of two partitions" in message, message
    assert message.startswith("key [1") or "key [1] is also in partition 0" in message, message
    assert topic.output.read() is None or topic.output.read().num_rows == 0, "nothing was merged"


@pytest.mark.parametrize("fmt", FORMATS)
def test_changes_ordered_by_source_position_may_move_a_key_between_partitions(fmt, tmp_path):
    topic = staged_topic(fmt, tmp_path, CHANGES)
    topic.commit([Staged(pg("u", {"id": 1, "v": "newer"}, 20).key, pg("u", {"id": 1, "v": "newer"}, 20).value, 1),
                  pg("c", {"id": 1, "v": "new"}, 10)])  # fmt: skip
    assert topic.rows() == {1: {"id": 1, "v": "newer"}}, topic.rows()
