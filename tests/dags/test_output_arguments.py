"""The operators' output arguments: the catalog connection, checks at DAG parse time, replays,
and the plan XCom of an Iceberg output (real Airflow connections from AIRFLOW_CONN_* variables,
a real SQL catalog on SQLite, the real broker)."""

from __future__ import annotations

import json

import pytest

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.hooks.catalog import catalog_properties_from_connection
from kafka_batch_provider.operators.output import BatchOutput
from kafka_batch_provider.testing.producers import produce, sample_records

pytestmark = pytest.mark.check  # in make check's tier

SECRET = "catalog-secret-value"


def set_connection(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "generic", **fields}))


@pytest.fixture
def sql_catalog(tmp_path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}


# -- catalog_properties_from_connection -----------------------------------------------------


def test_catalog_properties_are_the_extra_with_json_scalars_as_text(monkeypatch):
    set_connection(
        monkeypatch,
        "cat",
        extra={"type": "rest", "uri": "https://cat.example/api", "s3.path-style-access": True, "rest.timeout": 30},
    )
    found = catalog_properties_from_connection("cat")
    expected = {"type": "rest", "uri": "https://cat.example/api", "s3.path-style-access": "true", "rest.timeout": "30"}
    assert found == expected, f"expected {expected}, got {found}"


def test_connection_fields_fill_in_uri_and_credential_but_never_override_the_extra(monkeypatch):
    set_connection(monkeypatch, "rest", host="https://cat.example/api", login="client", password=SECRET)
    found = catalog_properties_from_connection("rest")
    assert found == {"uri": "https://cat.example/api", "credential": f"client:{SECRET}"}, f"got {found}"

    set_connection(monkeypatch, "bearer", password=SECRET, extra={"uri": "https://extra.example"})
    found = catalog_properties_from_connection("bearer")
    assert found == {"uri": "https://extra.example", "token": SECRET}, f"a password without login is a token: {found}"

    set_connection(monkeypatch, "both", host="https://host.example", password="other", extra={"token": SECRET})
    found = catalog_properties_from_connection("both")
    assert found == {"uri": "https://host.example", "token": SECRET}, f"the extra's token must win: {found}"


def test_no_connection_id_means_no_properties():
    assert catalog_properties_from_connection(None) == {}


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"host": "https://cat.example", "port": 8181}, "put the port into the host URI"),
        ({"extra": {"s3": {"endpoint": "http://x"}}}, "key 's3' must be a string, number or boolean"),
    ],
)
def test_unusable_catalog_connections_fail_with_one_line(monkeypatch, fields, expected):
    set_connection(monkeypatch, "bad", **fields)
    with pytest.raises(ConfigError) as raised:
        catalog_properties_from_connection("bad")
    message = str(raised.value)
    assert expected in message and "\n" not in message, f"expected one line with {expected!r}, got {message!r}"


# -- checks when the DAG is parsed ----------------------------------------------------------


@pytest.mark.parametrize(
    "arguments, expected",
    [
        ({"output_format": "csv", "output_path": "/lake"}, "unknown output_format 'csv'"),
        (
            {"output_format": "iceberg", "table": "lake.orders"},
            "needs the catalog's properties: catalog_conn_id, a connection",
        ),
        ({"output_format": "iceberg", "catalog_conn_id": "c", "table": "orders"}, "needs table='NAMESPACE.NAME'"),
        (
            {"output_format": "iceberg", "catalog_conn_id": "c", "table": "a.b", "output_path": "/lake"},
            "takes table, not output_path",
        ),
        ({"output_format": "delta"}, "output_format='delta' needs output_path (a path or a URI)"),
        ({"output_path": "/lake", "table": "a.b"}, "table is for output_format='iceberg'"),
        (
            {"output_path": "/lake", "partition_by": "date"},
            "partition_by applies to output_format='delta' or output_format='iceberg'",
        ),
        ({"output_format": "delta", "output_path": "/t", "partition_by": "hour"}, "unknown partition_by 'hour'"),
        (
            {"output_format": "iceberg", "table": "a.b", "catalog_properties": {"s3.secret-access-key": "x"}},
            "put it in the extra of the catalog connection",
        ),
        ({"output_format": "iceberg", "table": "a.b", "catalog_conn_id": "c", "replay_output_path": "/r"}, "replay"),
        ({"output_path": "/lake", "mode": "upsert"}, "mode='upsert' needs a table: output_format='delta'"),
        ({"output_format": "delta", "output_path": "/t", "mode": "changes"}, "mode='changes' needs change_format"),
        ({"output_format": "delta", "output_path": "/t", "merge_key": "id"}, "merge_key, order_by and change_format"),
    ],
)
def test_bad_output_arguments_fail_the_dag_import_with_one_line(arguments, expected):
    from kafka_batch_provider.operators.plan import KafkaOffsetPlanOperator

    replay = {k: arguments.pop(k) for k in ("replay_output_path",) if k in arguments}
    with pytest.raises(ConfigError) as raised:
        KafkaOffsetPlanOperator(task_id="plan", topics="t", group_id="g", output=BatchOutput(**arguments), **replay)
    message = str(raised.value)
    assert expected in message and "\n" not in message, f"expected one line with {expected!r}, got {message!r}"


def test_templated_output_arguments_are_checked_when_the_task_runs():
    from kafka_batch_provider.operators.plan import KafkaOffsetPlanOperator

    task = KafkaOffsetPlanOperator(
        task_id="plan",
        topics="t",
        group_id="g",
        output=BatchOutput(output_format="{{ var.value.fmt }}", output_path="/lake"),
    )
    assert task.output_format == "{{ var.value.fmt }}", "a template cannot be judged before it is rendered"


