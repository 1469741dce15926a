"""A Kafka topic into a MariaDB table (``--format mysql``, issue 50), exactly once: each batch's rows
and its offsets in one transaction, on a real MariaDB (Debian's, a plain process) and a real broker."""

from __future__ import annotations

import io
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.output.formats import OutputSpec, open_store
from kafka_batch_provider.output.tables import KAFKA_SCHEMA
from kafka_batch_provider.testing.producers import Record, produce, sample_records
from tests.integration.helpers import group_offsets
from tests.integration.test_cli import assert_one_line_error, cli, last_json
from tests.integration.test_output_log import delete_group
from tests.integration.test_postgres_output import race, staged_manifest
from tests.support.databases import PASSWORD

pytestmark = pytest.mark.xdist_group("mariadb")


def run(db, topic: str, group: str, *more: str, env: dict | None = None):
    """``kafka-batch run`` into ``<db>.orders`` on the session's Spark Connect server."""
    return cli(
        "run", "--bootstrap-servers", os.environ["KAFKA_BATCH_TEST_BOOTSTRAP"], "--topic", topic, "--group", group,
        "--format", "mysql", "--table", f"{db.name}.orders", "--spark-remote", os.environ["KAFKA_BATCH_TEST_REMOTE"],
        *more, env={"KAFKA_BATCH_DATABASE_URL": db.url, **(env or {})},
    )  # fmt: skip


def table_offsets(db, table: str = "orders") -> list[tuple[int, int]]:
    return db.rows(f"SELECT `partition`, `offset` FROM `{table}` ORDER BY 1, 2")


def test_a_topic_lands_in_a_mariadb_table_exactly_once_and_resumes_from_the_tables_offsets(
    mariadb_database, kafka_config, kafka_bootstrap_servers, new_topic, group_id, monkeypatch, spark_connect_remote
):
    monkeypatch.setenv("KAFKA_BATCH_TEST_BOOTSTRAP", kafka_bootstrap_servers)
    monkeypatch.setenv("KAFKA_BATCH_TEST_REMOTE", spark_connect_remote)
    db = mariadb_database
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 40))
    first = run(db, topic, group_id)
    assert last_json(first)["records"] == 40, first.stdout[-2000:]
    assert PASSWORD not in first.stdout + first.stderr, "the database's password was shown"
    assert table_offsets(db) == [(p, o) for p in range(2) for o in range(20)], "expected each record once"
    log = [(seq, json.loads(entry)["offsets"]) for seq, entry in db.rows("SELECT seq, entry FROM kafka_batch_log")]
    assert log == [(1, {f"{topic}:0": 20, f"{topic}:1": 20})], f"expected one log entry with the offsets: {log}"
    staged = db.rows("SELECT count(*) FROM kafka_batch_files WHERE path LIKE '%%/data/%%'")
    assert staged == [(0,)], f"the staged files are the table's rows now: {staged} left"
    columns = dict(
        db.rows(
            "SELECT column_name, column_type FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'orders' ORDER BY ordinal_position",
            (db.name,),
        )
    )
    assert columns == {
        "key": "longblob", "value": "longblob", "topic": "longtext", "partition": "int(11)", "offset": "bigint(20)",
        "timestamp": "datetime(6)", "timestampType": "int(11)", "headers": "longtext",
    }, columns  # fmt: skip
    values = sorted(value for (value,) in db.rows("SELECT `value` FROM orders"))
    assert values == sorted(r.value for r in sample_records(2, 40)), "the values' bytes changed"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 20, 1: 20}

    # The group deleted (expired, moved): the next run goes on from the table's offsets.
    delete_group(kafka_config, group_id)
    produce(kafka_config, topic, sample_records(2, 10, first_id=40))
    assert last_json(run(db, topic, group_id))["records"] == 10
    assert table_offsets(db) == [(p, o) for p in range(2) for o in range(25)]
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 25, 1: 25}
    listed = last_json(
        cli("table", "--format", "mysql", "--table", f"{db.name}.orders", env={"KAFKA_BATCH_DATABASE_URL": db.url})
    )
    assert [b["rows"] for b in listed["batches"]] == [40, 10], listed
    assert PASSWORD not in json.dumps(listed), listed
    # Upkeep: a crashed attempt's staged files (older than the retention) go, the rows stay.
    store = open_store(spec_of(db))
    store.data.put_atomic("data/b-crashed/x1/part-0.parquet", b"PAR1")
    db.rows("UPDATE kafka_batch_files SET modified = modified - INTERVAL 2 HOUR WHERE path LIKE '%%b-crashed%%'")
    kept = cli("upkeep", "--format", "mysql", "--table", f"{db.name}.orders", "--retention-hours", "1",
               env={"KAFKA_BATCH_DATABASE_URL": db.url})  # fmt: skip
    assert kept.returncode == 0 and PASSWORD not in kept.stdout + kept.stderr, kept.stderr[-2000:]
    assert store.data.files_below("data") == {}, "upkeep left a crashed attempt's staged files"
    assert table_offsets(db) == [(p, o) for p in range(2) for o in range(25)], "upkeep changed rows"


