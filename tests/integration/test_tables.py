"""Delta Lake and Iceberg tables as the output, with the offsets in the table's own commit.

Real broker, real Spark ``local[2]``, real tables (delta-rs, pyiceberg with a SQLite catalog),
on a local disk and on the S3-protocol server; read back with each format's own reader and
with DuckDB.
"""

from __future__ import annotations

import json
import os

import pytest

from kafka_batch_provider.core.planning import PlanPolicy
from kafka_batch_provider.errors import ConfigError, LogConflictError, ManifestError
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.steps.commit import commit_batch
from kafka_batch_provider.steps.plan import plan_batch
from kafka_batch_provider.testing.producers import Record, produce, sample_records
from tests.integration.helpers import (
    TableOutput,
    assert_exactly_once,
    duckdb_connection,
    one_partition_manifest,
    produce_committed_aborted_committed,
    race_two_writes,
    run_batch,
    write_without_commit,
)
from tests.integration.test_cli import assert_one_line_error, cli, last_json
from tests.integration.test_output_log import delete_group, group_offsets, offsets_of

pytestmark = pytest.mark.integration


def make_table(request: pytest.FixtureRequest, tmp_path, fmt: str, where: str, partition_by: str | None = None):
    if where == "local":
        if fmt == "delta":
            return TableOutput(str(tmp_path / "events table ü"), partition_by=partition_by)
        catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh ü"}
        return TableOutput("", format="iceberg", table="lake.events", catalog=catalog, partition_by=partition_by)
    uri = request.getfixturevalue("new_s3_output")(f"tables {fmt}")
    options = request.getfixturevalue("s3_storage_options")
    if fmt == "delta":
        return TableOutput(uri, options, partition_by=partition_by)
    s3 = {
        "s3.endpoint": options["client_kwargs"]["endpoint_url"],
        "s3.access-key-id": options["key"],
        "s3.secret-access-key": options["secret"],
        "s3.region": options["client_kwargs"]["region_name"],
    }
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": uri, **s3}
    return TableOutput("", format="iceberg", table="lake.events", catalog=catalog, partition_by=partition_by)


@pytest.fixture(params=["delta-local", "iceberg-local", "delta-s3", "iceberg-s3"])
def table(request, tmp_path) -> TableOutput:
    fmt, where = request.param.split("-")
    return make_table(request, tmp_path, fmt, where)


@pytest.fixture(params=["delta", "iceberg"])
def local_table(request, tmp_path) -> TableOutput:
    return make_table(request, tmp_path, request.param, "local")


def is_local(output: TableOutput) -> bool:
    return output.uri.startswith("/") if output.format == "delta" else output.catalog["warehouse"].startswith("file:")


def table_commits(output: TableOutput) -> int:
    """How many commits (Delta versions, Iceberg snapshots) the table has."""
    store = output.store()
    table = store.sink.table()
    if output.format == "delta":
        return 0 if table is None else table.version() + 1
    return len(table.snapshots())


def duckdb_keys(output: TableOutput) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of every row, as DuckDB's delta/iceberg extensions read the table."""
    con = duckdb_connection()
    if output.format == "delta":
        source = f"delta_scan('{output.location.uri}')"  # a file:// URI: DuckDB drops non-ASCII in plain paths
    else:
        metadata = output.store().sink.table().metadata_location.removeprefix("file://")
        source = f"iceberg_scan('{metadata}')"
    return con.execute(f'SELECT topic, "partition", "offset" FROM {source}').fetchall()


