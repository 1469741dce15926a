"""Waiting on the live stack: polls with a deadline whose failure says what was seen last."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.dev.airflow_live import AirflowStack
from kafka_batch_provider.kafka.client import KafkaOffsets

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], tuple[T | None, Any]], timeout: float, interval: float = 1.0) -> T:
    """Call ``probe`` until its first value is truthy; ``probe`` returns (value, what it saw)."""
    deadline = time.monotonic() + timeout
    seen: Any = None
    while time.monotonic() < deadline:
        value, seen = probe()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"expected {what} within {timeout:.0f} s; last seen: {seen}")


def runs_since(stack: AirflowStack, dag_id: str, known: set[str], run_type: str | None = None) -> list[dict]:
    """The DAG's runs not in ``known``, oldest first (optionally of one run type)."""
    runs = [r for r in stack.dag_runs(dag_id, order_by="id") if r["dag_run_id"] not in known]
    return [r for r in runs if run_type is None or r["run_type"] == run_type]


def task_instances_of(stack: AirflowStack, dag_id: str, task_id: str, state: str | None = None) -> list[dict]:
    params: dict[str, Any] = {"task_id": task_id, "limit": 100}
    if state:
        params["state"] = [state]
    return stack.api("GET", f"/dags/{dag_id}/dagRuns/~/taskInstances", params=params)["task_instances"]


def xcom_value(stack: AirflowStack, dag_id: str, run_id: str, task_id: str) -> Any:
    entry = stack.api(
        "GET",
        f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value",
        params={"deserialize": "true"},
    )
    return entry["value"]


def committed(kafka_config: dict, group: str, topic: str, partitions: list[int]) -> dict[int, int | None]:
    found = KafkaOffsets(kafka_config).committed_offsets(group, [TopicPartition(topic, p) for p in partitions])
    return {tp.partition: offset for tp, offset in found.items()}
