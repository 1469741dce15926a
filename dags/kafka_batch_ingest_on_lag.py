"""
### Kafka → lake, fired by lag (`kafka_batch_ingest_on_lag`)

No cron: the DAG is scheduled on an asset whose watcher, a `KafkaLagEventTrigger` in the
triggerer, fires when the consumer group's lag reaches `KAFKA_BATCH_MIN_LAG` records or its
oldest unconsumed record is older than `KAFKA_BATCH_MAX_DATA_AGE_SECONDS`. The trigger reads
offsets only and commits nothing: the ingest task group that runs (`plan` → `spark_write` →
`commit` → `lag_health`, no sensor) sees every record, and commits as the scheduled DAG does.

Bursts: lag that a running batch is already taking fires no second event (the trigger knows
what it fired for, and the output's pending plan); events that arrive while a run is going
queue at most one more run (`max_active_runs=1`), which finds the rest or nothing.

A trigger is fixed when the DAG is parsed, so this DAG takes its topics, group and output from
the environment only (`KAFKA_BATCH_TOPICS`, `KAFKA_BATCH_GROUP`, `KAFKA_BATCH_FORMAT`,
`KAFKA_BATCH_OUTPUT`, `KAFKA_BATCH_TABLE`, `KAFKA_BATCH_CATALOG_CONN_ID`, ...), not from Airflow
Variables. It is paused when created: run it *instead of* `kafka_batch_ingest` for a group (both
at once are safe, the commit is compare-and-set, but they would take turns on the same batches).

| setting | environment (read at parse time) |
| --- | --- |
| fire at this many records | `KAFKA_BATCH_MIN_LAG`, else `1` |
| fire when the oldest waits longer than (s) | `KAFKA_BATCH_MAX_DATA_AGE_SECONDS`, else `3600` |
| check every (s) | `KAFKA_BATCH_LAG_POKE_SECONDS`, else `5` |
| a fired batch counts as running for (s) | `KAFKA_BATCH_IN_FLIGHT_SECONDS`, else `900` |
| its own output beside the scheduled DAG's (parquet, delta) | `KAFKA_BATCH_LAG_OUTPUT`, else `KAFKA_BATCH_OUTPUT` |
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, AssetWatcher

from kafka_batch_provider.operators.dag_settings import env_int, env_number, seconds, static_output, value_settings
from kafka_batch_provider.task_group import kafka_batch_ingest_group
from kafka_batch_provider.triggers.lag import KafkaLagEventTrigger

TOPICS = [t.strip() for t in os.environ.get("KAFKA_BATCH_TOPICS", "orders").split(",") if t.strip()]
GROUP = os.environ.get("KAFKA_BATCH_GROUP", "kafka-batch-ingest")
KAFKA_CONN_ID = os.environ.get("KAFKA_BATCH_KAFKA_CONN_ID", "kafka_default")
OUTPUT = static_output(os.environ.get("KAFKA_BATCH_LAG_OUTPUT") or None)
MAX_AGE = env_number("KAFKA_BATCH_MAX_DATA_AGE_SECONDS", 3600)

lag = Asset(
    name=f"kafka-batch-lag:{GROUP}",
    watchers=[
        AssetWatcher(
            name=f"kafka_batch_lag_{GROUP}",
            trigger=KafkaLagEventTrigger(
                group_id=GROUP,
                topics=TOPICS,
                kafka_config_id=KAFKA_CONN_ID,
                min_records=env_int("KAFKA_BATCH_MIN_LAG", 1),
                max_age_seconds=MAX_AGE,
                poke_interval=env_number("KAFKA_BATCH_LAG_POKE_SECONDS", 5),
                output=OUTPUT.to_dict(),
                in_flight_seconds=env_number("KAFKA_BATCH_IN_FLIGHT_SECONDS", 900),
            ),
        )
    ],
)

with DAG(
    dag_id="kafka_batch_ingest_on_lag",
    description="Kafka to lake ingestion fired by the consumer group's lag (an asset watcher), no cron",
    doc_md=__doc__,
    schedule=[lag],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # one writer per consumer group; events meanwhile queue at most one more run
    is_paused_upon_creation=True,
    dagrun_timeout=timedelta(hours=2),
    default_args={"owner": "data-platform", "retries": 2, "retry_delay": timedelta(minutes=2)},
    tags=["kafka", "spark", "ingestion", "assets"],
) as dag:
    kafka_batch_ingest_group(
        group_id="ingest",
        topics=TOPICS,
        consumer_group=GROUP,
        output=OUTPUT,
        kafka_config_id=KAFKA_CONN_ID,
        spark_conn_id=os.environ.get("KAFKA_BATCH_SPARK_CONN_ID", "spark_default"),
        spark_connect_conn_id=os.environ.get("KAFKA_BATCH_SPARK_CONNECT_CONN_ID") or None,
        on_group_mismatch=os.environ.get("KAFKA_BATCH_ON_GROUP_MISMATCH", "fail"),
        wait_for_data=False,  # the trigger judged the lag already
        retry_delay=seconds("KAFKA_BATCH_RETRY_DELAY_SECONDS", 120),
        stop_after=None,  # no schedule to fall behind: STOP needs one
        bootstrap_servers=os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or None,
        **value_settings(),
    )
