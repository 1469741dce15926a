"""The Airflow 3 services as plain local processes: api-server, scheduler, dag-processor, triggerer.

``AirflowStack(home, dags_folder, env)`` migrates a SQLite metadata DB in ``home``, starts the
four services on 127.0.0.1 (a free port for the api-server, LocalExecutor), waits until the
health endpoint reports every component healthy, and talks to the public REST API (``/api/v2``,
a JWT from SimpleAuthManager's ``/auth/token``; every user is an admin, which suits a local
stack only). Each service runs in a process group of its own; ``stop()`` ends the groups and
any process that left them (a task's spark-submit), so nothing outlives the stack.

Used by the ``airflow_live`` pytest fixture (``tests/live``) and ``make airflow``
(``python -m kafka_batch_provider.dev.airflow_live``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from kafka_batch_provider.dev.local_servers import HOST, free_port

SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
# The components /api/v2/monitor/health reports; each must say "healthy".
HEALTH_COMPONENTS = ("metadatabase", "scheduler", "triggerer", "dag_processor")
TERMINAL_RUN_STATES = {"success", "failed"}
# Task states that can still lead to running code.
BUSY_TASK_STATES = ["running", "queued", "scheduled", "deferred", "restarting", "up_for_retry", "up_for_reschedule"]


class AirflowStackError(RuntimeError):
    """The stack did not start, or an API call failed: one line naming what and where the logs are."""


def airflow_bin() -> str:
    return str(Path(sys.executable).parent / "airflow")


@dataclass
class AirflowStack:
    """Airflow's services for one ``home`` (SQLite, LocalExecutor) and a REST client for them.

    :param home: ``AIRFLOW_HOME``: the config, the metadata DB, task and service logs.
    :param dags_folder: the DAG files the dag-processor parses.
    :param env: extra environment for every service (the DAGs' settings, ``KAFKA_BATCH_*``).
    :param parallelism: task slots of the LocalExecutor.
    :param stop_timeout: seconds the services get to stop on SIGTERM before SIGKILL (a test's
        throwaway stack needs no graceful stop: measured, one service took the whole 20 s).
    """

    home: Path
    dags_folder: Path
    env: Mapping[str, str] = field(default_factory=dict)
    parallelism: int = 4
    stop_timeout: float = 20.0
    port: int = field(default_factory=free_port)
    processes: dict[str, subprocess.Popen] = field(default_factory=dict, init=False)
    _token: str | None = field(default=None, init=False)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def db_path(self) -> Path:
        return self.home / "airflow.db"

    @property
    def log_dir(self) -> Path:
        return self.home / "service-logs"

    def service_env(self) -> dict[str, str]:
        """What every service and CLI call of this stack gets: its home, no examples, loopback."""
        bin_dir = str(Path(sys.executable).parent)
        env = {
            **os.environ,
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
            # Five processes share one SQLite file: wait for its lock instead of failing at once.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.db_path}?timeout=60",
            "AIRFLOW__API__HOST": HOST,
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.base_url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            # New DAG files are found within seconds; the scheduler loops fast on a small DB.
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",  # spark-submit next to Python
            "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", HOST),
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            **self.env,
        }
        # Connections and Variables live in this stack's DB: the caller's would override them.
        for key in [k for k in env if k.startswith(("AIRFLOW_CONN_", "AIRFLOW_VAR_"))]:
            del env[key]
        return env

    def _write_config(self) -> None:
        """Secrets shared by the services go in a 0600 airflow.cfg, never on a command line."""
        self.home.mkdir(parents=True, exist_ok=True)
        from cryptography.fernet import Fernet

        config = self.home / "airflow.cfg"
        config.touch(mode=0o600)
        config.write_text(
            "[core]\n"
            f"fernet_key = {Fernet.generate_key().decode()}\n"
            "[api_auth]\n"
            f"jwt_secret = {secrets.token_urlsafe(32)}\n"
            "[api]\n"
            f"secret_key = {secrets.token_urlsafe(32)}\n"
        )
        config.chmod(0o600)

    def run_cli(self, *args: str, timeout: float = 300, retry_locked: float = 0) -> subprocess.CompletedProcess:
        """``airflow <args>`` against this stack; fails with one line naming the command.

        :param retry_locked: for a command whose writes are one transaction, the seconds within
            which it is run again when SQLite refused it ("database is locked": another service's
            read-then-write transaction held the lock; SQLite does not wait in that case).
        """
        deadline = time.monotonic() + retry_locked
        while True:
            result = subprocess.run(
                [airflow_bin(), *args], env=self.service_env(), capture_output=True, text=True, timeout=timeout
            )
            if result.returncode == 0 or "database is locked" not in result.stderr or time.monotonic() > deadline:
                break
            time.sleep(1)
        if result.returncode != 0:
            lines = result.stderr.strip().splitlines()
            # The exception's own line says more than SQLAlchemy's statement dump after it.
            errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]
            raise AirflowStackError(
                f"airflow {' '.join(args)} exited with {result.returncode}: {(errors or lines or [''])[-1][:500]}"
            )
        return result

    def start(self, timeout: float = 240) -> AirflowStack:
        self._write_config()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.run_cli("db", "migrate")
        # Write-ahead logging: readers no longer block the writer (the file keeps the mode).
        with sqlite3.connect(self.db_path) as db:
            db.execute("PRAGMA journal_mode=WAL")
        try:
            for service in SERVICES:
                log = open(self.log_dir / f"{service}.log", "ab")  # noqa: SIM115 - the child owns it
                self.processes[service] = subprocess.Popen(
                    [airflow_bin(), service],
                    env=self.service_env(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stopped as one
                )
                log.close()
            self.wait_until_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _check_processes(self) -> None:
        for service, process in self.processes.items():
            if process.poll() is not None:
                raise AirflowStackError(
                    f"airflow {service} exited with {process.returncode} (log: {self.log_dir / service}.log)"
                )

    def wait_until_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            self._check_processes()
            try:
                health = httpx.get(f"{self.base_url}/api/v2/monitor/health", timeout=5).json()
                unhealthy = {c: health.get(c, {}).get("status") for c in HEALTH_COMPONENTS}
                unhealthy = {c: s for c, s in unhealthy.items() if s != "healthy"}
                if not unhealthy:
                    return
                last = f"not yet healthy: {unhealthy}"
            except (httpx.HTTPError, ValueError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(1)
        raise AirflowStackError(f"Airflow was not healthy within {timeout:.0f} s ({last}); logs in {self.log_dir}")

    # -- the REST API ------------------------------------------------------------------------

    def token(self) -> str:
        if self._token is None:
            response = httpx.get(f"{self.base_url}/auth/token", timeout=30)
            response.raise_for_status()
            self._token = response.json()["access_token"]
        return self._token

    def api(self, method: str, path: str, headers: Mapping[str, str] | None = None, **kwargs: Any) -> Any:
        """A call to ``/api/v2<path>``; returns the decoded JSON (None for 204).

        A call that may be repeated (all but POST) is asked again when the api-server did not
        answer in time: on SQLite it waits for a lock the scheduler or the triggerer holds, which
        on a busy machine can outlast one timeout.
        """
        attempts = 1 if method.upper() == "POST" else 3
        for attempt in range(attempts):
            try:
                response = httpx.request(
                    method,
                    f"{self.base_url}/api/v2{path}",
                    headers={"Authorization": f"Bearer {self.token()}", **(headers or {})},
                    timeout=60,
                    **kwargs,
                )
                break
            except httpx.TimeoutException:
                if attempt == attempts - 1:
                    raise
        if response.status_code >= 400:
            raise AirflowStackError(f"{method} /api/v2{path}: HTTP {response.status_code}: {response.text[:500]}")
        return response.json() if response.content else None

    def set_connection(self, conn_id: str, conn_type: str, **fields: Any) -> None:
        """Create or replace a connection (``extra`` may be a dict)."""
        body = {"connection_id": conn_id, "conn_type": conn_type, **fields}
        if isinstance(body.get("extra"), dict):
            body["extra"] = json.dumps(body["extra"])
        try:
            self.api("DELETE", f"/connections/{conn_id}")
        except AirflowStackError as exc:
            if "HTTP 404" not in str(exc):
                raise
        self.api("POST", "/connections", json=body)

    def set_variable(self, key: str, value: str) -> None:
        try:
            self.api("PATCH", f"/variables/{key}", json={"key": key, "value": value})
        except AirflowStackError as exc:
            if "HTTP 404" not in str(exc):
                raise
            self.api("POST", "/variables", json={"key": key, "value": value})

    def wait_for_dags(self, dag_ids: list[str], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        missing = list(dag_ids)
        while time.monotonic() < deadline:
            found = {d["dag_id"] for d in self.api("GET", "/dags", params={"limit": 100})["dags"]}
            missing = [d for d in dag_ids if d not in found]
            if not missing:
                return
            self._check_processes()
            time.sleep(1)
        errors = self.api("GET", "/importErrors")
        raise AirflowStackError(f"DAGs {missing} not parsed within {timeout:.0f} s; import errors: {errors}")

    def set_paused(self, dag_id: str, paused: bool) -> None:
        self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": paused})

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        run = self.api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": dict(conf or {})})
        return run["dag_run_id"]

    def dag_runs(self, dag_id: str, **params: Any) -> list[dict]:
        return self.api("GET", f"/dags/{dag_id}/dagRuns", params={"limit": 100, **params})["dag_runs"]

    def dag_run(self, dag_id: str, run_id: str) -> dict:
        return self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict]:
        found = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100})
        return {ti["task_id"]: ti for ti in found["task_instances"]}

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        return {task_id: ti["state"] for task_id, ti in self.task_instances(dag_id, run_id).items()}

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """The task's log as text (the structured log's events, one per line)."""
        found = self.api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            params={"full_content": "true"},
            headers={"Accept": "application/json"},
        )
        lines = []
        for item in found.get("content", []):
            lines.append(item.get("event", "") if isinstance(item, dict) else str(item))
        return "\n".join(lines)

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 300) -> dict:
        """Wait until the run is finished; returns it. Fails naming its task states otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.dag_run(dag_id, run_id)
            if run["state"] in TERMINAL_RUN_STATES:
                return run
            self._check_processes()
            time.sleep(1)
        raise AirflowStackError(
            f"{dag_id} run {run_id} did not finish within {timeout:.0f} s; tasks: {self.task_states(dag_id, run_id)}"
        )

    def quiesce(self, dag_id: str, timeout: float = 120, settle: float = 4) -> None:
        """Pause the DAG and fail whatever of it is unfinished until nothing of it is left to run.

        Failing a run once is not enough: the scheduler may have been creating a run, or queueing a
        task of a run, in the same loop as the pause, and such a leftover would later run with the
        next test's Variables. So the runs and tasks are failed on every poll, and the DAG counts as
        quiet only after two polls ``settle`` seconds apart (longer than a scheduler loop) found none.
        """
        self.set_paused(dag_id, True)
        deadline = time.monotonic() + timeout
        quiet_since: float | None = None
        busy: list[dict] = []
        runs: list[dict] = []
        while time.monotonic() < deadline:
            runs = self.dag_runs(dag_id, state=["queued", "running"])
            busy = self.api(
                "GET",
                f"/dags/{dag_id}/dagRuns/~/taskInstances",
                params={"state": BUSY_TASK_STATES, "limit": 100},
            )["task_instances"]
            if not runs and not busy:
                if quiet_since is None:
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since >= settle:
                    return
                time.sleep(1)
                continue
            quiet_since = None
            for run in runs:
                self._try("PATCH", f"/dags/{dag_id}/dagRuns/{run['dag_run_id']}", json={"state": "failed"})
            for ti in busy:  # a task queued or started after its run was failed
                path = f"/dags/{dag_id}/dagRuns/{ti['dag_run_id']}/taskInstances/{ti['task_id']}/{ti['map_index']}"
                self._try("PATCH", path, json={"new_state": "failed"})
            self._check_processes()
            time.sleep(1)
        left = [(ti["dag_run_id"], ti["task_id"], ti["state"]) for ti in busy]
        unfinished = [(run["dag_run_id"], run["state"]) for run in runs]
        raise AirflowStackError(
            f"{dag_id}: not quiet for {settle:g} s within {timeout:.0f} s after its runs were failed: "
            f"runs {unfinished}, tasks {left}"
        )

    def _try(self, method: str, path: str, **kwargs: Any) -> None:
        """An API call whose failure is retried by the caller's next poll (the state moved on meanwhile)."""
        try:
            self.api(method, path, **kwargs)
        except AirflowStackError:
            pass

    # -- stopping ------------------------------------------------------------------------------

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM every service's process group, then SIGKILL what is left, including
        processes that left their group (tasks' spark-submit JVMs, orphaned by a killed task)."""
        import psutil

        leftovers: list[psutil.Process] = []
        for process in self.processes.values():
            try:
                leftovers += psutil.Process(process.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                pass
        for process in self.processes.values():
            if process.poll() is None:
                _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait(10)
            _signal_group(process.pid, signal.SIGKILL)  # the group's stragglers
        for child in leftovers + orphans_of(self.home):
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        self.processes.clear()

    def __enter__(self) -> AirflowStack:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop(self.stop_timeout)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def orphans_of(home: Path) -> list:
    """Processes still running with this stack's ``AIRFLOW_HOME`` in their environment
    (a spark-submit whose task was killed is re-parented and in no service's group)."""
    import psutil

    marker = str(home)
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid != os.getpid() and proc.environ().get("AIRFLOW_HOME") == marker:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found
