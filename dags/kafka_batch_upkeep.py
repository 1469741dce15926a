"""
### Upkeep of the ingestion's output (`kafka_batch_upkeep`)

Once a day: compact and clean the output the `kafka_batch_ingest` DAG writes (the same
Airflow Variables and environment defaults choose it), keeping every offset:

* **Delta**: `optimize` to the target file size, a checkpoint, log cleanup (commits older
  than the table's `delta.logRetentionDuration`, 30 days by default), `vacuum` of files older
  than the retention (replaced ones, and failed attempts' files no commit names);
* **Iceberg**: expiry of snapshots older than the retention, orphan data files (pyiceberg
  cannot compact data files yet: the task log says so);
* **Parquet layout**: staging folders of failed attempts older than the retention;
* **every format**: plans and Kafka commit records older than the newest `keep_batches`.

It may run while ingestion runs: a batch committing meanwhile is committed again on top of
upkeep's commit; no file younger than the retention (at least an hour) and no file of a batch
in flight is removed (plans and commit records go by count: `keep_batches`). The
task's XCom holds the report (files before and after, compacted, removed, snapshots expired,
records pruned).

| setting | environment default (read at parse time) |
| --- | --- |
| output | as for `kafka_batch_ingest` (its Variables and `KAFKA_BATCH_*` defaults) |
| schedule | `KAFKA_BATCH_UPKEEP_SCHEDULE`, else `30 3 * * *` |
| target file size (MB) | `KAFKA_BATCH_UPKEEP_TARGET_FILE_MB`, else `128` |
| retention (hours, at least 1) | `KAFKA_BATCH_UPKEEP_RETENTION_HOURS`, else `168` |
| batches whose plans and commit records stay | `KAFKA_BATCH_UPKEEP_KEEP_BATCHES`, else `1000` |
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from kafka_batch_provider.core.upkeep import UpkeepSettings
from kafka_batch_provider.operators.dag_settings import env_int, env_number, ingest_output
from kafka_batch_provider.operators.upkeep import KafkaBatchUpkeepOperator

with DAG(
    dag_id="kafka_batch_upkeep",
    description="Compaction and cleanup of the Kafka ingestion's output; the offsets are kept",
    doc_md=__doc__,
    schedule=os.environ.get("KAFKA_BATCH_UPKEEP_SCHEDULE", "30 3 * * *"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=6),
    default_args={"owner": "data-platform", "retries": 1, "retry_delay": timedelta(minutes=10)},
    tags=["kafka", "ingestion", "upkeep"],
) as dag:
    KafkaBatchUpkeepOperator(
        task_id="upkeep",
        output=ingest_output(),
        target_file_mb=env_int("KAFKA_BATCH_UPKEEP_TARGET_FILE_MB", UpkeepSettings.target_file_mb),
        retention_hours=env_number("KAFKA_BATCH_UPKEEP_RETENTION_HOURS", UpkeepSettings.retention_hours),
        keep_batches=env_int("KAFKA_BATCH_UPKEEP_KEEP_BATCHES", UpkeepSettings.keep_batches),
    )
