"""
### Kafka → lake, incremental (`kafka_batch_ingest`)

Every 15 minutes: wait until there is something to ingest (lag sensor), read the consumer
group's committed offsets, read the new records up to the current end offsets with Spark,
write them as one batch (Parquet + its entry in the output's offset log), commit the end
offsets for the group, then judge the group's lag health. A failed run changes no offsets; the
next run finishes its batch. The output's offset log is the truth: a group whose offsets were
deleted or expired resumes from it, one moved by someone else is refused.

Tasks: `ingest.wait_for_data` (reschedule mode; skips the run when fewer than `min_lag`
records arrive in time and nothing is older than `max_data_age`) → `ingest.plan` →
`ingest.spark_write` → `ingest.commit` → `ingest.lag_health` (fails on STALL, STOP, REWIND,
RETENTION_RISK, DATA_LOSS; logs WARN).

| setting | Airflow Variable (read at run time) | environment default (read at parse time) |
| --- | --- | --- |
| topics (comma-separated) | `kafka_batch_topics` | `KAFKA_BATCH_TOPICS`, else `orders` |
| consumer group | `kafka_batch_group` | `KAFKA_BATCH_GROUP`, else `kafka-batch-ingest` |
| output format: `parquet`, `delta` or `iceberg` | `kafka_batch_format` (*) | `KAFKA_BATCH_FORMAT`, else `parquet` |
| output (parquet, delta; a path or URI) | `kafka_batch_output` (*) | `KAFKA_BATCH_OUTPUT`, **required** |
| Iceberg table `NAMESPACE.NAME` (iceberg) | `kafka_batch_table` (*) | `KAFKA_BATCH_TABLE`, **required** (iceberg) |
| partitioning: `date` or none (tables) | `kafka_batch_partition_by` | `KAFKA_BATCH_PARTITION_BY`, else none |
| Iceberg catalog connection id (extra = catalog properties) | - | `KAFKA_BATCH_CATALOG_CONN_ID`, else none |
| Kafka connection id | - | `KAFKA_BATCH_KAFKA_CONN_ID`, else `kafka_default` |
| storage connection id (`aws`, `google_cloud_platform`, `wasb`) | - | `KAFKA_BATCH_STORAGE_CONN_ID`, else none |
| group disagrees with the output's log | - | `KAFKA_BATCH_ON_GROUP_MISMATCH`, else `fail` (`output`, `group`) |
| Spark connection id | - | `KAFKA_BATCH_SPARK_CONN_ID`, else `spark_default` |
| Spark Connect connection id (instead of spark-submit) | - | `KAFKA_BATCH_SPARK_CONNECT_CONN_ID`, else none |
| schedule | - | `KAFKA_BATCH_SCHEDULE`, else `*/15 * * * *` |
| sensor: records enough to start | - | `KAFKA_BATCH_MIN_LAG`, else `1` |
| sensor: ingest anyway when older than (s) | - | `KAFKA_BATCH_MAX_DATA_AGE_SECONDS`, else `3600` |
| sensor: give up and skip after (s) | - | `KAFKA_BATCH_SENSOR_TIMEOUT_SECONDS`, else `600` |
| sensor: check every (s) | - | `KAFKA_BATCH_SENSOR_POKE_SECONDS`, else `60` |
| sensor: wait in the triggerer (no worker slot) | - | `KAFKA_BATCH_SENSOR_DEFERRABLE`, else `false` |
| retries: wait between attempts (s) | - | `KAFKA_BATCH_RETRY_DELAY_SECONDS`, else `120` |
| health: STOP after no commit for (s) | - | `KAFKA_BATCH_STOP_AFTER_SECONDS`, else `2700` (3 intervals) |
| Spark's reader: `python`, or `jvm` (Spark's own Kafka source) | - | `KAFKA_BATCH_READER`, else `python` |
| values: `bytes`, `string` or `avro` (typed, from a registry) | - | `KAFKA_BATCH_VALUE_FORMAT`, else `bytes` |
| avro: `schema_registry` connection id | - | `KAFKA_BATCH_SCHEMA_REGISTRY_CONN_ID`, else none |
| avro: subject | - | `KAFKA_BATCH_VALUE_SUBJECT`, else `<topic>-value` |
| avro: pinned schema version | - | `KAFKA_BATCH_VALUE_SCHEMA_VERSION`, else the latest at plan time |
| avro: keep the value's bytes too | - | `KAFKA_BATCH_KEEP_RAW_VALUE`, else `false` |

Runs of type *backfill* (`airflow backfill create --dag-id kafka_batch_ingest ...`) replay
their data interval (mapped to offsets with `offsets_for_times`) into `<output>_replay` and
leave the group's offsets alone (an Iceberg table's replays go to `<table>_replay`).

(*) The output is the environment's, as for every shipped DAG (the lag-fired and downstream DAGs
follow it): without `KAFKA_BATCH_OUTPUT` (`KAFKA_BATCH_TABLE` for iceberg) the DAG file fails to
import, in one line; there is no default location. The Variables name another output for the
runs made while they are set (tests, a one-off run); the environment's stays the one the other
DAGs follow, and a group feeds one output (another output meeting it is refused). The output
setting is used for `parquet` and `delta` only, the table for `iceberg` only; a bad combination
(e.g. `iceberg` without a catalog connection) fails the first task that opens the output with one line.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, CronDataIntervalTimetable

from kafka_batch_provider.operators.dag_settings import (
    env_bool,
    env_int,
    ingest_output,
    seconds,
    setting,
    value_settings,
)
from kafka_batch_provider.task_group import kafka_batch_ingest_group

with DAG(
    dag_id="kafka_batch_ingest",
    description="Incremental, offset-checkpointed Kafka to lake ingestion with Spark",
    doc_md=__doc__,
    # Data intervals (not just trigger times): a backfill run replays exactly its interval.
    schedule=CronDataIntervalTimetable(os.environ.get("KAFKA_BATCH_SCHEDULE", "*/15 * * * *"), timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # one writer per consumer group: the commit is compare-and-set
    dagrun_timeout=timedelta(hours=2),
    default_args={"owner": "data-platform", "retries": 2, "retry_delay": timedelta(minutes=2)},
    tags=["kafka", "spark", "ingestion"],
) as dag:
    kafka_batch_ingest_group(
        group_id="ingest",
        topics=setting("kafka_batch_topics", "KAFKA_BATCH_TOPICS", "orders"),
        consumer_group=setting("kafka_batch_group", "KAFKA_BATCH_GROUP", "kafka-batch-ingest"),
        output=ingest_output(),
        kafka_config_id=os.environ.get("KAFKA_BATCH_KAFKA_CONN_ID", "kafka_default"),
        spark_conn_id=os.environ.get("KAFKA_BATCH_SPARK_CONN_ID", "spark_default"),
        spark_connect_conn_id=os.environ.get("KAFKA_BATCH_SPARK_CONNECT_CONN_ID") or None,
        on_group_mismatch=os.environ.get("KAFKA_BATCH_ON_GROUP_MISMATCH", "fail"),
        min_lag=env_int("KAFKA_BATCH_MIN_LAG", 1),
        max_data_age=seconds("KAFKA_BATCH_MAX_DATA_AGE_SECONDS", 3600),
        sensor_timeout=seconds("KAFKA_BATCH_SENSOR_TIMEOUT_SECONDS", 600),
        sensor_poke_interval=seconds("KAFKA_BATCH_SENSOR_POKE_SECONDS", 60),
        deferrable=env_bool("KAFKA_BATCH_SENSOR_DEFERRABLE", False),
        retry_delay=seconds("KAFKA_BATCH_RETRY_DELAY_SECONDS", 120),
        stop_after=seconds("KAFKA_BATCH_STOP_AFTER_SECONDS", 2700),
        **value_settings(),
    )
