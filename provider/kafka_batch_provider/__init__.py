"""Offset-checkpointed batch ingestion from Kafka with PySpark, for Apache Airflow.

The protocol has four steps, each in its own place:

* plan    -- :mod:`kafka_batch_provider.planning` (pure) fed by
             :mod:`kafka_batch_provider.kafka_offsets` (Kafka I/O)
* read    -- :mod:`kafka_batch_provider.spark.slice_reader` (one Spark task per slice of the plan)
* write   -- :mod:`kafka_batch_provider.spark.ingest` (staging, publish, manifest)
* commit  -- :mod:`kafka_batch_provider.protocol` (manifest check, compare-and-set commit)
"""

from __future__ import annotations

__version__ = "0.1.0"


def get_provider_info() -> dict:
    """Provider metadata for Airflow's ``apache_airflow_provider`` entry point."""
    return {
        "package-name": "airflow-provider-kafka-batch",
        "name": "Kafka Batch (offset-checkpointed Kafka to lake ingestion with PySpark)",
        "description": (
            "Plans bounded Kafka offset ranges from a consumer group's committed offsets, "
            "reads them with PySpark, writes them with a manifest and commits the offsets "
            "synchronously only after the write is durable."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Kafka Batch",
                "external-doc-url": "https://kafka.apache.org/documentation/#consumerconfigs",
                "tags": ["apache"],
            }
        ],
        "hooks": [{"integration-name": "Kafka Batch", "python-modules": ["kafka_batch_provider.hooks.offsets"]}],
        "operators": [
            {
                "integration-name": "Kafka Batch",
                "python-modules": [
                    "kafka_batch_provider.operators.plan",
                    "kafka_batch_provider.operators.spark",
                    "kafka_batch_provider.operators.spark_connect",
                    "kafka_batch_provider.operators.commit",
                ],
            }
        ],
    }
