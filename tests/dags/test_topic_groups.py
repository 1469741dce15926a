"""The topic groups DAG file: a group's pattern into a Delta table per topic, run with dag.test()
against the real broker and the warm Spark Connect server; one asset event per committed table."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from deltalake import DeltaTable

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.operators.assets import output_asset_uri
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records
from tests.dags.conftest import DAGS
from tests.dags.test_dags_end_to_end import asset_events, committed, use_spark_connect

pytestmark = pytest.mark.integration


def groups_file(tmp_path, **group) -> str:
    path = tmp_path / "groups.json"
    path.write_text(json.dumps({"groups": [group]}))
    return str(path)


def test_a_topic_group_lands_each_topic_in_its_table_with_an_asset_event_each(
    airflow_db, kafka_config, kafka_bootstrap_servers, spark_connect_remote, group_id, tmp_path, monkeypatch
):
    from airflow.dag_processing.dagbag import DagBag

    prefix = f"grp{uuid.uuid4().hex[:8]}"
    topics = [f"{prefix}.clicks", f"{prefix}.views"]
    create_topics(kafka_config, {t: 2 for t in topics})
    for count, topic in zip((10, 6), topics):
        produce(kafka_config, topic, sample_records(2, count))
    kafka = {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap_servers}}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps(kafka))
    use_spark_connect(monkeypatch, spark_connect_remote)
    monkeypatch.setenv("KAFKA_BATCH_LAKE", str(tmp_path / "lake"))
    monkeypatch.setenv(
        "KAFKA_BATCH_TOPIC_GROUPS",
        groups_file(
            tmp_path,
            name="web",
            topic_pattern=re.escape(prefix) + r"\..*",
            consumer_group=group_id,
            output={"format": "delta", "path": "${KAFKA_BATCH_LAKE}/{topic}"},
            spark_connect_conn_id="spark_connect_default",
            max_tasks=2,
            sensor_timeout=5,
            sensor_poke_interval=1,
        ),
    )
    dag = DagBag(str(DAGS / "kafka_topic_groups.py")).dags["kafka_batch_topics_web"]
    for task in dag.tasks:
        task.retries = 0
    run = dag.test()

    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert set(states.values()) == {"success"}, states
    for count, topic in zip((10, 6), topics):
        table = tmp_path / "lake" / topic
        assert DeltaTable(str(table)).to_pyarrow_table(columns=["offset"]).num_rows == count, topic
        assert committed(kafka_config, group_id, topic, [0, 1]) == {0: count // 2, 1: count // 2}, topic
        events = asset_events(output_asset_uri({"format": "delta", "output": str(table)}))
        assert [(e["rows"], e["seq"]) for e in events] == [(count, 1)], f"{topic}: one event for its batch: {events}"


@pytest.mark.parametrize(
    "group, says",
    [
        ({"name": "a b"}, "name must be 1-100 of A-Z"),
        ({"name": "x", "consumer_group": "g", "output": {"path": "/l/{topic}"}}, "give topics or topic_pattern"),
        ({"name": "x", "topics": ["t"], "output": {"path": "/l/{topic}"}}, "consumer_group is required"),
        ({"name": "x", "topics": ["t"], "consumer_group": "g", "output": {"paht": "/l"}}, "output must be an object"),
        (
            {"name": "x", "topics": ["t"], "consumer_group": "g", "output": {"path": "${NOT_SET_ANYWHERE}/{topic}"}},
            "NOT_SET_ANYWHERE is not set",
        ),
        ({"name": "x", "topics": ["t"], "consumer_group": "g", "output": {"path": "/l"}, "min_lagg": 3}, "min_lagg"),
    ],
)
def test_a_bad_topic_groups_file_is_refused_in_one_line(group, says, tmp_path):
    from kafka_batch_provider.dag_factory import dags_from_file
    from kafka_batch_provider.task_group import kafka_batch_ingest_group

    with pytest.raises(ConfigError) as refused:
        dags_from_file(groups_file(tmp_path, **group), kafka_batch_ingest_group)
    assert says in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
