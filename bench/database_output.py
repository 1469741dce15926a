"""The database outputs' speed against the database's own limit, our Parquet batch and what users
would otherwise pick (issue 50).

On a PostgreSQL server of its own (Debian's binaries, ``dev/postgres.py``), in one run:

* ``db_copy_rps``: a bare binary ``COPY`` of the records from one process (psycopg 3, row by row);
* ``db_commit_rps``: our batch transaction (``PostgresSink.append``) of the same records, staged as
  the Spark tasks stage them (a Parquet file in the database): read back, COPY as CSV text, log entry;
* with ``--bootstrap`` and ``--topic``, on that topic and the same Spark:

  - the whole batch, ``kafka-batch run --format postgres`` (``db_postgres_rps``) against
    ``--format parquet`` (``db_parquet_rps``); ``db_over_parquet`` is their ratio (goal >= 0.6);
  - Spark's own Kafka source and JDBC writer into the same server (``db_spark_jdbc_rps``,
    spark-submit from its start, as ours; not exactly once: goal ours >= 1.0x it);
  - ``kafka-batch run --format mysql`` into a MariaDB server of its own (``db_mariadb_rps``);

* with ``--bootstrap`` and ``--keyed-records N``: a topic of N keyed Kafka Connect JSON records (with
  schemas, ~200 bytes of payload), merged by ``kafka-batch run --mode upsert`` (``db_upsert_rps``)
  against Debezium's JDBC sink connector 3.5.0.Final in upsert mode, two tasks, on this project's
  Kafka Connect runtime (``db_debezium_jdbc_rps``: from the worker's JVM start, as ours is from
  spark-submit's, to the last row; ``db_debezium_jdbc_warm_rps`` from the connector's creation, the
  worker already up; goal ours >= 10x it); the same batch through a warm Spark Connect server
  (``db_upsert_connect_rps``, over Debezium's warm figure: ``db_upsert_connect_over_debezium_warm``);
  beside them the database's own upsert limit here
  (``db_upsert_limit_rps``: the same rows' three columns bare-COPYed from one process into a staging
  table and merged by one ``INSERT ... ON CONFLICT``, no Kafka, no decoding).

``python bench/database_output.py [--records N] [--bootstrap HOST:PORT --topic T --spark-master M]
[--keyed-records N]`` prints one JSON line; bench.py runs it as its ``db_*`` keys.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_batch_provider.dev.kafka import tools_dir
from kafka_batch_provider.dev.mariadb import MariadbServer
from kafka_batch_provider.dev.postgres import PostgresServer
from kafka_batch_provider.output.formats import OutputSpec, open_store
from kafka_batch_provider.output.tables import KAFKA_SCHEMA

PASSWORD = "bench"
KAFKA_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
BINARY_TYPES = ["bytea", "bytea", "text", "int4", "int8", "timestamptz", "int4"]


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def records(n: int, value_size: int) -> pa.Table:
    return pa.table(
        {
            "key": [b"user-%d" % (i % 97) for i in range(n)],
            "value": [os.urandom(value_size) for _ in range(n)],
            "topic": ["t"] * n,
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
            "timestampType": pa.array([0] * n, pa.int32()),
            "headers": pa.array([[]] * n, KAFKA_SCHEMA.field("headers").type),
        },
        schema=KAFKA_SCHEMA,
    )


def commit_measures(url: str, n: int, value_size: int) -> dict[str, Any]:
    import psycopg

    rows = records(n, value_size)
    store = open_store(OutputSpec(format="postgres", table="public.bench", database_url=url))
    folder = store.sink.staging_folder("b-1")
    buffer = io.BytesIO()
    pq.write_table(rows, buffer)
    store.data.put_atomic(f"{folder}/part-0.parquet", buffer.getvalue())
    manifest = {"seq": 1, "batch_id": "b-1", "location": folder, "rows": n, "offsets": {"t:0": n},
                "files": [{"name": "part-0.parquet", "bytes": len(buffer.getvalue()), "rows": n}]}  # fmt: skip
    started = time.perf_counter()
    assert store.log.append(manifest), "the batch lost its entry"
    ours = time.perf_counter() - started
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE bare (LIKE public.bench)")
        columns = ", ".join(f'"{c}"' for c in KAFKA_COLUMNS)
        started = time.perf_counter()
        with conn.cursor().copy(f"COPY bare ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(BINARY_TYPES)
            for row in zip(*(rows.column(c).to_pylist() for c in KAFKA_COLUMNS)):
                copy.write_row(row)
        bare = time.perf_counter() - started
    say(f"  commit transaction {n / ours:,.0f} rows/s; bare binary COPY {n / bare:,.0f} rows/s")
    return {
        "db_commit_rps": round(n / ours),
        "db_copy_rps": round(n / bare),
        "db_commit_over_copy": round(bare / ours, 3),
    }


def kafka_batch_run(bootstrap: str, topic: str, spark_master: str, group: str, *more: str, url: str = "") -> float:
    """``kafka-batch run`` of the whole topic: its records a second, from the command's start."""
    command = [shutil.which("kafka-batch") or str(Path(sys.executable).parent / "kafka-batch"), "run",
               "--bootstrap-servers", bootstrap, "--topic", topic, "--group", group,
               *(["--spark-master", spark_master] if spark_master else []), *more]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True,
                          env={**os.environ, **({"KAFKA_BATCH_DATABASE_URL": url} if url else {})})  # fmt: skip
    seconds = time.perf_counter() - started
    records = json.loads(done.stdout.strip().splitlines()[-1])["records"]
    say(f"  kafka-batch run {' '.join(more)}: {records:,} records in {seconds:.2f}s")
    return records / seconds


