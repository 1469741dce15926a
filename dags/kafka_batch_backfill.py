"""
### Kafka replay / backfill (`kafka_batch_backfill`)

Triggered by hand ("Trigger DAG" in the UI): reads a chosen range of one topic again and
writes it as one batch to the chosen output. **It never commits the consumer group.**

Choose the range **either** by offsets (`start_offsets` / `end_offsets`, objects of
`"partition": offset`; the partitions named there are replayed unless `partitions` says
otherwise, and a chosen partition without a start or end offset starts at the log start or
ends at the log end)
**or** by time (`start_time` / `end_time`, ISO 8601, end exclusive, not in the future)
**or** tick `whole_topic` to replay every offset of the chosen partitions. A run with none of
these is refused: it would otherwise read the whole topic by accident. `dry_run` only plans:
the ranges appear in the log and XCom and nothing is read or written.

The *Output* section chooses the format: `parquet` (a folder) or `delta` (a table location)
in `output_path`, or a table in `table`: `iceberg` (`NAMESPACE.NAME`, in the catalog of the
connection `KAFKA_BATCH_CATALOG_CONN_ID`), `postgres` (`SCHEMA.NAME`) or `mysql` (`DB.NAME`), both
in the database of the connection `KAFKA_BATCH_DATABASE_CONN_ID`; `output_path` is used for the
formats named by a path only, `table` for the tables only.

Values are read as the ingest DAG reads them (`KAFKA_BATCH_VALUE_FORMAT` and, for `avro`, the
`schema_registry` connection `KAFKA_BATCH_SCHEMA_REGISTRY_CONN_ID`, `KAFKA_BATCH_VALUE_SUBJECT`,
`KAFKA_BATCH_VALUE_SCHEMA_VERSION`, `KAFKA_BATCH_KEEP_RAW_VALUE`).

Replaying the same range again replaces its batch (same deterministic batch id), never adds.
Semantic errors (no range, end before start, an end time in the future, unknown topic,
offsets beyond the end) fail the first task with one line, without retries.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from kafka_batch_provider.operators.assets import batch_alias
from kafka_batch_provider.operators.dag_settings import (
    PLAN_VALUE_SETTINGS,
    WRITE_VALUE_SETTINGS,
    required_output,
    value_settings,
)
from kafka_batch_provider.operators.output import BatchOutput
from kafka_batch_provider.operators.plan import KafkaReplayPlanOperator
from kafka_batch_provider.operators.spark import KafkaSparkBatchOperator
from kafka_batch_provider.operators.spark_connect import KafkaSparkConnectBatchOperator
from kafka_batch_provider.output.kinds import kinds, named_by_table

BY_TABLE = list(named_by_table())
OUTPUT = BatchOutput(
    output_format="{{ params.output_format }}",
    # Each format reads its own field, so the other one's default does not get in the way.
    output_path=f"{{{{ params.output_path if params.output_format not in {BY_TABLE} else None }}}}",
    table=f"{{{{ params.table if params.output_format in {BY_TABLE} else None }}}}",
    storage_conn_id=os.environ.get("KAFKA_BATCH_STORAGE_CONN_ID") or None,
    catalog_conn_id=os.environ.get("KAFKA_BATCH_CATALOG_CONN_ID") or None,
    database_conn_id=os.environ.get("KAFKA_BATCH_DATABASE_CONN_ID") or None,
)

VALUES = value_settings()
# The replay output's default: the ingest DAG's output with "_replay" (the form may name another).
OUTPUT_FORMAT, OUTPUT_PATH, TABLE = required_output()

OFFSETS = {
    "type": ["null", "object"],
    "propertyNames": {"pattern": "^[0-9]+$"},
    "additionalProperties": {"type": "integer", "minimum": 0},
}

with DAG(
    dag_id="kafka_batch_backfill",
    description="Replay a Kafka offset or time range into the lake (never commits the group)",
    doc_md=__doc__,
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,  # params reach the operators as objects, not strings
    default_args={"owner": "data-platform", "retries": 1, "retry_delay": timedelta(minutes=1)},
    tags=["kafka", "spark", "backfill"],
    params={
        "topic": Param(
            os.environ.get("KAFKA_BATCH_TOPICS", "orders").split(",")[0],
            type="string",
            minLength=1,
            title="Topic",
            section="Source",
        ),
        "partitions": Param(
            None,
            type=["null", "array"],
            items={"type": "integer", "minimum": 0},
            title="Partitions (empty: all)",
            section="Source",
        ),
        "start_offsets": Param(None, **OFFSETS, title='Start offsets, e.g. {"0": 100}', section="Range by offsets"),
        "end_offsets": Param(
            None, **OFFSETS, title='End offsets (exclusive), e.g. {"0": 200}', section="Range by offsets"
        ),
        "start_time": Param(
            None, type=["null", "string"], format="date-time", title="Start time", section="Range by time"
        ),
        "end_time": Param(
            None, type=["null", "string"], format="date-time", title="End time (exclusive)", section="Range by time"
        ),
        "whole_topic": Param(
            False,
            type="boolean",
            title="Whole topic: replay every offset of the chosen partitions (no range given)",
            section="Whole topic",
        ),
        "output_path": Param(
            # (none when the deployment's output is a table: "" would fail the form's own check)
            f"{OUTPUT_PATH}_replay" if OUTPUT_PATH else None,
            type=["null", "string"],
            minLength=1,
            title="Output (local path or URI, e.g. s3://bucket/replays)",
            section="Output",
        ),
        "output_format": Param(
            OUTPUT_FORMAT,
            type="string",
            enum=list(kinds()),
            title="Output format (parquet: a folder; delta: a table location; iceberg, postgres, mysql: a table)",
            section="Output",
        ),
        "table": Param(
            f"{TABLE}_replay" if TABLE else None,
            type=["null", "string"],
            pattern=r"^[^.\s]+(\.[^.\s]+)+$",
            title="Table: NAMESPACE.NAME (iceberg), SCHEMA.NAME (postgres), DB.NAME (mysql)",
            section="Output",
        ),
        "dry_run": Param(False, type="boolean", title="Dry run (plan only)", section="Output"),
    },
) as dag:
    plan = KafkaReplayPlanOperator(
        task_id="plan_replay",
        # tojson: native rendering would turn a topic named 2024 (or 1e3) into a number.
        topics="{{ params.topic | tojson }}",
        partitions="{{ params.partitions }}",
        start_offsets="{{ params.start_offsets }}",
        end_offsets="{{ params.end_offsets }}",
        start_time="{{ params.start_time }}",
        end_time="{{ params.end_time }}",
        whole_topic="{{ params.whole_topic }}",
        output=OUTPUT,
        dry_run="{{ params.dry_run }}",
        kafka_config_id=os.environ.get("KAFKA_BATCH_KAFKA_CONN_ID", "kafka_default"),
        **{name: VALUES[name] for name in PLAN_VALUE_SETTINGS},
    )
    spark_step = {
        "task_id": "spark_write",
        "plan_task_id": "plan_replay",
        "kafka_config_id": os.environ.get("KAFKA_BATCH_KAFKA_CONN_ID", "kafka_default"),
        "output": OUTPUT,
        # A replay commits no group: this task announces it, on the replay output's asset.
        "outlets": [batch_alias("replay")],
        **{name: VALUES[name] for name in WRITE_VALUE_SETTINGS},
    }
    if os.environ.get("KAFKA_BATCH_SPARK_CONNECT_CONN_ID"):
        # A Spark Connect server instead of spark-submit: no JVM start per run.
        write = KafkaSparkConnectBatchOperator(conn_id=os.environ["KAFKA_BATCH_SPARK_CONNECT_CONN_ID"], **spark_step)
    else:
        write = KafkaSparkBatchOperator(
            conn_id=os.environ.get("KAFKA_BATCH_SPARK_CONN_ID", "spark_default"),
            conf={"spark.log.level": "WARN"},
            **spark_step,
        )
    plan >> write
