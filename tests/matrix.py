"""Counted test matrices (bad inputs, faults): each case's counts ride on its test report.

A case asks for its matrix's fixture (a :class:`~tests.bad_input.tally.Verdict`, a
:class:`~tests.faults.tally.Outcome`); what the case recorded there is attached to its
report as a user property, so the counts reach the process that prints the summary line,
also when pytest-xdist runs the cases in worker processes. The hooks live in
tests/conftest.py: the controller never loads the conftest files of subfolders.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest

#: Every matrix; tests/conftest.py (which xdist's controller loads too) runs their hooks.
MATRICES: list[Matrix] = []


class Matrix:
    """One matrix: its fixture's name and class, and the tally that counts its cases.

    :param tally: has ``record(nodeid, passed, case_or_None)``, ``ran`` and ``line()``.
    :param folder: where the cases live (node ids start with it).
    """

    def __init__(self, fixture: str, case_type: type, tally: Any, folder: str) -> None:
        self.fixture, self.case_type, self.tally, self.folder = fixture, case_type, tally, folder
        self.stash_key = pytest.StashKey[case_type]()
        MATRICES.append(self)

    def new_case(self, request: pytest.FixtureRequest) -> Any:
        request.node.stash[self.stash_key] = case = self.case_type()
        return case

    def attach(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """In ``pytest_runtest_makereport``: a case counts once, at its call or at a failed set-up."""
        if self.fixture not in getattr(item, "fixturenames", ()) or report.skipped:
            return
        if report.when == "call" or (report.when == "setup" and report.failed):
            case = item.stash.get(self.stash_key, None)
            report.user_properties.append((self.fixture, asdict(case) if case is not None else None))

    def count(self, report: pytest.TestReport) -> None:
        """In ``pytest_runtest_logreport``, where xdist's workers' reports arrive too."""
        for key, value in report.user_properties:
            if key == self.fixture:
                self.tally.record(report.nodeid, report.passed, self.case_type(**value) if value else None)
        if report.when == "???" and report.nodeid.startswith(self.folder):
            # xdist's stand-in for a case whose worker crashed: it carries no properties,
            # and a crashed case must count as failed, not vanish from the total.
            self.tally.record(report.nodeid, False, None)

    def summary(self, terminalreporter) -> None:
        if self.tally.ran:
            terminalreporter.write_line(self.tally.line())
