"""
### After each ingested batch (`kafka_batch_downstream`)

Scheduled on the ingest DAG's output asset, not on a clock: every batch the ingest DAG commits
is an asset event, and this DAG runs on it. `count_batch` reads exactly that batch back from
the output (its offset ranges from the event's extra, with the output's own reader: the Parquet
files of the batch, the Delta table at the batch's version, the Iceberg snapshot) and records
its rows per topic in the report table `batch_rows` of a SQLite file.

| setting | environment (read at parse time) |
| --- | --- |
| the output it follows (the ingest DAG's defaults) | `KAFKA_BATCH_FORMAT`, `KAFKA_BATCH_OUTPUT`, `KAFKA_BATCH_TABLE` |
| the Iceberg catalog's name in the asset | `KAFKA_BATCH_CATALOG_NAME`, else `kafka_batch` |
| the report's SQLite file | `KAFKA_BATCH_REPORT_DB`, else `/tmp/kafka-batch/batch_report.sqlite` |
| connections to read the output | `KAFKA_BATCH_STORAGE_CONN_ID`, `KAFKA_BATCH_CATALOG_CONN_ID` |

The schedule is fixed when the file is parsed: set the environment to the output the ingest DAG
writes (its Airflow Variables are read only when it runs).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from kafka_batch_provider.operators.batch_report import KafkaBatchReportOperator
from kafka_batch_provider.operators.dag_settings import ingest_output_asset

with DAG(
    dag_id="kafka_batch_downstream",
    description="Counts each ingested batch's rows by topic, scheduled on the ingest output's asset",
    doc_md=__doc__,
    schedule=[ingest_output_asset()],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    default_args={"owner": "data-platform", "retries": 2, "retry_delay": timedelta(seconds=30)},
    tags=["kafka", "assets", "downstream"],
) as dag:
    KafkaBatchReportOperator(
        task_id="count_batch",
        report_db=os.environ.get("KAFKA_BATCH_REPORT_DB", "/tmp/kafka-batch/batch_report.sqlite"),
        storage_conn_id=os.environ.get("KAFKA_BATCH_STORAGE_CONN_ID") or None,
        catalog_conn_id=os.environ.get("KAFKA_BATCH_CATALOG_CONN_ID") or None,
    )
