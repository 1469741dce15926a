"""``KafkaOffsetsHook``: :class:`~kafka_batch_provider.kafka.client.KafkaOffsets` for Airflow.

It reads the librdkafka config from a connection of the ``kafka`` type that
apache-airflow-providers-apache-kafka defines (extra = librdkafka config JSON), or takes a
plain dict, and offers the same offset calls as the command line uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

from kafka_batch_provider.kafka.client import KafkaOffsets


class KafkaOffsetsHook(KafkaOffsets, KafkaBaseHook):
    """Committed offsets, log offsets, lag and compare-and-set commits of consumer groups.

    :param kafka_config_id: a ``kafka`` connection; its extra is the librdkafka config.
    :param config: a librdkafka config dict to use instead of a connection.
    :param timeout: seconds to wait for any one broker request.
    """

    conn_name_attr = "kafka_config_id"
    default_conn_name = "kafka_default"
    conn_type = "kafka"
    hook_name = "Kafka offsets (batch ingestion)"

    def __init__(
        self,
        kafka_config_id: str = default_conn_name,
        config: Mapping[str, Any] | None = None,
        timeout: float = 30.0,
    ) -> None:
        KafkaBaseHook.__init__(self, kafka_config_id=kafka_config_id)
        KafkaOffsets.__init__(self, config=config, timeout=timeout)

    def _load_config(self) -> dict[str, Any]:
        if self._explicit_config is not None:
            return self._explicit_config
        # KafkaBaseHook resolves allow-listed callbacks and managed-cloud OAuth the same way
        # the Apache Kafka provider's own hooks do.
        return self._build_config()
