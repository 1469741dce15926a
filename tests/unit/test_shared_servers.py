"""The servers one pytest session shares between its xdist workers (``testing/shared_servers.py``),
with a small real server (Python's ``http.server``) in place of a broker."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from kafka_batch_provider.dev.local_servers import LocalServer, listen_ports, pid_alive, port_open
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.testing.shared_servers import SharedServerError, SharedServers


@dataclass
class TinyServer(LocalServer):
    label: ClassVar[str] = "tiny server"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(self.port)]

    def wait_until_ready(self, timeout: float) -> None:
        self.poll_until(lambda: port_open(self.port), timeout, ConfigError, "did not listen")


def start_tiny(folder: Path) -> TinyServer:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / "starts", "a") as starts:  # how often a start happened, across processes
        starts.write("1\n")
    return TinyServer(log_path=folder / "tiny.log", detach=True).start()


def get_tiny(folder: str) -> dict:
    return SharedServers(Path(folder)).get("tiny", start_tiny, lambda s: [s], lambda s: {"port": s.port, "pid": s.pid})


def wait_until(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"expected {what} within {timeout:g} s"
        time.sleep(0.1)


@pytest.fixture
def servers(tmp_path):
    shared = SharedServers(tmp_path / "shared")
    yield shared
    shared.stop_all()


def test_workers_asking_at_once_start_one_server_and_all_reach_it(servers):
    context = multiprocessing.get_context("spawn")  # separate processes, as xdist's workers are
    with context.Pool(4) as pool:
        found = pool.map(get_tiny, [str(servers.folder)] * 4)
    starts = (servers.folder / "starts").read_text().splitlines()
    assert len(starts) == 1, f"expected one start for four workers, found {len(starts)}"
    assert len({json.dumps(f, sort_keys=True) for f in found}) == 1, f"expected one server for all, found {found}"
    assert port_open(found[0]["port"]), "expected the server to outlive the workers that asked for it"


def test_stop_all_stops_every_recorded_server_and_removes_its_leftovers(servers, tmp_path):
    leftover = tmp_path / "outside"
    leftover.mkdir()
    info = servers.get("tiny", start_tiny, lambda s: [s], lambda s: {"pid": s.pid}, leftovers=lambda s: [leftover])
    assert pid_alive(info["pid"]), "expected the server running"
    stopped = servers.stop_all()
    assert stopped == [f"tiny: tiny server (pid {info['pid']})"], f"expected the tiny server stopped, found {stopped}"
    assert not pid_alive(info["pid"]), "expected the server gone after stop_all"
    assert not leftover.exists(), "expected its leftover folder removed"
    assert not list(servers.folder.glob("*.json")), "expected no record left"


def test_a_shared_server_that_died_is_one_line_naming_it_not_a_second_start(servers):
    info = get_tiny(str(servers.folder))
    os.kill(info["pid"], 9)
    wait_until(lambda: not pid_alive(info["pid"]), "the killed server gone")
    with pytest.raises(SharedServerError, match=rf"the session's tiny \(pid {info['pid']}\) has exited; see the logs"):
        get_tiny(str(servers.folder))
    assert len((servers.folder / "starts").read_text().splitlines()) == 1, "expected no second start"


def test_a_process_handed_over_to_a_worker_may_go_and_is_never_signalled_by_its_old_pid(servers):
    def start_two(folder: Path) -> list[TinyServer]:
        return [start_tiny(folder), TinyServer(log_path=folder / "second.log", detach=True).start()]

    def get() -> dict:
        return servers.get("two", start_two, lambda two: two, lambda two: {"pids": [s.pid for s in two]}, handed_over=1)

    first, second = get()["pids"]
    os.kill(first, 9)  # the worker it was handed to stopped it
    wait_until(lambda: not pid_alive(first), "the handed-over server gone")
    assert get()["pids"] == [first, second], "expected the record kept: a handed-over process may go"
    stopped = servers.stop_all()
    assert stopped == [f"two: tiny server (pid {second})"], f"expected only the running one stopped, found {stopped}"
    assert not pid_alive(second)


OWNER = """
import os, sys, time
from pathlib import Path
from kafka_batch_provider.testing.shared_servers import SharedServers, start_reaper
reaper = start_reaper(SharedServers(Path(sys.argv[1])), os.getpid())
print(reaper.pid, flush=True)
time.sleep(600)
"""


def test_the_reaper_stops_the_servers_when_the_session_process_is_killed(servers):
    info = get_tiny(str(servers.folder))
    # The session's process starts the reaper, as the plugin's pytest_configure does.
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(servers.folder)], stdout=subprocess.PIPE, text=True)
    try:
        reaper = int(owner.stdout.readline())
        time.sleep(1.5)  # the reaper's first looks at a live owner
        assert pid_alive(info["pid"]), "expected the server kept while its session runs"
        owner.kill()
        owner.wait()
        wait_until(lambda: not pid_alive(info["pid"]), "the reaper to stop the server once the owner was killed")
        wait_until(lambda: not pid_alive(reaper), "the reaper to exit once it stopped the servers")
    finally:
        owner.kill()


def test_free_ports_are_outside_the_kernels_ephemeral_range():
    low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    chosen = listen_ports()
    assert chosen.stop <= low or chosen.start > high, f"expected {chosen} outside the ephemeral {low}-{high}"
