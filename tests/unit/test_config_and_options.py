"""Pure checks around the protocol: librdkafka config and JVM reader options."""

from __future__ import annotations

import json

import pytest

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.kafka.config import check_config, parse_key_values, redact
from kafka_batch_provider.spark.jvm_options import jvm_reader_options

# -- librdkafka config -----------------------------------------------------------------------


def test_key_values_keep_equals_signs_in_values():
    assert parse_key_values(["a=1", "sasl.jaas.config=x=y;z"]) == {"a": "1", "sasl.jaas.config": "x=y;z"}


@pytest.mark.parametrize("bad", ["novalue", "=x"])
def test_key_values_without_key_or_equals_are_refused(bad):
    with pytest.raises(ConfigError, match="expects key=value"):
        parse_key_values([bad])


@pytest.mark.parametrize("value", ["true", "True", "1", True])
def test_auto_commit_is_refused(value):
    with pytest.raises(ConfigError, match="enable.auto.commit=true is not allowed"):
        check_config({"bootstrap.servers": "x:1", "enable.auto.commit": value})


def test_isolation_defaults_to_read_committed_and_is_validated():
    assert check_config({"bootstrap.servers": "x:1"})["isolation.level"] == "read_committed"
    with pytest.raises(ConfigError, match="isolation.level must be"):
        check_config({"bootstrap.servers": "x:1", "isolation.level": "dirty"})


def test_missing_bootstrap_servers_is_refused():
    with pytest.raises(ConfigError, match="bootstrap.servers is required"):
        check_config({})


def test_redaction_hides_every_secret_and_keeps_the_rest():
    config = {
        "bootstrap.servers": "b:9092",
        "sasl.username": "alice",
        "sasl.password": "s3cret",
        "ssl.key.password": "k",
        "sasl.oauthbearer.client.secret": "c",
        "sasl.jaas.config": "org... password='p';",
    }
    shown = redact(config)
    assert shown["bootstrap.servers"] == "b:9092" and shown["sasl.username"] == "alice"
    assert "s3cret" not in json.dumps(shown) and "'p'" not in json.dumps(shown)


# -- JVM reader options ----------------------------------------------------------------------


def test_jvm_options_read_exactly_the_ranges_in_sparks_json_vocabulary():
    ranges = [OffsetRange("a", 0, 5, 10), OffsetRange("a", 2, 0, 3), OffsetRange("b", 1, 7, 7)]
    options = jvm_reader_options(ranges, {"bootstrap.servers": "h:1", "security.protocol": "SSL", "group.id": "x"})
    assert json.loads(options["assign"]) == {"a": [0, 2]}
    assert json.loads(options["startingOffsets"]) == {"a": {"0": 5, "2": 0}}
    assert json.loads(options["endingOffsets"]) == {"a": {"0": 10, "2": 3}}
    assert options["kafka.bootstrap.servers"] == "h:1" and options["kafka.security.protocol"] == "SSL"
    assert "kafka.group.id" not in options  # Spark manages it
    assert options["failOnDataLoss"] == "true" and options["includeHeaders"] == "true"


def test_jvm_options_need_something_to_read():
    with pytest.raises(ConfigError, match="at least one non-empty range"):
        jvm_reader_options([OffsetRange("a", 0, 5, 5)], {"bootstrap.servers": "h:1"})


def test_callbacks_in_the_connection_cannot_be_shipped_to_spark():
    pytest.importorskip("airflow")
    from kafka_batch_provider.operators.spark import shippable

    assert shippable({"bootstrap.servers": "b:1", "logger": object()}) == {"bootstrap.servers": "b:1"}
    with pytest.raises(ConfigError, match=r"callback\(s\) oauth_cb"):
        shippable({"bootstrap.servers": "b:1", "oauth_cb": lambda cfg: ("t", 0)})


def test_config_file_must_be_a_json_object(tmp_path):
    from kafka_batch_provider.kafka.config import read_config_file

    good = tmp_path / "k.json"
    good.write_text('{"sasl.password": "x"}')
    assert read_config_file(str(good)) == {"sasl.password": "x"}
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must be a JSON object"):
        read_config_file(str(bad))
    with pytest.raises(ConfigError, match="cannot read Kafka config file"):
        read_config_file(str(tmp_path / "missing.json"))


# -- write options ----------------------------------------------------------------------------


def test_write_options_round_trip_through_the_application_flags():
    import argparse

    from kafka_batch_provider.core.write_options import WriteOptions

    options = WriteOptions("jvm", "json", "id long", 1000, 7.5, key_format="string")
    parser = argparse.ArgumentParser()
    WriteOptions.add_arguments(parser)
    assert WriteOptions.from_namespace(parser.parse_args(options.to_args())) == options
    keyed = WriteOptions(value_format="string", key_format="avro", on_bad_record="dead-letter")
    assert WriteOptions.from_namespace(parser.parse_args(keyed.to_args())) == keyed
    assert keyed.registry_parts == {"key": "avro"}
    assert WriteOptions.from_namespace(parser.parse_args([])) == WriteOptions()


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"reader": "kafka"}, "unknown reader 'kafka'"),
        ({"value_format": "xml"}, "unknown value format 'xml'"),
        ({"value_format": "avro", "reader": "jvm"}, "reader='jvm' cannot decode avro values"),
        ({"keep_raw_value": True}, "keep_raw_value is only used with a schema registry format"),
        ({"value_format": "json"}, "value_format='json' needs value_schema"),
        ({"value_schema": "id long"}, "value_schema is only used with value_format='json'"),
        ({"max_offsets_per_task": 0}, "max offsets per task must be positive"),
        ({"stall_timeout": 0}, "stall timeout must be a positive, finite number"),
        ({"key_format": "xml"}, "unknown key_format 'xml'; choose one of bytes, string, avro"),
        ({"key_format": "json"}, "read JSON keys as string"),
        ({"key_format": "avro", "reader": "jvm"}, "reader='jvm' cannot decode avro keys"),
        ({"key_format": "avro", "value_format": "json", "value_schema": "id long"}, "key_format='avro' cannot go"),
        ({"key_format": "string", "on_bad_record": "dead-letter"}, "on_bad_record='dead-letter' is only used with"),
        ({"key_format": "protobuf", "keep_raw_value": True}, "keep_raw_value is only used with a schema registry"),
    ],
)
def test_bad_write_options_are_refused_with_one_line(kwargs, expected):
    from kafka_batch_provider.core.write_options import WriteOptions

    with pytest.raises(ConfigError, match=expected):
        WriteOptions(**kwargs)


