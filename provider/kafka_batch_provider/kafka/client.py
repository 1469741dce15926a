"""Kafka I/O for the plan and commit steps: offsets in, offsets out. No Airflow here.

Every call has a timeout and turns librdkafka errors into one-line
:class:`~kafka_batch_provider.errors.KafkaBatchError` messages. Consumers are only used for
offset APIs (``committed``, ``commit``, the latter bounded by a timeout); they never
``subscribe``, so no group join happens and no rebalance can move anything.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any, TypeVar

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AclOperation, AdminClient, ConfigResource, OffsetSpec, ResourceType

from kafka_batch_provider.core.listing import listed
from kafka_batch_provider.core.offsets import PartitionOffsets, TopicPartition
from kafka_batch_provider.core.validation import check_topics
from kafka_batch_provider.errors import (
    CommitConflictError,
    ConfigError,
    KafkaBatchError,
    KafkaRefusedError,
    KafkaUnavailableError,
    PlanError,
)
from kafka_batch_provider.kafka.config import (
    READ_COMMITTED,
    admin_config,
    check_config,
    consumer_config,
    reader_consumer_config,
)
from kafka_batch_provider.kafka.errors import (
    LEADERSHIP_MOVING,
    READER_GROUP_ERRORS,
    error_of,
    is_refusal,
    is_transient,
    is_unreachable,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: librdkafka's "no committed offset" sentinel (OFFSET_INVALID).
_NO_OFFSET = -1001

#: Partitions per offsets request. librdkafka matches each partition of an answer to the
#: request with a linear search, so one request costs client CPU quadratic in its partitions:
#: at 10,000 partitions one ``list_offsets`` took 0.65 s and ten of 1,000 took 0.14 s
#: (``committed``: 0.61 s against 0.12 s; measured on the embedded broker, docs/design.md).
REQUEST_PARTITIONS = 1000


def in_requests(items: Sequence[T]) -> list[Sequence[T]]:
    """``items`` cut into requests of at most :data:`REQUEST_PARTITIONS`."""
    return [items[i : i + REQUEST_PARTITIONS] for i in range(0, len(items), REQUEST_PARTITIONS)]


#: Bytes of offsets and metadata per commit request. The broker writes one commit as one record
#: batch to ``__consumer_offsets``, within ``message.max.bytes`` (1 MiB by default): 10,000
#: partitions with a batch's metadata (~2 MB) were refused as an unknown server error.
COMMIT_REQUEST_BYTES = 512 * 1024


def commit_requests(request: Sequence[KafkaTopicPartition], metadata: str) -> list[Sequence[KafkaTopicPartition]]:
    """``request`` cut into commits of at most :data:`REQUEST_PARTITIONS` partitions and about
    :data:`COMMIT_REQUEST_BYTES`. Not atomic across them: a commit cut short shows some partitions
    at their targets, which :meth:`KafkaOffsets.commit` accepts as an earlier attempt of itself."""
    per_partition = len(metadata.encode()) + max((len(tp.topic.encode()) for tp in request), default=0) + 64
    size = max(1, min(REQUEST_PARTITIONS, COMMIT_REQUEST_BYTES // per_partition))
    return [request[i : i + size] for i in range(0, len(request), size)]


#: The broker's answer to an offset commit from outside a group that has active members: while
#: consumers are subscribed with its ``group.id``, Kafka takes the group's offsets from them only
#: (a commit without a member id and generation is accepted from an empty group alone). Kafka 4.4
#: answers so under both rebalance protocols, the classic one and KIP-848's consumer protocol.
GROUP_HAS_MEMBERS = frozenset({KafkaError.UNKNOWN_MEMBER_ID})


def group_in_use(group_id: str) -> KafkaRefusedError:
    """Our commit refused because the group has active members: one line naming it and the remedy."""
    return KafkaRefusedError(
        f"Kafka refused the commit of group {group_id!r}: the group has an active member (a consumer subscribed "
        f"with group.id {group_id!r}), and Kafka takes a group's offsets from its members only; stop that consumer "
        "or give it a group.id of its own (a group feeds one reader); the batch stays in the output, and the next "
        "run commits it without reading again"
    )


def refused_access(servers: str, error: KafkaError) -> KafkaRefusedError:
    """A login, certificate or ACL refusal (:func:`~kafka_batch_provider.kafka.errors.is_refusal`) in one line."""
    return KafkaRefusedError(
        f"Kafka at {servers} refused access ({error.name()}): {error.str()}; "
        "check the connection's credentials, CA and the principal's ACLs (a retry fails the same way)"
    )


def refused_group(group_id: str, error: KafkaError) -> KafkaRefusedError:
    """The broker's refusal of a group (``GROUP_AUTHORIZATION_FAILED``) in one line naming the remedy."""
    return KafkaRefusedError(
        f"Kafka refused group {group_id!r} ({error.name()}): {error.str()}; the principal needs "
        "READ on the group (a retry fails the same way)"
    )


