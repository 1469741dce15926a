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
``kafka-batch`` script. As with ``subprocess.Popen``, its pid stays the run's (a zombie, not
reaped) until the caller has read its exit, so a late signal never reaches another process.

What differs from an exec'd run: its ``/proc/<pid>/cmdline`` is the forkserver's, and the
libraries above were imported in the forkserver's environment. Some read a variable at import
(``PYTHON*`` and the locale at the interpreter's start, pyspark's Connect log level, s3fs's log
level, fsspec's config folder and ``HOME``, pandas' options, gRPC's fork support): a run whose
environment differs from the forkserver's in one of them is exec'd instead (``IMPORT_TIME_ENV``).

``KAFKA_BATCH_TEST_CLI=exec`` runs the installed ``kafka-batch`` script instead, for every run;
the first test of tests/integration/test_cli.py and the wheel's test always do.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import selectors
import shutil
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
#: Variables that the interpreter or a library in ``PRELOAD`` reads at start or import: a run
#: whose environment differs from the forkserver's in one of them is exec'd, not forked.
IMPORT_TIME_ENV = (
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "SPARK_CONNECT_LOG_LEVEL",
    "S3FS_LOGGING_LEVEL",
    "FSSPEC_CONFIG_DIR",
    "PANDAS_COPY_ON_WRITE",
    "PANDAS_FUTURE_INFER_STRING",
    "GRPC_ENABLE_FORK_SUPPORT",
    "PYSPARK_PIN_THREAD",
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
    #: What the channel gave past the last whole message (the forkserver's messages are lines).
    _unread: bytes = field(default=b"", repr=False)
    #: What :meth:`communicate` read before its timeout, kept for the next call (as Popen keeps it).
    _read: dict[int, list[bytes]] = field(default_factory=dict, repr=False)
    _closed: set[int] = field(default_factory=set, repr=False)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.channel.setblocking(False)
            try:
                self._take(self._line())
            except BlockingIOError:
                return None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.channel.settimeout(timeout)
            try:
                self._take(self._line())
            except TimeoutError:
                raise subprocess.TimeoutExpired(["kafka-batch"], timeout) from None
        return self.returncode

    def _line(self) -> bytes:
        """The forkserver's next message, ``b""`` if it closed the channel (raises what the
        channel's ``recv`` raises while no whole message has come; a part is kept)."""
        while b"\n" not in self._unread:
            data = self.channel.recv(4096)
            if not data:
                return b""
            self._unread += data
        line, _, self._unread = self._unread.partition(b"\n")
        return line

    def _take(self, line: bytes) -> None:
        """The forkserver's last message: the run's exit. Closing the channel lets it reap the run."""
        self.channel.close()
        if not line:
            raise RuntimeError("the kafka-batch forkserver went away before it reported the run's exit")
        ended = json.loads(line)
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
        out, err = (b"".join(self._read.get(pipe, [])).decode() for pipe in (self.stdout_pipe, self.stderr_pipe))
        for pipe in pipes:
            os.close(pipe)
        self.stdout_pipe = self.stderr_pipe = None
        self._read, self._closed = {}, set()
        return out, err

    def send_signal(self, signum: int) -> None:
        # Until its exit is read the pid is the run's (alive, or a zombie the forkserver keeps).
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Forkserver:
    """This process's forkserver (started on first use, stopped with this process)."""

    _lock = threading.Lock()
    _current: Forkserver | None = None

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="kafka-batch-cli-"))
        atexit.register(shutil.rmtree, self.folder, ignore_errors=True)
        self.address = str(self.folder / "forkserver.sock")
        #: The environment its libraries were imported in (see ``IMPORT_TIME_ENV``).
        self.environment = dict(os.environ)
        with open(self.folder / "forkserver.log", "wb") as log:  # not the first test's captured streams
            self.process = subprocess.Popen(
                [sys.executable, "-m", __name__, self.address],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment,
                cwd=ROOT,  # where ``tests`` is importable, whatever folder the test is in
                start_new_session=True,  # a test's killpg of a run never reaches it
            )
        deadline = time.monotonic() + 120
        while not os.path.exists(self.address):
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = self.folder / "forkserver.log"
                raise RuntimeError(f"the kafka-batch forkserver did not start (exit {self.process.poll()}); see {log}")
            time.sleep(0.02)

    @classmethod
    def of_this_process(cls) -> Forkserver:
        with cls._lock:
            if cls._current is None or cls._current.process.poll() is not None:
                cls._current = cls()
            return cls._current

    def can_run_in(self, env: dict[str, str]) -> bool:
        """Whether a run in ``env`` sees what an exec'd one would: the same import-time variables."""
        names = {*IMPORT_TIME_ENV, *(k for k in (*env, *self.environment) if k.startswith("PYTHON"))}
        return all(env.get(name) == self.environment.get(name) for name in names)

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
        run = ForkedRun(0, channel, read_out, read_err)
        reply = run._line()
        if not reply:
            raise RuntimeError(f"the kafka-batch forkserver did not fork a run; see {self.folder}/forkserver.log")
        run.pid = json.loads(reply)["pid"]
        return run


