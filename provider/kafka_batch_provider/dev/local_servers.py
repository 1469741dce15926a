"""Servers this package runs as plain local processes: the brokers, S3, Spark Connect, PostgreSQL and Kafka Connect.

Both bind 127.0.0.1, log to a file, stop with SIGTERM and then SIGKILL, and can be detached
(``kafka-batch broker|s3 start``): the process then outlives the command, and a state file in
``$KAFKA_BATCH_STATE_DIR`` (default ``~/.kafka-batch``) remembers it for ``status`` and ``stop``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from kafka_batch_provider.errors import ConfigError, KafkaBatchError

HOST = "127.0.0.1"


#: Where :func:`free_port` looks when the kernel's range of ephemeral ports is not known.
LISTEN_PORTS = range(20000, 32768)
#: Below this, well-known services' ports (5432, 8080, 9092, ...): not chosen.
LOWEST_PORT = 10000


def listen_ports() -> range:
    """Ports below the kernel's ephemeral range (``ip_local_port_range``, 32768-60999 by default),
    or above it when there is more room there. A port the kernel hands out for binding to 0 is also
    the local port of the next outgoing connection: between choosing one and a server binding it,
    any client of the machine (there are hundreds in a test session) may take it, and the server
    then fails to start with "Address already in use". Outside that range only another server can."""
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return LISTEN_PORTS
    below, above = range(LOWEST_PORT, low), range(high + 1, 65536)
    chosen = below if len(below) >= len(above) else above
    return chosen if len(chosen) >= 1000 else LISTEN_PORTS


#: Its own source of randomness: the global one may be seeded (Hypothesis seeds it for each example,
#: and two test workers starting servers inside examples then chose the same port).
CHOOSER = random.SystemRandom()


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now, outside the ephemeral range (:func:`listen_ports`);
    chosen at random, so that processes choosing at once rarely choose alike."""
    ports = listen_ports()
    for _ in range(200):
        port = CHOOSER.choice(ports)
        with socket.socket() as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a machine with that range full: let the kernel choose
        s.bind((HOST, 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = HOST, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command's name (the state first; the name, in
    parentheses, may hold spaces); ``None`` once the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = proc_stat(pid)
    return fields is None or fields[0] != "Z"  # a zombie child is not alive


def runs(pid: int, marker: str) -> bool:
    """Guard against a recycled pid: does process ``pid`` run a command line containing ``marker``?"""
    try:
        return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def stop_pid(pid: int, timeout: float = 10.0, first: int = signal.SIGTERM) -> None:
    """``first`` (SIGTERM), wait, then SIGKILL if it would not go."""
    for sig, wait in ((first, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return
            time.sleep(0.05)


def state_dir() -> Path:
    return Path(os.environ.get("KAFKA_BATCH_STATE_DIR", Path.home() / ".kafka-batch"))


@dataclass
class LocalServer:
    """A server process on 127.0.0.1; subclasses say how to run it and when it is ready.

    Use as a context manager, or ``start()`` / ``stop()``. With ``detach=True`` the process
    outlives this Python process.

    :param port: port to listen on; ``0`` picks a free one.
    :param log_path: file for the server's output (default: discarded).
    """

    port: int = 0
    log_path: Path | None = None
    detach: bool = False
    pid: int | None = None

    #: What the server is called in messages.
    label: ClassVar[str] = "server"
    #: The signal that asks the server to stop (SIGKILL follows when it would not).
    stop_signal: ClassVar[int] = signal.SIGTERM

    def __post_init__(self) -> None:
        if self.port == 0:
            self.port = free_port()

    def command(self) -> list[str]:
        raise NotImplementedError

    def wait_until_ready(self, timeout: float) -> None:
        """Return once the server answers its protocol; raise a one-line error otherwise."""
        raise NotImplementedError

    def poll_until(self, ready: Callable[[], bool], timeout: float, error: type[KafkaBatchError], waiting: str) -> None:
        """Poll ``ready()`` until it holds; one line (``error``) if the process exits or ``timeout`` passes.

        :param waiting: what did not happen in time, e.g. ``"did not answer"``.
        """
        deadline = time.monotonic() + timeout
        while not ready():
            code = self.exit_code()
            if code is not None:
                where = f"; see {self.log_path}" if self.log_path else ""
                raise error(f"{self.label} on port {self.port} exited with code {code} at start{where}")
            if time.monotonic() > deadline:
                raise error(f"{self.label} on port {self.port} {waiting} within {timeout:g}s")
            time.sleep(0.2)

    def environment(self) -> dict[str, str] | None:
        """The server's environment (default: this process's)."""
        return None

    def popen_options(self) -> dict[str, Any]:
        """More arguments of the server's ``Popen`` (its working folder, the user it runs as)."""
        return {}

    def start(self, timeout: float = 30.0):
        if port_open(self.port):
            raise ConfigError(f"port {self.port} on {HOST} is already in use; choose another with --port")
        output = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self._process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                start_new_session=self.detach,  # a detached server must not die with our terminal
                **self.popen_options(),
            )
        finally:
            if self.log_path:
                output.close()
        self.pid = self._process.pid
        try:
            self.wait_until_ready(timeout)
        except BaseException:  # not ready, or interrupted waiting (Ctrl-C reaches no detached server)
            self.stop()
            raise
        return self

    def exit_code(self) -> int | None:
        """The process's exit code if it already ended (it should not have)."""
        process = getattr(self, "_process", None)
        return process.poll() if process is not None else None

    def stop(self, timeout: float = 10.0) -> None:
        if self.pid is None:
            return
        stop_pid(self.pid, timeout, self.stop_signal)
        process = getattr(self, "_process", None)
        if process is not None:
            process.wait(timeout)  # reap it, so no zombie is left
        self.pid = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@dataclass(frozen=True)
class Detached:
    """The state file of one kind of detached server (``kafka-batch <name> start|status|stop``).

    :param name: the command and the state file's name (``broker`` -> ``broker.json``).
    :param marker: a part of the server's command line, to recognise its pid.
    :param address: the key of the address in the remembered info, for messages.
    """

    name: str
    label: str
    marker: str
    address: str

    @property
    def state_file(self) -> Path:
        return state_dir() / f"{self.name}.json"

    @property
    def log_file(self) -> Path:
        return state_dir() / f"{self.name}.log"

    def start(self, make: Callable[[Path], LocalServer], describe: Callable[[Any], dict]) -> dict:
        """Start the server ``make(log_path)`` detached and remember ``describe(server)``."""
        running = self.status()
        if running["running"]:
            raise ConfigError(
                f"the {self.label} is already running at {running[self.address]} (pid {running['pid']}); "
                f"stop it first with: kafka-batch {self.name} stop"
            )
        state_dir().mkdir(parents=True, exist_ok=True)
        server = make(self.log_file)
        info = {"pid": server.pid, "port": server.port, **describe(server)}
        self.state_file.write_text(json.dumps(info))
        return {"running": True, **info, "log": str(self.log_file)}

    def status(self) -> dict:
        try:
            info = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {"running": False}
        pid = int(info["pid"])
        alive = pid_alive(pid) and runs(pid, self.marker) and port_open(int(info["port"]))
        return {"running": alive, **info}

    def stop(self, timeout: float = 10.0) -> dict:
        info = self.status()
        if info["running"]:
            stop_pid(int(info["pid"]), timeout)
        self.state_file.unlink(missing_ok=True)
        return {
            "running": False,
            "stopped": bool(info.get("running")),
            **{k: info[k] for k in ("pid", "port") if k in info},
        }
