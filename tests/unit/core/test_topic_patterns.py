"""Topic patterns: whole-name matches, Kafka's own topics never, what came and what left."""

from __future__ import annotations

import re

import pytest

from kafka_batch_provider.core.planning import NewPartitionPolicy, PlanPolicy
from kafka_batch_provider.core.topic_patterns import compile_pattern, matching, topic_changes
from kafka_batch_provider.errors import ConfigError

CLUSTER = ["orders", "orders.eu", "orders.us", "pre-orders.eu", "__consumer_offsets", "__orders.eu", "_schemas"]


@pytest.mark.parametrize(
    "pattern, expected",
    [
        (r"orders\..*", ["orders.eu", "orders.us"]),  # whole names: not pre-orders.eu, not __orders.eu
        (r".*orders.*", ["orders", "orders.eu", "orders.us", "pre-orders.eu"]),  # never Kafka's own __ topics
        (r".*", ["_schemas", "orders", "orders.eu", "orders.us", "pre-orders.eu"]),
        (r"orders", ["orders"]),
        (r"payments.*", []),
    ],
)
def test_a_pattern_matches_whole_names_and_never_kafkas_own_topics(pattern, expected):
    found = matching(compile_pattern(pattern), CLUSTER)
    assert found == expected, f"{pattern!r}: expected {expected}, found {found}"


@pytest.mark.parametrize(
    "text, says", [("orders(", "is not a regular expression"), ("", "must be a regular expression"), (3, "got 3")]
)
def test_a_pattern_that_is_no_regular_expression_is_refused_in_one_line(text, says):
    with pytest.raises(ConfigError) as refused:
        compile_pattern(text)
    assert says in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    assert "topic_pattern" in str(refused.value), str(refused.value)


def test_the_first_batch_has_no_new_topic_and_later_ones_record_what_came_and_left():
    first = topic_changes("o.*", ["orders", "other"], None, CLUSTER, {"orders", "other"}, "latest")
    assert (dict(first.new), dict(first.left)) == ({}, {}), "the first batch starts every topic as new partitions do"

    later = topic_changes(
        "o.*",
        matched=["orders", "other", "oxen"],
        previous=["orders", "orders.eu", "owls"],
        existing=[*CLUSTER, "other", "oxen"],
        uncommitted={"other"},  # oxen was committed once (it matched before): it resumes, it is not new
        new_topic_start="latest",
    )
    assert later.to_dict() == {
        "pattern": "o.*",
        "new": {"other": "latest"},
        "left": {"orders.eu": "unmatched", "owls": "deleted"},
    }, later.to_dict()
    assert later.lines() == [
        "topic 'other' matches 'o.*' for the first time: it starts at latest",
        "topic 'orders.eu' of the previous batch no longer matches 'o.*': it leaves the plan (its offsets stay in "
        "the output's log)",
        "topic 'owls' of the previous batch no longer exists: it leaves the plan (its offsets stay in the output's "
        "log)",
    ], later.lines()


def test_a_new_topic_cannot_be_set_to_fail_the_plan():
    with pytest.raises(ConfigError, match="new_topic_start must be earliest or latest"):
        PlanPolicy(new_topic_start=NewPartitionPolicy.ERROR)


def test_compiled_patterns_are_plain_regular_expressions():
    assert compile_pattern(r"a\d+") == re.compile(r"a\d+")