def spec_of(db, table: str = "orders", **more) -> OutputSpec:
    return OutputSpec(format="mysql", table=f"{db.name}.{table}", database_url=db.url, **more)


def test_two_writers_of_one_entry_one_commits_and_nothing_of_the_other_stays(mariadb_database):
    db = mariadb_database
    spec = spec_of(db)
    store = open_store(spec)
    first = race(spec, [staged_manifest(store, 1, f"b-first-{i}", range(0, 5)) for i in range(6)])
    assert sorted(first.values()) == [False] * 5 + [True], f"expected one of six first writers: {first}"
    racers = [staged_manifest(store, 2, f"b-racer-{i}", range(5 + 100 * i, 10 + 100 * i)) for i in range(4)]
    results = race(spec, racers)
    winners = [b for b, won in results.items() if won]
    assert len(winners) == 1, f"expected one of four writers to commit entry 2: {results}"
    end = next(m for m in racers if m["batch_id"] == winners[0])["offsets"]["t:0"]
    assert table_offsets(db) == [(0, o) for o in [*range(0, 5), *range(end - 5, end)]], "the losers' rows stayed"
    assert [e["batch_id"] for e in store.log.entries()] == [next(b for b, w in first.items() if w), winners[0]]
    assert store.log.tail_seq() == 2 and store.log.entry(1)["offsets"] == {"t:0": 5}


def stage(store, rows: pa.Table, seq: int = 1, batch_id: str = "b-1") -> dict:
    folder = store.sink.staging_folder(batch_id)
    buffer = io.BytesIO()
    pq.write_table(rows, buffer)
    store.data.put_atomic(f"{folder}/part-0.parquet", buffer.getvalue())
    return {"seq": seq, "batch_id": batch_id, "location": folder, "rows": rows.num_rows, "offsets": {"t:0": seq},
            "files": [{"name": "part-0.parquet", "bytes": len(buffer.getvalue()), "rows": rows.num_rows}]}  # fmt: skip


