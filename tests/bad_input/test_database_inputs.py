"""What a database output cannot take (issue 50), refused by the server: the run fails in one
``error:`` line naming the table (and the column, where one is at fault), with the terminal exit
code (a retry would be refused alike: never retried), nothing committed, the group unmoved, and
the database's password nowhere in the output. On PostgreSQL and MariaDB, through the command line
and the session's Spark Connect server."""

from __future__ import annotations

import os
import uuid

import pytest

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.errors import EXIT_TERMINAL
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records
from tests.bad_input.scene import Scene
from tests.support import cli_runner
from tests.support.databases import PASSWORD

#: case -> (statements run by the database's superuser first, the table, what the line must say);
#: {db} is the test's database and user.
POSTGRES_CASES = {
    "wrong-password": ([], "public.orders", "password authentication failed"),
    "no-create-privilege": (
        ["CREATE ROLE reader_{db} LOGIN PASSWORD '{password}'"], "public.orders", "permission denied for schema public"
    ),
    "missing-schema": ([], "nosuch.orders", 'schema "nosuch" does not exist'),
    "incompatible-existing-table": (
        ['CREATE TABLE public.orders ("offset" bigint, "value" integer)'], "public.orders", "type integer"
    ),
    "not-null-column-the-batch-lacks": (
        ['CREATE TABLE public.orders ("offset" bigint, "note" text NOT NULL)'], "public.orders", '"note"'
    ),
}  # fmt: skip
MARIADB_CASES = {
    "wrong-password": ([], "{db}.orders", "Access denied"),
    "no-create-privilege": (
        ["CREATE USER 'reader_{db}'@'127.0.0.1' IDENTIFIED BY '{password}'",
         "GRANT SELECT ON `{db}`.* TO 'reader_{db}'@'127.0.0.1'"],
        "{db}.orders", "command denied",
    ),
    "missing-database": ([], "nosuch.orders", "nosuch"),
    "incompatible-existing-table": (
        ["CREATE TABLE `{db}`.orders (`offset` BIGINT, `value` INT)"], "{db}.orders", "value"
    ),
    "value-longer-than-its-column": (
        ["CREATE TABLE `{db}`.orders (`offset` BIGINT, `topic` VARCHAR(2))"], "{db}.orders", "topic"
    ),
}  # fmt: skip
CASES = [("postgres", c) for c in POSTGRES_CASES] + [("mysql", c) for c in MARIADB_CASES]


def prepare(server, db, statements: list[str]) -> None:
    """Run ``statements`` as the server's superuser, in the test's database."""
    if not statements:
        return
    if db.format == "postgres":
        with server.admin(db.name) as conn:
            for statement in statements:
                conn.execute(statement.format(db=db.name, password=PASSWORD))
            conn.execute(f'ALTER TABLE IF EXISTS public.orders OWNER TO "{db.name}"')
        return
    conn = server.admin()
    try:
        with conn.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement.format(db=db.name, password=PASSWORD))
    finally:
        conn.close()


def url_of(db, case: str) -> str:
    if case == "wrong-password":
        return db.url.replace(PASSWORD, "not-the-password")
    if case == "no-create-privilege":
        return db.url.replace(f"{db.name}:", f"reader_{db.name}:", 1)
    return db.url


def table_state(db, table: str) -> tuple[int, int]:
    """How many rows the table holds and how many entries its log (0 while either does not exist)."""
    schema, name = table.split(".")

    def count(relation: str, quoted: str) -> int:
        return db.rows(f"SELECT count(*) FROM {quoted}")[0][0] if db.has_table(relation) else 0

    return (
        count(table, f"{db.quote(schema)}.{db.quote(name)}"),
        count(f"{schema}.kafka_batch_log", f"{db.quote(schema)}.kafka_batch_log"),
    )


@pytest.mark.parametrize("fmt, case", CASES)
def test_what_a_database_refuses_fails_the_run_in_one_terminal_line_and_changes_nothing(
    fmt: str, case: str, scene: Scene, verdict, spark_connect_remote: str, request
) -> None:
    server = request.getfixturevalue("postgres_server" if fmt == "postgres" else "mariadb_server")
    db = request.getfixturevalue("postgres_database" if fmt == "postgres" else "mariadb_database")
    statements, table, expected = (POSTGRES_CASES if fmt == "postgres" else MARIADB_CASES)[case]
    table = table.format(db=db.name)
    prepare(server, db, statements)
    topic = f"db-refused-{uuid.uuid4().hex[:8]}"
    create_topics(scene.kafka_config, {topic: 1})
    produce(scene.kafka_config, topic, sample_records(1, 3))
    group = f"g-{topic}"
    before = (table_state(db, table), scene.kafka.committed_offsets(group, [TopicPartition(topic, 0)]))
    result = cli_runner.run(
        ["run", "--bootstrap-servers", scene.bootstrap_servers, "--topic", topic, "--group", group,
         "--format", fmt, "--table", table, "--spark-remote", spark_connect_remote],
        env={**os.environ, "KAFKA_BATCH_DATABASE_URL": url_of(db, case)}, timeout=600,
    )  # fmt: skip
    after = (table_state(db, table), scene.kafka.committed_offsets(group, [TopicPartition(topic, 0)]))
    lines = result.stderr.strip().splitlines()
    problems = []
    if result.returncode != EXIT_TERMINAL:
        problems.append(f"expected the terminal exit code {EXIT_TERMINAL}, got {result.returncode}: {lines[-2:]}")
    if "Traceback" in result.stderr or not lines or not lines[-1].startswith("error: "):
        problems.append(f"expected one 'error:' line last and no traceback, got {lines[-4:]!r}")
    elif [line for line in lines if line.startswith("error: ")] != [lines[-1]]:
        problems.append(f"expected exactly one 'error:' line, got {lines[-4:]!r}")
    elif expected not in lines[-1]:
        problems.append(f"expected the error line to say {expected!r}, got {lines[-1]!r}")
    if PASSWORD in result.stderr + result.stdout:
        problems.append("the database's password was shown")
    verdict.judge(problems, before, after)
