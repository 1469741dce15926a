"""The ordering rule and the per-key reduction of merged batches (pure)."""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone

import pytest

from kafka_batch_provider.core.merging import (
    DELETE_OP,
    TRUNCATE_OP,
    UNAVAILABLE,
    UPSERT_OP,
    Change,
    MergeSpec,
    debezium_order,
    merge_spec,
    order_text,
    reduce_changes,
    upsert_order,
)
from kafka_batch_provider.errors import ConfigError


def test_ordering_values_sort_as_their_components_do():
    rng = random.Random(7)
    tuples = [tuple(rng.randint(-(2**63), 2**63 - 1) for _ in range(3)) for _ in range(300)]
    tuples += [(0, 0, 0), (-1, 0, 0), (0, -1, 5), (2**64 - 1, 0, 0)]
    by_text = sorted(tuples, key=lambda t: order_text(*t))
    assert by_text == sorted(tuples), "ordering values do not sort like the tuples they encode"


def postgres_source(last_commit: int | None, lsn: int, snapshot: str = "false") -> dict:
    return {"connector": "postgresql", "snapshot": snapshot, "sequence": json.dumps([
        None if last_commit is None else str(last_commit), str(lsn)]), "lsn": lsn}  # fmt: skip


def test_postgres_events_order_by_commit_then_lsn_not_by_lsn_alone():
    # DBZ-2911: a transaction that commits later may hold a lower LSN than one committed before it.
    earlier_tx = debezium_order(postgres_source(100, 500), "u", offset=1)
    later_tx_lower_lsn = debezium_order(postgres_source(600, 450), "u", offset=2)
    assert earlier_tx < later_tx_lower_lsn
    snapshot = debezium_order(postgres_source(None, 90, "last"), "r", offset=0)
    first_streamed = debezium_order(postgres_source(None, 95), "c", offset=1)
    assert snapshot < first_streamed < earlier_tx
    same_lsn_streamed = debezium_order(postgres_source(90, 90), "u", offset=2)
    assert snapshot < same_lsn_streamed, "a snapshot row ranks before a streamed event at its LSN"
    later_snapshot = debezium_order(postgres_source(None, 1000, "true"), "r", offset=3)
    assert later_tx_lower_lsn < later_snapshot, "a later snapshot (snapshot.mode=always) must win over older streams"


def test_mysql_events_order_by_binlog_file_position_and_row():
    def source(file: str, pos: int, row: int) -> dict:
        return {"connector": "mysql", "file": file, "pos": pos, "row": row}

    found = [
        debezium_order(source("mysql-bin.000010", 4, 0), "u", 9),
        debezium_order(source("mysql-bin.000009", 9_999, 1), "u", 3),
        debezium_order(source("mysql-bin.000010", 4, 1), "u", 1),
    ]
    assert sorted(found) == [found[1], found[0], found[2]]


def test_upserts_order_by_offset_or_by_the_named_timestamp_then_offset():
    assert upsert_order({"a": 1}, None, 5, "t/0@5") < upsert_order({"a": 1}, None, 6, "t/0@6")
    older = datetime(2026, 1, 1, tzinfo=timezone.utc)
    newer = datetime(2026, 1, 2, tzinfo=timezone.utc)
    assert upsert_order({"at": newer}, "at", 1, "t/1@1") > upsert_order({"at": older}, "at", 900, "t/0@900")
    tombstone = upsert_order(None, "at", 2, "t/1@2", kafka_timestamp=datetime(2026, 1, 3, tzinfo=timezone.utc))
    assert tombstone > upsert_order({"at": newer}, "at", 1, "t/1@1")
    with pytest.raises(ConfigError, match="'at' holds int values; name a timestamp column"):
        upsert_order({"at": 5}, "at", 1, "t/0@1")
    with pytest.raises(ConfigError, match="t/0@1: the order_by column 'at' is null"):
        upsert_order({"at": None}, "at", 1, "t/0@1")


def change(key: int, op: str, order: int, **row) -> Change:
    return Change((key,), op, order_text(order), {"id": key, **row} if op == UPSERT_OP else None, f"o{order}")


def test_each_key_keeps_its_newest_change_whatever_the_arrival_order():
    changes = [change(1, UPSERT_OP, 3, v="c"), change(1, UPSERT_OP, 1, v="a"), change(2, UPSERT_OP, 2, v="x"),
               change(2, DELETE_OP, 5), change(1, UPSERT_OP, 2, v="b")]  # fmt: skip
    reduced = reduce_changes(changes)
    kept = {c.key: (c.op, c.row) for c in reduced.changes}
    assert kept == {(1,): (UPSERT_OP, {"id": 1, "v": "c"}), (2,): (DELETE_OP, None)}
    assert reduced.superseded == 3 and reduced.truncated_at is None


def test_a_truncate_drops_what_came_before_it_and_keeps_what_came_after():
    changes = [change(1, UPSERT_OP, 1, v="a"), Change((), TRUNCATE_OP, order_text(2)), change(2, UPSERT_OP, 3, v="b")]
    reduced = reduce_changes(changes)
    assert [c.key for c in reduced.changes] == [(2,)]
    assert reduced.truncated_at == order_text(2) and reduced.superseded == 1


def test_a_toast_placeholder_takes_the_value_an_older_change_of_the_batch_gave():
    reduced = reduce_changes([change(1, UPSERT_OP, 1, bio="long text"), change(1, UPSERT_OP, 2, bio=UNAVAILABLE)])
    assert reduced.changes[0].row["bio"] == "long text" and not reduced.unavailable
    alone = reduce_changes([change(1, UPSERT_OP, 2, bio=UNAVAILABLE)])
    assert alone.unavailable == {"bio"}, "a placeholder with no older value must keep the table's value"


