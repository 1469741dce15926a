"""A Kafka topic into a PostgreSQL table (``--format postgres``, issue 50), exactly once: each
batch's rows and its offsets in one database transaction, on a real PostgreSQL and a real broker,
through the command line as a user runs it."""

from __future__ import annotations

import io
import json
import os
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafka_batch_provider.output.formats import OutputSpec, open_store
from kafka_batch_provider.output.tables import KAFKA_SCHEMA
from kafka_batch_provider.testing.producers import produce, sample_records
from tests.integration.helpers import group_offsets
from tests.integration.test_cli import assert_one_line_error, cli, last_json
from tests.integration.test_output_log import delete_group
from tests.support.databases import PASSWORD

pytestmark = pytest.mark.xdist_group("postgres")


def run(db, topic: str, group: str, *more: str, env: dict | None = None):
    return cli(
        "run", "--bootstrap-servers", os.environ.get("KAFKA_BATCH_TEST_BOOTSTRAP", ""), "--topic", topic,
        "--group", group, "--format", "postgres", "--table", "public.orders", *more,
        env={"KAFKA_BATCH_DATABASE_URL": db.url, **(env or {})},
    )  # fmt: skip


def table_offsets(db) -> list[tuple[int, int]]:
    with db.connect() as conn:
        return conn.execute('SELECT "partition", "offset" FROM public.orders ORDER BY 1, 2').fetchall()


def test_a_topic_lands_in_a_postgres_table_exactly_once_and_resumes_from_the_tables_offsets(
    postgres_database, kafka_config, kafka_bootstrap_servers, new_topic, group_id, monkeypatch
):
    monkeypatch.setenv("KAFKA_BATCH_TEST_BOOTSTRAP", kafka_bootstrap_servers)
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 40))
    first = run(postgres_database, topic, group_id)
    result = last_json(first)
    assert result["records"] == 40, result
    assert PASSWORD not in first.stdout + first.stderr, "the database's password was shown"
    expected = [(p, o) for p in range(2) for o in range(20)]
    assert table_offsets(postgres_database) == expected, "expected each record once"
    with postgres_database.connect() as conn:
        log = conn.execute("SELECT seq, entry->'offsets' FROM public.kafka_batch_log ORDER BY seq").fetchall()
        staged = conn.execute("SELECT count(*) FROM public.kafka_batch_files WHERE path LIKE '%/data/%'").fetchone()
        columns = conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'orders' "
            "ORDER BY ordinal_position"
        ).fetchall()
    assert log == [(1, {f"{topic}:0": 20, f"{topic}:1": 20})], f"expected one log entry with the offsets: {log}"
    assert staged == (0,), f"the staged files are the table's rows now: {staged[0]} left"
    assert dict(columns) == {
        "key": "bytea", "value": "bytea", "topic": "text", "partition": "integer", "offset": "bigint",
        "timestamp": "timestamp with time zone", "timestampType": "integer", "headers": "jsonb",
    }, columns  # fmt: skip
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 20, 1: 20}

    # The group deleted (expired, moved): the next run goes on from the table's offsets.
    delete_group(kafka_config, group_id)
    produce(kafka_config, topic, sample_records(2, 10, first_id=40))
    again = last_json(run(postgres_database, topic, group_id))
    assert again["records"] == 10, again
    assert table_offsets(postgres_database) == [(p, o) for p in range(2) for o in range(25)]
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 25, 1: 25}


def test_a_postgres_output_without_its_url_or_with_a_wrong_password_is_one_line(
    postgres_database, kafka_bootstrap_servers, new_topic, group_id, monkeypatch, kafka_config
):
    monkeypatch.setenv("KAFKA_BATCH_TEST_BOOTSTRAP", kafka_bootstrap_servers)
    monkeypatch.delenv("KAFKA_BATCH_DATABASE_URL", raising=False)
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 3))
    missing = cli(
        "run", "--bootstrap-servers", kafka_bootstrap_servers, "--topic", topic, "--group", group_id,
        "--format", "postgres", "--table", "public.orders",
    )  # fmt: skip
    assert_one_line_error(missing, "needs the database's URL")
    wrong = postgres_database.url.replace(PASSWORD, "wrong-password")
    refused = run(postgres_database, topic, group_id, env={"KAFKA_BATCH_DATABASE_URL": wrong})
    assert_one_line_error(refused, "password authentication failed")
    assert "wrong-password" not in refused.stderr + refused.stdout
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: None}, "a refused run moved the group"


def staged_manifest(store, seq: int, batch_id: str, offsets: range) -> dict:
    """A batch staged as the Spark tasks stage it (one Parquet file) and its log entry."""
    rows = pa.table(
        {
            "key": [b"k"] * len(offsets), "value": [b"v%d" % o for o in offsets], "topic": ["t"] * len(offsets),
            "partition": pa.array([0] * len(offsets), pa.int32()), "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array([0] * len(offsets), pa.timestamp("us", tz="UTC")),
            "timestampType": pa.array([0] * len(offsets), pa.int32()),
            "headers": pa.array([[]] * len(offsets), KAFKA_SCHEMA.field("headers").type),
        },
        schema=KAFKA_SCHEMA,
    )  # fmt: skip
    folder = store.sink.staging_folder(batch_id)
    buffer = io.BytesIO()
    pq.write_table(rows, buffer)
    store.data.put_atomic(f"{folder}/part-0.parquet", buffer.getvalue())
    return {
        "seq": seq, "batch_id": batch_id, "location": folder, "rows": len(offsets),
        "files": [{"name": "part-0.parquet", "bytes": len(buffer.getvalue()), "rows": len(offsets)}],
        "offsets": {"t:0": offsets.stop},
    }  # fmt: skip


def test_two_writers_of_one_entry_one_commits_and_nothing_of_the_other_stays(postgres_database):
    spec = OutputSpec(format="postgres", table="public.orders", database_url=postgres_database.url)
    store = open_store(spec)
    assert store.log.append(staged_manifest(store, 1, "b-first", range(0, 5))) is True
    racers = [staged_manifest(store, 2, f"b-racer-{i}", range(5 + 100 * i, 10 + 100 * i)) for i in range(4)]
    results: dict[str, bool] = {}

    def append(manifest: dict) -> None:
        results[manifest["batch_id"]] = open_store(spec).log.append(manifest)

    threads = [threading.Thread(target=append, args=(m,)) for m in racers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [b for b, won in results.items() if won]
    assert len(winners) == 1 and len(results) == 4, f"expected one of four writers to commit entry 2: {results}"
    winner = next(m for m in racers if m["batch_id"] == winners[0])
    expected = [(0, o) for o in [*range(0, 5), *range(winner["offsets"]["t:0"] - 5, winner["offsets"]["t:0"])]]
    assert table_offsets(postgres_database) == expected, "the losers' rows must not stay"
    assert [e["batch_id"] for e in store.log.entries()] == ["b-first", winners[0]]
    assert store.log.tail()["batch_id"] == winners[0] and store.log.tail_seq() == 2
    assert json.loads(json.dumps(store.log.entry(1)))["offsets"] == {"t:0": 5}
