"""A PostgreSQL output's speed against the database's own limit and our Parquet batch (issue 50).

On a PostgreSQL server of its own (Debian's binaries, ``dev/postgres.py``), in one run:

* ``db_copy_rps``: a bare binary ``COPY`` of the records from one process (psycopg 3, row by row);
* ``db_commit_rps``: our batch transaction (``PostgresSink.append``) of the same records, staged as
  the Spark tasks stage them (a Parquet file in the database): read back, COPY as CSV text, log entry;
* with ``--bootstrap`` and ``--topic``: the whole batch, ``kafka-batch run --format postgres``
  (``db_postgres_rps``) against ``--format parquet`` on the same topic and Spark
  (``db_parquet_rps``); ``db_over_parquet`` is their ratio (goal >= 0.6).

``python bench/database_output.py [--records N] [--bootstrap HOST:PORT --topic T --spark-master M]``
prints one JSON line; bench.py runs it as its ``db_*`` keys.
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


def pipeline_measures(url: str, bootstrap: str, topic: str, spark_master: str, work: Path) -> dict[str, Any]:
    """The whole batch into PostgreSQL against the Parquet layout, same topic, same Spark."""
    common = [shutil.which("kafka-batch") or str(Path(sys.executable).parent / "kafka-batch"), "run",
              "--bootstrap-servers", bootstrap, "--topic", topic, "--spark-master", spark_master]  # fmt: skip
    found: dict[str, Any] = {}
    for fmt, where, env in (
        ("parquet", ["--output", str(work / "lake")], {}),
        ("postgres", ["--format", "postgres", "--table", "public.events"], {"KAFKA_BATCH_DATABASE_URL": url}),
    ):
        started = time.perf_counter()
        done = subprocess.run([*common, "--group", f"bench-db-{fmt}", *where], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, **env}, check=True)  # fmt: skip
        seconds = time.perf_counter() - started
        result = json.loads(done.stdout.strip().splitlines()[-1])
        found[f"db_{fmt}_rps"] = round(result["records"] / seconds)
        say(f"  {fmt}: {result['records']:,} records in {seconds:.2f}s")
    found["db_over_parquet"] = round(found["db_postgres_rps"] / found["db_parquet_rps"], 3)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records of the commit measure")
    parser.add_argument("--value-size", type=int, default=200)
    parser.add_argument("--bootstrap", help="a broker with --topic: the whole batch's measure too")
    parser.add_argument("--topic")
    parser.add_argument("--spark-master", default="local[2]")
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
        print(json.dumps(found))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
