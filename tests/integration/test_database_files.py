"""The protocol's files in the output's own database (output/database_files.py), on a real
PostgreSQL and a real MariaDB: what :class:`Location` asks of any filesystem, the atomic create
above all."""

from __future__ import annotations

import threading

import pytest

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.output.database_files import files_uri
from kafka_batch_provider.output.location import Location

pytestmark = pytest.mark.xdist_group("postgres")


def location(db, name: str = "orders") -> Location:
    return Location(files_uri(db.url, db.table.replace("orders", name)), {"url": db.url})


def test_files_round_trip_through_the_database_as_through_a_bucket(output_database):
    where = location(output_database)
    assert where.uri == f"dbfiles://127.0.0.1:{output_database.port}/{output_database.name}/{output_database.table}"
    assert "secret" not in where.uri and "secret" not in repr(where) and "secret" not in repr(where.fs)
    where.put_atomic("_plans/1-b.json", b'{"a": 1}')
    where.put_atomic("_plans/1-b.json", b'{"a": 2}')  # replaced whole
    assert where.read_bytes("_plans/1-b.json") == b'{"a": 2}'
    with where.write_stream("data/b/x1/part-0.parquet") as out:
        out.write(b"PAR1" * 1000)
    assert where.exists("data/b/x1/part-0.parquet") and not where.exists("data/b/x1/part-1.parquet")
    assert where.list_names("data") == ["b"] and where.list_names("data/b") == ["x1"]
    assert where.file_sizes("data/b/x1") == {"part-0.parquet": 4000}
    below = where.files_below("data")
    assert set(below) == {"b/x1/part-0.parquet"} and below["b/x1/part-0.parquet"][0] == 4000, below
    with where.open_input("data/b/x1/part-0.parquet") as f:
        assert f.read() == b"PAR1" * 1000
    where.copy("_plans/1-b.json", "_plans/copy.json")
    assert where.read_bytes("_plans/copy.json") == b'{"a": 2}'
    where.delete(["_plans/copy.json", "_plans/gone.json"])  # one already gone is fine
    assert where.list_names("_plans") == ["1-b.json"]
    where.delete_tree("data/b")
    assert where.list_names("data") == [] and where.files_below("data") == {}
    with pytest.raises(FileNotFoundError):
        where.read_bytes("data/b/x1/part-0.parquet")
    with where.write_stream("data/b_x/_under%score") as out:  # (LIKE's wildcards are plain characters here)
        out.write(b"1")
    assert where.list_names("data") == ["b_x"] and where.files_below("data/b") == {}
    other = location(output_database, "customers")  # another table's files are its own
    assert other.list_names("_plans") == []


def test_exactly_one_of_racing_writers_creates_a_name(output_database):
    results: list[bool] = []

    def create(i: int) -> None:
        results.append(location(output_database).create_exclusive("_log/00001.json", b"writer %d" % i))

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True], f"expected one creator of eight, found {results}"
    winner = location(output_database).read_bytes("_log/00001.json")
    assert winner.startswith(b"writer "), winner


def test_a_refused_login_is_one_terminal_line_without_the_password(output_database):
    # (terminal: a ConfigError, never retried; a lost connection is a StorageError, which may pass)
    wrong = output_database.url.replace("db-output-secret", "not-the-password")
    where = Location(files_uri(wrong, output_database.table), {"url": wrong})
    with pytest.raises(ConfigError) as refused:
        where.put_atomic("_plans/x.json", b"{}")
    message = str(refused.value)
    assert "\n" not in message and ("password authentication failed" in message or "Access denied" in message), message
    assert "not-the-password" not in message and "db-output-secret" not in message, message
