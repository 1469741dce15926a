"""DAG integrity: the DAGs parse, are documented and owned, open no connection, and render."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.dags.conftest import DAGS

pytestmark = pytest.mark.check  # in make check's tier

EXPECTED_DAGS = {
    "kafka_batch_ingest",
    "kafka_batch_backfill",
    "kafka_batch_upkeep",
    "kafka_batch_downstream",
    "kafka_batch_ingest_on_lag",
    "kafka_batch_topics_platform",  # dags/kafka_topic_groups.py, from dags/topic_groups.json
}


def test_every_dag_file_imports_without_errors(dagbag):
    assert dagbag.import_errors == {}, f"import errors: {dagbag.import_errors}"
    assert EXPECTED_DAGS <= set(dagbag.dag_ids), f"found DAGs {sorted(dagbag.dag_ids)}"


@pytest.mark.parametrize("dag_id", sorted(EXPECTED_DAGS))
def test_dag_has_owner_retries_tags_and_docs(dagbag, dag_id):
    dag = dagbag.dags[dag_id]
    assert dag.tags, f"{dag_id} has no tags"
    assert dag.doc_md and len(dag.doc_md) > 200, f"{dag_id} needs doc_md explaining it"
    for task in dag.tasks:
        assert task.owner not in ("", "airflow"), f"{dag_id}.{task.task_id} has no owner"
        assert task.retries >= 1, f"{dag_id}.{task.task_id} has retries={task.retries}"


def test_ingest_dag_runs_one_at_a_time(dagbag):
    dag = dagbag.dags["kafka_batch_ingest"]
    assert dag.max_active_runs == 1, "two runs of one group would race on the compare-and-set commit"
    assert [t.task_id for t in dag.topological_sort()] == [
        "ingest.wait_for_data",
        "ingest.plan",
        "ingest.spark_write",
        "ingest.commit",
        "ingest.lag_health",
    ]
    sensor = dag.task_dict["ingest.wait_for_data"]
    assert sensor.mode == "reschedule" and sensor.soft_fail, "a run with nothing to do must be skipped, not failed"


def test_importing_dag_files_opens_no_network_connection(monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    attempts: list[object] = []

    def refuse(self, address, *args):
        attempts.append(address)
        raise OSError(f"network access during DAG import: {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    bag = DagBag(str(DAGS))
    assert bag.import_errors == {} and attempts == [], f"import errors {bag.import_errors}, connects {attempts}"
    assert EXPECTED_DAGS <= set(bag.dag_ids)


class _Variables:
    """Stands in for ``var.value`` (a lookup needs a running task): answers the default."""

    def get(self, name, default=None):
        return default


@pytest.mark.parametrize("dag_id", sorted(EXPECTED_DAGS))
def test_every_template_field_renders(dagbag, dag_id):
    dag = dagbag.dags[dag_id]
    params = {k: dag.params[k] for k in dag.params}
    context = {"params": params, "var": SimpleNamespace(value=_Variables()), "ds": "2026-01-01"}
    jinja = dag.get_template_env()
    for task in dag.tasks:
        for field in task.template_fields:
            value = getattr(task, field)
            rendered = task.render_template(value, context, jinja)
            assert "{{" not in str(rendered) and "{%" not in str(rendered), f"{task.task_id}.{field} -> {rendered!r}"
    ingest_like = {t.task_id: t for t in dag.tasks}
    if dag_id == "kafka_batch_ingest":
        plan = ingest_like["ingest.plan"]
        assert plan.render_template(plan.topics, context, jinja) == "orders"
    elif dag_id == "kafka_batch_backfill":
        plan = ingest_like["plan_replay"]
        assert plan.render_template(plan.dry_run, context, jinja) is False, "params must render as native objects"


def test_provider_is_listed_by_airflow(airflow_db):
    result = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"airflow-provider-kafka-batch"' in result.stdout, f"provider missing from: {result.stdout[:500]}"


class _SetVariables(_Variables):
    def __init__(self, values):
        self.values = values

    def get(self, name, default=None):
        return self.values.get(name, default)


@pytest.mark.parametrize(
    "variables, expected",
    [
        # the environment's (required; tests/conftest.py gives the session one)
        (
            {},
            {
                "output_format": "parquet",
                "output_path": os.environ["KAFKA_BATCH_OUTPUT"],
                "table": "",
                "partition_by": "",
            },
        ),
        (
            {"kafka_batch_format": "iceberg", "kafka_batch_table": "lake.orders", "kafka_batch_partition_by": "date"},
            {"output_format": "iceberg", "output_path": "", "table": "lake.orders", "partition_by": "date"},
        ),
        (
            {"kafka_batch_format": "delta", "kafka_batch_output": "s3://b/t", "kafka_batch_table": "ignored.here"},
            {"output_format": "delta", "output_path": "s3://b/t", "table": "", "partition_by": ""},
        ),
    ],
)
def test_ingest_dag_renders_the_output_of_the_chosen_format_for_every_task_that_opens_it(dagbag, variables, expected):
    dag = dagbag.dags["kafka_batch_ingest"]
    context = {"params": {}, "var": SimpleNamespace(value=_SetVariables(variables)), "ds": "2026-01-01"}
    jinja = dag.get_template_env()
    tasks = [dag.task_dict[t] for t in ("ingest.wait_for_data", "ingest.plan", "ingest.lag_health")]
    for task in [*tasks, dagbag.dags["kafka_batch_upkeep"].task_dict["upkeep"]]:
        task_id = task.task_id
        rendered = {name: task.render_template(getattr(task, name), context, jinja) for name in expected}
        assert rendered == expected, f"{task_id}: expected {expected}, rendered {rendered}"


def test_ingest_group_hands_the_catalog_connection_to_every_task_that_opens_the_output():
    from airflow.sdk import DAG

    from kafka_batch_provider.operators.output import BatchOutput
    from kafka_batch_provider.task_group import kafka_batch_ingest_group

    output = BatchOutput(
        output_format="iceberg", table="lake.orders", catalog_conn_id="lake_catalog", storage_conn_id="lake"
    )
    with DAG(dag_id="tables", schedule=None) as dag:
        kafka_batch_ingest_group(topics="t", consumer_group="g", output=output)
    for task in dag.tasks:
        found = task.batch_output
        assert (found.catalog_conn_id, found.storage_conn_id) == ("lake_catalog", "lake"), (
            f"{task.task_id} has catalog_conn_id {found.catalog_conn_id!r}, storage_conn_id {found.storage_conn_id!r}"
        )
    for task_id in ("kafka_ingest.wait_for_data", "kafka_ingest.plan", "kafka_ingest.lag_health"):
        task = dag.task_dict[task_id]
        assert (task.output_format, task.table) == ("iceberg", "lake.orders"), f"{task_id} opens another output"


def test_ingest_group_with_a_bad_output_fails_when_the_dag_is_parsed():
    from airflow.sdk import DAG

    from kafka_batch_provider.errors import ConfigError
    from kafka_batch_provider.operators.output import BatchOutput
    from kafka_batch_provider.task_group import kafka_batch_ingest_group

    output = BatchOutput(output_format="iceberg", table="lake.orders")
    with DAG(dag_id="bad_tables", schedule=None), pytest.raises(ConfigError) as raised:
        kafka_batch_ingest_group(topics="t", consumer_group="g", output=output)
    expected = "needs the catalog's properties: catalog_conn_id"
    assert expected in str(raised.value), f"expected the missing catalog ({expected!r}), got {raised.value}"


@pytest.mark.parametrize(
    "name, value, valid",
    [
        ("output_format", "parquet", True),
        ("output_format", "iceberg", True),
        ("output_format", "csv", False),
        ("table", None, True),
        ("table", "lake.orders", True),
        ("table", "orders", False),
        ("table", "lake. orders", False),
    ],
)
def test_backfill_dag_validates_the_output_params(dagbag, name, value, valid):
    from airflow.sdk.definitions.param import ParamValidationError

    param = dagbag.dags["kafka_batch_backfill"].params.get_param(name)
    if valid:
        assert param.resolve(value) == value, f"{name}={value!r} must be accepted"
    else:
        with pytest.raises(ParamValidationError):
            param.resolve(value)


@pytest.mark.parametrize(
    "params, expected",
    [
        ({"output_format": "parquet", "output_path": "/r", "table": "x.y"}, ("parquet", "/r", None)),
        ({"output_format": "iceberg", "output_path": "/r", "table": "lake.again"}, ("iceberg", None, "lake.again")),
        ({"output_format": "postgres", "output_path": "/r", "table": "public.r"}, ("postgres", None, "public.r")),
        ({"output_format": "mysql", "output_path": "/r", "table": "shop.r"}, ("mysql", None, "shop.r")),
    ],
)
def test_backfill_dag_hands_each_format_only_its_own_output_field(dagbag, params, expected):
    dag = dagbag.dags["kafka_batch_backfill"]
    plan = dag.task_dict["plan_replay"]
    context = {"params": {**{k: dag.params[k] for k in dag.params}, **params}}
    jinja = dag.get_template_env()
    rendered = tuple(
        plan.render_template(getattr(plan, f), context, jinja) for f in ("output_format", "output_path", "table")
    )
    assert rendered == expected, f"expected (format, output_path, table) {expected}, rendered {rendered}"


def test_both_dags_read_keys_in_a_registry_format_from_the_environment(monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("KAFKA_BATCH_VALUE_FORMAT", "avro")
    monkeypatch.setenv("KAFKA_BATCH_KEY_FORMAT", "protobuf")
    monkeypatch.setenv("KAFKA_BATCH_KEY_SCHEMA_VERSION", "2")
    monkeypatch.setenv("KAFKA_BATCH_SCHEMA_REGISTRY_CONN_ID", "registry")
    bag = DagBag(str(DAGS))
    assert bag.import_errors == {}, f"import errors: {bag.import_errors}"
    for dag_id, plan_task, write_task in [
        ("kafka_batch_ingest", "ingest.plan", "ingest.spark_write"),
        ("kafka_batch_backfill", "plan_replay", "spark_write"),
    ]:
        dag = bag.dags[dag_id]
        plan, write = dag.task_dict[plan_task], dag.task_dict[write_task]
        found = (
            plan.key_format,
            plan.key_schema_version,
            write.write_options.key_format,
            write.schema_registry_conn_id,
        )
        assert found == ("protobuf", 2, "protobuf", "registry"), f"{dag.dag_id}: {found}"

    monkeypatch.delenv("KAFKA_BATCH_SCHEMA_REGISTRY_CONN_ID")
    monkeypatch.setenv("KAFKA_BATCH_VALUE_FORMAT", "bytes")
    refused = DagBag(str(DAGS)).import_errors
    errors = [e for e in refused.values() if "key format protobuf decodes with a schema registry" in e]
    assert len(errors) == 3, f"expected the three ingesting DAG files refused for keys without a registry: {refused}"


def test_airflow_checks_iceberg_assets_with_this_providers_handler():
    from airflow.sdk import Asset

    assert Asset(uri="iceberg://prod/shop/orders").uri == "iceberg://prod/shop/orders"
    with pytest.raises(ValueError, match="an Iceberg asset is iceberg://<catalog>/<namespace>/<table>"):
        Asset(uri="iceberg://prod/orders")


def test_the_ingest_group_reads_its_topics_as_inlets_and_announces_batches_through_an_alias():
    from airflow.sdk import DAG, AssetAlias

    from kafka_batch_provider.operators.output import BatchOutput
    from kafka_batch_provider.task_group import kafka_batch_ingest_group

    with DAG("assets_probe", schedule=None) as dag:
        kafka_batch_ingest_group(
            topics=["orders", "refunds"],
            consumer_group="lake",
            output=BatchOutput(output_path="s3://lake/orders"),
            bootstrap_servers="b1:9092,b2:9092",
        )
    inlets = [a.uri for a in dag.task_dict["kafka_ingest.plan"].inlets]
    assert inlets == ["kafka://b1:9092/orders", "kafka://b1:9092/refunds"], inlets
    # The tasks that end a batch announce it: the commit, a replay's Spark task, and the plan task
    # when it finishes a batch whose commit task failed.
    for task_id in ("kafka_ingest.commit", "kafka_ingest.spark_write", "kafka_ingest.plan"):
        assert dag.task_dict[task_id].outlets == [AssetAlias(name="kafka-batch:lake")], task_id
    assert dag.task_dict["kafka_ingest.lag_health"].outlets == [], "the health check announces nothing"


def test_the_lag_fired_dag_is_scheduled_on_a_watched_asset_with_no_cron_and_no_sensor(dagbag):
    from kafka_batch_provider.triggers.lag import KafkaLagEventTrigger

    dag = dagbag.dags["kafka_batch_ingest_on_lag"]
    assert dag.max_active_runs == 1, "events during a run must queue at most one more run"
    assert [t.task_id for t in dag.topological_sort()] == [
        "ingest.plan",
        "ingest.spark_write",
        "ingest.commit",
        "ingest.lag_health",
    ], "the trigger judged the lag: no sensor"
    (asset,) = dag.timetable.asset_condition.objects  # schedule=[the watched asset]
    (watcher,) = asset.watchers
    assert isinstance(watcher.trigger, KafkaLagEventTrigger), watcher
    classpath, kwargs = watcher.trigger.serialize()
    assert classpath == "kafka_batch_provider.triggers.lag.KafkaLagEventTrigger"
    assert (kwargs["group_id"], kwargs["topics"], kwargs["min_records"]) == ("kafka-batch-ingest", ["orders"], 1)


FIRST_LOAD = """
import importlib.metadata, json, sys
(found,) = [e for e in importlib.metadata.entry_points(group="apache_airflow_provider") if e.name == "provider_info"
            and e.value.startswith("kafka_batch_provider")]
