"""The state bad input must leave alone, and how the cases run and judge a refusal.

The scene, built once on the real broker:

* ``topic`` (2 partitions, 10 records) and ``group``, which committed one batch (the
  partitions' start, recorded without Spark: there was nothing to read yet) into ``lake``;
* ``pending``: a second output whose group (``pending_group``) has a planned, unwritten batch
  (``pending_plan``), for the ``write``/``commit --plan`` cases;
* everything under ``root``: outputs, config files, plans made up by the cases.

:meth:`Scene.snapshot` is the committed offsets of both groups plus every file under
``root`` with a hash of its content: a refused command must leave it identical.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records
from tests.support import cli_runner


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``kafka-batch ARGS`` as a user runs it, from this checkout's code (tests/support/cli_runner.py)."""
    return cli_runner.run(list(args), timeout=timeout)


def cli_refusal_problems(result: subprocess.CompletedProcess, expected: str) -> list[str]:
    """What is wrong with a refusal: it must be a non-zero exit and one ``error:`` line naming the problem."""
    problems = []
    lines = result.stderr.strip().splitlines()
    if result.returncode == 0:
        problems.append(f"expected a non-zero exit, got 0 (stdout {result.stdout.strip()[-300:]!r})")
    if "Traceback" in result.stderr:
        problems.append(f"expected no traceback, got {result.stderr.strip()[-800:]!r}")
    elif len(lines) != 1 or not lines[0].startswith("error: "):
        problems.append(f"expected exactly one 'error: ...' line on stderr, got {lines[-6:]!r}")
    elif expected not in lines[0]:
        problems.append(f"expected the error line to say {expected!r}, got {lines[0]!r}")
    elif lines[0].startswith("error: unexpected "):  # how the CLI reports a bug, not a refusal
        problems.append(f"expected a refusal, got an unexpected error: {lines[0]!r}")
    return problems


def one_line_problems(message: str, expected: str) -> list[str]:
    """What is wrong with an exception's message: one line that names the problem."""
    if "\n" in message.strip():
        return [f"expected a one-line message, got {message!r}"]
    if expected not in message:
        return [f"expected the message to say {expected!r}, got {message!r}"]
    return []


@dataclass
class Scene:
    bootstrap_servers: str
    root: Path
    topic: str
    group: str
    lake: Path
    pending_group: str
    pending: Path
    pending_plan: Path

    @property
    def kafka_config(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap_servers}

    kafka: KafkaOffsets

    def snapshot(self) -> dict[str, Any]:
        tps = [TopicPartition(self.topic, p) for p in (0, 1)]
        committed = {
            group: {str(tp): offset for tp, offset in self.kafka.committed_offsets(group, tps).items()}
            for group in (self.group, self.pending_group)
        }
        files = {
            str(path.relative_to(self.root)): hashlib.sha256(path.read_bytes()).hexdigest()[:16]
            for path in sorted(self.root.rglob("*"))
            if path.is_file()
        }
        folders = sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_dir())
        return {"committed": committed, "files": files, "folders": folders}

    def file(self, name: str, content: str | bytes) -> str:
        """A file the case needs (config, plan), made before the 'before' snapshot."""
        path = self.root / "inputs" / f"{uuid.uuid4().hex[:8]}-{name}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return str(path)

    def plan_file(self, content: str | bytes, output: str | None = None) -> str:
        """A made-up plan file inside an output's ``_plans/`` folder."""
        folder = self.root / (output or f"made-up-{uuid.uuid4().hex[:6]}") / "_plans"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "00000000000000000001-b-0123456789abcdef0123.json"
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return str(path)

    def fill(self, text: str) -> str:
        return text.format(
            bs=self.bootstrap_servers,
            topic=self.topic,
            group=self.group,
            lake=self.lake,
            root=self.root,
            pending=self.pending,
            pending_plan=self.pending_plan,
        )


def last_json(result: subprocess.CompletedProcess) -> dict[str, Any]:
    assert result.returncode == 0, f"scene set-up failed: exit {result.returncode}, stderr {result.stderr[-1500:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def scene(kafka_bootstrap_servers: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    root = tmp_path_factory.mktemp("bad-input")
    suffix = uuid.uuid4().hex[:8]
    topic, group, pending_group = f"bad-input-{suffix}", f"bad-input-{suffix}", f"bad-input-pending-{suffix}"
    config = {"bootstrap.servers": kafka_bootstrap_servers}
    create_topics(config, {topic: 2})
    lake, pending = root / "lake", root / "pending"
    common = ["--bootstrap-servers", kafka_bootstrap_servers, "--topic", topic]
    # Batch 1 of the lake: the empty partitions' start, logged and committed without Spark.
    first = last_json(cli("run", *common, "--group", group, "--output", str(lake), "--new-partitions", "latest"))
    assert first["committed"] == {f"{topic}:0": 0, f"{topic}:1": 0}, first
    produce(config, topic, sample_records(2, 10))
    planned = last_json(cli("plan", *common, "--group", pending_group, "--output", str(pending)))
    assert planned["records"] == 10, planned
    kafka = KafkaOffsets(config, timeout=30)  # one client for every snapshot of the session
    try:
        yield Scene(
            kafka_bootstrap_servers, root, topic, group, lake, pending_group, pending, Path(planned["plan_path"]), kafka
        )
    finally:
        kafka.close()
