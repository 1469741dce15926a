"""OpenLineage of a batch: dataset names by the naming spec, the batch's facts as facets, and the
events they make checked as a lineage backend reads them (tests/support/openlineage_events.py)."""

from __future__ import annotations

import inspect
import json
import uuid

import pyarrow as pa
import pytest

from kafka_batch_provider.core.lineage import (
    OFFSETS_FACET,
    dataset_name,
    dataset_version,
    offsets_run_facet,
    output_statistics,
    rows_by_topic,
    schema_fields,
)
from kafka_batch_provider.errors import ConfigError
from tests.support.openlineage_events import check_run_event


@pytest.mark.parametrize(
    "uri, expected",
    [
        ("kafka://b1:9092/orders", ("kafka://b1:9092", "orders")),
        ("kafka://b1:9092/a%2Fb", ("kafka://b1:9092", "a/b")),
        ("file:///tmp/lake%20dir", ("file", "/tmp/lake dir")),
        ("s3://bucket/lake/orders", ("s3://bucket", "lake/orders")),
        ("gs://bucket/lake", ("gs://bucket", "lake")),
        ("abfs://c@acct.dfs.core.windows.net/lake", ("abfss://c@acct.dfs.core.windows.net", "lake")),
        ("iceberg://prod/a.b/orders", ("iceberg://prod", "a.b.orders")),
    ],
)
def test_datasets_are_named_by_the_openlineage_naming_spec(uri, expected):
    assert dataset_name(uri) == expected


def test_a_scheme_without_a_naming_is_refused():
    with pytest.raises(ValueError, match="no OpenLineage dataset name for 'hdfs://nn/lake'"):
        dataset_name("hdfs://nn/lake")


ENTRY = {
    "batch_id": "20261124T000000-abc",
    "seq": 3,
    "mode": "incremental",
    "group_id": "orders-ingest",
    "rows": 7,
    "files": [{"name": "a.parquet", "bytes": 100, "rows": 4}, {"name": "b.parquet", "bytes": 50, "rows": 3}],
    "ranges": [
        {"topic": "orders", "partition": 0, "start": 0, "end": 5, "rows": 5},
        {"topic": "refunds", "partition": 0, "start": 2, "end": 4, "rows": 2},
    ],
}


def test_a_logged_batch_gives_its_statistics_version_and_offsets():
    assert output_statistics(ENTRY) == {"rowCount": 7, "size": 150, "fileCount": 2}
    assert rows_by_topic(ENTRY) == {"orders": 5, "refunds": 2}
    assert dataset_version(ENTRY) == "3", "the Parquet layout's version is the log sequence number"
    assert dataset_version({**ENTRY, "table_version": 12}) == "12"
    assert dataset_version({**ENTRY, "snapshot_id": 987654321}) == "987654321"
    facet = offsets_run_facet(ENTRY)
    assert facet["ranges"] == [
        {"topic": "orders", "partition": 0, "start": 0, "end": 5},
        {"topic": "refunds", "partition": 0, "start": 2, "end": 4},
    ]
    assert (facet["batchId"], facet["seq"], facet["replay"], facet["groupId"]) == (
        ENTRY["batch_id"],
        3,
        False,
        "orders-ingest",
    )


def test_nested_columns_become_nested_schema_fields():
    schema = pa.schema(
        [
            ("offset", pa.int64()),
            ("value", pa.struct([("id", pa.int64()), ("tags", pa.list_(pa.string()))])),
            ("attrs", pa.map_(pa.string(), pa.int32())),
        ]
    )
    fields = schema_fields(schema)
    assert [f["name"] for f in fields] == ["offset", "value", "attrs"]
    assert [f["name"] for f in fields[1]["fields"]] == ["id", "tags"]
    assert fields[1]["fields"][1]["fields"] == [{"name": "_element", "type": "string"}]
    assert [f["name"] for f in fields[2]["fields"]] == ["key", "value"]


