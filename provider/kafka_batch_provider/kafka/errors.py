"""Which Kafka errors mean "the broker is away, try again" and which mean "stop now".

An outage (broker stopped, connection cut, leader moving) passes: the caller retries until
its own deadline (a request's timeout, a read's stall timeout). Everything else is an answer
(the offset is gone, the topic is unknown, access is denied), and retrying cannot change it.
"""

from __future__ import annotations

from confluent_kafka import KafkaError

#: The client could not reach a broker, or no broker answered in time.
UNREACHABLE = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
        KafkaError._WAIT_COORD,  # no group coordinator answers: the commit's broker is gone
    }
)

#: A broker answered, but the partition is between leaders or the request timed out there.
LEADERSHIP_MOVING = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.KAFKA_STORAGE_ERROR,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        # The group's coordinator is starting, moving or rebalancing: the commit's broker comes back.
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.REBALANCE_IN_PROGRESS,
    }
)


#: A broker answered "not now": a request queued too long, offsets still being settled.
NOT_NOW = frozenset(
    {
        KafkaError._TIMED_OUT_QUEUE,
        KafkaError._MSG_TIMED_OUT,
        KafkaError.UNSTABLE_OFFSET_COMMIT,
    }
)


TRANSIENT_CODES = UNREACHABLE | LEADERSHIP_MOVING | NOT_NOW

#: Errors about the reading consumer's own group, not about the read: librdkafka wants a
#: ``group.id`` and looks up its coordinator, though the reader only assigns and never joins or
#: commits. A principal allowed to read the topic (and its own group) has no ACL on that group.
READER_GROUP_ERRORS = frozenset({KafkaError.GROUP_AUTHORIZATION_FAILED})


def is_unreachable(error: KafkaError) -> bool:
    """No broker could be asked: a request failing so names the broker, not the input."""
    return error.code() in UNREACHABLE


def is_transient(error: KafkaError) -> bool:
    """Worth retrying within a deadline: an outage, a leader change, or what librdkafka marks retriable."""
    if error.fatal():
        return False
    return (
        error.code() in UNREACHABLE or error.code() in LEADERSHIP_MOVING or error.code() in NOT_NOW or error.retriable()
    )


#: Refusals that librdkafka reports through ``error_cb`` (or as a consumer's error event) only,
#: while the request that met them waits out its timeout and then looks like an outage: the
#: broker refused the credentials, the client does not trust the broker's certificate, the
#: principal may not use the group or the topic. No wait changes them.
REFUSALS = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)
#: Not refusals though reported as ``_AUTHENTICATION``: the identity provider of OAUTHBEARER away.
_PASSING_AUTHENTICATION = ("OAUTHBEARER token",)


def is_refusal(error: KafkaError) -> bool:
    """A refusal (:data:`REFUSALS`), or a TLS handshake that failed on the certificate.

    ``_SSL`` also reports handshakes cut short (a broker restarting: "Connection timed out",
    "unexpected eof"), which pass: only certificate failures count."""
    text = error.str()
    if error.code() in REFUSALS:
        return not any(words in text for words in _PASSING_AUTHENTICATION)
    if error.code() in (KafkaError._SSL, KafkaError._TRANSPORT):
        return "certificate verify failed" in text or "certificate" in text and "alert" in text
    return False


def error_of(exc: BaseException) -> KafkaError | None:
    """The librdkafka error a ``KafkaException`` carries (``None`` when it carries none)."""
    error = exc.args[0] if exc.args else None
    return error if isinstance(error, KafkaError) else None
