"""The bad-input matrix: every case must be refused with one clear line and change nothing.

The cases share one scene (a topic, a group with a committed batch, outputs, a pending plan)
built once per session on the real broker, so most refusals cost one short subprocess. The
terminal summary ends with ``bad inputs rejected: M/N, state changed: K``.
"""

from __future__ import annotations

import pytest

from tests.bad_input.scene import scene  # noqa: F401 - the shared fixture
from tests.bad_input.tally import TALLY, Verdict

VERDICT = pytest.StashKey[Verdict]()


@pytest.fixture
def verdict(request: pytest.FixtureRequest) -> Verdict:
    request.node.stash[VERDICT] = found = Verdict()
    return found


def is_case(item: pytest.Item) -> bool:
    return "verdict" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    TALLY.collected += sum(1 for item in items if is_case(item))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if not is_case(item) or report.skipped:
        return
    # A case counts once: at its call, or at a set-up that failed before it could run.
    if report.when == "call" or (report.when == "setup" and report.failed):
        TALLY.record(item.nodeid, report.passed, item.stash.get(VERDICT, None))


def pytest_terminal_summary(terminalreporter) -> None:
    if TALLY.collected:
        terminalreporter.write_line(TALLY.line())
