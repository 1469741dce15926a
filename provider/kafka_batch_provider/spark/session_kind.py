"""Which kind of Spark session a DataFrame belongs to: classic (a SparkContext here) or Spark Connect."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame


def functions_of(df: DataFrame) -> Any:
    """``pyspark.sql.functions`` for ``df``'s kind of session: Spark Connect's for a Connect DataFrame.

    pyspark picks the Connect variants only in a process marked as Spark Connect, which
    :mod:`~kafka_batch_provider.spark.connect` keeps unmarked (a spark-submit started later
    would inherit the mark); the classic ones need a SparkContext in this process.
    """
    if is_connect(df):
        from pyspark.sql.connect import functions
    else:
        from pyspark.sql import functions
    return functions


def is_connect(df: DataFrame) -> bool:
    return type(df).__module__.startswith("pyspark.sql.connect.")
