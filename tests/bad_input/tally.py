"""What the bad-input matrix counts: cases run, refused as required, and with a changed state.

Every case asks for the ``verdict`` fixture; the conftest hooks count the cases that ran
(even one whose set-up failed) and print ``bad inputs rejected: M/N, state changed: K`` in
pytest's terminal summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.matrix import Matrix


@dataclass
class Verdict:
    """One case's outcome, set by :meth:`judge`.

    :param refused: the input was refused as required (one clear line, failure, no retry).
    :param changed: the state differed afterwards.
    """

    refused: bool = False
    changed: bool = False

    def judge(self, problems: list[str], before: Any, after: Any) -> None:
        """Record the outcome, then fail the case with what was expected and what was found."""
        self.changed = before != after
        self.refused = not problems
        assert not problems, "; ".join(problems)
        assert not self.changed, f"the state changed: {describe_change(before, after)}"


@dataclass
class Tally:
    ran: int = 0
    rejected: int = 0
    changed: int = 0
    failed_ids: list[str] = field(default_factory=list)

    def record(self, nodeid: str, passed: bool, verdict: Verdict | None) -> None:
        self.ran += 1
        if verdict is not None and verdict.changed:
            self.changed += 1
        if passed and verdict is not None and verdict.refused and not verdict.changed:
            self.rejected += 1
        else:
            self.failed_ids.append(nodeid)

    def line(self) -> str:
        return f"bad inputs rejected: {self.rejected}/{self.ran}, state changed: {self.changed}"


TALLY = Tally()
MATRIX = Matrix("verdict", Verdict, TALLY, "tests/bad_input/")


def describe_change(before: Any, after: Any) -> str:
    """The first differences between two snapshots (nested dicts), for the failure message."""
    if isinstance(before, dict) and isinstance(after, dict):
        notes = []
        for key in sorted(set(before) | set(after), key=str):
            if key not in before:
                notes.append(f"{key} appeared")
            elif key not in after:
                notes.append(f"{key} disappeared")
            elif before[key] != after[key]:
                notes.append(f"{key}: {describe_change(before[key], after[key])}")
        return ", ".join(notes[:8]) or "no difference"
    return f"{before!r} -> {after!r}"