def cli_mode() -> str:
    mode = os.environ.get(MODE_ENV, "fork")
    if mode not in ("fork", "exec"):
        raise ValueError(f"{MODE_ENV}={mode!r}: choose fork or exec")
    return mode


def start(
    args: list[str], env: dict[str, str] | None = None, new_session: bool = False, fork: bool | None = None
) -> ForkedRun | subprocess.Popen:
    """``kafka-batch <args>`` with its output captured (text), in the environment ``env`` (this
    process's when ``None``): forked by the forkserver, or exec'd (``fork=False``,
    ``KAFKA_BATCH_TEST_CLI=exec`` for every run, or an environment the forkserver cannot give)."""
    env = dict(os.environ if env is None else env)
    forkserver = None if fork is False or cli_mode() == "exec" else Forkserver.of_this_process()
    if forkserver is None or not forkserver.can_run_in(env):
        return subprocess.Popen(
            [KAFKA_BATCH, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            start_new_session=new_session,
        )  # fmt: skip
    return forkserver.start([KAFKA_BATCH, *args], env, new_session, capture=True)


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
    listener.listen(64)
    os.rename(address + ".part", address)  # seen only once it listens
    running: dict[int, socket.socket] = {}  # child pid -> its caller's channel
    ended: dict[int, int] = {}  # a zombie kept until its caller read its exit: its channel's fd -> pid
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    # A child's exit wakes the loop at once (SIGCHLD through a pipe), not at its next timeout.
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector.register(wake_read, selectors.EVENT_READ)
    server = os.getpid()
    try:
        while os.getppid() == parent:
            for key, _ in selector.select(1.0):
                if key.fd == wake_read:
                    os.read(wake_read, 4096)
                elif key.fd in ended:  # the caller read the exit (or went away): reap
                    selector.unregister(key.fileobj)
                    key.fileobj.close()
                    os.waitpid(ended.pop(key.fd), 0)
                else:
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
                        for other in running.values():
                            other.close()
                        for fd in ended:
                            os.close(fd)
                        channel.close()
                        become_run(request, fds)
                        return request["argv"]
                    for fd in fds:
                        os.close(fd)
                    channel.sendall(json.dumps({"pid": pid}).encode() + b"\n")
                    running[pid] = channel
            for pid in list(running):
                # WNOWAIT: the exit is read, the zombie stays, so its pid is not reused while the
                # caller may still signal it.
                exited = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                if exited is None:
                    continue
                channel = running.pop(pid)
                ended_now = {"returncode": returncode(exited), "cpu": zombie_cpu_seconds(pid)}
                try:
                    channel.sendall(json.dumps(ended_now).encode() + b"\n")
                except OSError:  # the caller went away
                    channel.close()
                    os.waitpid(pid, 0)
                    continue
                ended[channel.fileno()] = pid
                selector.register(channel, selectors.EVENT_READ)
    finally:
        if os.getpid() == server:  # not in a forked run, which returns through here
            for pid in running:  # the worker is gone (or this server failed): so are the runs it started
                os.kill(pid, signal.SIGKILL)
    os._exit(0)


def returncode(exited: os.waitid_result) -> int:
    """As ``subprocess.Popen.returncode``: the exit code, or minus the signal that ended it."""
    return exited.si_status if exited.si_code == os.CLD_EXITED else -exited.si_status


def zombie_cpu_seconds(pid: int) -> float:
    """The CPU of an exited child not reaped yet and of the children it waited for (what
    ``wait4`` would give): its ``/proc`` stat's utime, stime, cutime and cstime. (Not
    ``dev.local_servers.proc_stat``: the forkserver imports nothing of this package.)"""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


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
