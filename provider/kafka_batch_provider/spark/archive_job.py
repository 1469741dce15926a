"""The job the class archive is recorded from (``kafka-batch spark-archive build``).

It loads, in the driver's JVM, what a batch of :mod:`kafka_batch_provider.spark.app` loads: a
session with the application's settings, a ``mapInArrow`` job whose tasks write a Parquet file
with the real :class:`~kafka_batch_provider.spark.task_writer.TaskWriter`, the Kafka schema and
the value decoding expressions, without a broker: the rows are made up in the tasks.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator

from kafka_batch_provider.spark.worker_daemon import use_installed_pyspark

use_installed_pyspark()

import pyarrow as pa  # noqa: E402 - after the path fix above, like the application

from kafka_batch_provider.spark.kafka_reader import KAFKA_ARROW_SCHEMA  # noqa: E402


def made_up_records(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Ten Kafka-shaped records per slice id, as the reader would yield them."""
    for batch in batches:
        for index in batch.column(0).to_pylist():
            rows = 10
            yield pa.RecordBatch.from_pydict(
                {
                    "key": [b"k"] * rows,
                    "value": [b'{"id": %d}' % i for i in range(rows)],
                    "topic": ["archive"] * rows,
                    "partition": [index] * rows,
                    "offset": list(range(rows)),
                    "timestamp": [1_700_000_000_000_000] * rows,
                    "timestampType": [0] * rows,
                    "headers": [[]] * rows,
                },
                schema=KAFKA_ARROW_SCHEMA,
            )


def main() -> int:
    from pyspark.sql import SparkSession

    from kafka_batch_provider.core.write_options import WriteOptions
    from kafka_batch_provider.kafka.config import SECRET_KEY_PATTERN
    from kafka_batch_provider.spark.ingest import decode_values
    from kafka_batch_provider.spark.slice_reader import KAFKA_SCHEMA_DDL
    from kafka_batch_provider.spark.task_writer import REPORT_SCHEMA, TaskWriter

    spark = (
        SparkSession.builder.appName("kafka-batch class archive")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.redaction.regex", SECRET_KEY_PATTERN.pattern)
        .getOrCreate()
    )
    records = spark.range(0, 2, 1, 2).mapInArrow(made_up_records, KAFKA_SCHEMA_DDL)
    with tempfile.TemporaryDirectory(prefix="kafka-batch-archive-") as output:
        for options in (WriteOptions(), WriteOptions(value_format="json", value_schema="id long")):
            frame = decode_values(records, options)
            frame.schema.simpleString()
            reports = frame.mapInArrow(TaskWriter(output, f"_staging/{options.value_format}"), REPORT_SCHEMA).collect()
            rows = sum(f["rows"] for row in reports for f in json.loads(row["report"])["files"])
            if rows != 20:
                print(f"error: the archive job wrote {rows} rows, expected 20", file=sys.stderr)
                return 1
    return 0  # no spark.stop(): SparkSubmit stops the context, as after a batch


if __name__ == "__main__":
    sys.exit(main())