def moved(old: int, new: int, order: int, **row) -> list[Change]:
    """A key change as Debezium sends it: the old key's delete, then the new key's create."""
    create = change(new, UPSERT_OP, order + 1, **row)
    create.moved_from = (old,)
    return [change(old, DELETE_OP, order), create]


def test_a_moved_rows_placeholder_comes_from_its_old_key_in_the_batch_or_in_the_table():
    # 1 -> 9, 2 -> 1, 9 -> 2 in one transaction; 3 updated (its bio given) then moved to 4
    changes = [
        *moved(1, 9, 10, bio=UNAVAILABLE),
        *moved(2, 1, 20, bio=UNAVAILABLE),
        *moved(9, 2, 30, bio=UNAVAILABLE),
        change(3, UPSERT_OP, 40, bio="given"),
        *moved(3, 4, 50, bio=UNAVAILABLE),
    ]
    reduced = {c.key: c for c in reduce_changes(changes).changes}
    found = {key[0]: (c.op, (c.row or {}).get("bio"), c.origins) for key, c in reduced.items()}
    expected = {
        1: (UPSERT_OP, UNAVAILABLE, {"bio": (2,)}),  # the table's row at 2
        2: (UPSERT_OP, UNAVAILABLE, {"bio": (1,)}),  # through 9: the table's row at 1
        9: (DELETE_OP, None, {}),
        3: (DELETE_OP, None, {}),
        4: (UPSERT_OP, "given", {}),  # the value 3's update gave, in the batch
    }
    assert found == expected, f"expected {expected}, found {found}"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"mode": "merge"}, "unknown mode 'merge'"),
        ({"mode": "changes"}, "needs change_format"),
        ({"mode": "upsert", "change_format": "debezium"}, "change_format goes with mode='changes'"),
        ({"mode": "changes", "change_format": "debezium", "order_by": "ts"}, "order_by is for mode='upsert'"),
        ({"mode": "upsert", "merge_key": "a,a"}, "names a column twice"),
        ({"mode": "upsert", "on_truncate": "ignore"}, "unknown on_truncate 'ignore'"),
        ({"merge_key": "a"}, "need mode"),
    ],
)
def test_merge_settings_are_refused_in_one_line(settings, message):
    with pytest.raises(ConfigError, match=message) as refused:
        merge_spec(**settings)
    assert "\n" not in str(refused.value)


def test_a_table_keeps_its_mode_key_and_ordering_but_not_its_truncate_choice():
    table = MergeSpec(mode="changes", change_format="debezium")
    assert table.keeps(MergeSpec(mode="changes", change_format="debezium", on_truncate="apply"))
    assert not table.keeps(MergeSpec(mode="upsert"))
    assert not MergeSpec(mode="upsert", merge_key=("a",)).keeps(MergeSpec(mode="upsert", merge_key=("b",)))
    assert MergeSpec.from_description(table.describe()) == table


def test_a_planned_batch_is_merged_as_planned_and_a_run_asking_otherwise_is_refused():
    from kafka_batch_provider.core.merging import planned_merge

    upsert = MergeSpec(mode="upsert", merge_key=("id",))
    extra = {"merge": upsert.describe()}
    assert planned_merge(extra, None, "b-1") == upsert, "a step run without --mode follows the plan"
    assert planned_merge({}, upsert, "b-1") == upsert, "a plan of an earlier version follows the run"
    with pytest.raises(ConfigError, match="batch b-1 was planned to merge as .* discard it first"):
        planned_merge(extra, MergeSpec(mode="upsert", merge_key=("name",)), "b-1")


def test_order_texts_of_whole_columns_equal_order_text_of_each_row():
    import numpy as np

    from kafka_batch_provider.core.merging import order_texts

    rng = random.Random(3)
    first = np.array([rng.randint(-(2**63), 2**63 - 1) for _ in range(200)] + [0, -1, 2**63 - 1, -(2**63)])
    second = np.array([rng.randint(0, 2**40) for _ in range(len(first))])
    expected = [order_text(int(a), int(b)) for a, b in zip(first, second)]
    assert order_texts(first, second).to_pylist() == expected


def test_typed_upserts_reduced_with_arrow_equal_the_record_by_record_rule():
    import pyarrow as pa

    from kafka_batch_provider.core.arrow_upserts import arrow_upserts
    from kafka_batch_provider.core.change_events import changes_of

    rng = random.Random(11)
    for _ in range(20):
        n = rng.randint(1, 60)
        ids = [rng.randint(0, 9) for _ in range(n)]
        alive = [rng.random() > 0.25 for _ in range(n)]
        batch = pa.table({
            "key": pa.array([{"id": k} for k in ids], pa.struct([("id", pa.int64())])),
            "topic": ["t"] * n, "partition": pa.array([0] * n, pa.int32()), "offset": pa.array(range(n), pa.int64()),
            "id": pa.array([k if a else None for k, a in zip(ids, alive)], pa.int64()),
            "v": pa.array([rng.random() if a else None for a in alive]),
        })  # fmt: skip
        reduced = reduce_changes(changes_of(batch, MergeSpec(mode="upsert"), "avro").changes)
        expected = sorted((c.key, c.op, c.order, c.row["v"] if c.row else None) for c in reduced.changes)
        fast = arrow_upserts(batch, MergeSpec(mode="upsert"), "avro")
        rows = fast.rows.to_pylist()
        found = sorted(
            ((r["id"],), r["_kafka_op"], r["_kafka_order"], r["v"] if r["_kafka_op"] == "u" else None) for r in rows
        )
        assert found == expected, f"the Arrow reduction differs from the record-by-record one: {found} != {expected}"
        assert fast.deletes.num_rows == alive.count(False), "every tombstone is recorded for the guard"
