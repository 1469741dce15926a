"""A forked ``kafka-batch`` run is the process an exec'd one is (tests/support/cli_runner.py): its
output, exit status, environment, working folder, session and signals, side by side with the
installed script."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

import psutil
import pytest

from tests.support import cli_runner

pytestmark = pytest.mark.skipif(
    cli_runner.cli_mode() == "exec", reason=f"{cli_runner.MODE_ENV}=exec: no run is forked, so none to compare"
)


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


def test_an_ended_run_keeps_its_pid_until_its_exit_is_read_so_a_late_kill_reaches_no_other_process():
    run = cli_runner.start(["--version"], fork=True)
    deadline = time.monotonic() + 60
    while psutil.Process(run.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "expected the ended run kept as a zombie until its exit is read"
        time.sleep(0.05)
    time.sleep(0.5)  # the forkserver has sent the exit by now: the caller reads it, no signal is sent
    run.kill()  # as Popen.kill after an unread exit: no error
    out, _ = run.communicate(timeout=30)
    assert (run.returncode, out.startswith("kafka-batch")) == (0, True), f"found {run.returncode}, {out!r}"
    deadline = time.monotonic() + 30
    while status_of(run.pid) == psutil.STATUS_ZOMBIE:  # (reaped between two looks: gone, not a zombie)
        assert time.monotonic() < deadline, f"expected pid {run.pid} reaped once its exit was read"
        time.sleep(0.05)


def test_two_messages_that_arrive_together_are_read_one_by_one():
    ours, forkserver = socket.socketpair()
    run = cli_runner.ForkedRun(0, ours, None, None)
    forkserver.sendall(b'{"pid": 7}\n{"returncode": 3, "cpu": 0.5}\n')
    assert json.loads(run._line()) == {"pid": 7}
    assert run.wait(timeout=5) == 3, f"expected exit 3 read from the second message, found {run.returncode}"
    forkserver.close()


def test_a_run_whose_environment_changes_an_import_time_variable_is_execed():
    env = {
        **os.environ,
        "SPARK_CONNECT_LOG_LEVEL": "debug" if os.environ.get("SPARK_CONNECT_LOG_LEVEL") != "debug" else "info",
    }
    run = cli_runner.start(["--version"], env, fork=True)
    run.communicate(timeout=60)
    assert isinstance(run, subprocess.Popen), f"expected an exec'd run, found {type(run).__name__}"


def test_runs_forked_one_after_another_all_live_side_by_side(tmp_path):
    env = {**os.environ, "KAFKA_BATCH_FAIL_POINT": "after-log-tail:stop"}
    args = ["run", "--bootstrap-servers", "127.0.0.1:1", "--topic", "t", "--group", "g", "--output"]
    runs = [cli_runner.start([*args, str(tmp_path / str(i))], env, new_session=True, fork=True) for i in range(3)]
    try:
        deadline = time.monotonic() + 60
        while not all(psutil.Process(run.pid).status() == psutil.STATUS_STOPPED for run in runs):
            found = [run.poll() for run in runs]
            assert found == [None] * 3, f"expected three runs stopped at their fail point, found exits {found}"
            assert time.monotonic() < deadline, "expected three runs stopped at their fail point within 60 s"
            time.sleep(0.05)
    finally:
        for run in runs:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
            run.communicate(timeout=30)


def status_of(pid: int) -> str | None:
    """A process's status, ``None`` once it is gone (reaped between asking whether it exists and asking
    its status: the race a pid_exists check before psutil.Process left open)."""
    try:
        return psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return None