def pipeline_measures(url: str, bootstrap: str, topic: str, spark_master: str, work: Path) -> dict[str, Any]:
    """The whole batch into PostgreSQL against the Parquet layout and Spark's JDBC writer, same topic,
    same Spark; into MariaDB."""
    found = {
        "db_parquet_rps": round(kafka_batch_run(bootstrap, topic, spark_master, "bench-db-parquet",
                                                "--output", str(work / "lake"))),
        "db_postgres_rps": round(kafka_batch_run(bootstrap, topic, spark_master, "bench-db-postgres", "--format",
                                                 "postgres", "--table", "public.events", url=url)),
    }  # fmt: skip
    found["db_over_parquet"] = round(found["db_postgres_rps"] / found["db_parquet_rps"], 3)
    found["db_spark_jdbc_rps"] = round(spark_jdbc_rps(url, bootstrap, topic, spark_master))
    found["db_over_spark_jdbc"] = round(found["db_postgres_rps"] / found["db_spark_jdbc_rps"], 3)
    server = MariadbServer(folder=work / "mariadb").start()
    try:
        server.create_database("bench", owner="bench", password=PASSWORD)
        maria = f"mysql://bench:{PASSWORD}@127.0.0.1:{server.port}/bench"
        found["db_mariadb_rps"] = round(kafka_batch_run(bootstrap, topic, spark_master, "bench-db-mysql", "--format",
                                                        "mysql", "--table", "bench.events", url=maria))  # fmt: skip
    finally:
        server.stop()
    return found


def spark_jdbc_rps(url: str, bootstrap: str, topic: str, spark_master: str) -> float:
    """Spark's Kafka source and JDBC writer (bench/spark_jdbc_writer.py) into ``public.spark_jdbc``,
    spark-submit from its start; rows a second."""
    import psycopg

    drivers = sorted((tools_dir() / "jdbc-drivers" / "jars").glob("postgresql-*.jar"))
    if not drivers:
        raise SystemExit("the PostgreSQL JDBC driver is missing: make bench-tools")
    jars = [*sorted((tools_dir() / "spark-kafka" / "jars").glob("*.jar")), *drivers]
    parts = psycopg.conninfo.conninfo_to_dict(url)
    jdbc = f"jdbc:postgresql://{parts['host']}:{parts['port']}/{parts['dbname']}"
    script = Path(__file__).resolve().parent / "spark_jdbc_writer.py"
    from kafka_batch_provider.spark.jvm_start import spark_home

    submit = str(spark_home() / "bin" / "spark-submit")
    started = time.perf_counter()
    subprocess.run(
        [submit, "--master", spark_master, "--jars", ",".join(map(str, jars)), str(script), bootstrap, topic, jdbc,
         "public.spark_jdbc"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "SPARK_HOME": str(spark_home()), "PYSPARK_PYTHON": sys.executable,
             "BENCH_JDBC_USER": parts["user"], "BENCH_JDBC_PASSWORD": parts["password"]},
    )  # fmt: skip
    seconds = time.perf_counter() - started
    with psycopg.connect(url) as conn:
        [(rows,)] = conn.execute("SELECT count(*) FROM public.spark_jdbc").fetchall()
    say(f"  Spark's JDBC writer: {rows:,} rows in {seconds:.2f}s")
    return rows / seconds