def test_reader_batches_are_bounded_by_bytes_as_well_as_by_count():
    import pyarrow as pa

    from kafka_batch_provider.spark.kafka_reader import MAX_BATCH_BYTES, messages_per_batch

    def batch(rows: int, value_size: int) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict(
            {"key": pa.array([b"k"] * rows, pa.binary()), "value": pa.array([b"v" * value_size] * rows, pa.binary())}
        )

    big = messages_per_batch(batch(10, 64 * 1024), batch_size=50_000)
    assert big * (64 * 1024 + 1) <= MAX_BATCH_BYTES < (big + 1) * (64 * 1024 + 1), f"64 KB values: {big} per batch"
    assert messages_per_batch(batch(1000, 100), batch_size=50_000) == 50_000, "small records: the count bound"
    assert messages_per_batch(batch(1, 64 * 1024 * 1024), batch_size=50_000) == 1, "never fewer than one"


def test_value_string_in_arrow_replaces_bytes_that_are_not_utf8_and_keeps_the_rest():
    import pyarrow as pa

    from kafka_batch_provider.spark.slice_reader import decode_in_arrow

    values = pa.array([b"plain", None, b"\xff\xfeab", "ü".encode()], pa.binary())
    batch = pa.RecordBatch.from_pydict({"value": values})

    decoded = decode_in_arrow(batch, "string")

    assert decoded.column("value").equals(values), "the raw value column must keep every byte"
    assert decoded.column("value_string").to_pylist() == ["plain", None, "\ufffd\ufffdab", "ü"]
    decoded.column("value_string").validate(full=True)
    assert decode_in_arrow(batch, "bytes").schema.names == ["value"]


def test_key_string_in_arrow_is_added_beside_value_string():
    import pyarrow as pa

    from kafka_batch_provider.spark.slice_reader import decode_in_arrow, string_columns

    batch = pa.RecordBatch.from_pydict(
        {"key": pa.array([b"k1", b"\xff", None], pa.binary()), "value": pa.array([b"v", b"w", b"x"], pa.binary())}
    )
    decoded = decode_in_arrow(batch, "string", "string")
    assert decoded.schema.names == ["key", "value", "value_string", "key_string"]
    assert decoded.column("key_string").to_pylist() == ["k1", "\ufffd", None]
    assert [f.name for f in string_columns("bytes", "string")] == ["key_string"]


@pytest.mark.parametrize(
    ("remote", "address", "shared"),
    [
        ("sc://h:1", "sc://h:1", "sc://h:1/;session_id=S"),
        ("sc://h", "sc://h:15002", "sc://h/;session_id=S"),
        ("sc://h:1/;token=T", "sc://h:1", "sc://h:1/;token=T;session_id=S"),
        ("sc://h:1;token=T;", "sc://h:1", "sc://h:1/;token=T;session_id=S"),
        ("sc://[::1]:1", "sc://[::1]:1", "sc://[::1]:1/;session_id=S"),
        ("sc://h:1/;session_id=A;user_id=u", "sc://h:1", "sc://h:1/;user_id=u;session_id=S"),
    ],
)
def test_spark_remote_address_is_printable_and_the_shared_session_id_is_added(remote, address, shared):
    from kafka_batch_provider.spark.connect import remote_address, with_session_id

    assert remote_address(remote) == address
    assert with_session_id(remote, "S") == shared


@pytest.mark.parametrize("remote", ["http://h:1", "sc://", "sc://h:port/;token=T", "h:15002"])
def test_a_malformed_spark_remote_is_refused_without_echoing_its_parameters(remote):
    from kafka_batch_provider.spark.connect import remote_address

    with pytest.raises(ConfigError, match="must look like sc://host:port") as refused:
        remote_address(remote)
    assert "T" not in str(refused.value).split("got")[1].replace("port", ""), str(refused.value)


def test_pyspark_errors_lose_the_urls_token():
    from kafka_batch_provider.spark.connect import connect_error

    error = connect_error("sc://h:1/;token=T0KEN", RuntimeError("cannot reach sc://h:1/;token=T0KEN"))
    assert "T0KEN" not in str(error) and "sc://h:1" in str(error), str(error)
    refused = connect_error("sc://h:1/;token=T0KEN", RuntimeError("[INVALID_CONNECT_URL] bad param token=T0KEN"))
    assert isinstance(refused, ConfigError) and "T0KEN" not in str(refused), str(refused)