def event_of(lineage, event_type: str = "COMPLETE") -> dict:
    """A run event with an operator's lineage, serialized as a transport sends it."""
    from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
    from openlineage.client.serde import Serde

    event = RunEvent(
        eventType=RunState(event_type),
        eventTime="2026-11-24T12:00:00+00:00",
        run=Run(runId=str(uuid.uuid4()), facets=lineage.run_facets),
        job=Job(namespace="default", name="kafka_batch_ingest.ingest.commit"),
        producer="https://example.org/producer",
        inputs=lineage.inputs,
        outputs=lineage.outputs,
    )
    return json.loads(Serde.to_json(event))


def test_a_written_batchs_lineage_makes_a_valid_event_with_every_fact():
    pytest.importorskip("airflow.providers.openlineage", reason="the openlineage extra is installed by make test")
    from kafka_batch_provider.operators.lineage import BatchFacts, operator_lineage

    schema = pa.schema([("topic", pa.string()), ("value", pa.struct([("id", pa.int64())]))])
    facts = BatchFacts(
        "b1:9092,b2:9092",
        ["orders", "refunds"],
        {"format": "delta", "output": "s3://lake/orders"},
        {},
        summary=ENTRY,
        entry={**ENTRY, "table_version": 4},
        wrote=True,
        schema=schema,
    )
    event = event_of(operator_lineage(facts))
    check_run_event(event)
    assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [
        ("kafka://b1:9092", "orders"),
        ("kafka://b1:9092", "refunds"),
    ]
    assert [d["inputFacets"]["inputStatistics"]["rowCount"] for d in event["inputs"]] == [5, 2]
    (output,) = event["outputs"]
    assert (output["namespace"], output["name"]) == ("s3://lake", "orders")
    assert output["facets"]["version"]["datasetVersion"] == "4"
    assert output["outputFacets"]["outputStatistics"] == {
        **{k: v for k, v in output["outputFacets"]["outputStatistics"].items() if k.startswith("_")},
        "rowCount": 7,
        "size": 150,
        "fileCount": 2,
    }
    assert [f["name"] for f in output["facets"]["schema"]["fields"]] == ["topic", "value"]
    assert event["run"]["facets"][OFFSETS_FACET]["ranges"][1] == {
        "topic": "refunds",
        "partition": 0,
        "start": 2,
        "end": 4,
    }


def test_a_batch_not_yet_planned_has_inputs_and_output_but_no_offsets():
    pytest.importorskip("airflow.providers.openlineage", reason="the openlineage extra is installed by make test")
    from kafka_batch_provider.operators.lineage import BatchFacts, operator_lineage

    lineage = operator_lineage(BatchFacts("b1:9092", ["orders"], {"format": "iceberg", "table": "shop.orders"}, {}))
    event = event_of(lineage, "START")
    check_run_event(event)
    assert [(d["namespace"], d["name"]) for d in event["outputs"]] == [("iceberg://kafka_batch", "shop.orders")]
    assert OFFSETS_FACET not in event["run"].get("facets", {}) and event["inputs"][0]["name"] == "orders"


def test_the_check_refuses_an_offsets_facet_that_breaks_its_schema():
    pytest.importorskip("airflow.providers.openlineage", reason="the openlineage extra is installed by make test")
    from kafka_batch_provider.operators.lineage import BatchFacts, operator_lineage

    event = event_of(operator_lineage(BatchFacts("b1:9092", ["orders"], None, summary=ENTRY)))
    event["run"]["facets"][OFFSETS_FACET]["ranges"][0]["start"] = -1
    with pytest.raises(AssertionError, match="kafkaBatchOffsets does not validate"):
        check_run_event(event)
    event = event_of(operator_lineage(BatchFacts("b1:9092", ["orders"], None, summary=ENTRY)))
    del event["run"]["runId"]
    with pytest.raises(AssertionError, match="not a valid RunEvent"):
        check_run_event(event)