def test_two_incremental_runs_land_each_offset_once_for_the_tables_own_reader(
    spark, kafka_config, new_topic, group_id, table
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 20))
    _, committed = run_batch(spark, kafka_config, table, group_id, [topic])
    assert committed == {f"{topic}:0": 10, f"{topic}:1": 10}
    produce(kafka_config, topic, sample_records(2, 6, first_id=20))
    _, committed = run_batch(spark, kafka_config, table, group_id, [topic], value_format="string")
    assert committed == {f"{topic}:0": 13, f"{topic}:1": 13}

    assert_exactly_once(table, offsets_of(topic, {0: 13, 1: 13}))
    rows = table.read(["offset", "value", "value_string"]).to_pylist()
    decoded = [r for r in rows if r["value_string"] is not None]
    assert len(decoded) == 6 and all(r["value_string"].encode() == r["value"] for r in decoded), (
        "the second batch brings the decoded value (schema evolution); the first batch's rows have none"
    )
    store = table.store()
    entries = list(store.log.entries())
    assert [(e["seq"], e["rows"]) for e in entries] == [(1, 20), (2, 6)]
    assert store.log.tail()["offsets"] == {f"{topic}:0": 13, f"{topic}:1": 13}
    if table.format == "delta":
        delta = store.sink.table()
        from kafka_batch_provider.output.delta import app_id

        versions = {p: delta.transaction_version(app_id(group_id, f"{topic}:{p}")) for p in (0, 1)}
        assert versions == {0: 13, 1: 13}, f"the txn actions must hold the end offsets, found {versions}"
    else:
        from kafka_batch_provider.output.iceberg import offsets_digest

        summary = store.sink.table().current_snapshot().summary.additional_properties
        digest = offsets_digest({f"{topic}:0": 13, f"{topic}:1": 13})
        assert (summary["kafka_batch.offsets_sha256"], summary["kafka_batch.partitions"]) == (digest, "2"), summary
        assert summary["kafka_batch.batch_id"] == entries[-1]["batch_id"]
    if is_local(table):  # DuckDB's S3 access needs its httpfs extension and credentials: local only
        keys = duckdb_keys(table)
        assert sorted(keys) == sorted(offsets_of(topic, {0: 13, 1: 13})), f"DuckDB read {len(keys)} rows"


def test_a_write_whose_kafka_commit_never_happened_is_repaired_without_a_new_table_commit(
    spark, kafka_config, new_topic, group_id, local_table
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 10))
    crashed = write_without_commit(spark, kafka_config, local_table, group_id, [topic])
    commits = table_commits(local_table)
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: None, 1: None}

    outcome, _ = run_batch(spark, kafka_config, local_table, group_id, [topic])

    assert outcome.repaired == [crashed.batch_id] and outcome.plan.ranges == ()
    assert table_commits(local_table) == commits, "the repair must not add a table commit"
    assert group_offsets(kafka_config, group_id, topic, 2) == {0: 5, 1: 5}
    assert_exactly_once(local_table, offsets_of(topic, {0: 5, 1: 5}))


def test_a_deleted_group_resumes_from_the_table(spark, kafka_config, new_topic, group_id, local_table):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 20))
    run_batch(spark, kafka_config, local_table, group_id, [topic])
    delete_group(kafka_config, group_id)
    produce(kafka_config, topic, sample_records(2, 6, first_id=20))

    outcome, committed = run_batch(spark, kafka_config, local_table, group_id, [topic])

    assert [(r.start, r.end) for r in outcome.plan.readable_ranges] == [(10, 13), (10, 13)]
    assert any("resuming from the output's log at 10" in note for note in outcome.notes), outcome.notes
    assert committed == {f"{topic}:0": 13, f"{topic}:1": 13}
    assert_exactly_once(local_table, offsets_of(topic, {0: 13, 1: 13}))


def test_two_writers_at_once_one_wins_and_readers_never_see_duplicates(spark, kafka_config, new_topic, group_id, table):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 40))
    store = table.store()
    dag = plan_batch(KafkaOffsets(kafka_config), store, group_id, [topic], PlanPolicy()).plan
    by_hand = plan_batch(KafkaOffsets(kafka_config), store, group_id, [topic], PlanPolicy(), partitions=[0]).plan
    assert dag.seq == by_hand.seq and dag.batch_id != by_hand.batch_id
    won, lost = race_two_writes(spark, kafka_config, table, dag, by_hand)
    with pytest.raises(LogConflictError):
        commit_batch(KafkaOffsets(kafka_config), store, lost)
    commit_batch(KafkaOffsets(kafka_config), store, won)
    assert_exactly_once(table, offsets_of(topic, {0: 20, 1: 20} if won is dag else {0: 20}))
    assert [e["batch_id"] for e in table.store().log.entries()] == [won.batch_id]
    run_batch(spark, kafka_config, table, group_id, [topic])
    assert_exactly_once(table, offsets_of(topic, {0: 20, 1: 20}))


