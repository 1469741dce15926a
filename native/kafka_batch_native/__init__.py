"""The native reader of airflow-provider-kafka-batch: librdkafka messages into Arrow columns in C.

``RangeConsumer(settings)`` is one librdkafka consumer; ``assign``, ``consume``, ``position`` and
``close`` are the calls the provider's range reader makes (kafka_batch_provider/spark/native_consumer.py).
It links the librdkafka that the confluent-kafka wheel carries, so both readers run the same client.
"""

__version__ = "1.0.0"  # the provider's (tests/unit/test_native_reader.py holds them equal)

from kafka_batch_native._reader import RangeConsumer, librdkafka_version

__all__ = ["RangeConsumer", "librdkafka_version"]