def keyed_topic(bootstrap: str, records: int, partitions: int = 2) -> str:
    """A new topic of ``records`` keyed Kafka Connect JSON records with schemas (keys 0..records-1)."""
    from kafka_batch_provider.testing.producers import Record, create_topics, produce

    topic = f"bench-keyed-{records}-{int(time.time())}"
    create_topics({"bootstrap.servers": bootstrap}, {topic: partitions})
    key_schema = {"type": "struct", "name": "bench.Key", "optional": False,
                  "fields": [{"field": "id", "type": "int64", "optional": False}]}  # fmt: skip
    value_schema = {"type": "struct", "name": "bench.Value", "optional": False, "fields": [
        {"field": "id", "type": "int64", "optional": False}, {"field": "name", "type": "string", "optional": True},
        {"field": "amount", "type": "double", "optional": True}]}  # fmt: skip

    def record(i: int) -> Record:
        # (compact, as Kafka Connect's JsonConverter writes them)
        key = json.dumps({"schema": key_schema, "payload": {"id": i}}, separators=(",", ":"))
        value = json.dumps({"schema": value_schema, "payload": {"id": i, "name": "n" * 160, "amount": i / 4}},
                           separators=(",", ":"))  # fmt: skip
        return Record(partition=i % partitions, key=key.encode(), value=value.encode())

    produce({"bootstrap.servers": bootstrap}, topic, (record(i) for i in range(records)))
    say(f"  produced {records:,} keyed Connect JSON records to {topic}")
    return topic