def test_a_stale_table_commit_is_refused_not_rebased(spark, kafka_config, new_topic, group_id, local_table):
    # Both libraries rebase an append over a concurrent one by default; the sink must not.
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 10))
    plan = write_without_commit(spark, kafka_config, local_table, group_id, [topic])
    sink = local_table.store().sink
    entry = sink.entry(plan.seq)
    forged = {**entry, "batch_id": "b-forged", "files": [], "rows": 0, "location": None}
    assert sink.append(forged) is False, "a second batch for a taken sequence number must be refused"
    assert [e["batch_id"] for e in sink.entries()] == [plan.batch_id]


def test_a_commit_from_a_table_state_another_batch_moved_on_from_fails_rather_than_rebases(
    spark, kafka_config, new_topic, group_id, local_table
):
    from deltalake.exceptions import CommitFailedError
    from pyiceberg.exceptions import CommitFailedException

    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 5))
    run_batch(spark, kafka_config, local_table, group_id, [topic])
    slow_writer = local_table.store().sink
    stale = slow_writer.table()  # what a slow writer saw: batch 1 as the newest
    produce(kafka_config, topic, sample_records(1, 5, first_id=5))
    run_batch(spark, kafka_config, local_table, group_id, [topic])  # batch 2 lands meanwhile
    second = local_table.store().log.tail()
    forged = {**second, "batch_id": "b-slow-writer", "files": [], "rows": 0, "location": None}

    with pytest.raises((CommitFailedError, CommitFailedException)):
        slow_writer._commit(stale, forged)  # the libraries' own retries would rebase it onto batch 2
    assert [e["batch_id"] for e in local_table.store().log.entries()][-1] == second["batch_id"]
    assert_exactly_once(local_table, offsets_of(topic, {0: 10}))


def test_the_transactional_topic_gaps_and_a_trailing_marker(
    spark, kafka_config, kafka_broker_kind, new_topic, group_id, local_table
):
    topic = new_topic(partitions=1)
    produce_committed_aborted_committed(kafka_config, topic)

    _, committed = run_batch(spark, kafka_config, local_table, group_id, [topic])

    assert committed == {f"{topic}:0": 8}, "the batch ends after the trailing control record"
    rows = local_table.read(["offset", "value"]).to_pylist()
    assert {b"committed-0", b"committed-1", b"committed-2", b"committed-3"} <= {r["value"] for r in rows}
    # tansu delivers aborted records to read_committed readers (design.md); real Kafka does
    # not. Either way control records (3, 5, 7) are never rows, and nothing is doubled.
    offsets = [r["offset"] for r in rows]
    assert not set(offsets) & {3, 5, 7} and len(offsets) == len(set(offsets)), sorted(offsets)
    if kafka_broker_kind != "tansu":
        assert sorted(offsets) == [0, 1, 2, 6], "read_committed: the aborted record (4) is not a row"
    assert local_table.store().log.tail()["rows"] == len(offsets)
    commits = table_commits(local_table)
    _, committed = run_batch(spark, kafka_config, local_table, group_id, [topic])
    assert committed == {} and table_commits(local_table) == commits, "nothing new: no table commit"


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_partitioned_by_the_records_date(spark, kafka_config, new_topic, group_id, tmp_path, request, fmt):
    topic = new_topic(partitions=1)
    day = 86_400_000
    base = 1_790_000_000_000 - 1_790_000_000_000 % day  # a midnight, UTC

    def produce_days(first: int, count: int) -> None:
        records = [Record(0, f"r{i}".encode(), timestamp_ms=base + (i % 2) * day) for i in range(first, first + count)]
        produce(kafka_config, topic, records)

    produce_days(0, 6)
    output = make_table(request, tmp_path, fmt, "local", partition_by="date")
    run_batch(spark, kafka_config, output, group_id, [topic])

    assert_exactly_once(output, {(topic, 0, o) for o in range(6)})
    entry = output.store().log.tail()
    dates = sorted((f.get("partition") or {}).get("date") for f in entry["files"])
    assert len(set(dates)) == 2, f"one file per date per task, found partitions {dates}"
    if fmt == "delta":
        assert output.store().sink.table().metadata().partition_columns == ["date"]
        assert sorted({str(d) for d in output.read(["date"]).column("date").to_pylist()}) == sorted(set(dates))
    else:
        assert [f.name for f in output.store().sink.table().spec().fields] == ["timestamp_day"]

    # A run that does not repeat --partition-by follows the table's partitioning.
    produce_days(6, 4)
    same_table = make_table(request, tmp_path, fmt, "local")
    run_batch(spark, kafka_config, same_table, group_id, [topic])
    assert_exactly_once(same_table, {(topic, 0, o) for o in range(10)})
    dates = sorted((f.get("partition") or {}).get("date") for f in same_table.store().log.tail()["files"])
    assert len(set(dates)) == 2, f"the second batch is split by date like the table, found {dates}"

    # An unpartitioned table asked for date partitioning is refused, before anything changes.
    (tmp_path / "plain").mkdir()
    plain = make_table(request, tmp_path / "plain", fmt, "local")
    run_batch(spark, kafka_config, plain, f"{group_id}-plain", [topic])
    asked = make_table(request, tmp_path / "plain", fmt, "local", partition_by="date")
    with pytest.raises(ConfigError, match="partitioned by nothing, this run asks for"):
        asked.store()


