"""Output templates: a safe table name per topic, and two topics on one name refused."""

from __future__ import annotations

import pytest

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.output.formats import OutputSpec

ICEBERG = {"type": "sql", "uri": "sqlite:///:memory:"}


def test_paths_take_the_topic_as_it_is_and_iceberg_names_a_safe_form():
    paths = OutputSpec("delta", output="s3://lake/raw/{topic}").for_topics(["orders.EU", "pay-ments"])
    assert {t: s.output for t, s in paths.items()} == {
        "orders.EU": "s3://lake/raw/orders.EU",
        "pay-ments": "s3://lake/raw/pay-ments",
    }
    tables = OutputSpec("iceberg", table="lake.raw_{topic}", catalog_properties=ICEBERG).for_topics(
        ["orders.EU", "pay-ments"]
    )
    assert {t: s.table for t, s in tables.items()} == {
        "orders.EU": "lake.raw_orders_eu",
        "pay-ments": "lake.raw_pay_ments",
    }


def test_two_topics_on_one_table_are_refused_in_one_line():
    spec = OutputSpec("iceberg", table="lake.{topic}", catalog_properties=ICEBERG)
    with pytest.raises(ConfigError) as refused:
        spec.for_topics(["orders.eu", "orders_eu", "payments"])
    assert str(refused.value).startswith("topics 'orders.eu', 'orders_eu' would share the table 'lake.orders_eu'"), str(
        refused.value
    )


@pytest.mark.parametrize(
    "output, says",
    [("/lake/{topic}/{topic}", "must hold {topic} once"), ("/lake/{topic}/{date}", "is the only placeholder")],
)
def test_a_template_names_the_topic_once_and_nothing_else(output, says):
    with pytest.raises(ConfigError, match=says):
        OutputSpec("delta", output=output)


def test_a_template_is_not_opened_as_one_output_and_one_output_has_no_tables():
    from kafka_batch_provider.output.formats import open_store

    with pytest.raises(ConfigError, match="names a table per topic"):
        open_store(OutputSpec("delta", output="/lake/{topic}"))
    with pytest.raises(ConfigError, match="names one output, not one per topic"):
        OutputSpec("delta", output="/lake/orders").for_topics(["orders"])