def test_the_spark_operator_refuses_to_put_the_lineage_transport_on_the_command_line(monkeypatch):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from kafka_batch_provider.operators.spark import KafkaSparkBatchOperator

    with pytest.raises(ConfigError, match="on spark-submit's command line"):
        KafkaSparkBatchOperator(task_id="spark", plan_task_id="plan", openlineage_inject_transport_info=True)
    # [openlineage] spark_inject_transport_info = True becomes the Spark operator's default: ignored here.
    defaults = inspect.unwrap(SparkSubmitOperator.__init__).__kwdefaults__
    monkeypatch.setitem(defaults, "openlineage_inject_transport_info", True)
    assert SparkSubmitOperator(task_id="plain", application="app.py")._openlineage_inject_transport_info
    task = KafkaSparkBatchOperator(task_id="spark2", plan_task_id="plan", openlineage_inject_parent_job_info=True)
    assert task._openlineage_inject_parent_job_info and not task._openlineage_inject_transport_info


def test_the_facets_json_schema_in_docs_is_the_one_the_events_are_checked_against():
    from pathlib import Path

    from kafka_batch_provider.core.lineage import OFFSETS_FACET_JSON_SCHEMA, OFFSETS_FACET_SCHEMA_URL

    docs = Path(__file__).resolve().parents[2] / "docs" / "KafkaBatchOffsetsRunFacet.json"
    assert json.loads(docs.read_text()) == OFFSETS_FACET_JSON_SCHEMA, "regenerate docs/KafkaBatchOffsetsRunFacet.json"
    assert OFFSETS_FACET_SCHEMA_URL.endswith("KafkaBatchOffsetsRunFacet.json#/$defs/KafkaBatchOffsetsRunFacet")


class RunningTask:
    """What the OpenLineage provider passes on complete: a task instance with its XCom."""

    def __init__(self, xcoms: dict) -> None:
        self.xcoms = xcoms

    def xcom_pull(self, task_ids: str):
        return self.xcoms.get(task_ids)


SUMMARY = {
    "batch_id": ENTRY["batch_id"],
    "seq": 3,
    "mode": "incremental",
    "group_id": "orders-ingest",
    "ranges": [{"topic": "orders", "partition": 0, "start": 0, "end": 5}],
    "plan_path": "/lake/_plans/3-b.json",
    "output": {"format": "iceberg", "table": "shop.orders"},
    "dry_run": False,
}


@pytest.fixture
def kafka_connection(monkeypatch):
    connection = {"conn_type": "kafka", "extra": {"bootstrap.servers": "b1:9092", "sasl.password": "s3cret"}}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps(connection))
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_DEFAULT",
        json.dumps({"conn_type": "generic", "extra": {"name": "prod", "type": "sql", "uri": "sqlite:///:memory:"}}),
    )


def lineage_of(task, ti) -> dict:
    pytest.importorskip("airflow.providers.openlineage", reason="the openlineage extra is installed by make test")
    event = event_of(task.get_openlineage_facets_on_complete(ti))
    check_run_event(event)
    assert "s3cret" not in json.dumps(event), "a connection's secret reached the event"
    return event


