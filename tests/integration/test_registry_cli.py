"""Registry formats as a user meets them on the command line: a real broker, the embedded schema
registry over HTTP, ``kafka-batch run`` on the worker's Spark Connect server (a registry format
through spark-submit: tests/integration/test_avro_batches.py), each output read back by its own
readers.

Each test stands for a defect a review reproduced this way (schemas with references, defaults of
byte types, JSON Schema references by name, a registry URL with a slash too few, a nested field
made optional, a batch of a newer version read back after compaction); each fails on the code
before its fix.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_batch_provider.output.batch_reader import read_batch
from kafka_batch_provider.testing.producers import Record, produce
from tests.integration.helpers import Output, TableOutput, duckdb_connection, read_dataset
from tests.integration.test_cli import assert_one_line_error, cli, last_json

pytestmark = pytest.mark.integration

ADDRESS = {
    "type": "record",
    "name": "Address",
    "namespace": "shop",
    "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "string"], "default": None}],
}
#: An order that names the address type another subject registers (a registry reference).
ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "ship", "type": "shop.Address"}],
}
#: Version 2 adds fields of the byte types with defaults, as Avro's JSON writes them: code points 0-255.
ORDER_V2 = {
    **ORDER,
    "fields": [
        *ORDER["fields"],
        {"name": "tag", "type": "bytes", "default": "\u00ff\u0001"},
        {"name": "code", "type": {"type": "fixed", "name": "Code", "size": 2}, "default": "\u00ab\u00cd"},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2},
            "default": "\u0001\u0000",  # unscaled 256: 2.56
        },
        {"name": "ratio", "type": "float", "default": 16777217},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 1500},
    ],
}


def run_args(bootstrap: str, topic: str, group: str, output: Output, registry_url: str, *more: str) -> list[str]:
    where = output.cli_args() if isinstance(output, TableOutput) else ["--output", output.uri]
    return [
        "run",
        *("--topic", topic, "--group", group, "--bootstrap-servers", bootstrap),
        *where,
        *("--schema-registry-url", registry_url),
        *more,
    ]


def avro_values(client, topic: str, schema: dict, records: list[dict], references=()) -> list[bytes]:
    serialize = AvroSerializer(client, Schema(json.dumps(schema), "AVRO", list(references)))
    return [serialize(r, SerializationContext(topic, MessageField.VALUE)) for r in records]


def test_avro_values_whose_schema_references_another_subject_land_as_rows_with_its_defaults_as_bytes(
    kafka_config, kafka_bootstrap_servers, new_topic, group_id, schema_registry, tmp_path, spark_connect_remote
):
    topic = new_topic(partitions=1)
    client = SchemaRegistryClient({"url": schema_registry})
    client.register_schema("shop.Address", Schema(json.dumps(ADDRESS), "AVRO"))
    address = [SchemaReference("shop.Address", "shop.Address", 1)]
    first = [{"id": n, "ship": {"city": f"city-{n}", "zip": None if n % 2 else f"{n:05d}"}} for n in range(20)]
    values = avro_values(client, topic, ORDER, first, address)
    # Version 2 is the reader: version 1's records take its defaults; 20 of its own take the block path.
    later = [
        {**o, "id": o["id"] + 100, "tag": b"\x00", "code": b"zz", "price": decimal.Decimal("1.25"), "ratio": 0.5}
        | {"at": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)}
        for o in first
    ]
    values += avro_values(client, topic, ORDER_V2, later, address)
    produce(kafka_config, topic, [Record(0, v) for v in values])
    out = Output(str(tmp_path / "lake"))
    args = run_args(
        kafka_bootstrap_servers, topic, group_id, out, schema_registry, "--spark-remote", spark_connect_remote
    )
    result = last_json(cli(*args, "--value-format", "avro", "--on-bad-record", "dead-letter"))
    assert (result["records"], result.get("dead_letters", 0)) == (40, 0), f"expected 40 rows, no dead letters: {result}"

    rows = sorted(read_dataset(out).to_pylist(), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == [*range(20), *range(100, 120)], f"found ids {[r['id'] for r in rows]}"
    assert rows[2]["ship"] == {"city": "city-2", "zip": "00002"} and rows[3]["ship"]["zip"] is None, rows[2:4]
    defaults = {k: rows[0][k] for k in ("tag", "code", "price", "ratio", "at")}
    expected = {
        "tag": b"\xff\x01",
        "code": b"\xab\xcd",
        "price": decimal.Decimal("2.56"),
        "ratio": 16777216.0,  # 16777217 as a float32 holds it
        "at": dt.datetime(1970, 1, 1, 0, 0, 1, 500000, tzinfo=dt.timezone.utc),
    }
    assert defaults == expected, f"version 1's records should read version 2's defaults {expected}, found {defaults}"
    assert rows[20]["tag"] == b"\x00" and rows[20]["code"] == b"zz", f"version 2's own values: {rows[20]}"


def test_json_schema_references_by_their_registered_name_resolve_as_confluents_deserializer_resolves_them(
    kafka_config, kafka_bootstrap_servers, new_topic, group_id, schema_registry, tmp_path, spark_connect_remote
):
    topic = new_topic(partitions=1)
    client = SchemaRegistryClient({"url": schema_registry})
    address = {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}}}
    client.register_schema("address-json", Schema(json.dumps(address), "JSON"))
    order = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "ship": {"$ref": "address.json"}},
        "required": ["id"],
    }
    serialize = JSONSerializer(
        Schema(json.dumps(order), "JSON", [SchemaReference("address.json", "address-json", 1)]), client
    )
    records = [{"id": n, "ship": {"city": f"c{n}", "zip": f"{n:05d}"}} for n in range(5)]
    context = SerializationContext(topic, MessageField.VALUE)
    produce(kafka_config, topic, [Record(0, serialize(r, context)) for r in records])
    out = Output(str(tmp_path / "lake"))
    args = run_args(kafka_bootstrap_servers, topic, group_id, out, schema_registry)
    result = last_json(
        cli(
            *args,
            "--value-format",
            "json-schema",
            "--on-bad-record",
            "dead-letter",
            "--spark-remote",
            spark_connect_remote,
        )
    )
    assert (result["records"], result.get("dead_letters", 0)) == (5, 0), f"expected 5 rows, no dead letters: {result}"
    rows = sorted(read_dataset(out, ["id", "ship"]).to_pylist(), key=lambda r: r["id"])
    assert rows == records, f"expected the referenced address as a struct {records}, found {rows}"


@pytest.mark.parametrize("url", ["http:/alice:s3cr3t@127.0.0.1:8081", "http:///alice:s3cr3t@127.0.0.1:8081"])
def test_a_registry_url_with_a_slash_too_few_or_many_is_refused_without_its_password(url, tmp_path):
    args = ["run", "--topic", "t", "--group", "g", "--bootstrap-servers", "127.0.0.1:1", "--output", str(tmp_path)]
    result = cli(*args, "--value-format", "avro", "--schema-registry-url", url)
    assert_one_line_error(result, "the schema registry URL carries credentials")
    assert "s3cr3t" not in result.stderr + result.stdout, f"the password was echoed: {result.stderr}"
    assert not list(tmp_path.rglob("*.json")), "a refused run left files"


LINE_V1 = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {
            "name": "line",
            "type": {
                "type": "record",
                "name": "Line",
                "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}],
            },
        },
    ],
}
#: BACKWARD compatible: the nested qty becomes optional (its records may leave it null).
LINE_V2 = {
    **LINE_V1,
    "fields": [
        LINE_V1["fields"][0],
        {
            "name": "line",
            "type": {
                "type": "record",
                "name": "Line",
                "fields": [
                    {"name": "sku", "type": "string"},
                    {"name": "qty", "type": ["null", "int"], "default": None},
                ],
            },
        },
    ],
}


def table_output(fmt: str, tmp_path) -> Output:
    if fmt == "parquet":
        return Output(str(tmp_path / "lake"))
    if fmt == "delta":
        return TableOutput(str(tmp_path / "orders"))
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    return TableOutput("", format="iceberg", table="lake.orders", catalog=catalog)


def duckdb_rows(output: Output) -> list[dict]:
    """The output as DuckDB reads it (its delta and iceberg extensions, or the Parquet files)."""
    if isinstance(output, TableOutput) and output.format == "delta":
        query = f"select id, line from delta_scan('{output.location.uri}')"
    elif isinstance(output, TableOutput):
        metadata = output.store().sink.table().metadata_location.removeprefix("file://")
        query = f"select id, line from iceberg_scan('{metadata}')"
    else:
        query = f"select id, line from read_parquet('{output.uri}/**/*.parquet', union_by_name=true)"
    con = duckdb_connection()
    return sorted(con.sql(query).fetch_arrow_table().to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("fmt", ["parquet", "delta", "iceberg"])
def test_a_nested_field_made_optional_lands_and_every_reader_still_reads_the_table(
    fmt, kafka_config, kafka_bootstrap_servers, new_topic, group_id, schema_registry, tmp_path, spark_connect_remote
):
    topic = new_topic(partitions=1)
    client = SchemaRegistryClient({"url": schema_registry})
    output = table_output(fmt, tmp_path)
    args = run_args(kafka_bootstrap_servers, topic, group_id, output, schema_registry, "--value-format", "avro")
    args += ["--spark-remote", spark_connect_remote]
    first = [{"id": n, "line": {"sku": f"s{n}", "qty": n}} for n in range(3)]
    produce(kafka_config, topic, [Record(0, v) for v in avro_values(client, topic, LINE_V1, first)])
    assert last_json(cli(*args))["records"] == 3
    if fmt != "parquet":
        require_qty(output)  # as earlier builds made the table: the nested field never null

    second = [{"id": n, "line": {"sku": f"s{n}", "qty": None if n % 2 else n}} for n in range(3, 7)]
    produce(kafka_config, topic, [Record(0, v) for v in avro_values(client, topic, LINE_V2, second)])
    assert last_json(cli(*args))["records"] == 4
    third = [{"id": 7, "line": {"sku": "s7", "qty": None}}]  # upkeep leaves the newest batch alone
    produce(kafka_config, topic, [Record(0, v) for v in avro_values(client, topic, LINE_V2, third)])
    assert last_json(cli(*args))["records"] == 1

    expected = [*first, *second, *third]
    for reader, rows in [("DuckDB", duckdb_rows(output)), ("its own reader", read_rows(output))]:
        assert rows == expected, f"{fmt} as {reader} reads it: expected {expected}, found {rows}"
    for seq, batch in [(1, first), (2, second)]:
        entry = output.store().log.entry(seq)
        event = {"seq": seq, "batch_id": entry["batch_id"], "ranges": entry["ranges"]}
        found = sorted(read_batch(output.store(), event, ["id", "line"]).to_pylist(), key=lambda r: r["id"])
        assert found == batch, f"read_batch of batch {seq}: expected {batch}, found {found}"
    if fmt == "parquet":
        # The two batches' folders differ only in the nested field's nullability: one run to compact.
        done = last_json(cli("upkeep", "--output", output.uri, "--retention-hours", "1"))
        assert done["compacted_files"] == 2 and done["written_files"] == 1, f"expected 2 files merged: {done}"
        assert duckdb_rows(output) == expected, "the compacted file holds every row as produced"


def require_qty(output: TableOutput) -> None:
    """Make the table's ``line.qty`` never null, as builds before nested fields were all nullable wrote it."""
    if output.format == "delta":
        from deltalake import write_deltalake

        table = output.store().sink.table()
        schema = pa.schema(table.schema().to_arrow())
        line = schema.field("line")
        required = pa.struct([f.with_nullable(f.name != "qty") for f in line.type])
        schema = schema.set(schema.get_field_index("line"), line.with_type(required))
        write_deltalake(output.uri, schema.empty_table(), mode="overwrite", predicate="false", schema_mode="overwrite")
    else:
        table = output.store().sink.table()
        with table.update_schema(allow_incompatible_changes=True) as update:
            update.update_column(("line", "qty"), required=True)
    table = output.store().sink.table()
    if output.format == "delta":
        qty = pa.schema(table.schema().to_arrow()).field("line").type.field("qty")
        assert not qty.nullable, f"the Delta table's line.qty should be never null: {qty}"
    else:
        assert table.schema().find_field("line.qty").required, f"line.qty should be required: {table.schema()}"


