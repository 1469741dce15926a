"""``kafka-batch`` as the tests run it: a real process of its own, forked from one that imported the
heavy libraries already.

A ``kafka-batch run`` through Spark Connect onto S3 spent ~1.2 of its ~2 s of CPU importing
pyarrow, pandas, pyspark's Connect client, s3fs, deltalake (measured with cProfile), and the suite
starts ~400 of them. Each xdist worker therefore keeps one *forkserver*: a process that imported
those third-party libraries once (never this package: every run imports and configures it
afresh, from the environment it is given) and forks a child per run. The child is a real process:
its own pid, its own standard streams (the caller's pipes), its own session when asked (so a
test can kill its whole process group), the environment and working folder it was given, the
exit status or the signal that ended it; it runs the same ``kafka_batch_provider.cli.main`` as the
``kafka-batch`` script. What differs from an exec'd one: its ``/proc/<pid>/cmdline`` is the
forkserver's, and the libraries above were imported before its environment was set (none of
them reads it at import).

``KAFKA_BATCH_TEST_CLI=exec`` runs the installed ``kafka-batch`` script instead, for every run;
tests/integration/test_cli.py and the wheel's test always do.
"""

from __future__ import annotations

import gc
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: ``fork`` (the default) or ``exec``: how the tests start ``kafka-batch``.
MODE_ENV = "KAFKA_BATCH_TEST_CLI"
KAFKA_BATCH = str(Path(sys.executable).parent / "kafka-batch")
ROOT = Path(__file__).resolve().parents[2]
#: The CPU seconds of the runs this process had forked that have ended (and of the processes they
#: waited for): what ``resource.getrusage(RUSAGE_CHILDREN)`` counts for exec'd children.
FORKED_CPU = [0.0]
#: What the forkserver imports before it forks: third-party libraries only.
PRELOAD = (
    "numpy",
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.dataset",
    "pyarrow.fs",
    "pyarrow.parquet",
    "pandas",
    "fsspec",
    "s3fs",
    "confluent_kafka",
    "confluent_kafka.admin",
    "deltalake",
    "pyspark.sql.connect.session",
)


# -- the caller's side --------------------------------------------------------------------------


@dataclass
class ForkedRun:
    """A ``kafka-batch`` process forked by the forkserver; the part of ``subprocess.Popen`` the tests use."""

    pid: int
    channel: socket.socket = field(repr=False)
    stdout_pipe: int | None = field(repr=False)
    stderr_pipe: int | None = field(repr=False)
    returncode: int | None = None
    #: What :meth:`communicate` read before its timeout, kept for the next call (as Popen keeps it).
    _read: dict[int, list[bytes]] = field(default_factory=dict, repr=False)
    _closed: set[int] = field(default_factory=set, repr=False)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.channel.setblocking(False)
            try:
                message = self.channel.recv(4096)
            except BlockingIOError:
                return None
            self._take(message)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.channel.settimeout(timeout)
            try:
                message = self.channel.recv(4096)
            except TimeoutError:
                raise subprocess.TimeoutExpired(["kafka-batch"], timeout) from None
            self._take(message)
        return self.returncode

    def _take(self, message: bytes) -> None:
        """The forkserver's one message: the run's exit, once it ended."""
        self.channel.close()
        if not message:
            raise RuntimeError("the kafka-batch forkserver went away before it reported the run's exit")
        ended = json.loads(message)
        self.returncode = ended["returncode"]
        FORKED_CPU[0] += ended["cpu"]

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Both streams to their end, then the exit; :class:`subprocess.TimeoutExpired` after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pipes = [pipe for pipe in (self.stdout_pipe, self.stderr_pipe) if pipe is not None]
        with selectors.DefaultSelector() as selector:
            for pipe in pipes:
                self._read.setdefault(pipe, [])
                if pipe not in self._closed:
                    selector.register(pipe, selectors.EVENT_READ)
            while selector.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(["kafka-batch"], timeout)
                for key, _ in selector.select(left):
                    data = os.read(key.fd, 65536)
                    if data:
                        self._read[key.fd].append(data)
                    else:
                        selector.unregister(key.fd)
                        self._closed.add(key.fd)
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0.01))
        out, err = (
            b"".join(self._read.get(pipe, [])).decode(errors="replace") for pipe in (self.stdout_pipe, self.stderr_pipe)
        )
        for pipe in pipes:
            os.close(pipe)
        self.stdout_pipe = self.stderr_pipe = None
        self._read, self._closed = {}, set()
        return out, err

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Forkserver:
    """This process's forkserver (started on first use, stopped with this process)."""

    _lock = threading.Lock()
    _current: Forkserver | None = None

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="kafka-batch-cli-"))
        self.address = str(self.folder / "forkserver.sock")
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, self.address],
            stdin=subprocess.DEVNULL,
            cwd=ROOT,  # where ``tests`` is importable, whatever folder the test is in
            start_new_session=True,  # a test's killpg of a run never reaches it
        )
        deadline = time.monotonic() + 120
        while not os.path.exists(self.address):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the kafka-batch forkserver did not start (exit {self.process.poll()})")
            time.sleep(0.02)

    @classmethod
    def of_this_process(cls) -> Forkserver:
        with cls._lock:
            if cls._current is None or cls._current.process.poll() is not None:
                cls._current = cls()
            return cls._current

    def start(self, argv: list[str], env: dict[str, str], new_session: bool, capture: bool) -> ForkedRun:
        channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        channel.connect(self.address)
        read_out = read_err = None
        with open(os.devnull, "rb") as null_in:
            fds = [null_in.fileno()]
            if capture:
                read_out, write_out = os.pipe()
                read_err, write_err = os.pipe()
                fds += [write_out, write_err]
            else:
                fds += [1, 2]
            request = {"argv": argv, "env": env, "cwd": os.getcwd(), "new_session": new_session}
            socket.send_fds(channel, [json.dumps(request).encode()], fds)
            if capture:
                os.close(write_out)
                os.close(write_err)
        reply = channel.recv(4096)
        if not reply:
            raise RuntimeError("the kafka-batch forkserver did not fork a run")
        return ForkedRun(json.loads(reply)["pid"], channel, read_out, read_err)