def test_only_the_spark_task_names_the_output_and_its_statistics(kafka_connection):
    from kafka_batch_provider.operators.commit import KafkaOffsetCommitOperator
    from kafka_batch_provider.operators.output import BatchOutput
    from kafka_batch_provider.operators.spark_connect import KafkaSparkConnectBatchOperator

    output = BatchOutput(output_format="iceberg", table="shop.orders", catalog_conn_id="iceberg_default")
    entry = {**ENTRY, "snapshot_id": 77, "files": [], "ranges": [{**SUMMARY["ranges"][0], "rows": 5}], "rows": 5}
    spark = KafkaSparkConnectBatchOperator(task_id="spark", plan_task_id="plan", output=output)
    spark.lineage_entry = entry
    written = lineage_of(spark, RunningTask({"plan": SUMMARY}))
    (dataset,) = written["outputs"]
    assert (dataset["namespace"], dataset["name"]) == ("iceberg://prod", "shop.orders")
    assert dataset["facets"]["version"]["datasetVersion"] == "77"
    assert dataset["outputFacets"]["outputStatistics"]["rowCount"] == 5
    assert [(d["namespace"], d["name"]) for d in written["inputs"]] == [("kafka://b1:9092", "orders")]

    commit = KafkaOffsetCommitOperator(task_id="commit", plan_task_id="plan", output=output)
    commit.lineage_entry = entry
    committed = lineage_of(commit, RunningTask({"plan": SUMMARY}))
    assert committed["outputs"] == [], "the commit writes no data: a backend would count the batch twice"
    assert committed["run"]["facets"][OFFSETS_FACET]["ranges"] == SUMMARY["ranges"]


def test_a_table_per_topic_names_each_topic_with_a_batch_and_the_spark_task_each_table(kafka_connection):
    from kafka_batch_provider.operators.commit import KafkaOffsetCommitOperator
    from kafka_batch_provider.operators.output import BatchOutput
    from kafka_batch_provider.operators.plan import KafkaOffsetPlanOperator
    from kafka_batch_provider.operators.spark import KafkaSparkBatchOperator

    planned = {"plan_path": "/lake/x/_plans/1.json", "records": 5}
    summary = {  # what tables_xcom pushes: two tables with a batch, one idle (not listed), one refused
        "per_topic": True,
        "pattern": "shop\\..*",
        "tables": {"shop.orders": {**planned, "table": "/lake/shop.orders"}, "shop.refunds": dict(planned)},
        "failed": {"shop.payments": {"error": "GroupMismatchError", "message": "moved"}},
        "idle_tables": 1,
        "output": {"format": "delta", "output": "/lake/{topic}"},
        "output_path": "/lake/{topic}",
        "dry_run": False,
    }
    spark = KafkaSparkBatchOperator(task_id="spark", plan_task_id="plan", output=BatchOutput())
    written = lineage_of(spark, RunningTask({"plan": summary}))
    topics = [(d["namespace"], d["name"]) for d in written["inputs"]]
    assert topics == [("kafka://b1:9092", "shop.orders"), ("kafka://b1:9092", "shop.refunds")], topics
    tables = [(d["namespace"], d["name"]) for d in written["outputs"]]
    assert tables == [("file", "/lake/shop.orders"), ("file", "/lake/shop.refunds")], tables
    assert OFFSETS_FACET not in written["run"].get("facets", {}), "each table's batch has its own offsets"

    commit = KafkaOffsetCommitOperator(task_id="commit", plan_task_id="plan", output=BatchOutput())
    committed = lineage_of(commit, RunningTask({"plan": summary}))
    assert committed["outputs"] == [] and len(committed["inputs"]) == 2, committed

    plan = KafkaOffsetPlanOperator(
        task_id="plan", topics=["shop.orders", "shop.refunds", "shop.payments", "shop.idle"], group_id="g",
        output=BatchOutput(output_format="delta", output_path="/lake/{topic}"),
    )  # fmt: skip
    planning = lineage_of(plan, RunningTask({"plan": summary}))
    assert [d["name"] for d in planning["inputs"]] == ["shop.orders", "shop.refunds"], planning["inputs"]
    assert planning["outputs"] == [] and OFFSETS_FACET not in planning["run"].get("facets", {}), planning


