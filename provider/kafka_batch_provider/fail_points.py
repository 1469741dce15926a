"""Named points where the fault tests crash or freeze this process: ``KAFKA_BATCH_FAIL_POINT``.

A crash "after the data is in the output and before the Kafka commit" cannot be hit by timing
a ``kill`` from outside: the gap is a few milliseconds. So the write path names its steps and
the tests set ``KAFKA_BATCH_FAIL_POINT=<point>:<action>`` in the environment of the process
they break (as failpoints in TiKV or FoundationDB's buggify do):

* ``kill``: SIGKILL this process at the point, as a lost machine or the OOM killer would;
* ``stop``: SIGSTOP it there, so the test can stop a server at exactly that moment and then
  let the process go on with ``SIGCONT``.

Unset (always, outside the tests) every point is a no-op.
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "KAFKA_BATCH_FAIL_POINT"

#: The points, in the order a batch passes them (then upkeep's).
POINTS = (
    "after-log-tail",  # the plan step first read the output log's newest entry; it reads the group next
    "after-plan",  # the plan file is saved; Spark has not started
    "writing-dead-letters",  # a Spark task wrote a part of its dead letters (its worker dies here)
    "before-log-entry",  # the files are staged and checked; the storage commit (log entry) is next
    "before-database-commit",  # a database output's rows and log entry are in its transaction; COMMIT is next
    "before-publish",  # the log entry is created; its files are still staged (publishing them is next)
    "between-tables",  # a table per topic: one table's batch is in its output; the next table's is next
    "after-log-entry",  # the batch is in the output; the Kafka commit is next
    "compaction-before-record",  # upkeep staged a compaction's files; its record (the commit point) is next
    "compaction-after-record",  # the compaction is recorded; publishing it and removing what it replaced is next
)
ACTIONS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}


def fail_point(name: str) -> None:
    """Crash or freeze here when ``$KAFKA_BATCH_FAIL_POINT`` names this point."""
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    point, _, action = wanted.partition(":")
    if point not in POINTS:  # a misspelt point would otherwise never fire, and a test pass for nothing
        raise ValueError(f"{ENV}={wanted!r}: the point must be one of {', '.join(POINTS)}")
    if point != name:
        return
    if action not in ACTIONS:
        raise ValueError(f"{ENV}={wanted!r}: the action must be one of {', '.join(ACTIONS)}")
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), ACTIONS[action])
