"""Spark application of the Kafka batch provider: read a plan's offset ranges, write one batch.

Submit it with spark-submit (the CLI and KafkaSparkBatchOperator do)::

    spark-submit spark_apps/kafka_batch_ingest.py --plan <output>/_plans/<batch_id>.json

It needs ``airflow-provider-kafka-batch`` (and so confluent-kafka and pyarrow) installed where
the driver and executors run. The logic lives in :mod:`kafka_batch_provider.spark.app` so that
tests and the CLI run the same code; this file only makes it submittable as a file.
"""

import sys

from kafka_batch_provider.spark.app import main

if __name__ == "__main__":
    sys.exit(main())
