"""The synchronous offset commit is bounded: a coordinator outage is one line, not a hang.

A private embedded broker is stopped between the compare-and-set check and the commit
request, the worst moment: the client has already found the coordinator.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.dev.broker import EmbeddedBroker
from kafka_batch_provider.errors import KafkaUnavailableError
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records

pytestmark = pytest.mark.integration

#: How long the test waits before calling the commit hung: far beyond its 3 s timeout, so a
#: slow machine never fails it, and far below the hours a hung commit would wait.
HANG = 120.0
#: The commit may take its 3 s and some slack for a busy machine, never librdkafka's own 45 s
#: (its session timeout), which is what it took while closing its consumer waited for it.
BOUND = 30.0


class BrokerStopsBeforeTheCommit(KafkaOffsets):
    """KafkaOffsets whose broker goes away right after the compare-and-set check passed."""

    def __init__(self, config, broker: EmbeddedBroker, timeout: float) -> None:
        super().__init__(config, timeout=timeout)
        self.broker = broker

    def _commit_synchronously(self, group_id, request):
        self.broker.stop()
        self.broker_stopped_at = time.monotonic()
        return super()._commit_synchronously(group_id, request)


def test_commit_with_the_coordinator_gone_fails_with_one_line_instead_of_hanging(tmp_path: Path):
    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as broker:
        config = {"bootstrap.servers": broker.bootstrap_servers}
        create_topics(config, {"orders": 1})
        produce(config, "orders", sample_records(1, 5))
        tp = TopicPartition("orders", 0)
        kafka = BrokerStopsBeforeTheCommit(config, broker, timeout=3)
        outcome: dict[str, BaseException | object] = {}

        def commit() -> None:
            try:
                outcome["result"] = kafka.commit("g", {tp: None}, {tp: 5})
            except BaseException as exc:  # noqa: BLE001 - reported by the assertions below
                outcome["error"] = exc
            outcome["returned_at"] = time.monotonic()

        worker = threading.Thread(target=commit, daemon=True)
        worker.start()
        worker.join(HANG)
        assert not worker.is_alive(), f"the commit was still waiting for the stopped coordinator after {HANG:g}s"
    waited = outcome["returned_at"] - kafka.broker_stopped_at
    assert waited < BOUND, f"expected the 3 s commit to give up within {BOUND:g} s of the outage, took {waited:.1f} s"
    error = outcome.get("error")
    assert isinstance(error, KafkaUnavailableError), f"expected KafkaUnavailableError, got {outcome!r}"
    message = str(error)
    assert "\n" not in message and "did not answer commit(g) within 3s" in message, message
