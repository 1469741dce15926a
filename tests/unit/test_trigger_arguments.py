"""A trigger serialized by an earlier build is rebuilt by the triggerer after an upgrade: its
arguments are taken (the output's parts one by one, now one dict), or refused in one line."""

from __future__ import annotations

import pytest

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.triggers.lag import KafkaLagEventTrigger, KafkaLagTrigger

#: What KafkaLagTrigger.serialize() gave before the output became one argument (commit f0c5980).
EARLIER = {
    "group_id": "ingest",
    "topics": ["orders"],
    "kafka_config_id": "kafka_default",
    "min_lag": 1,
    "max_data_age_seconds": None,
    "poke_interval": 60.0,
    "kafka_timeout": 30.0,
    "output_path": "s3://lake/orders",
    "storage_conn_id": "lake",
    "output_format": "delta",
    "table": None,
    "catalog_conn_id": None,
    "partition_by": None,
    "catalog_properties": {},
}


def test_a_lag_trigger_serialized_by_an_earlier_build_waits_on_with_its_output():
    trigger = KafkaLagTrigger(**EARLIER)
    expected = {"output_path": "s3://lake/orders", "storage_conn_id": "lake", "output_format": "delta"}
    assert {k: v for k, v in trigger.output.items() if v} == expected, f"found {trigger.output}"
    _, kwargs = trigger.serialize()
    assert "output_path" not in kwargs and kwargs["output"] == trigger.output, f"serialized anew: {kwargs}"
    assert KafkaLagTrigger(**kwargs).serialize() == trigger.serialize(), "its new form rebuilds the same trigger"


def test_a_lag_trigger_an_earlier_build_serialized_without_an_output_waits_on_without_one():
    # The sensor had no output: its parts were serialized with their defaults only.
    no_output = {**EARLIER, "output_path": None, "storage_conn_id": None, "output_format": "parquet"}
    trigger = KafkaLagTrigger(**no_output)
    assert trigger.output is None, f"expected no output, found {trigger.output}"
    _, kwargs = trigger.serialize()
    assert kwargs["output"] is None and "output_format" not in kwargs, f"serialized anew: {kwargs}"


@pytest.mark.parametrize("cls", [KafkaLagTrigger, KafkaLagEventTrigger])
def test_an_argument_no_build_serialized_is_refused_in_one_line_saying_what_to_do(cls):
    with pytest.raises(ConfigError) as refused:
        cls(group_id="g", topics=["t"], window_seconds=60)
    message = str(refused.value)
    assert "window_seconds" in message and "clear the deferred task" in message and "\n" not in message, message