def test_every_column_type_reads_back_as_written(mariadb_database):
    import datetime as dt
    import decimal

    db = mariadb_database
    store = open_store(spec_of(db, "typed"))
    rows = pa.table(
        {
            "offset": pa.array([0, 1, 2], pa.int64()),
            "raw": pa.array([b'\x00\xff\t\\N\n"', b"", None], pa.binary()),
            "text": pa.array(['a\t"b"\nc\\', "", None]),
            "unicode": pa.array(["Grüße 東京 🚀", "\\N", "NULL"]),
            "small": pa.array([-(2**15), 0, None], pa.int16()),
            "big": pa.array([2**64 - 1, 0, None], pa.uint64()),
            "ratio": pa.array([0.1, -1e300, None], pa.float64()),
            "flag": pa.array([True, False, None]),
            "amount": pa.array([decimal.Decimal("12345.67"), decimal.Decimal("-0.01"), None], pa.decimal128(12, 2)),
            "day": pa.array([dt.date(1815, 12, 10), dt.date(2024, 2, 29), None]),
            "at": pa.array(
                [dt.datetime(2024, 1, 1, 12, 0, 0, 123456, dt.timezone.utc), None, None], pa.timestamp("us", tz="UTC")
            ),  # fmt: skip
            "doc": pa.array([{"k": "v\t", "n": 1, "b": b"\x01"}, None, {"k": None, "n": 2, "b": None}]),
            "headers": pa.array([[{"key": "h", "value": b"\xff"}], [], None], KAFKA_SCHEMA.field("headers").type),
        }
    )
    assert store.log.append(stage(store, rows)) is True
    conn = db.connect()
    with conn.cursor() as cursor:
        cursor.execute("SELECT * FROM typed ORDER BY `offset`")
        found = [dict(zip([d[0] for d in cursor.description], row)) for row in cursor.fetchall()]
    conn.close()
    for want, got in zip(rows.to_pylist(), found, strict=True):
        for column, value in want.items():
            have = got[column]
            if column == "at" and value is not None:
                value = value.replace(tzinfo=None)  # (DATETIME holds the UTC wall time)
            if column == "flag" and value is not None:
                value = int(value)
            if column in ("doc", "headers") and have is not None:
                have = json.loads(have)
            if column == "doc" and value is not None:
                value = {**value, "b": None if value["b"] is None else "AQ=="}  # (bytes in JSON: base64)
            if column == "headers" and value:
                value = [{"key": "h", "value": "/w=="}]
            assert have == value, f"row {want['offset']} column {column}: wrote {value!r}, read {have!r}"


def test_upserts_by_key_land_as_each_keys_newest_row_and_a_tombstone_deletes(
    mariadb_database, kafka_config, kafka_bootstrap_servers, new_topic, group_id, monkeypatch, spark_connect_remote
):
    monkeypatch.setenv("KAFKA_BATCH_TEST_BOOTSTRAP", kafka_bootstrap_servers)
    monkeypatch.setenv("KAFKA_BATCH_TEST_REMOTE", spark_connect_remote)
    db = mariadb_database
    topic = new_topic(partitions=2)

    def keyed(key: int, value: dict | None) -> Record:
        return Record(key % 2, None if value is None else json.dumps(value).encode(), json.dumps({"id": key}).encode())

    produce(kafka_config, topic, [keyed(k, {"id": k, "name": f"v1-{k}"}) for k in range(6)])
    produce(
        kafka_config, topic, [keyed(2, {"id": 2, "name": "v2-2"}), keyed(3, None), keyed(4, {"id": 4, "name": "v2-4"})]
    )
    result = last_json(run(db, topic, group_id, "--mode", "upsert"))
    assert result["records"] == 9, result
    assert dict(db.rows("SELECT id, name FROM orders ORDER BY id")) == {
        0: "v1-0", 1: "v1-1", 2: "v2-2", 4: "v2-4", 5: "v1-5"
    }, "expected each key's newest row, key 3 deleted"  # fmt: skip
    key = db.rows(
        "SELECT column_name FROM information_schema.key_column_usage WHERE table_schema = %s AND "
        "table_name = 'orders' AND constraint_name = 'PRIMARY'",
        (db.name,),
    )
    assert key == [("id",)], f"expected the key as the primary key, found {key}"
    produce(kafka_config, topic, [keyed(0, None), keyed(3, {"id": 3, "name": "back"}), keyed(5, {"id": 5})])
    last_json(run(db, topic, group_id))  # (the table keeps its mode)
    assert dict(db.rows("SELECT id, name FROM orders ORDER BY id")) == {
        1: "v1-1", 2: "v2-2", 3: "back", 4: "v2-4", 5: None
    }  # fmt: skip
    assert_one_line_error(run(db, topic, group_id, "--mode", "append"), "a table keeps its mode")


