"""Partitions named in a one-line message, capped."""

from __future__ import annotations

import pytest

from kafka_batch_provider.core.listing import listed


@pytest.mark.parametrize(
    "count, expected",
    [
        (0, ""),
        (2, "p0, p1"),
        (5, "p0, p1, p2, p3, p4"),
        (6, "p0, p1, p2, p3, p4 and 1 more"),
        (10_000, "p0, p1, p2, p3, p4 and 9,995 more"),
    ],
)
def test_a_few_are_named_and_the_rest_counted(count, expected):
    found = listed(f"p{i}" for i in range(count))
    assert found == expected, f"expected {expected!r}, found {found!r}"
