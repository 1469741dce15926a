"""Servers (and other things made once, such as a migrated database file) that one pytest session
shares between its xdist workers.

Each pytest-xdist worker is a process of its own, so a session-scoped fixture runs once per
worker: four workers started four brokers, four S3 servers, four registries, each paying its start
and its idle CPU on a machine of two cores. Here the first worker that asks for a server starts it
(detached from the worker, under a file lock) and records how to reach it; the other workers read
the record. The pytest process that owns the session (xdist's controller, or the only process
with ``-n0``) stops them all at its end, and a small reaper process stops them if that process
dies without reaching its end (killed), so no server outlives its session.

The folder of the records is the session's base temporary folder (``shared/``), named to the
workers by ``$KAFKA_BATCH_TEST_SHARED_DIR``; each server keeps its data and log there too.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from kafka_batch_provider.dev.local_servers import LocalServer, pid_alive, proc_stat, stop_pid

#: The session's folder of shared servers, set by the session's owner for its workers.
ENV = "KAFKA_BATCH_TEST_SHARED_DIR"

Started = TypeVar("Started")


class SharedServerError(RuntimeError):
    """A shared server that the session started is gone: the tests that need it cannot run."""


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class SharedServers:
    """The shared servers of one session, recorded in ``folder`` (one ``<name>.json`` each)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    @classmethod
    def of_session(cls) -> SharedServers | None:
        """The session's, when its owner set one up (``None`` outside such a session)."""
        folder = os.environ.get(ENV)
        return cls(Path(folder)) if folder else None

    def get(
        self,
        name: str,
        start: Callable[[Path], Started],
        processes: Callable[[Started], Sequence[LocalServer]],
        describe: Callable[[Started], dict[str, Any]],
        leftovers: Callable[[Started], Sequence[Path]] = lambda started: (),
        handed_over: int = 0,
    ) -> dict[str, Any]:
        """What ``describe`` said of the server ``name``: started now by ``start(folder)`` if no worker has.

        :param start: starts the server(s) in a folder of their own, detached (``detach=True``:
            they must outlive the worker that started them); returns what ``describe`` and
            ``processes`` take.
        :param processes: the processes to stop at the session's end, in that order.
        :param describe: JSON-able facts the other workers need to reach it (ports, URLs, paths).
        :param leftovers: folders to remove once its processes stopped (those outside ``folder``).
        :param handed_over: how many of the first ``processes`` the workers take over (a proxy a
            worker stops and starts again): stopped at the end if still running, but not required
            to be alive when another worker asks.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        record = self.folder / f"{name}.json"
        with _locked(self.folder / f"{name}.lock"):
            if record.is_file():
                found = json.loads(record.read_text())
                gone = [p["pid"] for p in found["processes"] if p["watched"] and not still_running(p)]
                if gone:
                    raise SharedServerError(
                        f"the session's {name} (pid {gone[0]}) has exited; see the logs in {self.folder / name}"
                    )
                return found["info"]
            started = start(self.folder / name)
            stops = [
                {"pid": p.pid, "started": start_time(p.pid), "signal": int(p.stop_signal), "label": p.label}
                | {"watched": i >= handed_over}
                for i, p in enumerate(processes(started))
            ]
            info = describe(started)
            remove = [str(path) for path in leftovers(started)]
            temporary = record.with_suffix(".tmp")
            temporary.write_text(
                json.dumps({"processes": stops, "info": info, "remove": remove, "started": time.time()})
            )
            temporary.chmod(0o600)  # a record may hold a test server's password
            temporary.replace(record)
            return info

    def stop_all(self, timeout: float = 10.0) -> list[str]:
        """Stop every recorded server, the last started first; returns what was stopped."""
        records = sorted(self.folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        stopped = []
        for record in records:
            try:
                found = json.loads(record.read_text())
            except (OSError, ValueError):
                continue
            for process in found["processes"]:
                if not still_running(process):
                    continue  # gone already (a handed-over proxy), and its pid maybe another process's now
                stop_pid(process["pid"], timeout, process["signal"])
                stopped.append(f"{record.stem}: {process['label']} (pid {process['pid']})")
            for folder in found.get("remove", []):
                shutil.rmtree(folder, ignore_errors=True)
            record.unlink(missing_ok=True)
        return stopped


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot): with its pid, who it is; ``None`` if gone."""
    fields = proc_stat(pid)
    return None if fields is None else int(fields[19])


def still_running(process: dict[str, Any]) -> bool:
    """Whether a recorded process still runs: its pid alive and started when it was recorded (pids
    are reused: pid_max is 32768 on some machines)."""
    return start_time(process["pid"]) == process["started"] and pid_alive(process["pid"])


def start_reaper(servers: SharedServers, owner_pid: int) -> subprocess.Popen:
    """A process that stops ``servers`` once ``owner_pid`` has gone, however it went."""
    return subprocess.Popen(
        [sys.executable, "-m", __name__, str(servers.folder), str(owner_pid)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # not stopped by the terminal's Ctrl-C with the session
    )


def _reap(folder: str, owner_pid: str) -> None:
    # The owner started this process: once it is gone, this one has another parent (whereas its
    # pid alone could be reused by then).
    while os.getppid() == int(owner_pid):
        time.sleep(1.0)
    SharedServers(Path(folder)).stop_all()


if __name__ == "__main__":
    _reap(*sys.argv[1:3])
