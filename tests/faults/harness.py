"""What every fault scenario does: run ``kafka-batch`` as a user would, break something, look.

* :class:`Lake`: the output under test (the Parquet layout or a Delta table, on the S3-protocol
  server behind a :class:`FaultProxy`), read the way its readers read it.
* :class:`CliRun`: one ``kafka-batch run`` process (tests/support/cli_runner.py), optionally frozen
  or killed at a fail point.
* :func:`expect_exactly_once`: every produced offset once, counted into the scenario's
  :class:`~tests.faults.tally.Outcome` (records lost, duplicated).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from kafka_batch_provider.core.manifest import entry_files
from kafka_batch_provider.dev.s3 import S3Endpoint
from kafka_batch_provider.fail_points import ENV as FAIL_POINT_ENV
from kafka_batch_provider.output.formats import OutputSpec, open_store
from kafka_batch_provider.output.location import Location
from kafka_batch_provider.output.store import BatchStore
from tests.faults.tally import Outcome
from tests.integration.helpers import Output, TableOutput, dataset_keys
from tests.support import cli_runner
from tests.support.fault_proxy import FaultProxy


@dataclass
class Lake:
    """An output of one format, on the S3 server that ``s3_proxy`` can make go dark."""

    format: str
    uri: str
    endpoint: S3Endpoint = field(repr=False)
    s3_proxy: FaultProxy = field(repr=False)
    options_file: Path = field(repr=False)  # storage options (endpoint, keys) in a file: they reach Spark's tasks

    @property
    def storage_options(self) -> dict[str, Any]:
        return self.endpoint.storage_options()

    def output(self) -> Output:
        if self.format == "parquet":
            return Output(self.uri, self.storage_options)
        return TableOutput(self.uri, self.storage_options, format=self.format)

    def store(self) -> BatchStore:
        return open_store(OutputSpec(format=self.format, output=self.uri, storage_options=self.storage_options))

    def table_location(self) -> Location:
        """The output folder itself (for a table, its root: the store's own files are below it)."""
        return Location(self.uri, self.storage_options)

    def cli_args(self) -> list[str]:
        return ["--format", self.format, "--output", self.uri, "--storage-options-file", str(self.options_file)]

    def env(self) -> dict[str, str]:
        return self.endpoint.env()

    def keys(self) -> Counter:
        """How often each (topic, partition, offset) is visible to the format's own reader now."""
        return dataset_keys(self.output())

    def log_entries(self) -> list[dict[str, Any]]:
        return list(self.store().log.entries())

    def batches(self) -> list[tuple[str, tuple, int | None]]:
        """Each logged batch's id, files with sizes, and table version: unchanged means not rewritten."""
        return [
            (e["batch_id"], tuple(sorted(entry_files(e).items())), e.get("table_version")) for e in self.log_entries()
        ]

    def staged_names(self, store: BatchStore | None = None) -> list[str]:
        """Data files written but not (yet) part of the output: the Parquet layout's ``_staging/``,
        a table's data files that no commit names yet."""
        store = store or self.store()
        location = store.data  # a table's data files sit in the table, not beside its log
        folder = "_staging" if self.format == "parquet" else "data"
        if not location.exists(folder):
            return []
        written = [p for p in location.fs.find(location.path(folder)) if p.endswith(".parquet")]
        if self.format == "parquet":
            return written
        committed = {f"{e['location']}/{name}" for e in self.log_entries() for name in entry_files(e)}
        return [p for p in written if not any(p.endswith(c) for c in committed)]


#: Every run started, so a failed test's frozen or running processes are reaped (see :func:`reap`).
STARTED: list[CliRun] = []


def reap() -> None:
    """Kill what a scenario left: a run frozen at its fail point would otherwise stay for good."""
    while STARTED:
        run = STARTED.pop()
        if run.process is not None and run.process.poll() is None:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.killpg(run.process.pid, sig)
                except ProcessLookupError:
                    break
            run.process.wait(30)


@dataclass
class CliRun:
    """``kafka-batch run`` (or ``command``) in its own process group; ``fail_point`` as ``"<point>:<action>"``."""

    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    fail_point: str | None = None
    command: str = "run"
    process: cli_runner.ForkedRun | subprocess.Popen | None = None
    stdout: str = ""
    stderr: str = ""

    def start(self) -> CliRun:
        STARTED.append(self)
        env = {**os.environ, **self.env}
        env.pop(FAIL_POINT_ENV, None)
        if self.fail_point:
            env[FAIL_POINT_ENV] = self.fail_point
        # In a session of its own, so a kill can take the whole group, as a lost worker would.
        self.process = cli_runner.start([self.command, *self.args], env, new_session=True)
        return self

    def wait_stopped(self, timeout: float = 180) -> None:
        """Until the process froze itself at its fail point (``:stop``)."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.finish()
                raise AssertionError(
                    f"the run exited ({self.process.returncode}) before its fail point {self.fail_point}: "
                    f"{self.stderr.strip().splitlines()[-3:]}"
                )
            if psutil.Process(self.process.pid).status() == psutil.STATUS_STOPPED:
                return
            time.sleep(0.05)
        raise AssertionError(f"the run did not reach its fail point {self.fail_point} within {timeout:g}s")

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def kill_group(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)

    def finish(self, timeout: float = 300) -> CliRun:
        assert self.process is not None
        try:
            out, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            out, err = self.process.communicate()
            raise AssertionError(f"the run did not end within {timeout:g}s: {err.strip().splitlines()[-3:]}") from None
        self.stdout, self.stderr = self.stdout + out, self.stderr + err
        return self

    def result(self) -> dict[str, Any]:
        """The run's JSON summary; the run must have succeeded."""
        assert self.process is not None and self.process.returncode == 0, (
            f"expected the run to succeed, got exit {self.process.returncode if self.process else None}: "
            f"{self.stderr.strip().splitlines()[-3:]}"
        )
        return json.loads(self.stdout.strip().splitlines()[-1])

    def error_line(self) -> str:
        """The failed run's last line, which must be its one ``error:`` line (and no traceback)."""
        assert self.process is not None
        lines = self.stderr.strip().splitlines()
        assert self.process.returncode not in (0, None), f"expected a failure, got exit 0: {self.stdout[-500:]!r}"
        assert lines and lines[-1].startswith("error: "), f"expected an 'error:' line last, got {lines[-3:]!r}"
        others = [line for line in lines[:-1] if line.startswith("error: ")]
        assert not others, f"expected one 'error:' line, the last; found also {others!r}"
        assert "Traceback" not in self.stderr, f"a traceback was printed: {self.stderr[-1500:]}"
        return lines[-1]

    @property
    def killed(self) -> bool:
        return self.process is not None and self.process.returncode == -signal.SIGKILL


def scenario_args(lake: Lake, kafka_config: dict[str, Any], topic: str, group: str, remote: str, *extra: str):
    """``kafka-batch run`` arguments for one topic, group and lake, through Spark Connect."""
    return [
        "--bootstrap-servers",
        kafka_config["bootstrap.servers"],
        "--topic",
        topic,
        "--group",
        group,
        "--spark-remote",
        remote,
        "--timeout",
        "10",
        *lake.cli_args(),
        *extra,
    ]


def through_spark_submit(args: list[str], remote: str) -> list[str]:
    """The same run with spark-submit (a local master) instead of the Spark Connect server."""
    return [a for a in args if a not in ("--spark-remote", remote)] + ["--spark-master", "local[2]"]


def run_through_outage(
    args: list[str], env: dict[str, str], point: str, proxy: FaultProxy, back_after: float | None = None
) -> CliRun:
    """Run frozen at ``point``, take ``proxy``'s server away there, and let the run go on.

    The server comes back after ``back_after`` seconds, or (``None``) once the run has ended.
    """
    run = CliRun(args, env, fail_point=f"{point}:stop").start()
    run.wait_stopped()
    proxy.go_dark()
    run.resume()
    if back_after is not None:
        time.sleep(back_after)
        proxy.restore()
    run.finish()
    if proxy.dark:
        proxy.restore()
    return run


def wait_while_running(run: CliRun, what: str, found, every: float = 0.05, timeout: float = 180) -> None:
    """Until ``found()``, with the run still running then (a fault's moment: it must come mid-run)."""
    deadline = time.monotonic() + timeout
    while True:
        assert run.process.poll() is None, f"the batch ended before {what}: {run.finish().stderr[-1500:]}"
        if found():
            return
        assert time.monotonic() < deadline, f"expected {what} within {timeout:g} s"
        time.sleep(every)


def wait_until_tasks_write(run: CliRun, lake: Lake, timeout: float = 240) -> None:
    """Until the batch's Spark tasks have written a file and the run has not ended: mid-write."""
    store = lake.store()
    wait_while_running(run, "a task wrote a file", lambda: bool(lake.staged_names(store)), timeout=timeout)


def race(runs: list[CliRun]) -> list[CliRun]:
    """Runs started frozen at a ``:stop`` fail point: each waits until it is stopped there, then all
    resume together and finish (the runs, finished)."""
    for run in runs:
        run.wait_stopped()
    for run in runs:
        run.resume()
    for run in runs:
        run.finish()
    return runs


def run_cli(args: list[str], env: dict[str, str] | None = None, fail_point: str | None = None, timeout: float = 300):
    return CliRun(args, env or {}, fail_point).start().finish(timeout)


def expect_exactly_once(outcome: Outcome, lake: Lake, expected: set[tuple[str, int, int]]) -> None:
    """Every expected offset visible once, nothing else: counts go to the tally before asserting."""
    seen = lake.keys()
    outcome.checked = True
    outcome.lost += len(expected - set(seen))
    outcome.duplicated += sum(n - 1 for n in seen.values() if n > 1)
    extra = set(seen) - expected
    assert not (expected - set(seen)) and outcome.duplicated == 0 and not extra, (
        f"expected {len(expected)} offsets once each; missing {sorted(expected - set(seen))[:5]}, "
        f"seen twice or more {sorted(k for k, n in seen.items() if n > 1)[:5]}, unexpected {sorted(extra)[:5]}"
    )


def expect_nothing_new_visible(lake: Lake, before: Counter) -> None:
    """No partial batch: readers see exactly what they saw before the failed attempt."""
    after = lake.keys()
    assert after == before, f"a failed attempt changed what readers see: {len(before)} offsets before, {len(after)} now"
