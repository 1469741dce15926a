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
    """``kafka-batch run`` into ``public.orders``, on the session's Spark Connect server when the test
    set ``KAFKA_BATCH_TEST_REMOTE`` (spark-submit otherwise: the URL reaches it by its environment)."""
    remote = os.environ.get("KAFKA_BATCH_TEST_REMOTE")
    return cli(
        "run", "--bootstrap-servers", os.environ.get("KAFKA_BATCH_TEST_BOOTSTRAP", ""), "--topic", topic,
        "--group", group, "--format", "postgres", "--table", "public.orders", *more,
        *(["--spark-remote", remote] if remote else []),
        env={"KAFKA_BATCH_DATABASE_URL": db.url, **(env or {})},
    )  # fmt: skip


def table_offsets(db) -> list[tuple[int, int]]:
    with db.connect() as conn:
        return conn.execute('SELECT "partition", "offset" FROM public.orders ORDER BY 1, 2').fetchall()


def test_a_topic_lands_in_a_postgres_table_exactly_once_and_resumes_from_the_tables_offsets(
    postgres_database, kafka_config, kafka_bootstrap_servers, new_topic, group_id, monkeypatch, spark_connect_remote
):
    monkeypatch.setenv("KAFKA_BATCH_TEST_BOOTSTRAP", kafka_bootstrap_servers)
    monkeypatch.setenv("KAFKA_BATCH_TEST_REMOTE", spark_connect_remote)
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

    # The other commands read the same output: its batches, the lag, upkeep.
    env = {"KAFKA_BATCH_DATABASE_URL": postgres_database.url}
    where = ["--format", "postgres", "--table", "public.orders"]
    listed = last_json(cli("table", *where, env=env))
    assert [b["rows"] for b in listed["batches"]] == [40, 10], listed
    lag = cli("lag", "--bootstrap-servers", kafka_bootstrap_servers, "--topic", topic, "--group", group_id, *where,
              env=env)  # fmt: skip
    assert lag.returncode == 0 and PASSWORD not in lag.stdout + lag.stderr, lag.stderr[-2000:]
    kept = last_json(cli("upkeep", *where, env=env))
    assert PASSWORD not in json.dumps(kept), kept
    assert table_offsets(postgres_database) == [(p, o) for p in range(2) for o in range(25)], "upkeep changed rows"


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