@pytest.mark.parametrize(
    "summary, why",
    [
        (None, "the plan task failed before planning"),
        ({**SUMMARY, "plan_path": None, "ranges": []}, "nothing new to plan"),
        ({**SUMMARY, "dry_run": True}, "a dry run"),
    ],
)
def test_a_task_without_a_batch_names_no_output_and_no_offsets(kafka_connection, summary, why):
    from kafka_batch_provider.operators.output import BatchOutput
    from kafka_batch_provider.operators.plan import KafkaReplayPlanOperator
    from kafka_batch_provider.operators.spark_connect import KafkaSparkConnectBatchOperator

    spark = KafkaSparkConnectBatchOperator(task_id="spark", plan_task_id="plan")
    event = lineage_of(spark, RunningTask({"plan": summary}))
    assert (event["outputs"], event["inputs"]) == ([], []), f"{why}: expected no datasets, found {event}"
    assert OFFSETS_FACET not in event["run"].get("facets", {}), why
    replay = KafkaReplayPlanOperator(
        task_id="replay", topics=["orders"], output=BatchOutput(output_path="/lake_replay"), whole_topic=True
    )
    event = lineage_of(replay, RunningTask({"replay": summary}))
    assert [d["name"] for d in event["inputs"]] == ["orders"] and event["outputs"] == [], event
    assert OFFSETS_FACET not in event["run"].get("facets", {}), why


def test_a_replay_plan_names_its_batch_as_a_replay(kafka_connection):
    from kafka_batch_provider.operators.output import BatchOutput
    from kafka_batch_provider.operators.plan import KafkaReplayPlanOperator

    replay = KafkaReplayPlanOperator(
        task_id="replay", topics=["orders"], output=BatchOutput(output_path="/lake_replay"), whole_topic=True
    )
    event = lineage_of(replay, RunningTask({"replay": {**SUMMARY, "mode": "replay", "group_id": None}}))
    facet = event["run"]["facets"][OFFSETS_FACET]
    assert (facet["mode"], facet["replay"]) == ("replay", True), facet


def test_a_connection_without_servers_leaves_out_the_topics_not_the_batch(monkeypatch):
    from kafka_batch_provider.operators.spark_connect import KafkaSparkConnectBatchOperator

    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": {}}))
    spark = KafkaSparkConnectBatchOperator(task_id="spark", plan_task_id="plan")
    spark.lineage_entry = {**ENTRY, "ranges": [{**SUMMARY["ranges"][0], "rows": 5}]}
    event = lineage_of(spark, RunningTask({"plan": {**SUMMARY, "output": {"format": "parquet", "output": "/lake"}}}))
    assert event["inputs"] == [] and [(d["namespace"], d["name"]) for d in event["outputs"]] == [("file", "/lake")]
    assert event["run"]["facets"][OFFSETS_FACET]["batchId"] == ENTRY["batch_id"]


def test_the_operators_and_dags_work_without_the_openlineage_provider(tmp_path):
    """Nothing of OpenLineage is imported unless its provider calls: with it absent, the operators
    import, build and parse (the DAG files) as before."""
    import subprocess
    import sys
    from pathlib import Path

    dags = Path(__file__).resolve().parents[2] / "dags"
    script = f"""
import sys
# import fails, as when the packages are not installed (the provider's metadata stays findable)
for name in ("openlineage", "airflow.providers.openlineage.extractors", "airflow.providers.openlineage.plugins"):
    sys.modules[name] = None
from airflow.dag_processing.dagbag import DagBag
from kafka_batch_provider.operators.spark import KafkaSparkBatchOperator
KafkaSparkBatchOperator(task_id="spark", plan_task_id="plan")
bag = DagBag({str(dags)!r})
assert not bag.import_errors, bag.import_errors
assert not [m for m, v in sys.modules.items() if m.startswith("openlineage") and v], "openlineage was imported"
print(len(bag.dags))
"""
    env = {
        "AIRFLOW_HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "KAFKA_BATCH_OUTPUT": str(tmp_path / "lake"),  # the shipped DAGs' output (required)
    }
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, f"expected the DAGs to parse without OpenLineage, found: {done.stderr[-800:]}"
    assert int(done.stdout.split()[-1]) >= 4, f"expected the shipped DAGs, found {done.stdout}"