def cli_mode() -> str:
    mode = os.environ.get(MODE_ENV, "fork")
    if mode not in ("fork", "exec"):
        raise ValueError(f"{MODE_ENV}={mode!r}: choose fork or exec")
    return mode


def start(
    args: list[str], env: dict[str, str] | None = None, new_session: bool = False, fork: bool | None = None
) -> ForkedRun | subprocess.Popen:
    """``kafka-batch <args>`` with its output captured (text), in the environment ``env`` (this
    process's when ``None``): forked by the forkserver, or exec'd (``fork=False``, or
    ``KAFKA_BATCH_TEST_CLI=exec`` for every run)."""
    env = dict(os.environ if env is None else env)
    if fork is False or cli_mode() == "exec":
        return subprocess.Popen(
            [KAFKA_BATCH, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            start_new_session=new_session,
        )  # fmt: skip
    return Forkserver.of_this_process().start([KAFKA_BATCH, *args], env, new_session, capture=True)


def run(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 300, fork: bool | None = None
) -> subprocess.CompletedProcess:
    """``subprocess.run([kafka-batch, *args], capture_output=True, text=True, timeout=..., env=env)``."""
    process = start(args, env, fork=fork)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess([KAFKA_BATCH, *args], process.returncode, out, err)


# -- the forkserver's side ----------------------------------------------------------------------


def serve(address: str) -> list[str] | None:
    """Fork a run per request until this process's parent is gone. Returns, in a forked child, the
    argv it must run; never returns in the server."""
    for name in PRELOAD:
        __import__(name)
    # What was imported stays out of the children's garbage collections: a collection would touch
    # (and so copy) every page of it in each child.
    gc.collect()
    gc.freeze()
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address + ".part")
    os.rename(address + ".part", address)  # seen only once it listens
    listener.listen(64)
    waiting: dict[int, socket.socket] = {}  # child pid -> its caller's channel
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    # A child's exit wakes the loop at once (SIGCHLD through a pipe), not at its next timeout.
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector.register(wake_read, selectors.EVENT_READ)
    while os.getppid() == parent:
        for key, _ in selector.select(1.0):
            if key.fd == wake_read:
                os.read(wake_read, 4096)
                continue
            channel, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(channel, 1 << 20, 3)
            request = json.loads(message)
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a fresh Python's, as every other signal is
                for fd in (wake_read, wake_write):
                    os.close(fd)
                selector.close()
                listener.close()
                for other in waiting.values():
                    other.close()
                channel.close()
                become_run(request, fds)
                return request["argv"]
            for fd in fds:
                os.close(fd)
            channel.sendall(json.dumps({"pid": pid}).encode())
            waiting[pid] = channel
        for pid in list(waiting):
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                channel = waiting.pop(pid)
                ended = {"returncode": returncode(status), "cpu": usage.ru_utime + usage.ru_stime}
                try:
                    channel.sendall(json.dumps(ended).encode())
                except OSError:
                    pass  # the caller went away
                channel.close()
    for pid in waiting:  # the worker is gone: so are the runs it started
        os.kill(pid, signal.SIGKILL)
    os._exit(0)


def returncode(status: int) -> int:
    """As ``subprocess.Popen.returncode``: the exit code, or minus the signal that ended it."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def become_run(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: the process a caller asked for (streams, session, folder, environment)."""
    if request["new_session"]:
        os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])


if __name__ == "__main__":
    argv = serve(sys.argv[1])
    # A forked run: file descriptors 0-2 (under sys.stdin/stdout/stderr, still empty) are the
    # caller's now. Run the command line as the kafka-batch script does, with its folder first on
    # the path, and leave as it would (exit status, atexit handlers, flushed output).
    sys.argv = argv
    sys.path[0] = os.path.dirname(argv[0])
    from kafka_batch_provider.cli import main

    sys.exit(main())