def race(spec: OutputSpec, racers: list[dict]) -> dict[str, bool]:
    results: dict[str, bool] = {}
    together = threading.Barrier(len(racers), timeout=120)  # (all stores open before any appends)

    def append(manifest: dict) -> None:
        store = open_store(spec)
        together.wait()
        results[manifest["batch_id"]] = store.log.append(manifest)

    threads = [threading.Thread(target=append, args=(m,)) for m in racers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_two_writers_of_one_entry_one_commits_and_nothing_of_the_other_stays(postgres_database):
    spec = OutputSpec(format="postgres", table="public.orders", database_url=postgres_database.url)
    store = open_store(spec)
    # the first entry on a schema without the log table: its creation races too (review #7)
    first = race(spec, [staged_manifest(store, 1, f"b-first-{i}", range(0, 5)) for i in range(6)])
    assert sorted(first.values()) == [False] * 5 + [True], f"expected one of six first writers: {first}"
    racers = [staged_manifest(store, 2, f"b-racer-{i}", range(5 + 100 * i, 10 + 100 * i)) for i in range(4)]
    results = race(spec, racers)
    winners = [b for b, won in results.items() if won]
    assert len(winners) == 1 and len(results) == 4, f"expected one of four writers to commit entry 2: {results}"
    winner = next(m for m in racers if m["batch_id"] == winners[0])
    expected = [(0, o) for o in [*range(0, 5), *range(winner["offsets"]["t:0"] - 5, winner["offsets"]["t:0"])]]
    assert table_offsets(postgres_database) == expected, "the losers' rows must not stay"
    assert [e["batch_id"] for e in store.log.entries()] == [next(b for b, w in first.items() if w), winners[0]]
    assert store.log.tail()["batch_id"] == winners[0] and store.log.tail_seq() == 2
    assert json.loads(json.dumps(store.log.entry(1)))["offsets"] == {"t:0": 5}


@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
def test_writers_racing_on_a_database_whose_sessions_are_not_read_committed_one_commits(postgres_database, isolation):
    # (review: a lock taken by the transaction's first statement came after its snapshot, so under
    # REPEATABLE READ the loser's check read the log as it was before the winner committed)
    from urllib.parse import quote

    options = "-c default_transaction_isolation=" + isolation.replace(" ", "\\ ")
    url = postgres_database.url + "?options=" + quote(options)
    spec = OutputSpec(format="postgres", table="public.orders", database_url=url)
    store = open_store(spec)
    assert store.log.append(staged_manifest(store, 1, "b-first", range(0, 5))) is True
    racers = [staged_manifest(store, 2, f"b-racer-{i}", range(5 + 100 * i, 10 + 100 * i)) for i in range(4)]
    results = race(spec, racers)
    assert sorted(results.values()) == [False, False, False, True], f"expected one of four writers: {results}"
    assert store.log.tail_seq() == 2 and len(table_offsets(postgres_database)) == 10


def test_every_column_type_reads_back_as_written(postgres_database):
    import datetime as dt
    import decimal

    spec = OutputSpec(format="postgres", table="public.typed", database_url=postgres_database.url)
    store = open_store(spec)
    rows = pa.table(
        {
            "offset": pa.array([0, 1, 2], pa.int64()),
            "raw": pa.array([b'\x00\xff,\n"', b"", None], pa.binary()),
            "text": pa.array(['a,"b"\nc', "", None]),
            "unicode": pa.array(["Grüße 東京 🚀", "\\x00", "NULL"]),
            "small": pa.array([-(2**15), 0, None], pa.int16()),
            "ratio": pa.array([0.1, float("inf"), float("nan")], pa.float64()),
            "flag": pa.array([True, False, None]),
            "amount": pa.array([decimal.Decimal("12345.67"), decimal.Decimal("-0.01"), None], pa.decimal128(12, 2)),
            "day": pa.array([dt.date(1815, 12, 10), dt.date(2024, 2, 29), None]),
            "at": pa.array(
                [dt.datetime(2024, 1, 1, 12, 0, 0, 123456, dt.timezone.utc), None, None], pa.timestamp("us", tz="UTC")
            ),  # fmt: skip
            "local": pa.array([dt.datetime(2024, 1, 1, 0, 0, 1), None, None], pa.timestamp("us")),
            "numbers": pa.array([[1, None, 3], [], None], pa.list_(pa.int64())),
            "words": pa.array([['a"b', "c,d", "e\\f"], [None], None], pa.list_(pa.string())),
            "doc": pa.array([{"k": "v", "n": 1, "b": b"\x01"}, None, {"k": None, "n": 2, "b": None}]),
            "headers": pa.array([[{"key": "h", "value": b"\xff"}], [], None], KAFKA_SCHEMA.field("headers").type),
        }
    )
    folder = store.sink.staging_folder("b-1")
    buffer = io.BytesIO()
    pq.write_table(rows, buffer)
    store.data.put_atomic(f"{folder}/part-0.parquet", buffer.getvalue())
    manifest = {"seq": 1, "batch_id": "b-1", "location": folder, "rows": 3, "offsets": {"t:0": 3},
                "files": [{"name": "part-0.parquet", "bytes": len(buffer.getvalue()), "rows": 3}]}  # fmt: skip
    assert store.log.append(manifest) is True
    with postgres_database.connect() as conn:
        cursor = conn.execute('SELECT * FROM public.typed ORDER BY "offset"')
        found = [dict(zip([d.name for d in cursor.description], row)) for row in cursor.fetchall()]
    expected = rows.to_pylist()
    for want, got in zip(expected, found):
        for column, value in want.items():
            have = got[column]
            if column == "doc" and value is not None:
                value = {**value, "b": None if value["b"] is None else "AQ=="}  # (bytes in JSON: base64)
            if column == "headers" and value:
                value = [{"key": "h", "value": "/w=="}]
            if column == "raw" and have is not None:
                have = bytes(have)
            if column == "ratio" and value != value:
                assert have != have, f"row {want['offset']} {column}: expected NaN, found {have!r}"
                continue
            assert have == value, f"row {want['offset']} column {column}: wrote {value!r}, read {have!r}"


def test_upserts_by_key_land_as_each_keys_newest_row_and_a_tombstone_deletes(
    postgres_database, kafka_config, kafka_bootstrap_servers, new_topic, group_id, monkeypatch, spark_connect_remote
):
    from kafka_batch_provider.testing.producers import Record

    monkeypatch.setenv("KAFKA_BATCH_TEST_BOOTSTRAP", kafka_bootstrap_servers)
    monkeypatch.setenv("KAFKA_BATCH_TEST_REMOTE", spark_connect_remote)
    topic = new_topic(partitions=2)

    def keyed(key: int, value: dict | None) -> Record:
        return Record(key % 2, None if value is None else json.dumps(value).encode(), json.dumps({"id": key}).encode())

    produce(kafka_config, topic, [keyed(k, {"id": k, "name": f"v1-{k}"}) for k in range(6)])
    produce(
        kafka_config, topic, [keyed(2, {"id": 2, "name": "v2-2"}), keyed(3, None), keyed(4, {"id": 4, "name": "v2-4"})]
    )
    upsert = ["--mode", "upsert"]
    result = last_json(run(postgres_database, topic, group_id, *upsert))
    assert result["records"] == 9, result
    with postgres_database.connect() as conn:
        rows = dict(conn.execute("SELECT id, name FROM public.orders ORDER BY id").fetchall())
        key = conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'public.orders'::regclass AND i.indisprimary"
        ).fetchall()
    expected = {0: "v1-0", 1: "v1-1", 2: "v2-2", 4: "v2-4", 5: "v1-5"}
    assert rows == expected, f"expected each key's newest row, key 3 deleted: {rows}"
    assert key == [("id",)], f"expected the key as the primary key, found {key}"
    produce(kafka_config, topic, [keyed(0, None), keyed(3, {"id": 3, "name": "back"})])
    last_json(run(postgres_database, topic, group_id))  # (the table keeps its mode)
    with postgres_database.connect() as conn:
        rows = dict(conn.execute("SELECT id, name FROM public.orders ORDER BY id").fetchall())
    assert rows == {1: "v1-1", 2: "v2-2", 3: "back", 4: "v2-4", 5: "v1-5"}, rows
    refused = run(postgres_database, topic, group_id, "--mode", "append")
    assert_one_line_error(refused, "a table keeps its mode")