def test_cli_runs_iceberg_with_catalog_secrets_in_a_file_and_prints_the_tables_batches(
    kafka_config, kafka_bootstrap_servers, new_topic, group_id, tmp_path, s3_server, new_s3_output, spark_connect_remote
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 20))
    options = s3_server.storage_options()
    secret = options["secret"]
    catalog_file = tmp_path / "catalog.json"
    catalog_file.write_text(json.dumps({"s3.secret-access-key": secret, "s3.access-key-id": options["key"]}))
    table_args = [
        "--format",
        "iceberg",
        "--table",
        "lake.cli_events",
        "--catalog-property",
        "type=sql",
        "--catalog-property",
        f"uri=sqlite:///{tmp_path}/catalog.db",
        "--catalog-property",
        f"warehouse={new_s3_output('iceberg cli')}",
        "--catalog-property",
        f"s3.endpoint={options['client_kwargs']['endpoint_url']}",
        "--catalog-property",
        f"s3.region={options['client_kwargs']['region_name']}",
        "--catalog-properties-file",
        str(catalog_file),
    ]
    common = ["--bootstrap-servers", kafka_bootstrap_servers, "--topic", topic, "--group", group_id]

    # Through the session's Spark Connect server: the catalog is opened by this CLI process (the driver).
    result = cli("run", *common, *table_args, "--spark-remote", spark_connect_remote)
    ran = last_json(result)
    assert ran["records"] == 20 and ran["committed"] == {f"{topic}:0": 10, f"{topic}:1": 10}
    assert secret not in result.stdout + result.stderr

    listed = cli("table", *table_args)
    assert listed.returncode == 0, listed.stderr
    batches = last_json(listed)["batches"]
    assert [(b["seq"], b["rows"], b["end_offsets"]) for b in batches] == [(1, 20, {f"{topic}:0": 10, f"{topic}:1": 10})]
    assert batches[0]["batch_id"] in listed.stdout.splitlines()[1], "the human table lists the batch"
    assert secret not in listed.stdout + listed.stderr

    from kafka_batch_provider.output.iceberg import load_catalog

    catalog = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/catalog.db",
        "s3.endpoint": options["client_kwargs"]["endpoint_url"],
        "s3.access-key-id": options["key"],
        "s3.secret-access-key": secret,
        "s3.region": options["client_kwargs"]["region_name"],
    }
    table = load_catalog(catalog).load_table("lake.cli_events")
    stored = json.dumps(table.metadata.model_dump(mode="json")) + json.dumps(
        [s.summary.additional_properties for s in table.snapshots()]
    )
    assert secret not in stored, "the catalog secret must not reach the table's metadata or snapshot summaries"

    refused = cli("table", *table_args[:-2], "--catalog-property", f"s3.secret-access-key={secret}")
    assert_one_line_error(refused, "would show the secret in ps and shell history")


def test_cli_delta_refuses_bad_input_with_one_line_and_changes_nothing(kafka_bootstrap_servers, group_id, tmp_path):
    out = tmp_path / "delta"
    result = cli(
        "plan",
        "--bootstrap-servers",
        kafka_bootstrap_servers,
        "--topic",
        "no-such-topic-xyz",
        "--group",
        group_id,
        "--format",
        "delta",
        "--output",
        str(out),
    )
    assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not out.exists(), f"a refused plan must leave nothing behind, found {list(out.rglob('*'))}"
    assert_one_line_error(
        cli("table", "--format", "iceberg", "--table", "x"), "--format=iceberg needs --table=NAMESPACE.NAME"
    )
    assert_one_line_error(
        cli("table", "--format", "parquet", "--output", str(out), "--partition-by", "date"),
        "--partition-by applies to --format=delta or --format=iceberg",
    )


