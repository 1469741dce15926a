"""Topic patterns: which topics a batch reads when it is given a regular expression. Pure, no I/O.

A pattern is resolved against the cluster's topic names at every plan
(:meth:`~kafka_batch_provider.kafka.client.KafkaOffsets.topic_names`), so a topic created since
the last run is in the next batch; Kafka Connect's ``topics.regex`` and the Java consumer's
pattern subscription see it only after their next metadata refresh (5 minutes by default).

The pattern must match the whole name (Java's ``Pattern.matcher(topic).matches()``, which
Kafka Connect and Spark's ``subscribePattern`` use). Kafka's own topics (``__consumer_offsets``,
``__transaction_state``, ``__share_group_state``: every name starting with ``__``) are never
matched, as the Java consumer's ``exclude.internal.topics`` does.

What changed since the output's previous batch is recorded in the plan and the log entry: topics
met for the first time (and where they started) and topics that left (deleted or no longer
matched).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import ConfigError

#: Kafka's own topics begin so (``Topic.isInternal`` in the Java clients lists them; all do).
INTERNAL_PREFIX = "__"
#: The plan's ``extra`` key of what the pattern found (copied into the log entry).
PATTERN_PLAN_KEY = "topic_pattern"


def compile_pattern(text: Any) -> re.Pattern[str]:
    """``text`` as a regular expression, or one line saying why it is not one."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(
            f"{Setting('topic_pattern')} must be a regular expression, got {text!r}", setting=Setting("topic_pattern")
        )
    try:
        return re.compile(text)
    except re.error as exc:
        raise ConfigError(
            f"{Setting('topic_pattern')} {text!r} is not a regular expression: {exc}", setting=Setting("topic_pattern")
        ) from None


def topics_or_pattern(topics: Any, topic_pattern: Any) -> str | None:
    """``topics`` or ``topic_pattern``, one of the two (``None``: not given); the pattern (checked
    unless it is still a template)."""
    if (topics is None) == (topic_pattern is None):
        raise ConfigError(
            f"give topics ({Setting('topics')}) or a pattern ({Setting('topic_pattern')}), one of the two",
            setting=Setting("topics"),
        )
    if topic_pattern is not None and "{{" not in str(topic_pattern):
        compile_pattern(topic_pattern)
    return topic_pattern


def matching(pattern: re.Pattern[str], names: Iterable[str]) -> list[str]:
    """The names the pattern matches whole, Kafka's own topics left out, sorted."""
    return sorted(n for n in set(names) if not n.startswith(INTERNAL_PREFIX) and pattern.fullmatch(n))


@dataclass(frozen=True)
class TopicChanges:
    """What a pattern's topics did since the output's previous batch.

    :param pattern: the pattern as given.
    :param new: topics in this batch and not in the previous one, with where they start
        (``earliest``/``latest``: the policy of a partition the group never committed).
    :param left: topics of the previous batch missing now: ``deleted`` (gone from the cluster)
        or ``unmatched`` (there, but the pattern no longer matches them).
    """

    pattern: str
    new: Mapping[str, str] = field(default_factory=dict)
    left: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "new": dict(sorted(self.new.items())), "left": dict(sorted(self.left.items()))}

    def lines(self) -> list[str]:
        """One line per topic that came or left, for the run's log."""
        came = [
            f"topic {t!r} matches {self.pattern!r} for the first time: it starts at {at}" for t, at in self.new.items()
        ]
        went = [
            f"topic {t!r} of the previous batch "
            + ("no longer exists" if why == "deleted" else f"no longer matches {self.pattern!r}")
            + ": it leaves the plan (its offsets stay in the output's log)"
            for t, why in self.left.items()
        ]
        return sorted(came) + sorted(went)


def topic_changes(
    pattern: str,
    matched: Iterable[str],
    previous: Iterable[str] | None,
    existing: Iterable[str],
    uncommitted: Iterable[str],
    new_topic_start: str,
) -> TopicChanges:
    """What the pattern's topics did since the previous batch.

    :param matched: the topics this batch reads.
    :param previous: the topics the previous batch read (``None``: this is the output's first batch,
        where no topic counts as new: every one starts as ``--new-partitions`` says).
    :param existing: every topic on the cluster now.
    :param uncommitted: topics the group has no committed offset for (only those start by policy).
    :param new_topic_start: where a new topic's partitions start.
    """
    if previous is None:
        return TopicChanges(pattern)
    matched, previous, existing = set(matched), set(previous), set(existing)
    uncommitted = set(uncommitted)
    new = {t: new_topic_start for t in matched - previous if t in uncommitted}
    left = {t: ("unmatched" if t in existing else "deleted") for t in previous - matched}
    return TopicChanges(pattern, new, left)
