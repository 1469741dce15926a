"""Primary-key changes (issue 47): Debezium turns ``UPDATE ... SET id = ...`` into a delete of the
old key and a create of the new one, whose TOASTed columns the update left alone hold Debezium's
placeholder (REPLICA IDENTITY DEFAULT). The moved row's values are its old key's row's (in the
same batch or already in the table), never whatever stood at the new key. Driven through the
sinks' own merge (tests/support/staged_merges.py), Delta and Iceberg alike; the real PostgreSQL
and Debezium run the same in tests/integration/test_debezium_postgres.py.
"""

from __future__ import annotations

import json

import pytest

from kafka_batch_provider.core.merging import UNAVAILABLE, MergeSpec
from tests.support.staged_merges import Staged, debezium, staged_topic

pytestmark = pytest.mark.check  # in make check's tier: no Spark, no Kafka

CHANGES = MergeSpec(mode="changes", change_format="debezium")
FORMATS = ["delta", "iceberg"]
OLD_KEY = "__debezium.oldkey"


class Source:
    """Debezium Postgres events of a table keyed by (region, id), one LSN per event."""

    def __init__(self) -> None:
        self.lsn = 100

    def event(self, op: str, key: dict, row: dict | None, moved_from: dict | None = None) -> Staged:
        self.lsn += 10
        after, before = (None, key) if op == "d" else (row, None)
        value = debezium(op, after, before, lsn=self.lsn, sequence=json.dumps([str(self.lsn), str(self.lsn)]))
        fields = [{"field": "region", "type": "string"}, {"field": "id", "type": "int32"}]
        key_json = {"schema": {"type": "struct", "fields": fields}, "payload": key}
        headers = None if moved_from is None else [(OLD_KEY, {"schema": key_json["schema"], "payload": moved_from})]
        return Staged(key_json, value, headers=headers)

    def move(self, old: dict, new: dict, row: dict) -> list[Staged]:
        """A key change as Debezium sends it: the old key's delete, its tombstone, the new key's create."""
        return [self.event("d", old, None), Staged(self.event("d", old, None).key, None),
                self.event("c", new, {**new, **row}, moved_from=old)]  # fmt: skip


def key(i: int, region: str = "eu") -> dict:
    return {"region": region, "id": i}


def by_id(rows: dict) -> dict:
    return {k: (v["label"], v["doc"]) for k, v in rows.items()}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_moved_row_takes_its_unchanged_toasted_values_from_its_old_key(fmt, tmp_path):
    topic, source = staged_topic(fmt, tmp_path, CHANGES), Source()
    topic.commit([source.event("r", key(i), {**key(i), "label": f"l{i}", "doc": f"doc-{i}"}) for i in range(1, 6)])
    topic.commit([source.event("d", key(3), None)])  # a delete-only batch (string key column first)
    swap = [  # 1 -> 100, 2 -> 1, 100 -> 2 in one transaction: each create holds the placeholder
        *source.move(key(1), key(100), {"label": "l1", "doc": UNAVAILABLE}),
        *source.move(key(2), key(1), {"label": "l2", "doc": UNAVAILABLE}),
        *source.move(key(100), key(2), {"label": "l1", "doc": UNAVAILABLE}),
        *source.move(key(4), key(3), {"label": "l4", "doc": UNAVAILABLE}),  # onto the key deleted a batch ago
        source.event("u", key(5), {**key(5), "label": "l5-new", "doc": UNAVAILABLE}),
        *source.move(key(5), key(6), {"label": "l5-new", "doc": UNAVAILABLE}),  # updated, then moved
    ]
    topic.commit(swap)
    found = {k: (v["label"], v["doc"]) for k, v in topic.rows("id").items()}
    expected = {1: ("l2", "doc-2"), 2: ("l1", "doc-1"), 3: ("l4", "doc-4"), 6: ("l5-new", "doc-5")}
    assert found == expected, f"{fmt}: expected {expected}, found {found}"
    topic.commit(source.move(key(3), key(7), {"label": "l4", "doc": UNAVAILABLE}))  # moved again, a batch later
    found = {k: (v["label"], v["doc"]) for k, v in topic.rows("id").items()}
    expected = {1: ("l2", "doc-2"), 2: ("l1", "doc-1"), 7: ("l4", "doc-4"), 6: ("l5-new", "doc-5")}
    assert found == expected, f"{fmt}: expected {expected}, found {found}"


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_moved_row_whose_old_key_is_unknown_gets_null_never_the_new_keys_value(fmt, tmp_path):
    topic, source = staged_topic(fmt, tmp_path, CHANGES), Source()
    topic.commit([source.event("r", key(i), {**key(i), "label": f"l{i}", "doc": f"doc-{i}"}) for i in (1, 2)])
    deleted = source.event("d", key(2), None)
    moved = source.move(key(1), key(2), {"label": "l1", "doc": UNAVAILABLE})
    moved[-1].headers = None  # (a key converter whose bytes the merge cannot read)
    topic.commit([deleted, *moved])
    rows = topic.rows("id")
    assert {k: (v["label"], v["doc"]) for k, v in rows.items()} == {2: ("l1", None)}, rows
    merged = topic.output.store().log.tail()["merged"]
    assert merged.get("unresolved") == 1, f"the batch's counts must say one value was unknown: {merged}"


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_key_change_cut_between_two_batches_still_takes_the_old_keys_value(fmt, tmp_path):
    # The delete of the old key and the create of the new one are in two partitions, each bounded on
    # its own: the delete lands in one batch, the create (with the placeholder) in the next.
    topic, source = staged_topic(fmt, tmp_path, CHANGES), Source()
    topic.commit([source.event("r", key(i), {**key(i), "label": f"l{i}", "doc": f"doc-{i}"}) for i in (1, 2)])
    deleted, tombstone, created = source.move(key(1), key(9), {"label": "l1", "doc": UNAVAILABLE})
    topic.commit([deleted, tombstone])
    topic.commit([created])
    found = {k: (v["label"], v["doc"]) for k, v in topic.rows("id").items()}
    assert found == {2: ("l2", "doc-2"), 9: ("l1", "doc-1")}, f"{fmt}: the moved row keeps doc-1, found {found}"
    assert "unresolved" not in topic.output.store().log.tail()["merged"], topic.output.store().log.tail()["merged"]
