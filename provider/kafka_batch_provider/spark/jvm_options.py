"""Options for Spark's own Kafka source (``format("kafka")``), built from a plan.

For clusters that have the ``spark-sql-kafka-0-10`` connector. The result has the same
schema as the Python reader (``includeHeaders`` on). Offsets go in Spark's JSON vocabulary:
``{"topic": {"0": 42}}`` for ``startingOffsets`` / ``endingOffsets``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.errors import ConfigError

#: Kafka client settings Spark's source refuses or manages itself (see Spark's
#: "Structured Streaming + Kafka Integration Guide", section "Kafka Specific Configurations").
_SPARK_MANAGED = {
    "group.id",
    "auto.offset.reset",
    "key.deserializer",
    "value.deserializer",
    "enable.auto.commit",
    "interceptor.classes",
    "enable.auto.offset.store",
    "logger",
}


def jvm_reader_options(ranges: Sequence[OffsetRange], kafka_config: Mapping[str, Any]) -> dict[str, str]:
    """``spark.read.format("kafka").options(**result)`` reads exactly ``ranges``.

    librdkafka keys are passed as ``kafka.<key>``; the JVM client must understand them
    (``bootstrap.servers``, ``security.protocol``, ``sasl.mechanism`` do; credentials go
    in ``sasl.jaas.config`` for the Java client).
    """
    readable = [r for r in ranges if r.size > 0]
    if not readable:
        raise ConfigError("the JVM Kafka reader needs at least one non-empty range")
    assign: dict[str, list[int]] = defaultdict(list)
    starting: dict[str, dict[str, int]] = defaultdict(dict)
    ending: dict[str, dict[str, int]] = defaultdict(dict)
    for r in readable:
        assign[r.topic].append(r.partition)
        starting[r.topic][str(r.partition)] = r.start
        ending[r.topic][str(r.partition)] = r.end
    options = {
        "assign": json.dumps(dict(assign), sort_keys=True),
        "startingOffsets": json.dumps(dict(starting), sort_keys=True),
        "endingOffsets": json.dumps(dict(ending), sort_keys=True),
        "includeHeaders": "true",
        # A planned offset that no longer exists is data loss: fail, never skip silently.
        "failOnDataLoss": "true",
    }
    for key, value in kafka_config.items():
        if key not in _SPARK_MANAGED:
            options[f"kafka.{key}"] = str(value)
    return options