def test_values_the_table_cannot_hold_are_one_line_naming_the_column_and_commit_nothing(mariadb_database):
    db = mariadb_database
    conn = db.connect()
    with conn.cursor() as cursor:  # a table made by someone else, with a column that cannot take the rows
        cursor.execute("CREATE TABLE narrow (`offset` BIGINT, `name` VARCHAR(4) NOT NULL)")
    conn.close()
    store = open_store(spec_of(db, "narrow"))
    rows = pa.table({"offset": pa.array([0, 1], pa.int64()), "name": ["ok", "too long for it"]})
    with pytest.raises(ConfigError) as refused:
        store.log.append(stage(store, rows))
    message = str(refused.value)
    assert "\n" not in message and ("`name`" in message or "'name'" in message), message
    assert db.rows("SELECT count(*) FROM narrow") == [(0,)], "a refused batch left rows"
    assert store.log.tail_seq() == 0, "a refused batch left its log entry"
    nulls = pa.table({"offset": pa.array([0], pa.int64()), "name": pa.array([None], pa.string())})
    with pytest.raises(ConfigError, match="name"):
        store.log.append(stage(store, nulls, batch_id="b-2"))
    assert db.rows("SELECT count(*) FROM narrow") == [(0,)] and store.log.tail_seq() == 0

    # A value the server would change rather than refuse (a note, not a warning): refused too, even
    # after three of them (review: SHOW WARNINGS LIMIT 3 and notes skipped let a cut value through).
    conn = db.connect()
    with conn.cursor() as cursor:
        cursor.execute("CREATE TABLE rounded (`offset` BIGINT, `amount` DECIMAL(10,1), `name` VARCHAR(4))")
        cursor.execute("CREATE TABLE plain (`offset` BIGINT) ENGINE=MyISAM")
    conn.close()
    rounded = open_store(spec_of(db, "rounded"))
    values = pa.table({"offset": pa.array(range(4), pa.int64()), "amount": [1.25, 2.35, 3.45, 4.0],
                       "name": ["a", "b", "c", "waytoolong"]})  # fmt: skip
    with pytest.raises(ConfigError, match="amount"):
        rounded.log.append(stage(rounded, values))
    assert db.rows("SELECT count(*) FROM rounded") == [(0,)] and rounded.log.tail_seq() == 0

    # A table of an engine without transactions would keep a refused batch's rows: refused first.
    plain = open_store(spec_of(db, "plain"))
    with pytest.raises(ConfigError, match="not transactional"):
        plain.log.append(stage(plain, pa.table({"offset": pa.array([0], pa.int64())})))
    assert db.rows("SELECT count(*) FROM plain") == [(0,)]


def test_text_keys_differing_in_trailing_spaces_are_two_keys(mariadb_database):
    # (utf8mb4_bin pads: 'a' and 'a ' would be one key, and the second row silently skipped)
    from kafka_batch_provider.output.mariadb import MariadbSink

    db = mariadb_database
    sink = MariadbSink(db.url, f"{db.name}.keyed")
    conn = sink.connect()
    rows = pa.table({"id": ["a", "a ", "A"], "n": pa.array([1, 2, 3], pa.int64())})
    sink.ensure_table(conn, rows.schema, ["id"])
    sink.load(conn, sink.quoted("keyed"), rows.schema, rows.to_batches())
    assert sorted(db.rows("SELECT id, n FROM keyed")) == [("A", 3), ("a", 1), ("a ", 2)]
    assert sink.rows_at(conn, ["id"], [("a ",)], ["n"]) == {("a ",): {"n": 2}}


@pytest.mark.parametrize("name", ["pct%", "a{b}", "{target}", "trailing ", ""])
def test_column_names_the_statements_cannot_carry_are_refused_before_anything_is_read(mariadb_database, name):
    sink = open_store(spec_of(mariadb_database)).sink
    with pytest.raises(ConfigError, match="cannot be a column here") as refused:
        sink.check_columns(pa.schema([(name, pa.int64())]))
    assert "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match="differ only in case"):
        sink.check_columns(pa.schema([("Name", pa.int64()), ("name", pa.int64())]))


