"""A list of partitions in a one-line message, capped. Pure, no I/O.

A group of thousands of partitions must not turn one refusal into a line of megabytes: the
first few name what to look at, a count says how many more there are.
"""

from __future__ import annotations

from collections.abc import Iterable

#: How many items a message names before it counts the rest.
MOST = 5


def listed(items: Iterable[str], most: int = MOST) -> str:
    """``"a, b, c"``; beyond ``most`` items, ``"a, b, c, d, e and 1,995 more"``."""
    shown = list(items)
    if len(shown) <= most:
        return ", ".join(shown)
    return f"{', '.join(shown[:most])} and {len(shown) - most:,} more"
