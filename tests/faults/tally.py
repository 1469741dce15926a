"""What the fault matrix counts: scenarios run, survived, records lost and duplicated.

Every scenario asks for the ``outcome`` fixture and checks its output with
:func:`tests.faults.harness.expect_exactly_once`, which adds what it found to the outcome
before asserting. The conftest prints ``faults survived: N/M, records lost: L, duplicated: D``
in pytest's terminal summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.matrix import Matrix


@dataclass
class Outcome:
    """One scenario's counts: offsets missing from the output, and extra copies of offsets."""

    lost: int = 0
    duplicated: int = 0
    checked: bool = False  # the output was compared with what was produced


@dataclass
class Tally:
    ran: int = 0
    survived: int = 0
    lost: int = 0
    duplicated: int = 0
    failed_ids: list[str] = field(default_factory=list)

    def record(self, nodeid: str, passed: bool, outcome: Outcome | None) -> None:
        self.ran += 1
        if outcome is not None:
            self.lost += outcome.lost
            self.duplicated += outcome.duplicated
        if passed and outcome is not None and outcome.checked:
            self.survived += 1
        else:
            self.failed_ids.append(nodeid)

    def line(self) -> str:
        return f"faults survived: {self.survived}/{self.ran}, records lost: {self.lost}, duplicated: {self.duplicated}"


TALLY = Tally()
MATRIX = Matrix("outcome", Outcome, TALLY, "tests/faults/")
