"""The offsets of many topics asked for once, answered topic by topic.

Planning a table per topic plans each topic on its own (its own output, log and reconciliation),
but asking the broker for each topic's offsets on its own would cost a round of requests per
topic: 500 topics, 2,000 requests. :class:`PrefetchedOffsets` asks once for every topic and
answers each topic's first question from that answer; everything else goes to the client. A
topic asked about again (the plan step looks again when the output's log moved meanwhile, and
after finishing an earlier batch's commit) gets a fresh answer, so a decision never rests on an
answer older than the log it is compared with twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from kafka_batch_provider.core.offsets import PartitionOffsets
from kafka_batch_provider.kafka.client import KafkaOffsets


class PrefetchedOffsets:
    """A :class:`~kafka_batch_provider.kafka.client.KafkaOffsets` whose group and log offsets and
    topic ids of ``topics`` were fetched once, for ``group_id``; each answered from there once."""

    def __init__(self, kafka: KafkaOffsets, group_id: str, topics: Sequence[str]) -> None:
        self._kafka = kafka
        self._group_id = group_id
        # Once for every table, and first: a refused group would otherwise wait out the offset
        # request's timeout here, or (DESCRIBE only) be refused table by table.
        kafka.check_may_commit(group_id)
        states = kafka.partition_offsets(group_id, topics) if topics else []
        self._states: dict[str, list[PartitionOffsets]] = {topic: [] for topic in topics}
        for state in states:
            self._states[state.topic].append(state)
        self._topic_ids = kafka.topic_ids(topics) if topics else {}
        self._ids_unasked = set(topics)

    def __getattr__(self, name: str) -> Any:  # everything not prefetched: the client's own
        return getattr(self._kafka, name)

    def check_may_commit(self, group_id: str) -> None:
        if group_id != self._group_id:  # checked for the prefetched group already
            self._kafka.check_may_commit(group_id)

    def partition_offsets(
        self, group_id: str | None, topics: Sequence[str], partitions: Iterable[int] | None = None
    ) -> list[PartitionOffsets]:
        if group_id != self._group_id or partitions is not None or any(t not in self._states for t in topics):
            return self._kafka.partition_offsets(group_id, topics, partitions)
        return [state for topic in topics for state in self._states.pop(topic)]

    def topic_ids(self, topics: Sequence[str]) -> dict[str, str]:
        if any(t not in self._ids_unasked for t in topics):
            return self._kafka.topic_ids(topics)
        self._ids_unasked.difference_update(topics)
        return {t: self._topic_ids[t] for t in topics if t in self._topic_ids}

    def commit(self, group_id: str, *args: Any, **kwargs: Any) -> Any:
        committed = self._kafka.commit(group_id, *args, **kwargs)
        for tp in committed:  # asked again from now on: the group moved
            self._states.pop(tp.topic, None)
            self._ids_unasked.discard(tp.topic)
        return committed