def test_wrong_password_mismatched_format_and_unreadable_urls_are_one_line_without_the_password(
    mariadb_database, kafka_bootstrap_servers, new_topic, group_id, kafka_config, monkeypatch, spark_connect_remote
):
    monkeypatch.setenv("KAFKA_BATCH_TEST_BOOTSTRAP", kafka_bootstrap_servers)
    monkeypatch.setenv("KAFKA_BATCH_TEST_REMOTE", spark_connect_remote)
    db = mariadb_database
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 3))
    wrong = db.url.replace(PASSWORD, "wrong-password")
    refused = run(db, topic, group_id, env={"KAFKA_BATCH_DATABASE_URL": wrong})
    assert_one_line_error(refused, "Access denied")
    assert "wrong-password" not in refused.stderr + refused.stdout
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: None}, "a refused run moved the group"
    with pytest.raises(ConfigError, match="writes to a mysql:// database"):
        OutputSpec(format="mysql", table="d.orders", database_url="postgresql://u:secret@127.0.0.1/d")
    for url, secret in (
        ("mysql://rv:pa/s3cr3t@127.0.0.1:3306/db", "s3cr3t"),
        ("mysql://rv:pa:ss#3cr3t@h/db", "3cr3t"),
        ("mysql://rv:1234/S3cret@127.0.0.1", "S3cret"),  # (review: the password's rest read as the database)
    ):
        with pytest.raises(ConfigError) as unreadable:
            OutputSpec(format="mysql", table="db.orders", database_url=url)
        assert "percent-encoded" in str(unreadable.value) and secret not in str(unreadable.value), unreadable.value


def test_the_server_gets_no_local_file_but_the_one_the_statement_sends(mariadb_database, tmp_path):
    # (PyMySQL alone sends whatever file a server names, at any statement: a rogue server could read
    # a worker's secrets; here the real server asks for a file the statement did not pin)
    import pymysql

    from kafka_batch_provider.output.databases.mariadb import MARIADB
    from kafka_batch_provider.output.databases.mariadb_local_files import REFUSED, sending

    secret, rows = tmp_path / "secret.txt", tmp_path / "rows.txt"
    secret.write_text("worker-secret\n")
    rows.write_text("1\n2\n")
    mariadb_database.rows("CREATE TABLE pinned (v VARCHAR(40)) ENGINE=InnoDB")
    load = "LOAD DATA LOCAL INFILE %s INTO TABLE pinned"
    for pinned in (None, str(rows)):
        conn = MARIADB.connect(mariadb_database.url)
        with pytest.raises(pymysql.err.OperationalError) as refused:
            if pinned is None:
                conn.cursor().execute(load, (str(secret),))
            else:
                with sending(conn, pinned):
                    conn.cursor().execute(load, (str(secret),))
        assert refused.value.args[0] == REFUSED, f"expected the request refused, got {refused.value.args}"
        assert not conn.open, "a refused request leaves the protocol mid-statement: the connection must close"
        assert mariadb_database.rows("SELECT v FROM pinned") == [], "the server got the file it was refused"
    conn = MARIADB.connect(mariadb_database.url)
    with sending(conn, str(rows)):
        assert conn.cursor().execute(load, (str(rows),)) == 2
    assert conn.pinned_file is None
    assert sorted(mariadb_database.rows("SELECT v FROM pinned")) == [("1",), ("2",)]
    conn.close()
    # Inside the sink's writer lock, which closes its connection on any error: the refusal is what
    # surfaces (review: a second close() raised "Already closed" over it).
    sink = open_store(OutputSpec(format="mysql", table=mariadb_database.table, database_url=mariadb_database.url)).sink
    conn = sink.connect()
    with pytest.raises(pymysql.err.OperationalError) as refused:
        with sink.writer_lock(conn):
            conn.cursor().execute(load, (str(secret),))
    assert refused.value.args[0] == REFUSED, f"expected the refusal to surface, got {refused.value.args}"
