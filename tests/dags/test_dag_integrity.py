"""DAG integrity: the DAGs parse, are documented and owned, open no connection, and render."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.dags.conftest import DAGS

EXPECTED_DAGS = {"kafka_batch_ingest", "kafka_batch_backfill"}


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
    else:
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