def forget_batch_commits(output: TableOutput) -> None:
    """What table upkeep does to old commits: Delta log cleanup after a checkpoint, Iceberg snapshot expiry."""
    sink = output.store().sink
    table = sink.table()
    if output.format == "delta":
        # A commit that is not a batch (here: the retention setting itself), a checkpoint, then cleanup.
        table.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
        table.create_checkpoint()
        table.cleanup_metadata()
        assert not [h for h in table.history() if "kafka_batch.manifest" in h], "no batch commit is left"
        return
    with table.transaction() as transaction:  # a commit by another tool becomes the current snapshot
        with transaction.update_snapshot().fast_append():
            pass
    table = sink.table()
    batches = [s.snapshot_id for s in table.snapshots() if "kafka_batch.seq" in s.summary.additional_properties]
    table.maintenance.expire_snapshots().by_ids(batches).commit()


def test_a_table_that_forgot_its_batch_commits_still_knows_its_offsets_and_next_entry(
    spark, kafka_config, new_topic, group_id, local_table
):
    topic = new_topic(partitions=2)
    produce(kafka_config, topic, sample_records(2, 10))
    run_batch(spark, kafka_config, local_table, group_id, [topic])
    produce(kafka_config, topic, sample_records(2, 4, first_id=10))
    run_batch(spark, kafka_config, local_table, group_id, [topic])
    forget_batch_commits(local_table)

    tail = local_table.store().log.tail()
    assert (tail["seq"], tail.get("forgotten_by_table")) == (2, True), (
        f"the newest batch must be found from its saved manifest, found {tail and (tail['seq'], tail.keys())}"
    )
    assert tail["offsets"] == {f"{topic}:0": 7, f"{topic}:1": 7}
    # The worst case: the group is gone as well. The table's offsets decide, and entry 3 is new.
    delete_group(kafka_config, group_id)
    produce(kafka_config, topic, sample_records(2, 2, first_id=14))
    _, committed = run_batch(spark, kafka_config, local_table, group_id, [topic])
    assert committed == {f"{topic}:0": 8, f"{topic}:1": 8}
    assert local_table.store().log.tail()["seq"] == 3, "an entry number is never given twice"
    assert_exactly_once(local_table, offsets_of(topic, {0: 8, 1: 8}))


def json_records(ids: range, partition: int = 0) -> list[Record]:
    return [Record(partition, json.dumps({"id": i, "name": f"n{i}"}).encode()) for i in ids]


def test_nested_columns_are_added_and_a_changed_column_type_is_refused(
    spark, kafka_config, new_topic, group_id, local_table
):
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, json_records(range(0, 3)))
    run_batch(spark, kafka_config, local_table, group_id, [topic], value_format="json", value_schema="id long")
    produce(kafka_config, topic, json_records(range(3, 5)))
    run_batch(
        spark, kafka_config, local_table, group_id, [topic], value_format="json", value_schema="id long, name string"
    )
    rows = sorted(local_table.read(["offset", "value_json"]).to_pylist(), key=lambda r: r["offset"])
    names = [(r["value_json"] or {}).get("name") for r in rows]
    assert names == [None, None, None, "n3", "n4"], f"value_json.name is a new nested column, found {names}"

    produce(kafka_config, topic, json_records(range(5, 7)))
    commits = table_commits(local_table)
    with pytest.raises(ConfigError) as refused:
        run_batch(spark, kafka_config, local_table, group_id, [topic], value_format="json", value_schema="id string")
    message = str(refused.value)
    assert "\n" not in message and "column value_json.id is int64 in the table but string" in message, message
    assert table_commits(local_table) == commits, "a refused batch adds no table commit"
    assert group_offsets(kafka_config, group_id, topic, 1) == {0: 5}, "the group did not move"


