"""Which Kafka errors the reader and the offset client wait out, and which end the step at once."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafka_batch_provider.kafka.errors import is_refusal, is_transient, is_unreachable


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._RESOLVE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
    ],
)
def test_outages_and_leader_moves_are_waited_out(code):
    assert is_transient(KafkaError(code)), f"{KafkaError(code).name()} must be retried within the stall timeout"


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._AUTO_OFFSET_RESET,  # the start offset is gone: data loss, not an outage
        KafkaError.OFFSET_OUT_OF_RANGE,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    ],
)
def test_answers_that_no_wait_can_change_fail_at_once(code):
    assert not is_transient(KafkaError(code)), f"{KafkaError(code).name()} must fail the read at once"


@pytest.mark.parametrize(
    "code, expected",
    [
        (KafkaError.NOT_COORDINATOR, "KafkaUnavailableError"),
        (KafkaError.REBALANCE_IN_PROGRESS, "KafkaUnavailableError"),
        (KafkaError.GROUP_AUTHORIZATION_FAILED, "KafkaRefusedError"),
        (KafkaError.SASL_AUTHENTICATION_FAILED, "KafkaRefusedError"),
    ],
)
def test_the_offsets_client_retries_a_moving_coordinator_but_not_a_refusal(code, expected):
    from kafka_batch_provider.kafka.client import broker_error

    found = broker_error(KafkaError(code), "commit failed")
    assert type(found).__name__ == expected, f"{KafkaError(code).name()}: expected {expected}, found {found!r}"
    assert found.transient == (expected == "KafkaUnavailableError")


@pytest.mark.parametrize(
    "code", [KafkaError._TIMED_OUT_QUEUE, KafkaError._MSG_TIMED_OUT, KafkaError.UNSTABLE_OFFSET_COMMIT]
)
def test_a_broker_that_answers_not_now_is_retried(code):
    assert is_transient(KafkaError(code)), f"{KafkaError(code).name()} must be retried"


def test_a_fatal_error_is_never_transient_even_if_its_code_is():
    assert not is_transient(KafkaError(KafkaError._TRANSPORT, fatal=True))


def test_librdkafkas_own_retriable_flag_is_honoured():
    assert is_transient(KafkaError(KafkaError.CONCURRENT_TRANSACTIONS, retriable=True))


def test_only_a_broker_that_cannot_be_reached_is_unreachable():
    assert is_unreachable(KafkaError(KafkaError._WAIT_COORD))
    assert not is_unreachable(KafkaError(KafkaError.LEADER_NOT_AVAILABLE))


class ScriptedConsumer:
    """Stands in for librdkafka's consumer: hands out a fixed script of messages and errors.

    The embedded broker never delivers an outage as a message error (librdkafka only logs
    it), so the loop's handling of one is shown here; the fault matrix shows a real outage.
    """

    def __init__(self, script):
        self.script, self.position_ = list(script), 0

    def assign(self, partitions):
        self.position_ = partitions[0].offset

    def consume(self, n, timeout):
        return [self.script.pop(0)] if self.script else []

    def position(self, partitions):
        return [type("P", (), {"offset": self.position_})()]

    def close(self):
        pass


def Message(offset=None, error=None):  # noqa: N802 - reads like the class it builds
    """confluent-kafka's own message type, as ``consume()`` returns it."""
    from confluent_kafka import Message as KafkaMessage

    if error is not None:
        return KafkaMessage(error=error)
    return KafkaMessage(topic="t", partition=0, offset=offset, key=b"k", value=b"v", timestamp=(1, 1_700_000_000_000))


def test_the_reader_counts_transient_errors_and_goes_on_but_stops_at_a_final_one(monkeypatch):
    from kafka_batch_provider.core.offsets import OffsetRange
    from kafka_batch_provider.errors import ReadFailedError
    from kafka_batch_provider.spark import kafka_reader, python_consumer

    def read(script):
        consumer = ScriptedConsumer(script)
        monkeypatch.setattr(python_consumer, "Consumer", lambda config: consumer)
        stats = kafka_reader.ReadStats("t", 0, 0, 2, 0)
        ranges = kafka_reader.read_range({}, OffsetRange("t", 0, 0, 2), stats=stats, reader="python")
        rows = sum(b.num_rows for b in ranges)
        return rows, stats

    outage = [KafkaError(KafkaError._TRANSPORT), KafkaError(KafkaError._ALL_BROKERS_DOWN)]
    rows, stats = read([Message(0), *(Message(error=e) for e in outage), Message(1)])
    assert (rows, stats.transient_errors, stats.position) == (2, 2, 2), stats

    with pytest.raises(ReadFailedError, match=r"t\[0\]: reading \[0, 2\) failed at offset 1: .*"):
        read([Message(0), Message(error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))])


@pytest.mark.parametrize(
    "timeout, extra",
    [(3.0, {"group.protocol": "consumer"}), (7_200.0, {}), (0.001, {})],
    ids=["the consumer group protocol", "a timeout beyond librdkafka's range", "a tiny timeout"],
)
def test_the_commit_consumer_accepts_every_group_protocol_and_timeout(timeout, extra):
    """The commit's consumer is built whatever the group protocol and the timeout; with no broker
    the commit then fails as a commit (no coordinator), never as a consumer librdkafka refused."""
    from confluent_kafka import KafkaException

    from kafka_batch_provider.kafka.client import KafkaOffsets

    offsets = KafkaOffsets({"bootstrap.servers": "127.0.0.1:9", **extra}, timeout=timeout)
    with pytest.raises(KafkaException) as failed:
        offsets._commit_synchronously("g", [KafkaTopicPartition("t", 0, 5)])
    error = failed.value.args[0]
    assert error.code() != KafkaError._INVALID_ARG, f"expected a failed commit, librdkafka refused the config: {error}"


