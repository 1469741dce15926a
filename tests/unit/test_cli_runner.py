"""A forked ``kafka-batch`` run is the process an exec'd one is (tests/support/cli_runner.py): its
output, exit status, environment, working folder, session and signals, side by side with the
installed script."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import psutil
import pytest

from tests.support import cli_runner


@pytest.mark.parametrize("args", [["--version"], ["run", "--max-records", "0"], ["no-such-command"]])
def test_a_forked_run_prints_and_exits_as_the_installed_script_does(args):
    forked, executed = cli_runner.run(args, fork=True), cli_runner.run(args, fork=False)
    found = (forked.returncode, forked.stdout, forked.stderr)
    expected = (executed.returncode, executed.stdout, executed.stderr)
    assert found == expected, f"expected the script's {expected}, found {found}"


def test_a_forked_run_takes_the_callers_environment_and_folder(tmp_path):
    env = {**os.environ, "KAFKA_BATCH_SPARK_CLASS_ARCHIVE": str(tmp_path / "mine.jsa")}
    archive = cli_runner.run(["spark-archive", "status"], env, fork=True)
    assert json.loads(archive.stdout)["path"] == str(tmp_path / "mine.jsa"), archive.stdout
    folder = tmp_path / "here"
    folder.mkdir()
    before = os.getcwd()
    os.chdir(folder)
    try:
        listed = cli_runner.run(["table", "--output", "lake", "--json"], fork=True)
    finally:
        os.chdir(before)
    assert json.loads(listed.stdout.splitlines()[-1])["output"] == str(folder / "lake"), listed.stdout


def test_a_forked_run_in_a_session_of_its_own_stops_at_its_fail_point_and_dies_with_its_group(tmp_path):
    env = {**os.environ, "KAFKA_BATCH_FAIL_POINT": "after-log-tail:stop"}
    run = cli_runner.start(
        ["run", "--bootstrap-servers", "127.0.0.1:1", "--topic", "t", "--group", "g", "--output", str(tmp_path)],
        env,
        new_session=True,
        fork=True,
    )
    deadline = time.monotonic() + 60
    while psutil.Process(run.pid).status() != psutil.STATUS_STOPPED:
        assert run.poll() is None and time.monotonic() < deadline, "expected the run stopped at its fail point"
        time.sleep(0.05)
    assert os.getpgid(run.pid) == run.pid, "expected the run to lead a process group of its own"
    with pytest.raises(subprocess.TimeoutExpired):
        run.communicate(timeout=0.5)
    os.killpg(run.pid, signal.SIGKILL)
    out, err = run.communicate(timeout=30)
    assert run.returncode == -signal.SIGKILL, f"expected the run killed by SIGKILL, found {run.returncode}"
