"""Checks of user-given values shared by the command line and the operators. Pure, no I/O.

Each check returns the value it accepts or raises a one-line
:class:`~kafka_batch_provider.errors.ConfigError` naming the setting, so a bad value is refused
before anything is read, planned or written.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from kafka_batch_provider.errors import ConfigError

#: Kafka's legal topic names (``kafka.common.internals.Topic``): at most 249 of these characters.
TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def positive_seconds(name: str, value: Any) -> float:
    """A finite number of seconds > 0 (``nan``, ``inf``, 0 and negatives are refused)."""
    seconds = _number(name, value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return seconds


def fraction(name: str, value: Any) -> float:
    """A number in ``(0, 1]``."""
    number = _number(name, value)
    if not (0 < number <= 1):  # also refuses nan, for which every comparison is false
        raise ConfigError(f"{name} must be a fraction in (0, 1], got {value!r}")
    return number


def share(name: str, value: Any) -> float:
    """A number in ``[0, 1]`` (0: any at all)."""
    number = _number(name, value)
    if not (0 <= number <= 1):  # also refuses nan
        raise ConfigError(f"{name} must be a share in [0, 1], got {value!r}")
    return number


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None


def check_topics(topics: Sequence[str]) -> list[str]:
    """Topic names: at least one, each legal for Kafka, none given twice."""
    names = list(topics)
    if not names:
        raise ConfigError("no topic given")
    for topic in names:
        if not isinstance(topic, str):
            raise ConfigError(
                f"topic {topic!r} is a {type(topic).__name__}, not a name: a template rendered it as a number; "
                "pass it as text (in a DAG with render_template_as_native_obj, '{{ params.topic | tojson }}')"
            )
        if not TOPIC_NAME.match(topic):
            raise ConfigError(
                f"topic {topic!r} is not a legal Kafka topic name (1-249 of a-z, A-Z, 0-9, '.', '_', '-')"
            )
    repeated = sorted({t for t in names if names.count(t) > 1})
    if repeated:
        raise ConfigError(f"topic(s) {', '.join(map(repr, repeated))} given more than once")
    return names


def check_group_id(group_id: Any) -> str:
    if not isinstance(group_id, str) or not group_id.strip():
        raise ConfigError(f"a consumer group id is required, got {group_id!r}")
    return group_id