def test_a_request_answered_by_a_moving_coordinator_is_asked_again_within_the_timeout():
    from confluent_kafka import KafkaException

    from kafka_batch_provider.errors import KafkaRefusedError, KafkaUnavailableError
    from kafka_batch_provider.kafka.client import KafkaOffsets

    offsets = KafkaOffsets({"bootstrap.servers": "127.0.0.1:9"}, timeout=2)
    answers = [KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR, None]

    def request():
        code = answers.pop(0)
        if code is not None:
            raise KafkaException(KafkaError(code))
        return "answer"

    assert offsets._call("committed(g)", request) == "answer", "expected the third attempt's answer"
    assert answers == [], f"expected all three attempts made, {len(answers)} left"

    def always_moving():
        raise KafkaException(KafkaError(KafkaError.NOT_COORDINATOR))

    with pytest.raises(KafkaUnavailableError, match="committed"):
        offsets._call("committed(g)", always_moving)  # transient, after the 2 s timeout

    calls = []

    def refused():
        calls.append(1)
        raise KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))

    with pytest.raises(KafkaRefusedError):
        offsets._call("committed(g)", refused)
    assert len(calls) == 1, f"an answer that is no outage is not asked again, asked {len(calls)} times"


def test_a_commit_refused_because_the_group_has_active_members_is_one_line_naming_the_group(monkeypatch):
    """Kafka answers UNKNOWN_MEMBER_ID to a commit from outside a group with active members (both
    rebalance protocols; tests/integration/test_active_group_member.py shows it on Apache Kafka)."""
    from kafka_batch_provider.core.offsets import TopicPartition
    from kafka_batch_provider.errors import KafkaRefusedError
    from kafka_batch_provider.kafka import client

    class MemberlessCommit:
        """The commit's consumer, answered as Kafka answers it while the group has a member."""

        def __init__(self, config):
            self.on_commit, self.offsets = config["on_commit"], []

        def commit(self, offsets, asynchronous):
            self.offsets = offsets

        def poll(self, timeout):
            self.on_commit(KafkaError(KafkaError.UNKNOWN_MEMBER_ID), self.offsets)

        def close(self):
            pass

    tp = TopicPartition("orders", 0)
    offsets = client.KafkaOffsets({"bootstrap.servers": "127.0.0.1:9"}, timeout=2)
    monkeypatch.setattr(client, "Consumer", MemberlessCommit)
    monkeypatch.setattr(offsets, "committed_offsets", lambda group_id, tps: {tp: None})
    with pytest.raises(KafkaRefusedError) as refused:
        offsets.commit("orders-to-lake", {tp: None}, {tp: 5})
    line = str(refused.value)
    assert not refused.value.transient and "\n" not in line, f"expected a one-line refusal, found {line!r}"
    for expected in ("group 'orders-to-lake'", "active member", "stop that consumer", "without reading again"):
        assert expected in line, f"expected {expected!r} in {line!r}"


@pytest.mark.parametrize(
    ("code", "text", "refused"),
    [
        (KafkaError._AUTHENTICATION, "SASL authentication error: Authentication failed", True),
        (KafkaError._SSL, "SSL handshake failed: certificate verify failed", True),
        (KafkaError._TRANSPORT, "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed", True),
        (KafkaError.GROUP_AUTHORIZATION_FAILED, "FindCoordinator response error: Group authorization failed.", True),
        (KafkaError._TRANSPORT, "Connect to ipv4#127.0.0.1:9092 failed: Connection refused", False),
        (KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down", False),
        # A handshake cut short by a broker restarting, an identity provider away: they pass.
        (KafkaError._SSL, "SSL transport error: Connection timed out (after 10012ms in state SSL_HANDSHAKE)", False),
        (KafkaError._SSL, "SSL handshake failed: error:0A000126:SSL routines::unexpected eof while reading", False),
        (KafkaError._AUTHENTICATION, "Failed to acquire SASL OAUTHBEARER token: HTTP 503", False),
    ],
)
def test_refusals_reported_beside_a_request_are_told_from_an_outage(code, text, refused):
    assert is_refusal(KafkaError(code, text)) is refused, f"{KafkaError(code).name()} {text!r}: refused={refused}"


def test_a_commit_is_cut_into_requests_that_fit_the_brokers_record_batch():
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    from kafka_batch_provider.kafka.client import COMMIT_REQUEST_BYTES, REQUEST_PARTITIONS, commit_requests

    request = [KafkaTopicPartition("orders", p, 10) for p in range(10_000)]
    metadata = '{"batch_id": "b-0123456789abcdef0123", "output": "s3://bucket/' + "x" * 1000 + '"}'
    parts = commit_requests(request, metadata)
    assert [tp for part in parts for tp in part] == request, "every partition once, in order"
    largest = max(len(part) for part in parts) * (len(metadata) + len("orders") + 64)
    assert largest <= COMMIT_REQUEST_BYTES and len(parts) > 10, f"expected requests under the bound, got {len(parts)}"
    small = commit_requests(request[:2500], "")
    assert [len(part) for part in small] == [REQUEST_PARTITIONS, REQUEST_PARTITIONS, 500], [len(p) for p in small]