def staged_attempt(output: TableOutput, batch_id: str, attempt: str, rows: int) -> dict:
    """A batch's attempt as the Spark tasks leave it: one Parquet file in data/<batch>/<attempt>/,
    and the manifest the write step would append."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kafka_batch_provider.output.tables import KAFKA_SCHEMA

    store = output.store()
    folder = f"data/{batch_id}/{attempt}"
    columns = {f.name: pa.nulls(rows, f.type) for f in KAFKA_SCHEMA}
    columns.update(topic=pa.array(["t"] * rows), partition=pa.array([0] * rows, pa.int32()))
    columns["offset"] = pa.array(range(rows), pa.int64())
    with store.data.write_stream(f"{folder}/part-0.parquet") as f:
        pq.write_table(pa.table(columns, schema=KAFKA_SCHEMA), f)
    size = store.data.file_sizes(folder)["part-0.parquet"]
    return one_partition_manifest(batch_id, rows, folder, folder, size)


def test_a_late_attempt_of_a_committed_batch_drops_its_own_files_never_the_committed_ones(local_table):
    # Airflow retried the write while the first attempt still ran (a zombie): both reach the commit.
    first, late = staged_attempt(local_table, "b-1", "aaaa", 5), staged_attempt(local_table, "b-1", "bbbb", 5)
    late_sink = local_table.store().sink
    assert local_table.store().log.append(first) is True
    late_store = local_table.store()
    late_sink.save_manifest(late)  # the late attempt got past its own checks before the first committed
    assert late_store.log.append(late) is False
    plan = type("Plan", (), {"seq": 1, "batch_id": "b-1", "mode": "incremental"})()
    winner = late_store.commit_entry(plan, late)  # what the write step does when its append is refused
    assert winner["location"] == "data/b-1/aaaa", f"the committed attempt is the first, found {winner['location']}"
    late_store.clean_staging("b-1", keep=winner["staging"])
    assert local_table.read(["offset"]).num_rows == 5, "the table still reads: the committed files are in place"
    from kafka_batch_provider.output.tables import BATCHES

    saved = late_store.data.list_names(BATCHES)
    assert saved == [f"{1:020d}-b-1-aaaa.json"], f"only the committed attempt's manifest stays, found {saved}"


def test_an_iceberg_rollback_stays_a_rollback_after_the_rolled_back_snapshot_expires(request, tmp_path):
    local_table = make_table(request, tmp_path, "iceberg", "local")
    first = staged_attempt(local_table, "b-1", "aaaa", 5)
    assert local_table.store().log.append(first) is True
    second = {**staged_attempt(local_table, "b-2", "cccc", 7), "seq": 2, "previous": "b-1", "offsets": {"t:0": 12}}
    assert local_table.store().log.append(second) is True
    table = local_table.store().sink.table()
    by_seq = {s.summary.additional_properties.get("kafka_batch.seq"): s.snapshot_id for s in table.snapshots()}
    table.manage_snapshots().rollback_to_snapshot(by_seq["1"]).commit()
    assert local_table.store().log.tail()["seq"] == 1, "after the rollback the table's state ends at batch 1"
    local_table.store().sink.table().maintenance.expire_snapshots().by_id(by_seq["2"]).commit()
    tail = local_table.store().log.tail()
    assert (tail["seq"], tail.get("forgotten_by_table")) == (1, None), (
        f"an expired rolled-back batch is not in the table's data: expected batch 1, found {tail['seq']}"
    )


def test_a_delta_table_restored_to_before_a_batch_is_refused_in_one_line(request, tmp_path):
    local_table = make_table(request, tmp_path, "delta", "local")
    assert local_table.store().log.append(staged_attempt(local_table, "b-1", "aaaa", 5)) is True
    second = {**staged_attempt(local_table, "b-2", "cccc", 7), "seq": 2, "previous": "b-1", "offsets": {"t:0": 12}}
    assert local_table.store().log.append(second) is True
    local_table.store().sink.table().restore(0)  # back to batch 1: batch 2's rows leave, its txn offsets stay
    with pytest.raises(ManifestError) as refused:
        local_table.store().log.tail()
    assert "\n" not in str(refused.value) and "was restored (version 2) to before a batch's commit" in str(
        refused.value
    ), str(refused.value)


def append_batches(output: TableOutput, count: int, rows: int = 5) -> None:
    """``count`` batches straight into the sink, as the write step appends them."""
    for seq in range(1, count + 1):
        manifest = staged_attempt(output, f"b-{seq}", f"a00{seq}", rows)
        previous = f"b-{seq - 1}" if seq > 1 else None
        ranges = [{"topic": "t", "partition": 0, "start": rows * (seq - 1), "end": rows * seq, "rows": rows}]
        manifest.update(seq=seq, previous=previous, offsets={"t:0": rows * seq}, ranges=ranges)
        assert output.store().log.append(manifest) is True, f"batch {seq} must be appended"


def test_an_older_batch_whose_iceberg_snapshot_expired_is_still_committed_and_never_cleaned(request, tmp_path):
    from kafka_batch_provider.errors import CommitConflictError

    output = make_table(request, tmp_path, "iceberg", "local")
    append_batches(output, 3)
    table = output.store().sink.table()
    first = next(s for s in table.snapshots() if s.summary.additional_properties.get("kafka_batch.seq") == "1")
    table.maintenance.expire_snapshots().by_id(first.snapshot_id).commit()  # ordinary age-based expiry
    store = output.store()
    entry = store.log.entry(1)
    assert entry is not None and entry["batch_id"] == "b-1", f"batch 1 is still committed, found {entry}"
    with pytest.raises(CommitConflictError):  # what drop_stale_plans does with a plan that lost its entry
        store.remove_unpublished_plan_file(1, "b-1")
    assert output.read(["offset"]).num_rows == 15, "all three batches' files are in place"


def test_an_iceberg_format_version_1_table_still_tells_expiry_from_rollback(request, tmp_path):
    from kafka_batch_provider.output.iceberg import load_catalog
    from kafka_batch_provider.output.tables import KAFKA_SCHEMA

    output = make_table(request, tmp_path, "iceberg", "local")
    catalog = load_catalog(output.catalog)
    catalog.create_namespace("lake")
    catalog.create_table("lake.events", schema=KAFKA_SCHEMA, properties={"format-version": "1"})
    append_batches(output, 2)
    table = output.store().sink.table()
    with table.transaction() as transaction:  # another tool's commit, then expiry of both batches
        with transaction.update_snapshot().fast_append():
            pass
    table = output.store().sink.table()
    batches = [s.snapshot_id for s in table.snapshots() if "kafka_batch.seq" in s.summary.additional_properties]
    table.maintenance.expire_snapshots().by_ids(batches).commit()
    tail = output.store().log.tail()
    assert tail is not None and (tail["seq"], tail.get("forgotten_by_table")) == (2, True), tail


def test_a_delta_restore_forward_by_time_is_not_refused(request, tmp_path):
    import time
    from datetime import datetime, timezone

    output = make_table(request, tmp_path, "delta", "local")
    append_batches(output, 2)
    output.store().sink.table().alter.set_table_properties({"delta.appendOnly": "false"})
    time.sleep(1.1)
    after_both = datetime.now(timezone.utc)
    time.sleep(1.1)
    output.store().sink.table().delete()  # another tool's bad delete
    output.store().sink.table().restore(after_both)  # back to after both batches
    assert output.store().log.tail()["seq"] == 2
    assert output.read(["offset"]).num_rows == 10, "the restore brought both batches' rows back"


def append_replay(output: TableOutput, plan) -> None:
    """The replay ``plan``'s batch, appended as the write step appends it (one file per batch)."""
    rows = sum(r.end - r.start for r in plan.ranges)
    manifest = staged_attempt(output, plan.batch_id, "a001", rows)
    ranges = [{**r.to_dict(), "rows": r.end - r.start} for r in plan.ranges]
    previous = None if plan.previous is None else {"seq": plan.seq - 1, "batch_id": plan.previous}
    manifest.update(
        seq=plan.seq, previous=previous, mode="replay", offsets={}, ranges=ranges, topic_ids=dict(plan.topic_ids)
    )
    assert output.store().log.append(manifest) is True, f"replay batch {plan.seq} must be appended"