info = found.load()()
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "airflow" or m.startswith("kafka_batch_provider.hooks"))
from airflow.providers_manager import ProvidersManager
manager = ProvidersManager()
manager.initialize_providers_hooks()
print(json.dumps({"name": info["package-name"], "loaded": loaded, "providers": sorted(manager.providers),
                  "registry_hook": "schema_registry" in manager.hooks}))
"""


def test_the_provider_info_loads_first_in_a_fresh_process_without_airflow_or_a_hook():
    # What provider registries and validation tools do before Airflow is imported; then Airflow
    # itself discovers the provider (its configuration calls the entry point again).
    import json
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", FIRST_LOAD], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"the entry point failed when loaded first: {result.stderr[-1500:]}"
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["name"] == "airflow-provider-kafka-batch", found
    assert found["loaded"] == [], (
        f"get_provider_info imported {found['loaded']}; it must import neither Airflow nor a hook"
    )
    assert "airflow-provider-kafka-batch" in found["providers"], f"Airflow did not discover it: {found['providers']}"
    assert found["registry_hook"], "Airflow's providers manager lists no schema_registry connection type"


def test_the_provider_info_describes_the_schema_registry_form_as_the_hook_does():
    from kafka_batch_provider import get_provider_info
    from kafka_batch_provider.hooks.schema_registry import SchemaRegistryHook

    (declared,) = get_provider_info()["connection-types"]
    hook = SchemaRegistryHook.get_ui_field_behaviour()
    form = declared["ui-field-behaviour"]
    assert (form["hidden-fields"], form["relabeling"], form["placeholders"]) == (
        hook["hidden_fields"],
        hook["relabeling"],
        hook["placeholders"],
    ), "the provider info and the hook must describe one form"
    assert declared["hook-name"] == SchemaRegistryHook.hook_name
    info = get_provider_info()
    assert [m for s in info["triggers"] for m in s["python-modules"]] == ["kafka_batch_provider.triggers.lag"]
    assert [m for s in info["sensors"] for m in s["python-modules"]] == ["kafka_batch_provider.sensors.lag"]


@pytest.mark.parametrize("missing", ["KAFKA_BATCH_OUTPUT", "KAFKA_BATCH_TABLE"])
def test_every_shipped_dag_refuses_to_parse_without_its_output_in_one_line(missing, monkeypatch):
    # No default location: a DAG that wrote to some local folder would plan from the group and commit it.
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.delenv("KAFKA_BATCH_OUTPUT", raising=False)
    monkeypatch.delenv("KAFKA_BATCH_TABLE", raising=False)
    monkeypatch.setenv("KAFKA_BATCH_FORMAT", "iceberg" if missing == "KAFKA_BATCH_TABLE" else "parquet")
    errors = DagBag(str(DAGS)).import_errors
    shipped = sorted(p.name for p in DAGS.glob("kafka_batch_*.py"))
    # (kafka_topic_groups.py takes its outputs from its groups file: tests/dags/test_topic_groups.py)
    errors = {Path(f).name: e for f, e in errors.items() if Path(f).name in shipped}
    refused = sorted(name for name, message in errors.items() if f"{missing} is not set" in message)
    assert refused == shipped, f"expected every shipped DAG refused for {missing}, found {refused} of {shipped}"
    assert all(e.strip().splitlines()[-1].count(missing) == 1 for e in errors.values()), "one line naming it"


def test_the_backfill_forms_defaults_validate_when_the_deployments_output_is_a_database_table(monkeypatch):
    # (review: the output path's default was "" against its minLength=1, so every trigger failed)
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("KAFKA_BATCH_FORMAT", "postgres")
    monkeypatch.setenv("KAFKA_BATCH_TABLE", "public.events")
    monkeypatch.setenv("KAFKA_BATCH_DATABASE_CONN_ID", "warehouse")
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", "postgresql://ingest:hunter2@db.internal:5433/shop")
    bag = DagBag(str(DAGS))
    assert bag.import_errors == {}, f"import errors: {bag.import_errors}"
    params = bag.dags["kafka_batch_backfill"].params
    params.validate()  # (what Airflow does on every trigger)
    assert params["output_format"] == "postgres" and params["table"] == "public.events_replay"
    assert params["output_path"] is None
    # The downstream DAG is scheduled on the table's asset, its server read from the connection.
    [asset] = bag.dags["kafka_batch_downstream"].timetable.asset_condition.objects
    assert asset.uri == "postgres://db.internal:5433/shop/public/events", asset.uri