def broker_error(error: Any, message: str) -> KafkaBatchError:
    """A broker's error answer as ours: "not now" (an outage, a leader or coordinator moving) is
    transient, any other answer (authorization, authentication, ...) is refused for good."""
    if isinstance(error, KafkaError) and not is_transient(error):
        return KafkaRefusedError(message)
    return KafkaUnavailableError(message)


class KafkaOffsets:
    """Offsets of a cluster and of its consumer groups, from a librdkafka config dict.

    :param config: librdkafka configuration (``bootstrap.servers`` and security settings).
        ``enable.auto.commit=true`` is refused. ``isolation.level`` (default
        ``read_committed``) decides which end offset is reported: the last stable offset
        for ``read_committed``, the high watermark otherwise.
    :param timeout: seconds to wait for any one broker request.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, timeout: float = 30.0) -> None:
        self._given_config = dict(config) if config is not None else None
        self.timeout = timeout
        self._consumers: dict[str, Consumer] = {}
        #: The refusals librdkafka reported through ``error_cb`` (a login, a certificate) during the
        #: current metadata request (:meth:`_metadata`).
        self._refusals: list[KafkaError] = []

    # -- configuration -------------------------------------------------------------------

    @cached_property
    def kafka_config(self) -> dict[str, Any]:
        if self._given_config is None:
            raise PlanError("no Kafka configuration given")
        return check_config(self._given_config)

    @property
    def isolation_level(self) -> str:
        return self.kafka_config["isolation.level"]

    @property
    def bootstrap_servers(self) -> str:
        return str(self.kafka_config["bootstrap.servers"])

    @cached_property
    def admin(self) -> AdminClient:
        return AdminClient({**admin_config(self.kafka_config), "error_cb": self._on_error})

    def _on_error(self, error: KafkaError) -> None:
        """librdkafka's client-wide errors: refusals are kept for :meth:`_metadata`, the rest (a broker
        away, which librdkafka retries by itself) show in the request that meets them."""
        if is_refusal(error):
            self._refusals.append(error)

    def _consumer(self, group_id: str) -> Consumer:
        if group_id not in self._consumers:
            self._consumers[group_id] = Consumer(consumer_config(self.kafka_config, group_id))
        return self._consumers[group_id]

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one broker request; its failure becomes one line naming the request and broker.

        A broker that answers that the partition's leader or the group's coordinator is moving
        (a new group's coordinator still loading, a leader election) is asked again until the
        client's timeout: those answers last moments, and the request had no effect.
        """
        deadline = time.monotonic() + self.timeout
        pause = 0.05
        while True:
            try:
                return fn()
            except KafkaException as exc:
                error = error_of(exc)
                moving = error is not None and error.code() in LEADERSHIP_MOVING
                if not moving or time.monotonic() + pause > deadline:
                    raise self._failure(what, exc) from None
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def _failure(self, what: str, exc: KafkaException) -> Exception:
        """A request's failure as one line naming the request and broker."""
        error = error_of(exc)
        if error is not None and is_unreachable(error):
            return KafkaUnavailableError(
                f"Kafka at {self.bootstrap_servers} did not answer {what} within {self.timeout:g}s "
                f"({error.name()}); is the broker running and reachable?"
            )
        text = error.str() if error is not None else str(exc)
        if error is not None and error.code() == KafkaError._INVALID_ARG:
            # librdkafka refused the configuration (unknown key, bad value): no retry can fix it.
            return ConfigError(f"Kafka configuration refused: {text}")
        return broker_error(error, f"Kafka {what} failed: {text}")

    # -- metadata --------------------------------------------------------------------------

    def topic_partitions(self, topics: Sequence[str], partitions: Iterable[int] | None = None) -> list[TopicPartition]:
        """Every partition of ``topics`` (or the given subset); unknown names are an error.

        Asks for the metadata of all topics, because asking for a named topic can create it
        on brokers with ``auto.create.topics.enable``.
        """
        if topics:  # an empty list only probes the connection
            check_topics(topics)
        metadata = self._call("list_topics", self._metadata)
        missing = [t for t in topics if t not in metadata.topics]
        if missing:
            self._refuse_hidden_topics(missing)
            raise PlanError(f"unknown topic(s) {', '.join(map(repr, missing))} on {self.bootstrap_servers}")
        wanted = None if partitions is None else sorted(set(partitions))
        result: list[TopicPartition] = []
        for topic in topics:
            topic_meta = metadata.topics[topic]
            if topic_meta.error is not None:
                error_type = KafkaUnavailableError if topic_meta.error.retriable() else PlanError
                raise error_type(f"topic {topic!r}: {topic_meta.error.str()}")
            existing = sorted(topic_meta.partitions)
            chosen = existing if wanted is None else [p for p in wanted if p in existing]
            if wanted is not None and len(chosen) != len(wanted):
                absent = sorted(set(wanted) - set(existing))
                raise PlanError(f"topic {topic!r} has no partition(s) {absent} (it has {len(existing)})")
            result.extend(TopicPartition(topic, p) for p in chosen)
        return result

    def _refuse_hidden_topics(self, missing: Sequence[str]) -> None:
        """Raise the refusal behind topics absent from the metadata, if the principal may not see them.

        The metadata of all topics leaves out the ones the principal may not DESCRIBE; asked by
        name (an admin request, which never creates a topic), the broker answers
        ``TOPIC_AUTHORIZATION_FAILED`` for those (whether or not they exist: Kafka does not say)
        and ``UNKNOWN_TOPIC_OR_PARTITION`` for names that a principal allowed to see them would see
        missing.
        """
        futures = self.admin.describe_topics(TopicCollection(list(missing)), request_timeout=min(self.timeout, 10.0))
        for topic, future in futures.items():
            try:
                future.result()
            except KafkaException as exc:
                error = error_of(exc)
                if error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise KafkaRefusedError(
                        f"Kafka refused topic {topic!r} ({error.name()}): the principal needs DESCRIBE and READ on "
                        "the topic (Kafka does not say whether a topic it hides exists; a retry fails the same way)"
                    ) from None

    def check_may_commit(self, group_id: str) -> None:
        """Refuse a principal that may not commit ``group_id``, as soon as Kafka answers and before
        anything is read or written.

        First the connection: the metadata request names a refused login or certificate at once.
        Then the group: reading its offsets needs DESCRIBE on it, committing them READ, so a
        principal with DESCRIBE only (a common grant for monitoring) would plan, read and write the
        batch and be refused at the commit. The broker says which operations the principal may do
        on the group (DescribeGroups with its authorized operations, KIP-430), and refuses at once
        a principal without DESCRIBE, where a consumer's coordinator lookup would wait out the
        timeout.
        """
        self.topic_partitions([])
        futures = self.admin.describe_consumer_groups(
            [group_id], include_authorized_operations=True, request_timeout=min(self.timeout, 10.0)
        )
        try:
            description = futures[group_id].result()
        except KafkaException as exc:
            error = error_of(exc)
            if error is not None and is_refusal(error):
                raise refused_group(group_id, error) from None
            # Not a refusal (a broker that does not implement the request, one not reachable now): the
            # offset requests that follow meet an outage, and the commit a refusal, as before.
            log.debug("describe_consumer_groups(%s) did not answer: %s", group_id, exc)
            return
        allowed = description.authorized_operations
        if allowed is None:  # a broker that does not say: the commit will tell
            return
        if not {AclOperation.READ, AclOperation.ALL} & set(allowed):
            may = ", ".join(sorted(op.name for op in allowed))  # never empty: confluent-kafka gives None then
            raise KafkaRefusedError(
                f"Kafka would refuse the commit of group {group_id!r}: the principal may {may} on the group but "
                "not READ, which committing offsets needs; grant READ on the group (a retry fails the same way)"
            )

    def topic_names(self) -> set[str]:
        """Every topic's name on the cluster (Kafka's own ones too), from a fresh metadata request;
        not a topic the broker already reports unknown (one being deleted)."""
        topics = self._call("list_topics", self._metadata).topics
        return {name for name, meta in topics.items() if not (meta.error and not meta.error.retriable())}

    def _metadata(self) -> Any:
        """The cluster's metadata: the first request of every step, so the one that meets a refusal.

        librdkafka reports a refused login or an untrusted certificate to ``error_cb`` only (served
        by ``poll``), while ``list_topics`` waits out its whole timeout and then says the transport
        failed. So it is asked in growing slices (1, 2, 4 ... s: a large cluster's metadata may take
        longer than a second), with the refusals looked at between them; a refusal counts once
        librdkafka reported it twice in this call (it reconnects and is refused again within a
        second), so one odd handshake of a broker restarting is not taken for a wrong password.
        """
        self._refusals.clear()
        deadline = time.monotonic() + self.timeout
        wait = 1.0
        while True:
            left = deadline - time.monotonic()
            try:
                return self.admin.list_topics(timeout=max(min(wait, left), 0.001))
            except KafkaException as exc:
                error = error_of(exc)
                if error is None or not is_unreachable(error):
                    raise
                self.admin.poll(0)  # serves error_cb
                if len(self._refusals) >= 2:
                    raise refused_access(self.bootstrap_servers, self._refusals[-1]) from None
                if left <= wait:
                    raise
            wait *= 2

    def topic_ids(self, topics: Sequence[str]) -> dict[str, str]:
        """Each topic's id (a new one when a topic is deleted and recreated); brokers without ids give none.

        The output's log records them, so offsets of a deleted topic are never applied to
        its successor of the same name.
        """

        def run() -> dict[str, str]:
            futures = self.admin.describe_topics(TopicCollection(list(topics)), request_timeout=self.timeout)
            found = {}
            for topic, future in futures.items():
                topic_id = str(future.result().topic_id or "")
                if topic_id.strip("A="):  # the all-zero id means "no id"
                    found[topic] = topic_id
            return found

        return self._call("describe_topics", run)

    # -- log offsets -----------------------------------------------------------------------

    def _list_offsets(self, what: str, specs: Mapping[TopicPartition, OffsetSpec]) -> dict[TopicPartition, int]:
        if not specs:
            return {}
        isolation = (
            IsolationLevel.READ_COMMITTED if self.isolation_level == READ_COMMITTED else IsolationLevel.READ_UNCOMMITTED
        )
        requests = [
            {KafkaTopicPartition(tp.topic, tp.partition): specs[tp] for tp in part} for part in in_requests(list(specs))
        ]

        def run() -> dict[TopicPartition, int]:
            # Every request is sent before any answer is awaited: they travel together.
            answers = [
                self.admin.list_offsets(request, isolation_level=isolation, request_timeout=self.timeout)
                for request in requests
            ]
            return {
                TopicPartition(k.topic, k.partition): f.result().offset
                for futures in answers
                for k, f in futures.items()
            }

        return self._call(what, run)

    def log_start_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list_offsets("list_offsets(earliest)", {tp: OffsetSpec.earliest() for tp in tps})

    def log_end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """End offsets honouring ``isolation.level`` (last stable offset for read_committed)."""
        return self._list_offsets("list_offsets(latest)", {tp: OffsetSpec.latest() for tp in tps})

    def offsets_for_times(self, tps: Sequence[TopicPartition], timestamp_ms: int) -> dict[TopicPartition, int]:
        """Per partition, the first offset whose timestamp is >= ``timestamp_ms``.

        A timestamp after the last record maps to the end offset, so ``[for_time(a),
        for_time(b))`` is exactly the records with ``a <= timestamp < b``.
        """
        found = self._list_offsets(
            "list_offsets(timestamp)", {tp: OffsetSpec.for_timestamp(int(timestamp_ms)) for tp in tps}
        )
        missing = [tp for tp, offset in found.items() if offset < 0]
        ends = self.log_end_offsets(missing) if missing else {}
        return {tp: (ends[tp] if offset < 0 else offset) for tp, offset in found.items()}

    # -- group offsets ---------------------------------------------------------------------

    def committed_offsets(self, group_id: str, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets; ``None`` where the group has none (:meth:`committed`)."""
        return {tp: offset for tp, (offset, _) in self.committed(group_id, tps).items()}

    def committed(
        self, group_id: str, tps: Sequence[TopicPartition]
    ) -> dict[TopicPartition, tuple[int | None, str | None]]:
        """The group's committed offsets (``None`` where the group has none), each with the metadata
        committed beside it.

        Above :data:`REQUEST_PARTITIONS` the offsets come from several requests, so a commit
        landing between two of them shows in some partitions only; every caller compares
        partition by partition (the compare-and-set, the read-back, reconciliation), so a torn
        view is refused or reconciled like a moved group, never taken for a consistent one.
        """
        if not tps:
            return {}
        consumer = self._consumer(group_id)
        deadline = time.monotonic() + self.timeout

        def run() -> list[KafkaTopicPartition]:
            answer = []
            for part in in_requests(tps):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
                answer += consumer.committed([KafkaTopicPartition(tp.topic, tp.partition) for tp in part], timeout=left)
            return answer

        try:
            answer = self._call(f"committed({group_id})", run)
        except KafkaUnavailableError:
            self._check_group_access(group_id, tps[0])
            raise
        result: dict[TopicPartition, tuple[int | None, str | None]] = {}
        for item in answer:
            if item.error is not None:
                raise broker_error(
                    item.error, f"committed offset of {item.topic}[{item.partition}]: {item.error.str()}"
                )
            offset = None if item.offset < 0 else item.offset
            result[TopicPartition(item.topic, item.partition)] = (offset, item.metadata if offset is not None else None)
        return result

    def _check_group_access(self, group_id: str, tp: TopicPartition) -> None:
        """Raise the refusal behind a ``committed`` that timed out, if that is what it was.

        A consumer whose principal may not use the group gets no answer from librdkafka (its
        coordinator lookup is refused and retried until the timeout); the admin API's offset
        request gets the broker's answer (``GROUP_AUTHORIZATION_FAILED``) at once.
        """
        request = [ConsumerGroupTopicPartitions(group_id, [KafkaTopicPartition(tp.topic, tp.partition)])]
        futures = self.admin.list_consumer_group_offsets(request, request_timeout=min(self.timeout, 10.0))
        try:
            for future in futures.values():
                future.result()
        except KafkaException as exc:
            error = error_of(exc)
            if error is not None and is_refusal(error):
                raise refused_group(group_id, error) from None

    def partition_offsets(
        self, group_id: str | None, topics: Sequence[str], partitions: Iterable[int] | None = None
    ) -> list[PartitionOffsets]:
        """Committed, log start and log end of every partition: the input of planning."""
        tps = self.topic_partitions(topics, partitions)
        committed = self.committed(group_id, tps) if group_id else {}
        starts = self.log_start_offsets(tps)
        ends = self.log_end_offsets(tps)
        found = []
        for tp in tps:
            offset, metadata = committed.get(tp, (None, None))
            found.append(PartitionOffsets(tp.topic, tp.partition, offset, starts[tp], ends[tp], metadata))
        return found

    def commit(
        self,
        group_id: str,
        expected: Mapping[TopicPartition, int | None],
        offsets: Mapping[TopicPartition, int],
        metadata: str | Mapping[TopicPartition, str] = "",
    ) -> dict[TopicPartition, int]:
        """Compare-and-set commit: move ``group_id`` to ``offsets`` if it still sits at ``expected``.

        ``metadata``: the same for every partition, or each partition's own (a table per topic:
        each topic's partitions name their table).

        Synchronous; every partition's error is checked and the result is read back. A
        partition already at its target counts as an earlier attempt of this same commit
        that was cut short (a timeout after the broker applied it, a partial failure):
        committing it again changes nothing, so the commit can always be finished. The
        caller has made sure that the target is what the output's offset log holds, so a
        group that already shows it agrees with the output. Kafka has no atomic
        compare-and-set for offsets: the check narrows the window, and a concurrent writer
        that slips in is caught by the read-back.

        :raises CommitConflictError: when a committed offset is neither ``expected`` nor its
            target before the commit, or not the target after it.
        """
        tps = sorted(offsets)
        current = self.committed_offsets(group_id, tps)
        moved = [tp for tp in tps if current.get(tp) not in (expected.get(tp), offsets[tp])]
        if moved:
            details = listed(f"{tp}: committed {current.get(tp)}, plan expected {expected.get(tp)}" for tp in moved)
            raise CommitConflictError(
                f"group {group_id!r} moved since the plan was made ({details}); nothing was committed"
            )
        texts = metadata if isinstance(metadata, Mapping) else dict.fromkeys(tps, metadata)
        request = [KafkaTopicPartition(tp.topic, tp.partition, offsets[tp], metadata=texts[tp]) for tp in tps]
        for part in commit_requests(request, max(texts.values(), key=len, default="")):
            answer = self._call(f"commit({group_id})", lambda part=part: self._commit_synchronously(group_id, part))
            errors = [a for a in answer or [] if a.error is not None]
            if any(a.error.code() in GROUP_HAS_MEMBERS for a in errors):
                raise group_in_use(group_id)
            if errors:
                failed = listed(f"{a.topic}[{a.partition}]: {a.error.str()}" for a in errors)
                raise broker_error(errors[0].error, f"commit of group {group_id!r} failed for {failed}")
        after = self.committed_offsets(group_id, tps)
        wrong = [tp for tp in tps if after.get(tp) != offsets[tp]]
        if wrong:
            details = listed(f"{tp}: read back {after.get(tp)}, committed {offsets[tp]}" for tp in wrong)
            raise CommitConflictError(f"group {group_id!r} does not show the committed offsets ({details})")
        log.info("committed group %s: %s", group_id, ", ".join(f"{tp}={offsets[tp]}" for tp in tps))
        return {tp: offsets[tp] for tp in tps}

    def _commit_synchronously(self, group_id: str, request: list[KafkaTopicPartition]) -> list[KafkaTopicPartition]:
        """Commit and wait for the coordinator's answer for every partition, at most ``timeout``.

        ``Consumer.commit(asynchronous=False)`` has no timeout: with the coordinator gone it
        blocks until librdkafka gives up (~45 s on the embedded broker) or the task times out.
        An asynchronous commit whose callback is polled for has one. (The admin API's
        OffsetCommit has a timeout too, but after it the embedded broker failed later commits
        and group deletions of the same group with transport errors.) The consumer never
        joins the group, as before, so its session timeout serves one purpose only: librdkafka
        holds a commit that waits for a coordinator that long, and ``close()`` waits for it
        (45 s by default, measured), so it is the timeout too.
        """
        answers: list[tuple[KafkaError | None, list[KafkaTopicPartition]]] = []
        session_ms = min(max(3, int(self.timeout * 1000)), 3_600_000)  # librdkafka's range
        config = {
            **consumer_config(self.kafka_config, group_id),
            "on_commit": lambda e, p: answers.append((e, p)),
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": session_ms // 3,  # must stay below the session timeout
            "max.poll.interval.ms": max(300_000, session_ms),  # must not be below it
        }
        # The session timeout belongs to the classic protocol: librdkafka refuses it with the
        # consumer protocol (KIP-848), which a consumer that never joins has no use for.
        for key in ("group.protocol", "group.remote.assignor"):
            config.pop(key, None)
        consumer = Consumer(config)
        try:
            consumer.commit(offsets=request, asynchronous=True)
            deadline = time.monotonic() + self.timeout
            while not answers and time.monotonic() < deadline:
                consumer.poll(0.1)  # serves the commit's callback
        finally:
            consumer.close()
        if not answers:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        error, partitions = answers[0]
        if error is not None and error.code() in GROUP_HAS_MEMBERS:
            raise group_in_use(group_id)  # not a KafkaException: no retry, no generic line
        if error is not None:
            raise KafkaException(error)
        return partitions

    def topic_retention_ms(self, topics: Sequence[str]) -> dict[str, int | None]:
        """Each topic's ``retention.ms`` (``None`` when the broker does not say; ``-1``: forever).

        A principal without DESCRIBE_CONFIGS on a topic (READ is all ingestion needs) gets ``None``
        for it, with a warning: the lag check then cannot judge that topic's retention risk.
        """
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]

        def run() -> dict[str, int | None]:
            found: dict[str, int | None] = {}
            for resource, future in self.admin.describe_configs(resources, request_timeout=self.timeout).items():
                try:
                    entry = future.result().get("retention.ms")
                except KafkaException as exc:
                    error = error_of(exc)
                    if error is None or error.code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
                        raise
                    log.warning("no DESCRIBE_CONFIGS on topic %r: its retention is unknown, not judged", resource.name)
                    entry = None
                found[resource.name] = int(entry.value) if entry is not None and entry.value is not None else None
            return found

        return self._call("describe_configs", run)

    def first_record_timestamps(self, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Timestamp (ms) of the first record at or after each position; partitions with none are left out.

        Reads one fetch per partition with an assign-only consumer: it never joins or commits.
        """
        if not positions:
            return {}
        consumer = Consumer({**reader_consumer_config(self.kafka_config), "fetch.max.bytes": 1024 * 1024})
        found: dict[TopicPartition, int] = {}
        try:
            consumer.assign([KafkaTopicPartition(tp.topic, tp.partition, off) for tp, off in positions.items()])
            deadline = time.monotonic() + self.timeout
            while len(found) < len(positions) and time.monotonic() < deadline:
                for m in consumer.consume(len(positions), timeout=0.5):
                    tp = TopicPartition(m.topic(), m.partition())
                    if m.error() is None and tp not in found:
                        found[tp] = m.timestamp()[1]
                        consumer.pause([KafkaTopicPartition(tp.topic, tp.partition)])
        finally:
            consumer.close()
        return found

    def marks_around(
        self, tp: TopicPartition, start: int, end: int, mark: Callable[[bytes | None], T]
    ) -> list[tuple[int, T]]:
        """``(offset, mark(value))`` of the records from ``start`` up to the first one with a value at
        or after ``end`` (fewer when the log ends first): what the plan step reads around a bound.
        Only the marks are kept, never the values.

        An assign-only consumer with the readers' settings (isolation level included): it never
        joins or commits, and skips the group errors the readers skip. A transient error waits, up to
        ``timeout`` seconds without a record; a refusal fails at once.
        """
        conf = {**reader_consumer_config(self.kafka_config), "enable.partition.eof": True}
        consumer = Consumer(conf)
        found: list[tuple[int, T]] = []
        try:
            consumer.assign([KafkaTopicPartition(tp.topic, tp.partition, start)])
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                for m in consumer.consume(500, timeout=0.5):
                    error = m.error()
                    if error is not None and error.code() == KafkaError._PARTITION_EOF:
                        return found
                    if error is not None:
                        if error.code() in READER_GROUP_ERRORS or is_transient(error):
                            continue
                        raise broker_error(error, f"could not read {tp.key} from offset {start}: {error.str()}")
                    deadline = time.monotonic() + self.timeout
                    value = m.value()
                    found.append((m.offset(), mark(value)))
                    if m.offset() >= end and value is not None:
                        return found
            raise KafkaUnavailableError(
                f"could not read {tp.key} from offset {start} to {end}: no record for {self.timeout:g}s "
                f"({len(found)} record(s) read)"
            )
        finally:
            consumer.close()

    def lag(self, group_id: str, topics: Sequence[str]) -> dict[TopicPartition, int]:
        """Offsets between the group's position and the end, per partition (isolation-aware)."""
        return {s.tp: s.lag for s in self.partition_offsets(group_id, topics)}