def test_a_replay_already_in_a_table_is_still_known_after_upkeep_forgot_its_commits(
    kafka_config, new_topic, local_table
):
    from kafka_batch_provider.errors import PlanError
    from kafka_batch_provider.steps.replay import plan_replay_batch

    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 30))
    kafka = KafkaOffsets(kafka_config)
    replayed = []
    for start, end in ((0, 10), (10, 20)):
        outcome = plan_replay_batch(kafka, local_table.store(), [topic], start_offsets={0: start}, end_offsets={0: end})
        append_replay(local_table, outcome.plan)
        replayed.append(outcome.plan.batch_id)
    # A losing attempt's leftover at entry 1 (another batch id): entry 2's link tells them apart.
    from kafka_batch_provider.output.tables import BATCHES

    store = local_table.store()
    loser = {**json.loads(store.data.read_bytes(f"{BATCHES}/{store.data.list_names(BATCHES)[0]}")), "batch_id": "b-0"}
    store.data.put_atomic(f"{BATCHES}/{1:020d}-b-0-zzzz.json", json.dumps(loser).encode())
    forget_batch_commits(local_table)

    listed = [(e["seq"], e["batch_id"]) for e in local_table.store().log.entries()]
    assert listed == [(1, replayed[0]), (2, replayed[1])], f"expected both replays in the log, found {listed}"
    again = plan_replay_batch(kafka, local_table.store(), [topic], start_offsets={0: 0}, end_offsets={0: 10})
    assert again.notes == [f"already replayed as batch {replayed[0]}"] and not again.plan.ranges, (
        f"a range already in the table must not be planned again, found {again.plan.ranges} {again.notes}"
    )
    with pytest.raises(PlanError) as refused:
        plan_replay_batch(kafka, local_table.store(), [topic], start_offsets={0: 5}, end_offsets={0: 15})
    assert f"overlaps {topic}[0] [0, 10) of batch {replayed[0]}" in str(refused.value), str(refused.value)
    report = last_json(cli("table", *local_table.cli_args()))
    assert [b["batch_id"] for b in report["batches"]] == replayed, f"kafka-batch table lists both, found {report}"
    newest = last_json(cli("table", *local_table.cli_args(), "--last", "1"))
    assert [b["batch_id"] for b in newest["batches"]] == replayed[1:], f"--last 1: the newest, found {newest}"


