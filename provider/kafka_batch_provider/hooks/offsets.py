"""``KafkaOffsetsHook``: the Airflow way to get a :class:`~kafka_batch_provider.kafka.client.KafkaOffsets`.

Like the Apache Kafka provider's hooks, it reads the librdkafka config from a connection of
the ``kafka`` type (extra = librdkafka config JSON; allow-listed callbacks and managed-cloud
OAuth resolved by ``KafkaBaseHook``) and ``get_conn()`` hands out the client: the same offsets
client the command line uses, so a task and ``kafka-batch`` make the same broker calls.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.kafka.config import check_config


class KafkaOffsetsHook(KafkaBaseHook):
    """Committed offsets, log offsets, lag and compare-and-set commits of consumer groups.

    :param kafka_config_id: a ``kafka`` connection; its extra is the librdkafka config.
    :param timeout: seconds to wait for any one broker request.
    """

    conn_name_attr = "kafka_config_id"
    default_conn_name = "kafka_default"
    conn_type = "kafka"
    hook_name = "Kafka offsets (batch ingestion)"

    def __init__(self, kafka_config_id: str = default_conn_name, timeout: float = 30.0) -> None:
        super().__init__(kafka_config_id=kafka_config_id)
        self.timeout = timeout

    @cached_property
    def kafka_config(self) -> dict[str, Any]:
        """The connection's librdkafka config, checked (what the Spark tasks are handed too)."""
        try:
            built = self._build_config()
        except ValueError as exc:  # e.g. a connection without bootstrap.servers
            raise ConfigError(f"Kafka connection {self.kafka_config_id!r}: {exc}") from None
        return check_config(built)

    def _get_client(self, config: dict[str, Any]) -> KafkaOffsets:
        return KafkaOffsets(config, timeout=self.timeout)

    @cached_property
    def get_conn(self) -> KafkaOffsets:  # a cached property, as in KafkaBaseHook
        """The offsets client for this connection (one per hook: close it with ``close()``)."""
        return self._get_client(self.kafka_config)

    def close(self) -> None:
        if "get_conn" in self.__dict__:
            self.get_conn.close()
