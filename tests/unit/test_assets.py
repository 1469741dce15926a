"""Assets of an ingestion (pure): the topics' and outputs' URIs, and what a batch's event says."""

from __future__ import annotations

import pytest

from kafka_batch_provider.core.assets import (
    batch_event_extra,
    check_iceberg_uri,
    emits_event,
    iceberg_asset_uri,
    location_asset_uri,
    ranges_by_topic,
    topic_uri,
)
from kafka_batch_provider.errors import ConfigError


def test_topics_are_named_the_way_the_kafka_provider_names_them():
    assert topic_uri("b1:9092,b2:9092", "orders") == "kafka://b1:9092/orders"
    assert topic_uri("SASL_SSL://b1:9093", "a/b") == "kafka://b1:9093/a%2Fb"
    with pytest.raises(ConfigError, match="has no Kafka asset without bootstrap.servers"):
        topic_uri(" , ", "orders")


@pytest.mark.parametrize(
    "output, expected",
    [
        ({"format": "parquet", "output": "s3://lake/orders/"}, "s3://lake/orders"),
        ({"format": "parquet", "output": "s3a://lake/orders"}, "s3://lake/orders"),
        ({"format": "delta", "output": "gs://lake/t"}, "gs://lake/t"),
        ({"format": "parquet", "output": "/tmp/lake dir ü"}, "file:///tmp/lake%20dir%20%C3%BC"),
        ({"format": "parquet", "output": "file:///tmp/lake dir ü"}, "file:///tmp/lake%20dir%20%C3%BC"),
        ({"format": "iceberg", "table": "shop.orders"}, "iceberg://kafka_batch/shop/orders"),
    ],
)
def test_outputs_are_named_by_their_canonical_location_or_their_table(output, expected):
    from kafka_batch_provider.operators.assets import output_asset_uri

    assert output_asset_uri(output) == expected, "one location, however spelled, is one asset"
    assert iceberg_asset_uri("a.b.orders", "prod") == "iceberg://prod/a.b/orders"
    if expected.startswith("iceberg://"):
        check_iceberg_uri(expected)


def test_an_output_without_a_name_has_no_asset():
    with pytest.raises(ConfigError, match="needs its table as NAMESPACE.NAME"):
        iceberg_asset_uri("orders")
    with pytest.raises(ConfigError, match="a parquet output's asset needs its location"):
        location_asset_uri("parquet", None)
    with pytest.raises(ValueError, match="iceberg://<catalog>/<namespace>/<table>"):
        check_iceberg_uri("iceberg://prod/orders")


ENTRY = {
    "batch_id": "b-1",
    "seq": 7,
    "mode": "incremental",
    "rows": 9,
    "ranges": [
        {"topic": "orders", "partition": 0, "start": 10, "end": 15, "rows": 5},
        {"topic": "orders", "partition": 1, "start": 3, "end": 7, "rows": 4},
    ],
    "dead_letters": {"rows": 2, "files": []},
    "table_version": 12,
    "files": [{"name": "part-0.parquet"}],
}


def test_a_batch_event_carries_the_batch_facts_and_nothing_else():
    extra = batch_event_extra(ENTRY, {"format": "delta", "output": "s3://lake/t", "table": None, "x": "y"}, False)
    assert extra == {
        "batch_id": "b-1",
        "seq": 7,
        "mode": "incremental",
        "replay": False,
        "rows": 9,
        "dead_letters": 2,
        "ranges": [
            {"topic": "orders", "partition": 0, "start": 10, "end": 15},
            {"topic": "orders", "partition": 1, "start": 3, "end": 7},
        ],
        "output": {"format": "delta", "output": "s3://lake/t", "table": None},
        "table_version": 12,
    }
    assert ranges_by_topic(extra) == {"orders": [(0, 10, 15), (1, 3, 7)]}


def test_a_batch_that_wrote_nothing_emits_no_event_unless_asked():
    empty = batch_event_extra({**ENTRY, "rows": 0, "dead_letters": None}, {}, True)
    assert not emits_event(empty, emit_empty=False) and emits_event(empty, emit_empty=True)
    only_dead = batch_event_extra({**ENTRY, "rows": 0}, {}, True)
    assert emits_event(only_dead, emit_empty=False), "dead letters are news too"


def test_a_postgres_table_is_named_as_airflows_postgres_provider_and_openlineage_name_it():
    from kafka_batch_provider.core.lineage import dataset_name
    from kafka_batch_provider.operators.assets import output_asset_uri
    from kafka_batch_provider.output.formats import OutputSpec

    spec = OutputSpec(format="postgres", table="public.orders", database_url="postgresql://u:secret@db.internal/shop")
    described = spec.describe()
    assert described["database"] == "postgresql://db.internal:5432/shop" and "secret" not in str(described)
    uri = output_asset_uri(described)
    assert uri == "postgres://db.internal:5432/shop/public/orders", uri
    assert dataset_name(uri) == ("postgres://db.internal:5432", "shop.public.orders")


def test_a_mariadb_table_is_named_as_airflows_mysql_provider_and_openlineage_name_it():
    from kafka_batch_provider.core.lineage import dataset_name
    from kafka_batch_provider.operators.assets import output_asset_uri
    from kafka_batch_provider.output.formats import OutputSpec

    spec = OutputSpec(format="mysql", table="shop.orders", database_url="mysql://u:secret@db.internal/ingest")
    described = spec.describe()
    assert described["database"] == "mysql://db.internal:3306/ingest" and "secret" not in str(described)
    uri = output_asset_uri(described)
    assert uri == "mysql://db.internal:3306/shop/orders", uri  # (the table's database, not the URL's)
    assert dataset_name(uri) == ("mysql://db.internal:3306", "shop.orders")
