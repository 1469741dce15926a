"""`make demo`'s database step: the `kafka_batch_ingest` DAG into a PostgreSQL table (a plain
server process), each batch's rows and offsets in one database transaction; the consumer group
deleted, and the next run resumes from the table's own offset log; `SELECT count(*)` equal to
what was produced.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from kafka_batch_provider.dev.postgres import PostgresServer
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records

PASSWORD = "demo-warehouse-password"
TABLE = "public.clicks"
#: Events produced before each run (the group is deleted before the second).
BURSTS = (3_000, 1_000)


@contextmanager
def environment(**values: str):
    """``os.environ`` with ``values`` for the block (the Airflow commands it runs inherit it)."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def database_demo(config: dict, work: Path, airflow: Callable[..., None], say: Callable[[str], None]) -> dict[str, Any]:
    import psycopg

    folder = work / "database"
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)  # the postgres OS user runs the server (as root)
    suffix = time.strftime("%H%M%S")
    topic, group = f"demo.clicks.{suffix}", f"demo-warehouse-{suffix}"
    create_topics(config, {topic: 2})
    with PostgresServer(folder=folder / "postgres") as postgres:
        postgres.create_database("warehouse", owner="ingest", password=PASSWORD)
        say(f"database: PostgreSQL on 127.0.0.1:{postgres.port}, database warehouse; the ingest DAG into {TABLE}")
        connection = {"conn_type": "postgres", "host": "127.0.0.1", "port": postgres.port, "login": "ingest",
                      "password": PASSWORD, "schema": "warehouse"}  # fmt: skip
        settings = {
            "AIRFLOW_CONN_DEMO_WAREHOUSE": json.dumps(connection),
            "KAFKA_BATCH_DATABASE_CONN_ID": "demo_warehouse",
            "AIRFLOW_VAR_KAFKA_BATCH_FORMAT": "postgres",
            "AIRFLOW_VAR_KAFKA_BATCH_TABLE": TABLE,
            "AIRFLOW_VAR_KAFKA_BATCH_TOPICS": topic,
            "AIRFLOW_VAR_KAFKA_BATCH_GROUP": group,
        }
        produced, runs = 0, []
        admin = AdminClient(config)  # (kept: a client collected before its future completes leaves it waiting)
        with environment(**settings):
            for run, count in enumerate(BURSTS, start=1):
                if run > 1:
                    admin.delete_consumer_groups([group], request_timeout=30)[group].result(timeout=60)
                    say(f"database: deleted consumer group {group}")
                produce(config, topic, sample_records(2, count, first_id=produced))
                produced += count
                say(f"database run {run}: {count:,} events produced; airflow dags test kafka_batch_ingest ...")
                airflow("dags", "test", "kafka_batch_ingest", log_name=f"airflow-database-run{run}")
                runs.append(work / f"airflow-database-run{run}.log")
        with psycopg.connect(host="127.0.0.1", port=postgres.port, dbname="warehouse", user="ingest",
                             password=PASSWORD) as conn:  # fmt: skip
            [(rows, distinct)] = conn.execute(
                f'SELECT count(*), count(DISTINCT ("partition", "offset")) FROM {TABLE}'
            ).fetchall()
            batches = conn.execute("SELECT seq, entry->>'rows' FROM public.kafka_batch_log ORDER BY seq").fetchall()
    resumed = "resuming from the output's log" in runs[-1].read_text()
    shown = any(PASSWORD in path.read_text() for path in runs)
    return {
        "table": TABLE,
        "produced": produced,
        "rows": rows,
        "once": rows == distinct,
        "batches": [int(n) for _, n in batches],
        "resumed": resumed,
        "password_shown": shown,
    }
