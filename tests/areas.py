"""How long each area of the suite took, printed at the end, so growth is visible.

An area is the folder under ``tests/`` (unit, integration, faults, bad_input, dags, live, release). The
time is each test's set-up, call and tear-down added up, over every xdist worker: the work an
area costs, not the wall time (two workers share it). The reports reach the process that prints
the summary also under xdist, so this lives in tests/conftest.py's hooks.
"""

from __future__ import annotations

from collections import Counter

import pytest

#: The order of the summary line; any other folder comes after these.
AREAS = ("unit", "integration", "faults", "bad_input", "dags", "live", "release")


class AreaDurations:
    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self.tests: Counter[str] = Counter()

    def count(self, report: pytest.TestReport) -> None:
        parts = report.nodeid.split("/")
        if len(parts) < 3 or parts[0] != "tests":
            return
        area = parts[1]
        self.seconds[area] += report.duration
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.tests[area] += 1

    def line(self) -> str:
        order = [a for a in AREAS if a in self.seconds] + sorted(set(self.seconds) - set(AREAS))
        parts = [f"{area} {self.seconds[area]:.0f} s ({self.tests[area]})" for area in order]
        return f"test time per area (tests), summed over workers: {', '.join(parts)}"

    def summary(self, terminalreporter) -> None:
        if self.seconds:
            terminalreporter.write_line(self.line())


DURATIONS = AreaDurations()
