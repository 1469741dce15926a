"""Checks of user-given values (topics, group ids, seconds, fractions): pure, no broker."""

from __future__ import annotations

import pytest

from kafka_batch_provider.core.validation import check_group_id, check_topics, fraction, positive_seconds
from kafka_batch_provider.errors import ConfigError


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "soon", None, True])
def test_seconds_must_be_positive_and_finite(value):
    with pytest.raises(ConfigError, match="timeout must be a positive, finite number of seconds|must be a number"):
        positive_seconds("timeout", value)


@pytest.mark.parametrize("value, expected", [("0.5", 0.5), (30, 30.0), ("1e-3", 0.001)])
def test_seconds_accepted(value, expected):
    assert positive_seconds("timeout", value) == expected


@pytest.mark.parametrize("value", ["nan", "0", "1.5", "-0.1"])
def test_fraction_is_in_zero_one(value):
    with pytest.raises(ConfigError, match=r"must be a fraction in \(0, 1\]"):
        fraction("risk", value)


@pytest.mark.parametrize(
    "topics, expected",
    [
        ([], "no topic given"),
        (["orders", "orders"], "'orders' given more than once"),
        (["a b"], "is not a legal Kafka topic name"),
        ([""], "is not a legal Kafka topic name"),
        (["x" * 250], "is not a legal Kafka topic name"),
        ([2024], "is a int, not a name"),
    ],
)
def test_bad_topics_are_refused_with_one_line(topics, expected):
    with pytest.raises(ConfigError) as refused:
        check_topics(topics)
    assert expected in str(refused.value), f"expected {expected!r} in {refused.value}"


def test_legal_topics_pass_unchanged():
    assert check_topics(["2024", "orders.v1", "a_b-c"]) == ["2024", "orders.v1", "a_b-c"]


@pytest.mark.parametrize("group", ["", "  ", None])
def test_group_id_is_required(group):
    with pytest.raises(ConfigError, match="a consumer group id is required"):
        check_group_id(group)