def test_dead_letters_of_a_postgres_batch_are_published_beside_its_rows(postgres_database):
    # (review #1: the batch's transaction deleted its staged dead letters before they were published)
    from kafka_batch_provider.output.dead_letter_files import dead_letter_folder, staged_dead_letters

    store = open_store(OutputSpec(format="postgres", table="public.orders", database_url=postgres_database.url))
    manifest = staged_manifest(store, 1, "b-1", range(0, 5))
    staged = staged_dead_letters(manifest["location"])
    store.data.put_atomic(f"{staged}/part-0.parquet", b"PAR1-dead-letters")
    manifest["dead_letters"] = {
        "rows": 1, "staging": staged, "location": dead_letter_folder(store.sink.dead_letter_root, "b-1"),
        "files": [{"name": "part-0.parquet", "bytes": len(b"PAR1-dead-letters")}],
    }  # fmt: skip
    assert store.log.append(manifest) is True
    store.publish(store.log.entry(1))
    store.check_published(store.log.entry(1))
    published = store.data.read_bytes(f"{manifest['dead_letters']['location']}/part-0.parquet")
    assert published == b"PAR1-dead-letters", "the batch's dead letters were not published"
    assert table_offsets(postgres_database) == [(0, o) for o in range(5)]


@pytest.mark.parametrize(
    "url",
    ["postgresql://rv:pa/ssword@127.0.0.1:5432/db", "postgresql://rv:pass%word@127.0.0.1/db",
     "postgresql://rv:p@ss-word@127.0.0.1/db"],
)  # fmt: skip
def test_a_database_url_that_cannot_be_read_is_one_line_without_its_password(url):
    from kafka_batch_provider.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        OutputSpec(format="postgres", table="public.orders", database_url=url)
    message = str(refused.value)
    assert "percent-encoded" in message and "\n" not in message, message
    assert not any(secret in message for secret in ("pa/ssword", "pass%word", "ss-word")), message


def test_plan_write_commit_as_separate_steps_with_the_url_in_a_file(
    postgres_database, kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path, monkeypatch
):
    # The three steps as three processes (as the operators run them); the URL in a file, never argv.
    monkeypatch.delenv("KAFKA_BATCH_DATABASE_URL", raising=False)
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 7))
    url_file = tmp_path / "database-url"
    url_file.write_text(postgres_database.url + "\n")
    where = ["--format", "postgres", "--table", "public.orders", "--database-url-file", str(url_file)]
    common = ["--bootstrap-servers", kafka_bootstrap_servers]
    planned = last_json(cli("plan", *common, "--topic", topic, "--group", group_id, *where))
    assert planned["records"] == 7 and planned["plan_path"].startswith("dbfiles://127.0.0.1:"), planned
    assert PASSWORD not in json.dumps(planned), "the plan's answer shows the password"
    written = last_json(cli("write", "--plan", planned["plan_path"], *common, *where))
    assert written["records"] == 7 and table_offsets(postgres_database) == [(0, o) for o in range(7)], written
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: None}, "written, not committed yet"
    committed = last_json(cli("commit", "--plan", planned["plan_path"], *common, *where))
    assert committed["committed"] == {f"{topic}:0": 7}, committed
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: 7}


def test_kafka_records_go_by_binary_copy_and_a_table_of_other_types_by_text(postgres_database, monkeypatch):
    from kafka_batch_provider.output import postgres as postgres_module

    used: list[str] = []
    binary, text = postgres_module.postgres_binary.binary_rows, postgres_module.csv_text
    monkeypatch.setattr(postgres_module.postgres_binary, "binary_rows", lambda b: used.append("binary") or binary(b))
    monkeypatch.setattr(postgres_module, "csv_text", lambda b: used.append("text") or text(b))
    store = open_store(OutputSpec(format="postgres", table="public.orders", database_url=postgres_database.url))
    assert store.log.append(staged_manifest(store, 1, "b-1", range(0, 5))) is True
    assert used == ["binary"], f"expected the Kafka columns in binary, found {used}"
    assert table_offsets(postgres_database) == [(0, o) for o in range(5)]
    with postgres_database.connect() as conn:  # a column someone made text: the server converts text
        conn.execute('ALTER TABLE public.orders ALTER COLUMN "partition" TYPE text')
    used.clear()
    assert store.log.append(staged_manifest(store, 2, "b-2", range(5, 9))) is True
    assert used == ["text"], f"expected text for a table whose types differ, found {used}"
    with postgres_database.connect() as conn:
        found = conn.execute('SELECT "partition", "offset" FROM public.orders ORDER BY 2').fetchall()
    assert found == [("0", o) for o in range(9)], found
