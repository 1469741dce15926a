"""Spark's own Kafka source and JDBC writer, one batch of a topic into a PostgreSQL table: the
baseline of ``db_spark_jdbc_rps`` (bench/database_output.py). Not exactly once: each task commits
its own rows, and a retried task writes them again. The password comes from the environment.

``spark-submit --jars <spark-kafka jars>,<postgresql jar> bench/spark_jdbc_writer.py BOOTSTRAP TOPIC JDBC_URL TABLE``
"""

import os
import sys

from pyspark.sql import SparkSession


def main() -> None:
    bootstrap, topic, url, table = sys.argv[1:5]
    spark = SparkSession.builder.appName("bench-spark-jdbc").getOrCreate()
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .select("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
    )
    properties = {
        "user": os.environ["BENCH_JDBC_USER"],
        "password": os.environ["BENCH_JDBC_PASSWORD"],
        "driver": "org.postgresql.Driver",
        "batchsize": "10000",
        "reWriteBatchedInserts": "true",
    }
    frame.write.jdbc(url, table, mode="append", properties=properties)
    spark.stop()


if __name__ == "__main__":
    main()
