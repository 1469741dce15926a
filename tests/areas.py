"""How long each area of the suite took and what it cost, printed at the end, so growth is visible.

An area is the folder under ``tests/`` (unit, integration, faults, bad_input, dags, live, release). The
time is each test's set-up, call and tear-down added up, over every xdist worker: the work an
area costs, not the wall time (the workers share it). The CPU is what the test's own process and
the processes it started and waited for (CLI runs, spark-submit, ``airflow`` commands) spent in
those phases; the work it asked of long-running servers (a Spark Connect server's tasks, the
broker) is not in it. On two cores the suite is bound by CPU, so the tests that cost the most CPU
are the ones worth making cheaper; the summary names the slowest and the costliest.

The reports reach the process that prints the summary also under xdist (the CPU rides on each
report as a user property), so this lives in tests/conftest.py's hooks.
"""

from __future__ import annotations

import resource
from collections import Counter

import pytest

from tests.support.cli_runner import FORKED_CPU

#: The order of the summary line; any other folder comes after these.
AREAS = ("unit", "integration", "faults", "bad_input", "dags", "live", "release")
#: How many tests the summary names, by wall time and by CPU.
TOP = 20
CPU_PROPERTY = "cpu_seconds"
#: The CPU of a worker's last tear-down, where its session fixtures stop their servers: a server
#: waited for then (the worker's Spark Connect server) brings its whole session's CPU with it.
SESSION_END_PROPERTY = "session_end_cpu_seconds"
_CPU_MARK = pytest.StashKey[float]()
_LAST = pytest.StashKey[bool]()


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that were waited for (the ``kafka-batch``
    runs forked for it by its forkserver among them, tests/support/cli_runner.py)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + FORKED_CPU[0]


def mark_cpu(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """At the start of a test's protocol: where its first phase's CPU count starts."""
    item.stash[_CPU_MARK] = cpu_seconds()
    item.stash[_LAST] = nextitem is None


def attach_cpu(item: pytest.Item, report: pytest.TestReport) -> None:
    """In ``pytest_runtest_makereport``: the CPU the phase that just ended spent, on its report."""
    now = cpu_seconds()
    session_end = report.when == "teardown" and item.stash.get(_LAST, False)
    report.user_properties.append((SESSION_END_PROPERTY if session_end else CPU_PROPERTY, now - item.stash[_CPU_MARK]))
    item.stash[_CPU_MARK] = now


class AreaDurations:
    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self.cpu: Counter[str] = Counter()
        self.tests: Counter[str] = Counter()
        self.test_seconds: Counter[str] = Counter()
        self.test_cpu: Counter[str] = Counter()
        self.session_end_cpu = 0.0

    def count(self, report: pytest.TestReport) -> None:
        parts = report.nodeid.split("/")
        if len(parts) < 3 or parts[0] != "tests":
            return
        area = parts[1]
        cpu = sum(value for key, value in report.user_properties if key == CPU_PROPERTY)
        self.session_end_cpu += sum(value for key, value in report.user_properties if key == SESSION_END_PROPERTY)
        self.seconds[area] += report.duration
        self.cpu[area] += cpu
        self.test_seconds[report.nodeid] += report.duration
        self.test_cpu[report.nodeid] += cpu
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.tests[area] += 1

    def line(self) -> str:
        order = [a for a in AREAS if a in self.seconds] + sorted(set(self.seconds) - set(AREAS))
        parts = [f"{area} {self.seconds[area]:.0f} s ({self.tests[area]})" for area in order]
        return f"test time per area (tests), summed over workers: {', '.join(parts)}"

    def cpu_line(self) -> str:
        order = [a for a in AREAS if a in self.cpu] + sorted(set(self.cpu) - set(AREAS))
        parts = [f"{area} {self.cpu[area]:.0f} s" for area in order]
        return (
            f"CPU per area (tests and the processes they waited for): {', '.join(parts)}; "
            f"the workers' session ends (their servers stopped): {self.session_end_cpu:.0f} s"
        )

    def top(self, by: Counter[str], other: Counter[str], what: str, other_what: str) -> list[str]:
        lines = [f"the {TOP} tests with the most {what} ({what} / {other_what}, set-up and tear-down included):"]
        for nodeid, value in by.most_common(TOP):
            lines.append(f"  {value:6.1f} s / {other[nodeid]:6.1f} s  {nodeid}")
        return lines

    def summary(self, terminalreporter) -> None:
        if not self.seconds:
            return
        if len(self.test_seconds) > TOP:
            for line in self.top(self.test_seconds, self.test_cpu, "wall time", "CPU"):
                terminalreporter.write_line(line)
            for line in self.top(self.test_cpu, self.test_seconds, "CPU", "wall time"):
                terminalreporter.write_line(line)
        terminalreporter.write_line(self.line())
        terminalreporter.write_line(self.cpu_line())


DURATIONS = AreaDurations()
