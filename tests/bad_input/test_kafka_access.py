"""Kafka refusing access on a SASL_SSL listener with ACLs (``secure_kafka``): one ``error:`` line, exit 2
(a configuration error: not retried), nothing planned, written or committed.

Each case runs ``kafka-batch run``, with each reader, as a principal that lacks one thing the batch
needs: any ACL on the group, READ on the group (DESCRIBE only: it may read the group's offsets but not
commit them), any ACL on the topic, the right password, a CA that signed the broker's certificate.
Each is refused as soon as Kafka answers, not after the client's timeout. The state compared is the
case's group's committed offsets (read as ``admin``) and every file under the scene's folder (no
plan, no row, no log entry).
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.errors import EXIT_TERMINAL
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records
from tests.bad_input.scene import cli, cli_refusal_problems
from tests.support.secure_kafka import SecureKafka


@dataclass
class AccessScene:
    secure: SecureKafka
    root: Path
    topic: str
    kafka: KafkaOffsets  # as admin: the committed offsets of any group

    def snapshot(self, group: str) -> dict[str, Any]:
        tp = TopicPartition(self.topic, 0)
        files = {
            str(p.relative_to(self.root)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
            for p in sorted(self.root.rglob("*"))
            if p.is_file()
        }
        return {"committed": self.kafka.committed_offsets(group, [tp]), "files": files}

    def config_file(self, config: dict[str, str]) -> str:
        path = self.root / "inputs" / f"{uuid.uuid4().hex[:8]}-kafka.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config))
        return str(path)


@pytest.fixture(scope="module")
def access(secure_kafka: SecureKafka, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AccessScene]:
    topic = f"access-{uuid.uuid4().hex[:8]}"
    create_topics(secure_kafka.admin_config, {topic: 1})
    produce(secure_kafka.admin_config, topic, sample_records(1, 5))
    kafka = KafkaOffsets(secure_kafka.admin_config, timeout=30)
    try:
        yield AccessScene(secure_kafka, tmp_path_factory.mktemp("kafka-access"), topic, kafka)
    finally:
        kafka.close()


@dataclass(frozen=True)
class Case:
    id: str
    grants: tuple[tuple[str, str, str], ...]  # (resource, name, operation); {topic} and {group} filled in
    expected: str
    wrong_password: bool = False
    other_ca: bool = False


CASES = [
    pytest.param(
        # No ACL on the group at all: the broker refuses its coordinator lookup, at once.
        Case("no-acl-on-the-group", (("topic", "{topic}", "READ"),), "the principal needs READ on the group"),
        id="no-acl-on-the-group",
    ),
    pytest.param(
        # DESCRIBE (a monitoring grant) reads the group's offsets but cannot commit: refused before the write.
        Case(
            "describe-only-on-the-group",
            (("topic", "{topic}", "READ"), ("group", "{group}", "DESCRIBE")),
            "may DESCRIBE on the group but not READ",
        ),
        id="describe-only-on-the-group",
    ),
    pytest.param(
        # Without any ACL on it, the topic is left out of the metadata: asked by name, Kafka says it is refused.
        Case(
            "no-acl-on-the-topic",
            (("group", "{group}", "READ"),),
            "Kafka refused topic '{topic}' (TOPIC_AUTHORIZATION_FAILED): the principal needs DESCRIBE and READ",
        ),
        id="no-acl-on-the-topic",
    ),
    pytest.param(
        Case(
            "wrong-password",
            (("topic", "{topic}", "READ"), ("group", "{group}", "READ")),
            "SASL authentication error",
            wrong_password=True,
        ),
        id="wrong-password",
    ),
    pytest.param(
        Case(
            "certificate-of-another-ca",
            (("topic", "{topic}", "READ"), ("group", "{group}", "READ")),
            "certificate verify failed",
            other_ca=True,
        ),
        id="certificate-of-another-ca",
    ),
]

#: Long enough that a refusal waiting it out is told apart from one Kafka answered (2-3 s here).
TIMEOUT = 60


def run_as_the_case(case: Case, access: AccessScene, verdict, label: str, output: str, *flags: str) -> None:
    """``kafka-batch run`` as a new principal with the case's grants (and password, CA), judged: one
    ``error:`` line saying what the case expects, exit 2 (not retried), as soon as Kafka answered
    (not after ``--timeout``), and neither the group's offsets nor any file changed."""
    group = f"access-{label}-{uuid.uuid4().hex[:6]}"
    grants = [(r, name.format(topic=access.topic, group=group), op) for r, name, op in case.grants]
    user, password = access.secure.new_user(grants)
    config = access.secure.client_config(
        user, "not-the-password" if case.wrong_password else password, access.secure.other_ca if case.other_ca else None
    )
    config_file = access.config_file(config)
    before = access.snapshot(group)

    started = time.monotonic()
    result = cli(
        "run",
        *("--kafka-config-file", config_file, "--topic", access.topic, "--group", group, "--output", output),
        *("--timeout", str(TIMEOUT), *flags),
    )
    took = time.monotonic() - started

    problems = cli_refusal_problems(result, case.expected.format(topic=access.topic))
    if result.returncode != EXIT_TERMINAL:
        problems.append(f"expected exit {EXIT_TERMINAL} (a configuration error, not retried), got {result.returncode}")
    if took >= TIMEOUT:
        problems.append(f"expected the refusal once Kafka answered, not after --timeout {TIMEOUT}: took {took:.0f} s")
    verdict.judge(problems, before, access.snapshot(group))


@pytest.mark.parametrize("reader", ["python", "jvm"])
@pytest.mark.parametrize("case", CASES)
def test_kafka_refusing_access_is_one_line_exit_2_and_changes_nothing(
    case: Case, reader: str, access: AccessScene, verdict
):
    output = str(access.root / f"lake-{case.id}-{reader}")
    run_as_the_case(case, access, verdict, case.id, output, "--reader", reader)


GROUP_CASES = [case for case in CASES if case.values[0].id in ("no-acl-on-the-group", "describe-only-on-the-group")]


@pytest.mark.parametrize("case", GROUP_CASES)
def test_a_table_per_topic_is_refused_once_for_its_group_before_any_table(case: Case, access: AccessScene, verdict):
    output = str(access.root / f"tables-{case.id}") + "/{topic}"  # a table per topic
    run_as_the_case(case, access, verdict, f"{case.id}-tables", output)
