"""Offset-checkpointed batch ingestion from Kafka with PySpark, for Apache Airflow.

The four steps sit side by side in :mod:`kafka_batch_provider.steps`:

* plan    -- :mod:`~kafka_batch_provider.steps.plan`: reconcile the group with the output's log
             (:mod:`~kafka_batch_provider.core.reconcile`), plan (:mod:`~kafka_batch_provider.core.planning`)
* read    -- :mod:`kafka_batch_provider.spark` stages the plan's ranges, slices grouped into tasks
* write   -- :mod:`~kafka_batch_provider.steps.write`: check what was staged, append the log entry, publish
* commit  -- :mod:`~kafka_batch_provider.steps.commit`: check the entry, compare-and-set commit

``core/`` holds the pure rules, ``kafka/`` and ``output/`` the I/O, ``spark/`` what runs Spark.
"""

from __future__ import annotations

from kafka_batch_provider._version import __version__


def get_provider_info() -> dict:
    """Provider metadata for Airflow's ``apache_airflow_provider`` entry point: a plain dict that
    imports neither Airflow nor a hook (it is read before Airflow starts, and while it does)."""
    from kafka_batch_provider.connection_forms import REGISTRY_FORM

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
        "hooks": [
            {
                "integration-name": "Kafka Batch",
                "python-modules": ["kafka_batch_provider.hooks.offsets", "kafka_batch_provider.hooks.schema_registry"],
            }
        ],
        "connection-types": [
            {
                "hook-class-name": "kafka_batch_provider.hooks.schema_registry.SchemaRegistryHook",
                "connection-type": "schema_registry",
                "hook-name": "Schema Registry (Confluent-compatible)",
                # The form the hook's get_ui_field_behaviour gives, for a providers manager that
                # reads the provider info without importing the hook.
                "ui-field-behaviour": {key.replace("_", "-"): value for key, value in REGISTRY_FORM.items()},
            }
        ],
        "sensors": [{"integration-name": "Kafka Batch", "python-modules": ["kafka_batch_provider.sensors.lag"]}],
        "triggers": [{"integration-name": "Kafka Batch", "python-modules": ["kafka_batch_provider.triggers.lag"]}],
        "asset-uris": [
            {
                "schemes": ["iceberg"],
                "handler": "kafka_batch_provider.operators.assets.sanitize_iceberg_uri",
                "factory": "kafka_batch_provider.operators.assets.create_iceberg_asset",
                "to_openlineage_converter": "kafka_batch_provider.operators.assets.iceberg_asset_to_openlineage",
            }
        ],
        "operators": [
            {
                "integration-name": "Kafka Batch",
                "python-modules": [
                    "kafka_batch_provider.operators.plan",
                    "kafka_batch_provider.operators.spark",
                    "kafka_batch_provider.operators.spark_connect",
                    "kafka_batch_provider.operators.commit",
                    "kafka_batch_provider.operators.health",
                    "kafka_batch_provider.operators.upkeep",
                    "kafka_batch_provider.operators.batch_report",
                ],
            }
        ],
    }