def test_a_shared_output_value_is_rendered_per_task_never_in_place():
    from kafka_batch_provider.operators.plan import KafkaOffsetPlanOperator

    shared = BatchOutput(output_format="{{ params.fmt }}", output_path="/lake")
    first = KafkaOffsetPlanOperator(task_id="a", topics="t", group_id="g", output=shared)
    second = KafkaOffsetPlanOperator(task_id="b", topics="t", group_id="g", output=shared)
    first.render_template_fields({"params": {"fmt": "delta"}})
    assert first.batch_output.format == "delta", f"expected the rendered format, found {first.batch_output}"
    assert second.output_format == shared.output_format == "{{ params.fmt }}", (
        f"rendering one task changed the shared value: {shared} / {second.output_format}"
    )


def test_replays_go_beside_the_output_or_table():
    parquet = BatchOutput(output_path="s3://bucket/lake/")
    assert parquet.replay().output_path == "s3://bucket/lake_replay"
    assert parquet.replay("/elsewhere").output_path == "/elsewhere"
    iceberg = BatchOutput(output_format="iceberg", table="lake.orders", catalog_conn_id="c")
    assert iceberg.replay().table == "lake.orders_replay"
    assert iceberg.replay(replay_table="lake.again").table == "lake.again"
    with pytest.raises(ConfigError, match="replay_table is for output_format='iceberg'"):
        parquet.replay(replay_table="a.b")


def test_downstream_tasks_rebuild_the_output_from_the_xcom_and_an_old_xcom_is_a_parquet_folder():
    described = BatchOutput(storage_conn_id="lake").planned(
        {"output": {"format": "delta", "output": "/t", "table": None, "partition_by": "date"}, "output_path": "/t"}
    )
    assert (described.format, described.output_path, described.partition_by, described.storage_conn_id) == (
        "delta",
        "/t",
        "date",
        "lake",
    ), f"got {described}"
    old = BatchOutput().planned({"output_path": "/lake"})
    assert (old.format, old.output_path) == ("parquet", "/lake"), f"got {old}"


def test_merge_settings_reach_the_spec_and_survive_the_plan_xcom_and_a_sensor_keeps_its_own_mode():
    from kafka_batch_provider.core.merging import MergeSpec
    from kafka_batch_provider.sensors.lag import KafkaLagSensor

    output = BatchOutput(output_format="delta", output_path="/t", mode="upsert", merge_key="region,id")
    spec = output._spec(storage_options={}, catalog_from_connection={})
    assert spec.merge == MergeSpec(mode="upsert", merge_key=("region", "id")), f"got {spec.merge}"
    again = BatchOutput().planned({"output": spec.describe()})
    assert again._spec({}, {}).merge == spec.merge, f"the plan XCom lost the merge settings: {again}"
    sensor = KafkaLagSensor(task_id="s", group_id="g", topics="t", mode="reschedule", output=output)
    assert sensor.mode == "reschedule" and sensor.batch_output.mode == "upsert", (
        f"the output's mode must not replace the sensor's: {sensor.mode}, {sensor.batch_output.mode}"
    )


def test_the_trigger_serializes_connection_ids_not_their_contents():
    from kafka_batch_provider.triggers.lag import KafkaLagTrigger

    output = BatchOutput(output_format="iceberg", table="lake.orders", catalog_conn_id="lake_catalog")
    trigger = KafkaLagTrigger(group_id="g", topics=["t"], output=output.to_dict())
    path, kwargs = trigger.serialize()
    found = kwargs["output"]
    assert (found["output_format"], found["table"], found["catalog_conn_id"]) == (
        "iceberg",
        "lake.orders",
        "lake_catalog",
    )
    assert json.loads(json.dumps(kwargs)) == kwargs, f"the trigger's arguments must be plain JSON: {kwargs}"
    rebuilt = KafkaLagTrigger(**kwargs)
    assert rebuilt.serialize() == (path, kwargs), "the triggerer must rebuild the same trigger"


# -- the plan operator and the sensor on an Iceberg table (real broker, SQL catalog) ----------


@pytest.mark.integration
def test_plan_operator_creates_the_table_and_pushes_a_secret_free_xcom(
    kafka_bootstrap_servers, kafka_config, new_topic, group_id, sql_catalog, monkeypatch
):
    from kafka_batch_provider.operators.plan import KafkaOffsetPlanOperator
    from kafka_batch_provider.output.iceberg import load_catalog
    from kafka_batch_provider.sensors.lag import KafkaLagSensor

    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap_servers}}),
    )
    set_connection(monkeypatch, "lake_catalog", extra={**sql_catalog, "token": SECRET})
    topic = new_topic(partitions=1)
    produce(kafka_config, topic, sample_records(1, 5))
    output = BatchOutput(output_format="iceberg", table="lake.events", catalog_conn_id="lake_catalog")

    sensor = KafkaLagSensor(task_id="wait", group_id=group_id, topics=topic, output=output)
    poked = sensor.poke({})
    assert poked.is_done and poked.xcom_value["total_lag"] == 5, f"no table yet: the group alone tells {poked}"
    assert not load_catalog(sql_catalog).table_exists("lake.events"), "the sensor must not create the table"

    plan = KafkaOffsetPlanOperator(task_id="plan", topics=topic, group_id=group_id, output=output)
    xcom = plan.execute({})
    assert xcom["output"] == {"format": "iceberg", "output": None, "table": "lake.events", "partition_by": None}
    assert xcom["output_path"] is None, f"an Iceberg output has no path to reopen, got {xcom['output_path']!r}"
    assert "/_kafka_batch/_plans/" in xcom["plan_path"], f"the plan lives in the table's location: {xcom}"
    assert SECRET not in json.dumps(xcom), "the catalog secret is in the XCom"
    assert load_catalog(sql_catalog).table_exists("lake.events"), "the plan task creates the table"
