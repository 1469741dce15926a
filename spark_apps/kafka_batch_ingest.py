"""Spark application of the Kafka batch provider: read a plan's offset ranges, write one batch.

Submit it with spark-submit (the CLI and KafkaSparkBatchOperator do)::

    spark-submit [--py-files kafka_batch_provider-<version>.zip] spark_apps/kafka_batch_ingest.py \
        --plan <output>/_plans/<seq>-<batch_id>.json [--storage-options-file FILE]

The driver needs ``airflow-provider-kafka-batch`` installed; executors need only its
third-party dependencies (pyarrow, confluent-kafka, fsspec and the output's filesystem package)
when the package travels with ``--py-files``, as the CLI and the operator arrange on a cluster.
The logic lives in :mod:`kafka_batch_provider.spark.app` so that
tests and the CLI run the same code; this file only makes it submittable as a file.
"""

import sys

from kafka_batch_provider.spark.app import main

if __name__ == "__main__":
    sys.exit(main())
