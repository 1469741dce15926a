"""Pure parts of the table outputs: schema changes, plan locations, credentials mapping, secrets."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.kafka.config import is_secret, redact
from kafka_batch_provider.output.delta import delta_storage_options
from kafka_batch_provider.output.formats import OutputSpec, output_of_plan
from kafka_batch_provider.output.location import Location
from kafka_batch_provider.output.tables import relaxed_schema, schema_change
from kafka_batch_provider.spark.submit import application_args

TABLE = pa.schema(
    [
        ("offset", pa.int64()),
        ("value_json", pa.struct([("id", pa.int64())])),
        ("headers", pa.list_(pa.struct([("key", pa.string())]))),
    ]
)


def test_new_columns_are_found_at_any_depth():
    files = pa.schema(
        [
            ("offset", pa.int64()),
            ("value_json", pa.struct([("id", pa.int64()), ("name", pa.string())])),
            ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
            ("value_string", pa.string()),
        ]
    )
    assert schema_change(TABLE, files, "t").added == ["value_json.name", "headers.element.value", "value_string"]


def test_the_same_values_in_another_arrow_encoding_are_not_a_change():
    # Readers hand large/view types back (pyiceberg, delta-rs) for what pyarrow wrote as plain ones.
    table = pa.schema(
        [("k", pa.large_binary()), ("t", pa.timestamp("us", tz="+00:00")), ("l", pa.large_list(pa.string()))]
    )
    files = pa.schema([("k", pa.binary()), ("t", pa.timestamp("us", tz="UTC")), ("l", pa.list_(pa.large_string()))])
    assert schema_change(table, files, "t").added == []


def test_maps_are_compared_inside_and_their_encodings_and_nullability_do_not_count():
    table = pa.schema([("m", pa.map_(pa.large_string(), pa.struct([("a", pa.int32())])))])
    same = pa.schema([("m", pa.map_(pa.string(), pa.field("v", pa.struct([("a", pa.int32())]), nullable=False)))])
    wider = pa.schema([("m", pa.map_(pa.string(), pa.struct([("a", pa.int32()), ("b", pa.string())])))])
    assert schema_change(table, same, "t").added == []
    assert schema_change(table, wider, "t").added == ["m.value.b"]
    with pytest.raises(ConfigError, match="column m.key is string in the table but int64"):
        schema_change(table, pa.schema([("m", pa.map_(pa.int64(), pa.struct([("a", pa.int32())])))]), "t")


def test_columns_a_batch_makes_nullable_are_found_at_any_depth_and_relaxed_alone():
    required = pa.field("qty", pa.int32(), nullable=False)
    table = pa.schema(
        [
            ("id", pa.int64()),
            ("line", pa.struct([pa.field("sku", pa.string(), nullable=False), required])),
            ("tags", pa.list_(pa.field("element", pa.int32(), nullable=False))),
            ("counts", pa.map_(pa.string(), pa.field("value", pa.int64(), nullable=False))),
        ]
    )
    files = pa.schema(
        [
            ("id", pa.int64()),
            ("line", pa.struct([pa.field("sku", pa.string(), nullable=False), required.with_nullable(True)])),
            ("tags", pa.list_(pa.field("element", pa.int32()))),
            ("counts", pa.map_(pa.string(), pa.int64())),
        ]
    )
    change = schema_change(table, files, "t")
    expected = ["line.qty", "tags.element", "counts.value"]
    assert change.relaxed == expected and change.added == [], f"expected {expected} relaxed, found {change}"
    relaxed = relaxed_schema(table, files)
    assert not schema_change(relaxed, files, "t"), f"the relaxed schema still differs: {relaxed}"
    assert relaxed.field("line").type.field("sku").nullable is False, "a field the batch keeps required stays so"
    narrower = schema_change(files, table, "t")
    assert not narrower, f"a batch holding nullable columns as never null is no change, found {narrower}"


def test_numbers_a_batch_promotes_are_a_change_only_where_the_format_widens_columns():
    table = pa.schema([("n", pa.int32()), ("line", pa.struct([("q", pa.float32())])), ("m", pa.int64())])
    files = pa.schema([("n", pa.int64()), ("line", pa.struct([("q", pa.float64())])), ("m", pa.int32())])
    change = schema_change(table, files, "t", promotions=True)
    assert change.promoted == ["n", "line.q"], f"expected n and line.q promoted (m narrower is no change): {change}"
    with pytest.raises(ConfigError, match="column n is int32 in the table but int64 in this batch"):
        schema_change(table, files, "t")
    with pytest.raises(ConfigError, match="column n is int32 in the table but string"):
        schema_change(table, pa.schema([("n", pa.string())]), "t", promotions=True)


def test_saved_manifest_names_tell_seq_batch_and_attempt_apart():
    from kafka_batch_provider.output.tables import parse_saved_name, saved_name

    name = saved_name({"seq": 7, "batch_id": "b-0a1b", "location": "data/b-0a1b/1f2e3d4c"})
    assert name == f"_kafka_batch/_batches/{7:020d}-b-0a1b-1f2e3d4c.json"
    assert parse_saved_name(name.rpartition("/")[2]) == (7, "b-0a1b", "1f2e3d4c")
    assert saved_name({"seq": 8, "batch_id": "b-9", "location": None}).endswith("-b-9-none.json")


@pytest.mark.parametrize(
    "files, column",
    [
        (pa.schema([("value_json", pa.struct([("id", pa.string())]))]), "value_json.id"),
        (pa.schema([("value_json", pa.string())]), "value_json"),
        (pa.schema([("offset", pa.int32())]), "offset"),
    ],
)
def test_a_column_of_another_type_is_refused_in_one_line(files, column):
    with pytest.raises(ConfigError) as refused:
        schema_change(TABLE, files, "Delta table t")
    message = str(refused.value)
    assert "\n" not in message and f"column {column} is " in message and message.startswith("Delta table t"), message


def test_a_delta_plan_names_its_table_above_the_control_folder():
    assert output_of_plan("delta", "s3://b/events/_kafka_batch/_plans/1-b-x.json") == "s3://b/events"
    assert output_of_plan("parquet", "/lake/out/_plans/1-b-x.json") == "/lake/out"
    with pytest.raises(ConfigError, match="is not a plan of a Delta table"):
        output_of_plan("delta", "/lake/out/_plans/1-b-x.json")


def test_application_arguments_carry_the_output_and_its_partitioning_never_a_secret():
    spec = OutputSpec(
        format="iceberg",
        table="lake.events",
        catalog_properties={"type": "rest", "credential": "id:s3cr3t"},
        partition_by="date",
    )
    args = application_args("/w/_kafka_batch/_plans/1-b.json", spec, WriteOptions())
    assert args[:8] == [
        "--plan",
        "/w/_kafka_batch/_plans/1-b.json",
        "--format",
        "iceberg",
        "--table",
        "lake.events",
        "--partition-by",
        "date",
    ]
    assert not any("s3cr3t" in a for a in args) and "s3cr3t" not in repr(spec)


@pytest.mark.parametrize(
    "uri, options, expected",
    [
        (
            "s3://b/t",
            {"key": "AK", "secret": "SK", "client_kwargs": {"endpoint_url": "http://127.0.0.1:9", "region_name": "r"}},
            {
                "conditional_put": "etag",
                "AWS_ACCESS_KEY_ID": "AK",
                "AWS_SECRET_ACCESS_KEY": "SK",
                "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
                "AWS_REGION": "r",
                "AWS_ALLOW_HTTP": "true",
            },
        ),
        (
            "gs://b/t",
            {"token": {"type": "service_account"}},
            {"google_service_account_key": '{"type": "service_account"}'},
        ),
        ("gs://b/t", {"token": "/keys/sa.json"}, {"google_service_account": "/keys/sa.json"}),
        ("gs://b/t", {"token": "google_default"}, {}),
        (
            "abfs://c/t",
            {"connection_string": "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5=="},
            {"azure_storage_account_name": "acct", "azure_storage_account_key": "a2V5=="},
        ),
        (
            "abfs://c/t",
            {"connection_string": "AccountName=dev;AccountKey=a2V5==;BlobEndpoint=http://127.0.0.1:10000/dev;"},
            {
                "azure_storage_account_name": "dev",
                "azure_storage_account_key": "a2V5==",
                "azure_storage_endpoint": "http://127.0.0.1:10000/dev",
                "allow_http": "true",
            },
        ),
        (
            "abfs://c/t",
            {"account_name": "acct", "sas_token": "sv=1", "delta_options": {"azure_use_fabric_endpoint": True}},
            {
                "azure_storage_account_name": "acct",
                "azure_storage_sas_key": "sv=1",
                "azure_use_fabric_endpoint": "True",
            },
        ),
    ],
)
def test_delta_gets_the_credentials_of_every_object_store(uri, options, expected):
    assert delta_storage_options(Location(uri, options)) == expected


@pytest.mark.parametrize(
    "key, value",
    [
        ("account_key", "x"),
        ("connection_string", "x"),
        ("sas_token", "x"),
        ("s3.access-key-id", "x"),
        ("azure_storage_sas_key", "x"),
        ("uri", "postgresql://ingest:pw@db:5432/catalog"),
        ("uri", "postgresql://ingest:pw/with/slash@db/catalog"),
    ],
)
def test_secrets_are_known_by_name_or_by_a_password_in_a_uri(key, value):
    assert is_secret(key, value) and redact({key: value}) == {key: "***"}


@pytest.mark.parametrize(
    "key, value", [("uri", "postgresql://db:5432/catalog"), ("sasl.mechanism", "PLAIN"), ("type", "rest")]
)
def test_plain_settings_are_not_secrets(key, value):
    assert not is_secret(key, value)


def test_the_iceberg_catalog_is_opened_under_the_name_readers_use(tmp_path):
    from kafka_batch_provider.output.iceberg import DEFAULT_CATALOG_NAME, load_catalog

    sql = {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": f"file://{tmp_path}"}
    assert load_catalog(sql).name == DEFAULT_CATALOG_NAME == "kafka_batch"
    named = load_catalog({**sql, "name": "prod"})
    assert named.name == "prod" and "name" not in named.properties, "name chooses the catalog, it is no property"


def test_a_delta_table_on_a_store_that_ignores_conditional_writes_is_refused_before_its_first_commit(tmp_path):
    from kafka_batch_provider.errors import StorageError
    from kafka_batch_provider.output.delta import DeltaSink
    from tests.unit.output.test_location_log_and_store import IgnoresConditions

    sink = DeltaSink(IgnoresConditions(str(tmp_path / "table")))
    with pytest.raises(StorageError, match="accepts a second create of the same name") as refused:
        sink.commit_once(None, {"seq": 1, "batch_id": "b-1", "ranges": []})
    assert not refused.value.transient, "the same store refuses every retry the same way: no retry"
    assert not (tmp_path / "table" / "_delta_log").exists() or not any((tmp_path / "table" / "_delta_log").iterdir()), (
        "a refused table must not get a first commit"
    )


def test_a_delta_table_with_delta_rs_locking_provider_needs_no_conditional_writes(tmp_path):
    from kafka_batch_provider.output.delta import DeltaSink
    from tests.unit.output.test_location_log_and_store import IgnoresConditions

    options = {"delta_options": {"AWS_S3_LOCKING_PROVIDER": "dynamodb"}}
    sink = DeltaSink(IgnoresConditions(str(tmp_path / "table"), options))
    sink.refuse_unconditional_store()  # the locking provider makes commits exclusive: no refusal


def test_a_table_per_topic_hands_the_application_every_plan_and_the_template():
    from kafka_batch_provider.spark.app import parse_args

    spec = OutputSpec("delta", output="s3://lake/{topic}", storage_options={"key": "s3cr3t"})
    paths = ["s3://lake/a/_kafka_batch/_plans/1-b-a.json", "s3://lake/b/_kafka_batch/_plans/3-b-b.json"]
    args = application_args(paths, spec, WriteOptions(max_tasks=4))
    parsed = parse_args(args)
    assert (parsed.plan, parsed.output, parsed.format, parsed.max_tasks) == (paths, "s3://lake/{topic}", "delta", 4)
    assert not any("s3cr3t" in a for a in args)


def test_a_delta_tables_files_are_pruned_by_an_integer_keys_range_and_never_by_text(tmp_path):
    # (a moved row's old key is looked up file by file: only files whose statistics may hold it are read)
    from deltalake import DeltaTable, write_deltalake

    from kafka_batch_provider.output.delta import files_holding

    where = str(tmp_path / "t")
    write_deltalake(where, pa.table({"id": [1, 2], "name": ["a", "b"]}))
    write_deltalake(where, pa.table({"id": [9, 12], "name": ["y", "z"]}), mode="append")
    table = DeltaTable(where)
    holding, every = files_holding(table, "id", [10, 11])
    low = {f.path for f in table.to_pyarrow_dataset().get_fragments() if f.to_table().column("id")[0].as_py() == 1}
    assert len(every) == 2 and holding == every - low, f"expected only the 9..12 file, found {holding} of {every}"
    assert files_holding(table, "name", ["y"]) is None, "text statistics may be cut short: no pruning by them"