def read_rows(output: Output) -> list[dict]:
    table = read_dataset(output, ["id", "line"])
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def test_read_batch_after_compaction_reads_a_newer_versions_columns(
    kafka_config, kafka_bootstrap_servers, new_topic, group_id, schema_registry, tmp_path, spark_connect_remote
):
    topic = new_topic(partitions=1)
    client = SchemaRegistryClient({"url": schema_registry})
    output = Output(str(tmp_path / "lake"))
    args = run_args(kafka_bootstrap_servers, topic, group_id, output, schema_registry, "--value-format", "avro")
    args += ["--spark-remote", spark_connect_remote]
    v1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
    v2 = {**v1, "fields": [*v1["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}]}
    # Two batches of each version (and a newest one, which upkeep leaves alone): compaction merges
    # each pair, so batch 3's rows live in a file after one of version 1, which has no coupon column.
    for n, schema in enumerate([v1, v1, v2, v2, v2]):
        record = {"id": n, **({"coupon": f"c{n}"} if schema is v2 else {})}
        produce(kafka_config, topic, [Record(0, avro_values(client, topic, schema, [record])[0])])
        assert last_json(cli(*args))["records"] == 1, f"batch {n + 1} landed"
    done = last_json(cli("upkeep", "--output", output.uri, "--retention-hours", "1"))
    assert done["compacted_files"] == 4 and done["written_files"] == 2, f"expected two runs of two: {done}"
    entry = output.store().log.entry(3)
    assert not output.location.exists(f"{entry['location']}/{entry['files'][0]['name']}"), "batch 3 was compacted"
    event = {"seq": 3, "batch_id": entry["batch_id"], "ranges": entry["ranges"]}
    found = read_batch(output.store(), event, ["id", "coupon"]).to_pylist()
    assert found == [{"id": 2, "coupon": "c2"}], f"expected batch 3's row with its coupon, found {found}"
