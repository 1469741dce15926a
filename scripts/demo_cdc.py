"""`make demo`'s change-data-capture step: a PostgreSQL table, changed three times, captured by
Debezium (Kafka Connect) into Apache Kafka, merged by `kafka-batch run --mode changes
--change-format debezium` into a Delta table, which DuckDB reads back equal to
`SELECT * FROM` the source table after each round.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from decimal import Decimal
from pathlib import Path
from typing import Any

from kafka_batch_provider.dev.kafka_connect import ConnectWorker, debezium_postgres_config, wait_for_records
from kafka_batch_provider.dev.postgres import PostgresServer

PASSWORD = "demo-cdc-password"
TABLE = """CREATE TABLE accounts (
    id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2) NOT NULL, opened timestamptz NOT NULL)"""
#: Each round: what is done to the source, and how many change events Debezium writes for it
#: (a delete is followed by a tombstone; a key change is a delete, its tombstone and a create).
ROUNDS: list[tuple[str, list[str], int]] = [
    (
        "1,000 rows (Debezium's snapshot)",
        ["INSERT INTO accounts SELECT n, 'owner ' || n, n * 1.25, "
         "'2026-01-01 00:00+00'::timestamptz + n * interval '1 hour' FROM generate_series(1, 1000) n"],
        1000,
    ),
    (
        "200 updates, 50 deletes, 100 inserts",
        ["UPDATE accounts SET balance = balance + 0.01 WHERE id % 5 = 0",
         "DELETE FROM accounts WHERE id % 20 = 1",
         "INSERT INTO accounts SELECT n, 'new ' || n, 0.00, now() FROM generate_series(1001, 1100) n"],
        200 + 2 * 50 + 100,
    ),
    (
        "a column added, 10 rows given a tier, one key changed",
        ["ALTER TABLE accounts ADD COLUMN tier text",
         "UPDATE accounts SET tier = 'gold' WHERE id BETWEEN 2 AND 11",
         "UPDATE accounts SET id = 5000 WHERE id = 12"],
        10 + 3,
    ),
]  # fmt: skip


def normal(value: Any) -> Any:
    """One spelling for both readers (DuckDB and psycopg) of a value."""
    if isinstance(value, Decimal):
        return str(value)
    if hasattr(value, "isoformat") and getattr(value, "tzinfo", None) is not None:
        return value.timestamp()
    return value


def cdc_demo(
    config: dict,
    spark_remote: str | None,
    work: Path,
    kafka_batch: Callable[..., tuple[list[str], dict]],
    duckdb_connection: Callable[[], Any],
    say: Callable[[str], None],
) -> dict:
    bootstrap = config["bootstrap.servers"]
    folder = work / "cdc"
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)  # the postgres OS user runs the server (as root)
    with ExitStack() as stack:
        started = time.perf_counter()
        postgres = stack.enter_context(PostgresServer(folder=folder / "postgres"))
        connect = stack.enter_context(ConnectWorker(folder=folder / "connect", bootstrap_servers=bootstrap))
        say(
            f"cdc: PostgreSQL on 127.0.0.1:{postgres.port} and Kafka Connect with Debezium on {connect.url} "
            f"({time.perf_counter() - started:.1f}s)"
        )
        postgres.create_database("shop", owner="shop", password=PASSWORD)
        database = {"host": "127.0.0.1", "port": postgres.port, "dbname": "shop", "user": "shop", "password": PASSWORD}
        return run_rounds(database, postgres, connect, config, spark_remote, work, kafka_batch, duckdb_connection, say)


def run_rounds(database, postgres, connect, config, spark_remote, work, kafka_batch, duckdb_connection, say) -> dict:
    import psycopg

    suffix = time.strftime("%H%M%S")
    prefix, path = f"shop{suffix}", work / "delta" / "accounts"
    topic = f"{prefix}.public.accounts"
    with psycopg.connect(**database, autocommit=True) as conn:
        conn.execute(TABLE)
    args = [
        "run", "--bootstrap-servers", config["bootstrap.servers"], "--topic", topic, "--group", f"demo-cdc-{suffix}",
        "--format", "delta", "--output", str(path), "--mode", "changes", "--change-format", "debezium",
        *(["--spark-remote", spark_remote] if spark_remote else []),
    ]  # fmt: skip
    rounds, events = [], 0
    for number, (what, statements, count) in enumerate(ROUNDS, start=1):
        with psycopg.connect(**database, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)
        if number == 1:  # the connector starts after the first rows: they come as its snapshot
            config_ = debezium_postgres_config(
                port=postgres.port, user="shop", password=PASSWORD, dbname="shop", topic_prefix=prefix,
                tables=["public.accounts"], slot=prefix,
            )  # fmt: skip
            connect.add_connector(prefix, config_)
        events += count
        wait_for_records(config, topic, events)
        _, run = kafka_batch(*args, log_name=f"kafka-batch-cdc-run{number}")
        with psycopg.connect(**database) as conn:
            cursor = conn.execute("SELECT * FROM accounts")
            columns = [d.name for d in cursor.description]
            source = sorted(tuple(normal(v) for v in row) for row in cursor.fetchall())
        con = duckdb_connection()
        scan = f"delta_scan('{path.as_uri()}')"
        lake = sorted(
            tuple(normal(v) for v in row) for row in con.execute(f"SELECT {', '.join(columns)} FROM {scan}").fetchall()
        )
        merged = run.get("merged", {})
        rounds.append(
            {
                "what": what,
                "events": count,
                "upserts": merged.get("upserts"),
                "deletes": merged.get("deletes"),
                "source_rows": len(source),
                "lake_rows": len(lake),
                "equal": lake == source,
            }  # fmt: skip
        )
        mark = "equal" if lake == source else "DIFFERENT"
        say(
            f"cdc round {number}: {what}: {count} change events -> one MERGE commit ({merged.get('upserts')} upserts, "
            f"{merged.get('deletes')} deletes); DuckDB reads the Delta table {mark} to SELECT * FROM accounts "
            f"({len(lake):,} rows, columns {', '.join(columns)})"
        )
    return {"path": path, "rounds": rounds}


if __name__ == "__main__":  # pragma: no cover - run through scripts/demo.py
    sys.exit("run `make demo`")
