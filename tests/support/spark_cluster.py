"""A real Spark standalone cluster (one master, one worker) on 127.0.0.1, for tests.

A ``local[*]`` master runs the tasks in the driver's own process and Python path, so it
cannot show what breaks on a cluster: code that is not shipped to the executors, closures
that do not pickle, options that do not reach them. This starts the master and the worker
of the pip-installed pyspark (``spark-class``, no Spark download) as plain processes, each
in its own process group, so that ``stop()`` can end them and the executor JVMs the worker
launched, leaving no Java process behind. Everything (work dir, logs, local dirs, pid
files) lives under one base directory; every port is a free one on 127.0.0.1.

Enable the ``spark_standalone`` fixture in a ``conftest.py`` with
``pytest_plugins = ["tests.support.spark_cluster"]``.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kafka_batch_provider.dev.local_servers import HOST, free_port, port_open, stop_pid
from kafka_batch_provider.errors import ConfigError, KafkaBatchError
from kafka_batch_provider.spark.jvm_start import LEAN_JAVA_OPTIONS, java_executable, spark_home

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_class_executable(home: Path) -> str:
    path = home / "bin" / "spark-class"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ConfigError(f"{path} not found or not executable: set SPARK_HOME to a Spark distribution")
    return str(path)


@dataclass
class SparkStandaloneCluster:
    """A Spark master and one worker on 127.0.0.1; a context manager, or ``start()`` / ``stop()``.

    :param base_dir: holds everything the cluster writes: ``logs/`` (``master.log``,
        ``worker.log``), ``work/`` (the worker's work dir: one directory per application
        and executor, with the executors' output), ``local/``, ``pids/``, ``conf/``.
    :param cores: cores the worker offers.
    :param memory: memory the worker offers to executors (Spark's ``2g`` / ``512m`` syntax).
    :param python: the executors' default Python (``PYSPARK_PYTHON``); an application's
        ``spark.pyspark.python`` takes precedence.
    :param daemon_memory: heap of the master and the worker JVMs themselves.
    """

    base_dir: Path
    cores: int = 2
    memory: str = "2g"
    python: str = sys.executable
    daemon_memory: str = "512m"
    master_port: int = 0
    master_webui_port: int = 0
    worker_webui_port: int = 0
    _processes: dict[str, subprocess.Popen] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.base_dir = Path(self.base_dir).resolve()
        self.master_port = self.master_port or free_port()
        self.master_webui_port = self.master_webui_port or free_port()
        self.worker_webui_port = self.worker_webui_port or free_port()

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    @property
    def master_webui_url(self) -> str:
        return f"http://{HOST}:{self.master_webui_port}"

    @property
    def log_dir(self) -> Path:
        return self.base_dir / "logs"

    @property
    def work_dir(self) -> Path:
        return self.base_dir / "work"

    def environment(self) -> dict[str, str]:
        """What the master and the worker run with (the worker passes it on to executors)."""
        env = dict(os.environ)
        env.update(
            SPARK_LOCAL_IP=HOST,  # the hostname may resolve to an interface Spark should not use
            SPARK_HOME=str(spark_home()),
            PYSPARK_PYTHON=self.python,
            SPARK_WORKER_DIR=str(self.work_dir),
            SPARK_LOG_DIR=str(self.log_dir),
            SPARK_PID_DIR=str(self.base_dir / "pids"),
            SPARK_LOCAL_DIRS=str(self.base_dir / "local"),  # block manager and shuffle files
            SPARK_CONF_DIR=str(self.base_dir / "conf"),  # empty: no spark-env.sh or defaults of anybody's
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            # The master and the worker start like a batch's driver (C1 only, serial GC): on a
            # test machine they serve a few short applications.
            SPARK_DAEMON_JAVA_OPTS=" ".join(LEAN_JAVA_OPTIONS),
        )
        return env

    @property
    def executor_conf(self) -> dict[str, str]:
        """Spark settings for an application's executors here: JVMs as lean as the driver's."""
        return {"spark.executor.extraJavaOptions": " ".join(LEAN_JAVA_OPTIONS)}

    def start(self, timeout: float = 90.0) -> SparkStandaloneCluster:
        if self._processes:
            raise ConfigError(f"the Spark standalone cluster at {self.master_url} is already started")
        java_executable()  # fail with a clear message before spark-class prints its own
        spark_class = spark_class_executable(spark_home())
        for port in (self.master_port, self.master_webui_port, self.worker_webui_port):
            if port_open(port):
                raise ConfigError(f"port {port} on {HOST} is already in use; choose other ports")
        for directory in ("logs", "work", "local", "pids", "conf"):
            (self.base_dir / directory).mkdir(parents=True, exist_ok=True)
        env = self.environment()
        commands = {
            "master": [
                spark_class,
                MASTER_CLASS,
                "--host",
                HOST,
                "--port",
                str(self.master_port),
                "--webui-port",
                str(self.master_webui_port),
            ],
            # Started at once: the worker retries until the master answers.
            "worker": [
                spark_class,
                WORKER_CLASS,
                self.master_url,
                "--host",
                HOST,
                "--webui-port",
                str(self.worker_webui_port),
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--work-dir",
                str(self.work_dir),
            ],
        }
        atexit.register(self.stop)  # even if the caller never gets to stop(): no JVM outlives us
        try:
            for name, command in commands.items():
                with open(self.log_dir / f"{name}.log", "ab") as log:
                    self._processes[name] = subprocess.Popen(
                        command,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        cwd=self.base_dir,
                        start_new_session=True,  # its own process group, executors included
                    )
            self._wait_until_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def status(self) -> dict | None:
        """The master's JSON status page, or ``None`` while it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.master_webui_url}/json/", timeout=2) as response:
                return json.load(response)
        except (OSError, ValueError):
            return None

    def alive_workers(self) -> list[dict]:
        return [w for w in (self.status() or {}).get("workers", []) if w.get("state") == "ALIVE"]

    def _wait_until_ready(self, timeout: float) -> None:
        """Ready means the master lists one ALIVE worker offering the expected cores."""
        deadline = time.monotonic() + timeout
        while True:
            for name, process in self._processes.items():
                if process.poll() is not None:
                    raise KafkaBatchError(
                        f"the Spark {name} exited with code {process.returncode} while starting: {self.log_tail()}"
                    )
            workers = self.alive_workers()
            if len(workers) == 1 and workers[0].get("cores") == self.cores:
                return
            if time.monotonic() > deadline:
                found = [(w.get("host"), w.get("cores")) for w in workers]
                raise KafkaBatchError(
                    f"the Spark standalone cluster at {self.master_url} was not ready within {timeout:g}s "
                    f"(expected one ALIVE worker with {self.cores} cores, found {found}): {self.log_tail()}"
                )
            time.sleep(0.5)

    def log_tail(self, lines: int = 5) -> str:
        """The last lines of the master's and the worker's logs, for error messages."""
        parts = []
        for name in ("master", "worker"):
            path = self.log_dir / f"{name}.log"
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            tail = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
            parts.append(f"{name}.log: " + " | ".join(tail))
        return " || ".join(parts) or f"no logs in {self.log_dir}"

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL, to each process group; the worker (and its executors) first."""
        atexit.unregister(self.stop)
        for name in ("worker", "master"):
            process = self._processes.pop(name, None)
            if process is not None:
                _stop_group(process, timeout)

    def __enter__(self) -> SparkStandaloneCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _stop_group(process: subprocess.Popen, timeout: float) -> None:
    """End the process (``spark-class`` execs the JVM, so it is the JVM) and all of its group.

    The worker stops its executors when it gets SIGTERM; whatever is still in the group
    after that (an executor that would not stop, a launcher still starting) gets SIGKILL.
    """
    group = process.pid  # start_new_session: the group id is the leader's pid
    stop_pid(process.pid, timeout)
    process.wait(timeout)  # reap it, so no zombie is left
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
    raise KafkaBatchError(f"processes of group {group} ({process.args[1]}) survived SIGKILL")


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandaloneCluster]:
    """A Spark standalone cluster for the session: 1 worker, 2 cores, 2g for executors.

    Fails (does not skip) when Java or Spark is missing: a test asking for a cluster must
    not pass without one.
    """
    with SparkStandaloneCluster(tmp_path_factory.mktemp("spark-standalone")) as cluster:
        yield cluster
