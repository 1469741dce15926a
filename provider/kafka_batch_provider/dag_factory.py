"""DAGs from a small file of topic groups: one DAG per group, each a pattern into a table per topic.

For platform teams that want several DAGs (a schedule, a group and an owner each) rather than one
for every topic: the file (JSON, or YAML for ``.yaml``/``.yml``) lists the groups::

    {"groups": [
      {"name": "orders", "topic_pattern": "orders\\\\..*", "consumer_group": "lake-orders",
       "output": {"format": "delta", "path": "s3://lake/raw/{topic}", "storage_conn_id": "aws_lake"},
       "schedule": "*/15 * * * *", "max_tasks": 16, "owner": "orders-team"}
    ]}

Each group becomes the DAG ``kafka_batch_topics_<name>``: one
:func:`~kafka_batch_provider.task_group.kafka_batch_ingest_group` (sensor, plan, one Spark job for
every table, commit, lag health), five tasks whatever the number of topics, so no group comes near
Airflow's ``max_map_length``. ``topics`` (a list) may stand instead of ``topic_pattern``; every
other key of the task group (``spark_connect_conn_id``, ``kafka_config_id``, ``min_lag``, ...) may
be given too (durations in seconds). ``${VAR}`` in a string is the environment variable's value (unset: refused).
A bad file fails the DAG file's import in one line naming the group and the key.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from kafka_batch_provider.errors import ConfigError

#: The keys a group's entry takes besides the task group's own arguments.
GROUP_KEYS = {"name", "output", "schedule", "owner", "retries", "tags", "description"}
OUTPUT_KEYS = {
    "format",
    "path",
    "table",
    "storage_conn_id",
    "catalog_conn_id",
    "database_conn_id",
    "partition_by",
    "mode",
    "merge_key",
}
NAME = re.compile(r"^[A-Za-z0-9_]{1,100}$")
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def read_groups(path: str | Path) -> list[dict[str, Any]]:
    """The file's groups, checked: each a name, an output, and topics or a topic pattern."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"topic groups file {path}: {exc.strerror or exc}") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except ValueError as exc:  # json.JSONDecodeError and yaml.YAMLError's parser errors
        raise ConfigError(f"topic groups file {path} is not valid {path.suffix.lstrip('.') or 'JSON'}: {exc}") from None
    groups = data.get("groups") if isinstance(data, Mapping) else None
    if not isinstance(groups, list) or not all(isinstance(g, Mapping) for g in groups):
        raise ConfigError(f'topic groups file {path} must hold {{"groups": [{{...}}, ...]}}')
    names = [str(g.get("name")) for g in groups]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"topic groups file {path}: group name(s) {', '.join(repeated)} given more than once")
    return [check_group(expanded(dict(g)), path) for g in groups]


def expanded(value: Any) -> Any:
    """``${VAR}`` in every string replaced by the environment's value; an unset one refused."""
    if isinstance(value, str):
        missing = [name for name in VARIABLE.findall(value) if name not in os.environ]
        if missing:
            raise ConfigError(f"{missing[0]} is not set (the topic groups file names it)")
        return VARIABLE.sub(lambda m: os.environ[m.group(1)], value)
    if isinstance(value, Mapping):
        return {k: expanded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expanded(v) for v in value]
    return value


def check_group(group: dict[str, Any], path: Path) -> dict[str, Any]:
    name = group.get("name")
    where = f"topic groups file {path}, group {name!r}"
    if not isinstance(name, str) or not NAME.match(name):
        raise ConfigError(f"{where}: name must be 1-100 of A-Z, a-z, 0-9 and _ (it names the DAG)")
    if ("topics" in group) == ("topic_pattern" in group):
        raise ConfigError(f"{where}: give topics or topic_pattern, one of the two")
    if "consumer_group" not in group:
        raise ConfigError(f"{where}: consumer_group is required")
    output = group.get("output")
    if not isinstance(output, Mapping) or not (output.get("path") or output.get("table")):
        raise ConfigError(f"{where}: output must be an object with a path (or an Iceberg table)")
    unknown = sorted(set(output) - OUTPUT_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown output key(s) {', '.join(unknown)}")
    return group


def dag_of(group: Mapping[str, Any], ingest_group: Callable[..., Any]) -> Any:
    """The group's DAG: one task group (``ingest_group``, the
    :func:`~kafka_batch_provider.task_group.kafka_batch_ingest_group` the DAG file hands in), a
    table per topic when the output names ``{topic}``."""
    import inspect

    from airflow.sdk import DAG, CronDataIntervalTimetable

    from kafka_batch_provider.operators.output import BatchOutput

    name = group["name"]
    taken = set(inspect.signature(ingest_group).parameters) - {"output", "group_id"}
    unknown = sorted(set(group) - GROUP_KEYS - taken)
    if unknown:
        raise ConfigError(f"topic group {name!r}: unknown key(s) {', '.join(unknown)}")
    spec = group["output"]
    output = BatchOutput(
        output_format=spec.get("format", "parquet"),
        output_path=spec.get("path"),
        table=spec.get("table"),
        storage_conn_id=spec.get("storage_conn_id"),
        catalog_conn_id=spec.get("catalog_conn_id"),
        database_conn_id=spec.get("database_conn_id"),
        partition_by=spec.get("partition_by"),
        mode=spec.get("mode"),
        merge_key=spec.get("merge_key"),
    )
    parameters = inspect.signature(ingest_group).parameters
    arguments = {k: as_seconds(v, parameters[k].default) for k, v in group.items() if k in taken}
    with DAG(
        dag_id=f"kafka_batch_topics_{name}",
        description=group.get("description") or f"Kafka topic group {name} into {spec.get('path') or spec['table']}",
        doc_md=f"### Topic group `{name}`\n\n{__doc__}",
        schedule=CronDataIntervalTimetable(group.get("schedule", "*/15 * * * *"), timezone="UTC"),
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,  # one writer per consumer group: the commit is compare-and-set
        dagrun_timeout=timedelta(hours=2),
        default_args={"owner": group.get("owner", "data-platform"), "retries": int(group.get("retries", 2))},
        tags=["kafka", "spark", "ingestion", "topic-group", *group.get("tags", [])],
    ) as dag:
        ingest_group(group_id="ingest", output=output, **arguments)
    return dag


def as_seconds(value: Any, default: Any) -> Any:
    """A number of seconds where the task group takes a ``timedelta`` (JSON has none)."""
    if isinstance(default, timedelta) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return timedelta(seconds=value)
    return value


def dags_from_file(path: str | Path, ingest_group: Callable[..., Any]) -> dict[str, Any]:
    """``{dag_id: DAG}`` of every group in the file (for a DAG file's ``globals().update(...)``),
    each built with ``ingest_group`` (``kafka_batch_ingest_group``)."""
    dags = [dag_of(group, ingest_group) for group in read_groups(path)]
    return {dag.dag_id: dag for dag in dags}
