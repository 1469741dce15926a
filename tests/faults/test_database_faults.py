"""A database output's batch (PostgreSQL, MariaDB) broken at each point of its one transaction
(issue 50): killed inside it before COMMIT nothing is visible and the retry lands the batch once;
killed after COMMIT and before the Kafka commit, the next run commits without reading again; its
connection dropped, or its server restarted, while the transaction is open: one line, nothing
committed, the retry lands it once; two runs racing for the same entry: one writes it; a
deadlock with another application: the transaction runs again in place. Counted in the fault matrix."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from kafka_batch_provider.testing.producers import produce, sample_records
from tests.faults.harness import CliRun, race, run_cli, wait_while_running
from tests.integration.helpers import group_offsets
from tests.support.databases import PASSWORD

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("postgres")]


def rows_of(db) -> Counter:
    if not db.has_table(db.table):
        return Counter()
    return Counter(db.rows(f"SELECT topic, {db.quote('partition')}, {db.quote('offset')} FROM {db.table}"))


def expect_exactly_once(outcome, db, expected: set) -> None:
    seen = rows_of(db)
    outcome.checked = True
    outcome.lost += len(expected - set(seen))
    outcome.duplicated += sum(n - 1 for n in seen.values() if n > 1)
    assert set(seen) == expected and outcome.duplicated == 0, (
        f"expected {len(expected)} offsets once each; missing {sorted(expected - set(seen))[:5]}, "
        f"extra {sorted(set(seen) - expected)[:5]}, duplicated {outcome.duplicated}"
    )


def arguments(db, kafka_config, topic, group, remote) -> list[str]:
    where = ["--format", db.format, "--table", db.table]
    return ["--bootstrap-servers", kafka_config["bootstrap.servers"], "--topic", topic, "--group", group,
            "--spark-remote", remote, "--timeout", "10", *where]  # fmt: skip


def killed_at(point: str, records: int, db, kafka_config, topic: str, group: str, remote: str):
    """``records`` produced over two partitions, then ``kafka-batch run`` killed at ``point``:
    the arguments and environment of the run that follows."""
    produce(kafka_config, topic, sample_records(2, records))
    args = arguments(db, kafka_config, topic, group, remote)
    env = {"KAFKA_BATCH_DATABASE_URL": db.url}
    crashed = run_cli(args, env, fail_point=f"{point}:kill")
    assert crashed.killed, f"expected the run killed at {point}, got exit {crashed.process.returncode}"
    return args, env


def test_a_kill_inside_the_database_transaction_leaves_nothing_and_the_retry_lands_once(
    outcome, output_database, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    args, env = killed_at(
        "before-database-commit", 30, output_database, kafka_config, topic, group_id, spark_connect_remote
    )
    assert rows_of(output_database) == Counter(), "rows of an uncommitted transaction are visible"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}
    retried = run_cli(args, env).result()
    assert retried["records"] == 30 and retried["reused"], f"the retry must replay the saved plan: {retried}"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 15, 1: 15}
    expect_exactly_once(outcome, output_database, {(topic, p, o) for p in range(2) for o in range(15)})


def test_a_kill_after_the_database_commit_is_committed_to_kafka_without_reading_again(
    outcome, output_database, kafka_config, new_topic, group_id, spark_connect_remote
):
    topic = new_topic(partitions=2)
    args, env = killed_at("after-log-entry", 20, output_database, kafka_config, topic, group_id, spark_connect_remote)
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}, "the Kafka commit must not have run"
    finished = run_cli(args, env).result()
    assert finished["repaired"] and finished["skipped"], f"the next run must only finish the commit: {finished}"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 10, 1: 10}
    expect_exactly_once(outcome, output_database, {(topic, p, o) for p in range(2) for o in range(10)})


def drop_connections(db) -> int:
    """Every connection of the test's database user ended by the server (as a network cut or a
    database failover ends them); how many."""
    if db.format == "postgres":
        return len(db.rows("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s AND "
                           "pid <> pg_backend_pid()", (db.name,)))  # fmt: skip
    ours = db.connect()
    try:
        with ours.cursor() as cursor:
            cursor.execute("SELECT id FROM information_schema.processlist WHERE user = %s AND id <> CONNECTION_ID()",
                           (db.name,))  # fmt: skip
            ids = [row[0] for row in cursor.fetchall()]
            for one in ids:
                cursor.execute(f"KILL {int(one)}")
    finally:
        ours.close()
    return len(ids)


def test_the_connection_dropped_inside_the_transaction_is_one_line_and_the_retry_lands_once(
    outcome, output_database, kafka_config, new_topic, group_id, spark_connect_remote
):
    db = output_database
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 24))
    args, env = arguments(db, kafka_config, topic, group_id, spark_connect_remote), {"KAFKA_BATCH_DATABASE_URL": db.url}
    frozen = CliRun(args, env, fail_point="before-database-commit:stop").start()
    frozen.wait_stopped()
    assert drop_connections(db) >= 1, "the frozen run held no connection to drop"
    frozen.resume()
    frozen.finish()
    line = frozen.error_line()
    assert db.table in line and PASSWORD not in frozen.stderr, line
    assert rows_of(db) == Counter() and group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}
    assert run_cli(args, env).result()["records"] == 24
    expect_exactly_once(outcome, db, {(topic, p, o) for p in range(2) for o in range(12)})


def test_the_database_restarted_inside_the_transaction_is_one_line_and_the_retry_lands_once(
    outcome, output_database, kafka_config, new_topic, group_id, spark_connect_remote
):
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from kafka_batch_provider.dev.mariadb import MariadbServer
    from kafka_batch_provider.dev.postgres import PostgresServer
    from tests.support.databases import MariaDatabase, PostgresDatabase

    # A server of its own (the session's is shared with other tests), outside pytest's 0700 folders:
    # the database's OS user must reach its own.
    folder = Path(tempfile.mkdtemp(prefix="kafka-batch-restarted-"))
    os.chmod(folder, 0o755)
    kind = PostgresServer if output_database.format == "postgres" else MariadbServer
    server = kind(folder=folder / "db").start()
    try:
        server.create_database("restarted", owner="restarted", password=PASSWORD)
        db = (PostgresDatabase if kind is PostgresServer else MariaDatabase)(server.port, "restarted")
        topic = new_topic(partitions=2)
        produce(kafka_config, topic, sample_records(2, 16))
        args = arguments(db, kafka_config, topic, group_id, spark_connect_remote)
        env = {"KAFKA_BATCH_DATABASE_URL": db.url}
        frozen = CliRun(args, env, fail_point="before-database-commit:stop").start()
        frozen.wait_stopped()
        server.stop()
        server.start()
        frozen.resume()
        frozen.finish()
        line = frozen.error_line()
        assert db.table in line and PASSWORD not in frozen.stderr, line
        assert rows_of(db) == Counter(), "a transaction the restart cut is visible"
        assert run_cli(args, env).result()["records"] == 16
        expect_exactly_once(outcome, db, {(topic, p, o) for p in range(2) for o in range(8)})
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def test_two_runs_racing_for_one_entry_one_writes_it_and_the_other_never_does(
    outcome, output_database, kafka_config, new_topic, group_id, spark_connect_remote
):
    db = output_database
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 20))
    args, env = arguments(db, kafka_config, topic, group_id, spark_connect_remote), {"KAFKA_BATCH_DATABASE_URL": db.url}
    runs = race([CliRun(args, env, fail_point="before-log-entry:stop").start() for _ in range(2)])
    wrote = [run for run in runs if run.process.returncode == 0 and " rows in " in run.stderr]
    assert len(wrote) == 1, f"exactly one run must write the batch: {[r.stderr.splitlines()[-2:] for r in runs]}"
    [other] = [run for run in runs if run not in wrote]
    if other.process.returncode != 0:
        line = other.error_line()
        assert "another run" in line or "committed" in line, f"the loser must say it lost a race: {line}"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 10, 1: 10}
    expect_exactly_once(outcome, db, {(topic, p, o) for p in range(2) for o in range(10)})


def keyed(key: int, value: dict | None):
    """A record of key ``key`` (JSON) and ``value`` (JSON; a tombstone when ``None``) in partition 0."""
    from kafka_batch_provider.testing.producers import Record

    return Record(0, None if value is None else json.dumps(value).encode(), json.dumps({"id": key}).encode())


def two_upsert_batches(db, kafka_config, topic: str, group: str, remote: str) -> list[str]:
    """The conflict scenarios' topic: keys 0-5 (offsets 0-5), merged by a first ``--mode upsert`` run;
    then key 3 deleted and key 5 changed (offsets 6, 7), for the run under test (the arguments)."""
    produce(kafka_config, topic, [keyed(k, {"id": k, "name": f"v1-{k}"}) for k in range(6)])
    args = arguments(db, kafka_config, topic, group, remote)
    assert run_cli([*args, "--mode", "upsert"], {"KAFKA_BATCH_DATABASE_URL": db.url}).result()["records"] == 6
    produce(kafka_config, topic, [keyed(3, None), keyed(5, {"id": 5, "name": "v2-5"})])
    return args


def check_retried_once(outcome, db, batch: CliRun, reason: str, table: str, log: str) -> None:
    """The batch ran its transaction twice (one warning line naming ``reason``) and both batches
    landed once: each key's newest row (an upsert table holds the value's columns), two log entries."""
    assert batch.finish().result()["records"] == 2
    retried = [line for line in batch.stderr.splitlines() if "rolled back for another's sake" in line]
    assert len(retried) == 1 and reason in retried[0], f"expected one retry for {reason!r}: {batch.stderr}"
    expected = {0: "v1-0", 1: "v1-1", 2: "v1-2", 4: "v1-4", 5: "v2-5"}
    rows = db.rows(f"SELECT id, name FROM {table}")
    entries = db.rows(f"SELECT seq FROM {log} ORDER BY seq")
    outcome.checked = True
    outcome.lost = sum(1 for key, name in expected.items() if (key, name) not in rows)
    outcome.duplicated = len(rows) - len(set(rows)) + max(0, len(entries) - 2)
    assert sorted(rows) == sorted(expected.items()), f"expected each key's newest row once: {sorted(rows)}"
    assert entries == [(1,), (2,)], f"expected two log entries, found {entries}"


#: The batch's role's deadlock_timeout in the PostgreSQL scenario: the application must ask for the
#: batch's row within it (its own is 60 s).
BATCH_DEADLOCK_TIMEOUT = "5s"


def test_a_postgres_deadlock_runs_the_batch_transaction_again_and_it_lands_once(
    outcome, postgres_database, postgres_server, kafka_config, new_topic, group_id, spark_connect_remote
):
    # The batch deletes key 3, then waits for key 5, which another application holds; the application
    # then asks for key 3: a deadlock. PostgreSQL's check runs in the session that waited
    # deadlock_timeout first: the batch's role gets 5 s, the application 60 s (both set by the
    # superuser), so the batch is the one rolled back (40P01) and runs again in place.
    import psycopg

    db = postgres_database
    topic = new_topic(partitions=1)
    args = two_upsert_batches(db, kafka_config, topic, group_id, spark_connect_remote)
    with postgres_server.admin() as admin:
        admin.autocommit = True
        admin.execute(f"ALTER ROLE \"{db.name}\" SET deadlock_timeout = '{BATCH_DEADLOCK_TIMEOUT}'")
    with postgres_server.admin(db.name) as app, db.connect() as watcher:
        app.autocommit = True
        app.execute("SET deadlock_timeout = '60s'")
        app.execute("BEGIN")
        app.execute("UPDATE public.orders SET name = 'by the app' WHERE id = 5")
        batch = CliRun(args, {"KAFKA_BATCH_DATABASE_URL": db.url}).start()
        waiting = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' "
            "AND query LIKE 'UPDATE%'"
        )
        wait_while_running(
            batch, "its UPDATE waited for the application's row", lambda: watcher.execute(waiting).fetchone()[0]
        )
        try:  # (waits until the batch is rolled back)
            app.execute("UPDATE public.orders SET name = 'by the app' WHERE id = 3")
        except psycopg.errors.DeadlockDetected:
            raise AssertionError(
                "the application was rolled back, not the batch: it waited for key 3 more than "
                f"{BATCH_DEADLOCK_TIMEOUT} after the batch began to wait, so the batch's one deadlock check found none"
            ) from None
        app.execute("COMMIT")
    check_retried_once(outcome, db, batch, "deadlock detected", "public.orders", "public.kafka_batch_log")
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: 8}


def test_a_deadlock_runs_the_batch_transaction_again_and_it_lands_once(
    outcome, mariadb_database, mariadb_server, kafka_config, new_topic, group_id, spark_connect_remote
):
    # The batch deletes key 3, then waits for key 5, which another application holds; the application
    # then asks for key 3: a deadlock, and InnoDB rolls back the lighter transaction, the batch's (the
    # application changed 5,000 rows before), which runs again in place once the application commits.
    db = mariadb_database
    topic = new_topic(partitions=1)
    args = two_upsert_batches(db, kafka_config, topic, group_id, spark_connect_remote)
    db.rows("CREATE TABLE app_work (n INT PRIMARY KEY) ENGINE=InnoDB")
    app, watcher = db.connect(), mariadb_server.admin()
    try:
        app.autocommit(False)
        with app.cursor() as cursor:
            cursor.execute("INSERT INTO app_work SELECT seq FROM seq_1_to_5000")
            cursor.execute("UPDATE orders SET name = 'by the app' WHERE id = 5")
        batch = CliRun(args, {"KAFKA_BATCH_DATABASE_URL": db.url}).start()

        def update_waits() -> bool:
            with watcher.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT' "
                    "AND trx_query LIKE 'UPDATE%'"
                )
                return bool(cursor.fetchone()[0])

        # (every 0.3 s: InnoDB refreshes innodb_trx only when it was last read over 0.1 s before)
        wait_while_running(batch, "its UPDATE waited for the application's row", update_waits, every=0.3)
        with app.cursor() as cursor:
            cursor.execute("UPDATE orders SET name = 'by the app' WHERE id = 3")  # (the batch is the victim)
        app.commit()
    finally:
        app.close()
        watcher.close()
    check_retried_once(outcome, db, batch, "Deadlock found", "orders", "kafka_batch_log")
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: 8}
