"""The deleted keys a merged table remembers (local disk): newest delete per key, truncates, files
of committed batches only, and upkeep forgetting old deletes and folding the files into one."""

from __future__ import annotations

import time

import pyarrow as pa

from kafka_batch_provider.core.merging import DELETE_OP, TRUNCATE_OP, UPSERT_OP, Change, order_text
from kafka_batch_provider.output.deleted_keys import FOLDER, DeletedKeys
from kafka_batch_provider.output.location import Location

KEY = [pa.field("id", pa.int64())]


def delete(key: int, order: int) -> Change:
    return Change((key,), DELETE_OP, order_text(order))


class committed_up_to:  # noqa: N801 - read as a phrase: DeletedKeys(location, committed_up_to(3))
    """An offset log whose entries 1..last are the batches ``b-<seq>``."""

    def __init__(self, last: int) -> None:
        self.last = last

    def entry(self, seq: int) -> dict | None:
        return {"batch_id": f"b-{seq}"} if 1 <= seq <= self.last else None

    def tail_seq(self) -> int:
        return self.last


def test_the_newest_delete_per_key_and_the_newest_truncate_of_committed_batches_guard_a_merge(tmp_path):
    deleted = DeletedKeys(Location(str(tmp_path)), committed_up_to(3))
    assert deleted.guard(["id"]) == ({}, None), "a table without deletes guards nothing"
    assert deleted.record(1, "b-1", KEY, [delete(1, 5), delete(2, 6), Change((1,), UPSERT_OP, order_text(7))]) == 2
    deleted.record(2, "b-2", KEY, [delete(1, 9), Change((), TRUNCATE_OP, order_text(8))])
    deleted.record(3, "b-3", KEY, [delete(1, 3)])  # an older delete, recorded later (a replay)
    deleted.record(2, "b-lost", KEY, [delete(2, 99)])  # an attempt that lost entry 2 to b-2
    newest, truncated = deleted.guard(["id"])
    assert newest == {(1,): order_text(9), (2,): order_text(6)} and truncated == order_text(8), newest
    only, _ = deleted.guard(["id"], keys=[(2,)])
    assert only == {(2,): order_text(6)}, f"asking for key 2 read {only}"
    deleted.record(4, "b-4", KEY, [delete(2, 50)])
    assert deleted.guard(["id"], current=(4, "b-4"))[0][(2,)] == order_text(50), (
        "the committing batch's own file counts"
    )
    assert deleted.guard(["id"])[0][(2,)] == order_text(6), "an uncommitted batch's file must not count"


def test_upkeep_forgets_old_deletes_drops_lost_attempts_and_folds_the_rest_into_one_file(tmp_path):
    location = Location(str(tmp_path))
    deleted = DeletedKeys(location, committed_up_to(5))
    for seq in range(1, 6):
        deleted.record(seq, f"b-{seq}", KEY, [delete(k, seq * 10 + k) for k in range(3)])
    deleted.record(5, "b-lost", KEY, [delete(7, 1)])
    deleted.record(6, "b-6", KEY, [Change((), TRUNCATE_OP, order_text(1)), Change((), TRUNCATE_OP, order_text(2))])
    before = deleted.guard(["id"])
    files, forgotten, kept = deleted.upkeep(older_than=time.time() - 3600)
    assert (files, forgotten, kept) == (5, 0, 3), f"expected 5 files folded into 3 keys: {(files, forgotten, kept)}"
    names = location.list_names(FOLDER)
    assert len(names) == 2 and not any("b-lost" in n for n in names), f"expected a compacted file and b-6's: {names}"
    assert deleted.guard(["id"]) == before, "folding changed the guard"
    assert deleted.upkeep(older_than=time.time() + 1) == (1, 3, 0), "every delete is past the retention"


def test_a_batch_of_truncates_alone_has_no_key_columns_and_still_guards(tmp_path):
    deleted = DeletedKeys(Location(str(tmp_path)), committed_up_to(2))
    deleted.record(1, "b-1", KEY, [delete(1, 5)])
    deleted.record(2, "b-2", [], [Change((), TRUNCATE_OP, order_text(7))])
    assert deleted.guard(["id"], keys=[(1,)]) == ({(1,): order_text(5)}, order_text(7))