def upsert_limit_rps(url: str, records: int) -> float:
    """The database's own upsert speed here: the keyed topic's rows (id, name, amount), built in
    Python beforehand, binary-COPYed into a staging table and merged into an empty keyed table by one
    ``INSERT ... ON CONFLICT DO UPDATE``, one transaction; rows a second."""
    import psycopg

    rows = [(i, "n" * 160, i / 4) for i in range(records)]
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE upsert_limit (id int8 PRIMARY KEY, name text, amount float8)")
        conn.commit()
        started = time.perf_counter()
        conn.execute("CREATE TEMP TABLE staged (id int8, name text, amount float8) ON COMMIT DROP")
        with conn.cursor().copy("COPY staged FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "text", "float8"])
            for row in rows:
                copy.write_row(row)
        conn.execute("INSERT INTO upsert_limit SELECT * FROM staged ON CONFLICT (id) DO UPDATE "
                     "SET name = EXCLUDED.name, amount = EXCLUDED.amount")  # fmt: skip
        conn.commit()
        seconds = time.perf_counter() - started
    say(f"  the database's own upsert (COPY + ON CONFLICT): {records:,} rows in {seconds:.2f}s")
    return records / seconds


def upsert_connect_rps(bootstrap: str, topic: str, spark_master: str, url: str, work: Path) -> dict:
    """The same upsert batch through a warm Spark Connect server (its first batch, of another small
    keyed topic, beforehand): the pair of Debezium's sink on a worker already up."""
    from kafka_batch_provider.dev.spark_connect import SparkConnectServer

    warm = keyed_topic(bootstrap, 1_000)
    with SparkConnectServer(master=spark_master, log_path=work / "connect.log") as server:
        remote = ("--spark-remote", server.remote)
        upsert = ("--format", "postgres", "--mode", "upsert", *remote)
        kafka_batch_run(bootstrap, warm, "", "bench-db-upsert-warm", *upsert, "--table", "public.warm", url=url)
        rate = kafka_batch_run(bootstrap, topic, "", "bench-db-upsert-connect", *upsert, "--table",
                               "public.upserts_connect", url=url)  # fmt: skip
    return {"db_upsert_connect_rps": round(rate)}


def upsert_measures(url: str, port: int, bootstrap: str, records: int, spark_master: str, work: Path) -> dict:
    """``--mode upsert`` against Debezium's JDBC sink connector (upsert), the same keyed topic."""
    import psycopg

    from kafka_batch_provider.dev.kafka_connect import ConnectWorker

    topic = keyed_topic(bootstrap, records)
    found = {"db_upsert_rps": round(kafka_batch_run(bootstrap, topic, spark_master, "bench-db-upsert", "--format",
                                                    "postgres", "--table", "public.upserts", "--mode", "upsert",
                                                    url=url))}  # fmt: skip
    found.update(upsert_connect_rps(bootstrap, topic, spark_master, url, work))
    plugin = tools_dir() / "debezium-jdbc"
    if not any((plugin / "jars").glob("debezium-connector-jdbc-*.jar")):
        raise SystemExit("Debezium's JDBC sink connector is missing: make bench-tools")
    jvm_started = time.perf_counter()
    with ConnectWorker(folder=work / "connect", bootstrap_servers=bootstrap, more_plugins=(plugin,)) as worker:
        config = {
            "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector", "tasks.max": "2", "topics": topic,
            "connection.url": f"jdbc:postgresql://127.0.0.1:{port}/bench", "connection.username": "bench",
            "connection.password": PASSWORD, "insert.mode": "upsert", "primary.key.mode": "record_key",
            "primary.key.fields": "id", "schema.evolution": "basic", "collection.name.format": "dbz_upserts",
            "batch.size": "5000",
        }  # fmt: skip
        started = time.perf_counter()
        worker.add_connector("bench-jdbc-sink", config)
        deadline = started + max(600.0, records / 1000)
        rows = 0
        with psycopg.connect(url, autocommit=True) as conn:
            while rows < records:
                if time.perf_counter() > deadline:
                    raise SystemExit(f"Debezium's JDBC sink wrote {rows:,} of {records:,} rows before the deadline")
                time.sleep(0.25)
                if conn.execute("SELECT to_regclass('public.dbz_upserts')").fetchone()[0] is not None:
                    rows = conn.execute("SELECT count(*) FROM public.dbz_upserts").fetchone()[0]
        seconds, from_jvm = time.perf_counter() - started, time.perf_counter() - jvm_started
    say(f"  Debezium's JDBC sink: {rows:,} rows in {seconds:.2f}s from the connector's creation, {from_jvm:.2f}s from "
        "the worker's JVM start")  # fmt: skip
    found["db_debezium_jdbc_rps"] = round(rows / from_jvm)  # (from its JVM start, as ours from spark-submit's)
    found["db_debezium_jdbc_warm_rps"] = round(rows / seconds)
    found["db_upsert_over_debezium_jdbc"] = round(found["db_upsert_rps"] / found["db_debezium_jdbc_rps"], 2)
    found["db_upsert_connect_over_debezium_warm"] = round(
        found["db_upsert_connect_rps"] / found["db_debezium_jdbc_warm_rps"], 2
    )
    found["db_upsert_limit_rps"] = round(upsert_limit_rps(url, records))
    found["db_upsert_over_limit"] = round(found["db_upsert_rps"] / found["db_upsert_limit_rps"], 3)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records of the commit measure")
    parser.add_argument("--value-size", type=int, default=200)
    parser.add_argument("--bootstrap", help="a broker with --topic: the whole batch's measure too")
    parser.add_argument("--topic")
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--keyed-records", type=int, default=0, help="the upsert case's records (0: skip)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-db-"))
    os.chmod(work, 0o755)  # (the postgres user must reach its folder)
    server = PostgresServer(folder=work / "postgres").start()
    try:
        server.create_database("bench", owner="bench", password=PASSWORD)
        url = f"postgresql://bench:{PASSWORD}@127.0.0.1:{server.port}/bench"
        say(f"database output: {args.records:,} records of {args.value_size} bytes into PostgreSQL ...")
        found = commit_measures(url, args.records, args.value_size)
        if args.bootstrap and args.topic:
            found.update(pipeline_measures(url, args.bootstrap, args.topic, args.spark_master, work))
        if args.bootstrap and args.keyed_records:
            found.update(upsert_measures(url, server.port, args.bootstrap, args.keyed_records, args.spark_master, work))
        print(json.dumps(found))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