def test_an_iceberg_batch_adds_little_metadata_at_two_thousand_partitions_and_offsets_are_still_checked(
    request, tmp_path
):
    from kafka_batch_provider.output.tables import BATCHES

    output = make_table(request, tmp_path, "iceberg", "local")
    sizes = []
    for seq in (1, 2, 3):
        manifest = staged_attempt(output, f"b-{seq}", f"a00{seq}", 5)
        previous = {"seq": seq - 1, "batch_id": f"b-{seq - 1}"} if seq > 1 else None
        manifest.update(seq=seq, previous=previous, offsets={f"t:{p}": 10 * seq for p in range(2000)})
        assert output.store().log.append(manifest) is True
        sizes.append(os.path.getsize(output.store().sink.table().metadata_location.removeprefix("file://")))
    per_batch = (sizes[2] - sizes[0]) / 2
    assert per_batch < 4096, f"metadata.json grew by {per_batch:.0f} bytes per batch at 2,000 partitions ({sizes})"
    assert output.store().log.tail()["offsets"]["t:1999"] == 30, "the offsets come from the saved manifest"

    store = output.store()
    name = next(n for n in store.data.list_names(BATCHES) if n.startswith(f"{3:020d}-"))
    saved = json.loads(store.data.read_bytes(f"{BATCHES}/{name}"))
    saved["offsets"]["t:7"] = 99  # a manifest that no longer matches its snapshot
    store.data.put_atomic(f"{BATCHES}/{name}", json.dumps(saved).encode())
    with pytest.raises(ManifestError) as refused:
        output.store().log.tail()
    assert "its offsets differ from batch b-3's saved manifest" in str(refused.value), str(refused.value)


def test_a_delta_txn_that_disagrees_with_the_newest_batch_is_refused(request, tmp_path):
    from deltalake import CommitProperties, Transaction, write_deltalake

    from kafka_batch_provider.output.tables import KAFKA_SCHEMA

    output = make_table(request, tmp_path, "delta", "local")
    append_batches(output, 1)
    # Another tool's commit, using our app id for partition t:0 with another offset.
    write_deltalake(
        output.uri,
        KAFKA_SCHEMA.empty_table(),
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction("kafka-batch/g/t:0", 99)]),
    )
    with pytest.raises(ManifestError) as refused:
        output.store().log.tail()
    assert "the txn of t:0 says 99, batch b-1 ended at 5" in str(refused.value), str(refused.value)
