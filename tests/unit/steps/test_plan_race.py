"""The plan step decides only on an output log that held still while it read the group
(a local store; the decision is a stand-in that publishes entries as a racing run would)."""

from __future__ import annotations

import pytest

from kafka_batch_provider.errors import GroupMismatchError, LogConflictError
from kafka_batch_provider.output.store import BatchStore
from kafka_batch_provider.steps.plan import PLAN_ATTEMPTS, decide_on_a_still_log


def entry(seq: int) -> dict:
    previous = {"seq": seq - 1, "batch_id": f"b-{seq - 1}"} if seq > 1 else None
    return {
        "seq": seq, "batch_id": f"b-{seq}", "previous": previous, "mode": "incremental", "group_id": "g",
        "ranges": [], "offsets": {"t:0": 10 * seq}, "files": [], "rows": 0,
    }  # fmt: skip


def test_a_log_that_moved_while_the_group_was_read_is_read_again(tmp_path):
    store = BatchStore(str(tmp_path / "out"))
    store.log.append(entry(1))
    seen, notes = [], []

    def decide(tail, pending):
        seen.append(tail["seq"])
        if len(seen) == 1:
            store.log.append(entry(2))  # another run publishes meanwhile; the group looks ahead
            raise GroupMismatchError("group at 20, output at 10")
        return ("decision", "plan", None)

    tail, _, _, decided = decide_on_a_still_log(store, "g", decide, notes.append)
    assert (seen, tail["seq"], decided[0]) == ([1, 2], 2, "decision"), f"expected a second look from entry 2: {seen}"
    assert notes == ["another run published output log entry 2 while this run planned: planning again from it"]


def test_a_mismatch_on_a_log_that_held_still_is_a_real_one(tmp_path):
    store = BatchStore(str(tmp_path / "out"))
    store.log.append(entry(1))

    def decide(tail, pending):
        raise GroupMismatchError("group at 20, output at 10")

    with pytest.raises(GroupMismatchError):
        decide_on_a_still_log(store, "g", decide, print)


def test_a_log_that_never_holds_still_is_a_conflict_in_one_line(tmp_path):
    store = BatchStore(str(tmp_path / "out"))

    def decide(tail, pending):
        store.log.append(entry((tail["seq"] if tail else 0) + 1))
        return ("decision", "plan", None)

    with pytest.raises(LogConflictError) as refused:
        decide_on_a_still_log(store, "g", decide, lambda note: None)
    assert f"other runs published {PLAN_ATTEMPTS} batches" in str(refused.value) and "\n" not in str(refused.value)
    assert store.log.tail_seq() == PLAN_ATTEMPTS
