"""Bad operator arguments (refused when the DAG is parsed) and bad backfill params (refused by
the params' schema, or by the first task with ``AirflowFailException``: no retry)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from tests.bad_input.scene import Scene, one_line_problems
from tests.dags.conftest import DAGS

pytestmark = pytest.mark.check  # in make check's tier

# -- operator arguments: the DAG file fails to import, with one line ------------------------


@dataclass(frozen=True)
class ArgumentCase:
    id: str
    operator: str
    kwargs: dict[str, Any]
    expected: str


PLAN = {"topics": ["orders"], "group_id": "ingest"}
REPLAY = {"topics": ["orders"], "start_offsets": {"0": 0}}
NEVER_WRITTEN = {"output_path": "/tmp/kafka-batch-never-written"}

ARGUMENT_CASES = [
    ArgumentCase("plan-repeated-topics", "plan", {"topics": ["orders", "orders"]}, "given more than once"),
    ArgumentCase("plan-topic-is-a-number", "plan", {"topics": 2024}, "is a int, not a name"),
    ArgumentCase("plan-empty-group", "plan", {"group_id": " "}, "a consumer group id is required"),
    ArgumentCase("plan-timeout-nan", "plan", {"kafka_timeout": float("nan")}, "kafka_timeout must be a positive"),
    ArgumentCase("plan-timeout-negative", "plan", {"kafka_timeout": -1}, "kafka_timeout must be a positive"),
    ArgumentCase("plan-max-records-zero", "plan", {"max_records": 0}, "max_records must be a positive integer"),
    ArgumentCase("plan-unknown-format", "plan", {"output_format": "csv"}, "unknown output_format 'csv'"),
    ArgumentCase("plan-unknown-policy", "plan", {"new_partitions": "sometimes"}, "'sometimes' is not a valid"),
    ArgumentCase("commit-timeout-inf", "commit", {"kafka_timeout": float("inf")}, "kafka_timeout must be a positive"),
    ArgumentCase("spark-stall-timeout-nan", "spark", {"stall_timeout": float("nan")}, "stall timeout must be"),
    ArgumentCase("spark-target-file-mb-huge", "spark", {"target_file_mb": 10_000}, "target_file_mb must be between"),
    ArgumentCase("spark-bad-value-schema", "spark", {"value_format": "json", "value_schema": "id,"}, "Spark DDL"),
    ArgumentCase("spark-unknown-value-format", "spark", {"value_format": "xml"}, "unknown value format 'xml'"),
    ArgumentCase(
        "spark-json-without-schema", "spark", {"value_format": "json"}, "value_format='json' needs value_schema"
    ),
    ArgumentCase("connect-unknown-reader", "spark_connect", {"reader": "scala"}, "unknown reader 'scala'"),
    ArgumentCase(
        "plan-avro-without-registry",
        "plan",
        {"value_format": "avro"},
        "value format avro decodes with a schema registry: set schema_registry_conn_id",
    ),
    ArgumentCase("plan-unknown-value-format", "plan", {"value_format": "xml"}, "unknown value format 'xml'"),
    ArgumentCase(
        "plan-subject-without-registry-format",
        "plan",
        {"value_subject": "orders-value"},
        "value_subject is only used with a schema registry format",
    ),
    ArgumentCase(
        "plan-schema-version-zero",
        "plan",
        {"value_format": "avro", "schema_registry_conn_id": "registry", "value_schema_version": 0},
        "value_schema_version must be a registered version number",
    ),
    ArgumentCase(
        "spark-avro-without-registry",
        "spark",
        {"value_format": "avro"},
        "value format avro decodes with a schema registry: set schema_registry_conn_id",
    ),
    ArgumentCase(
        "connect-jvm-reader-with-avro",
        "spark_connect",
        {"value_format": "avro", "reader": "jvm", "schema_registry_conn_id": "registry"},
        "reader='jvm' cannot decode avro values",
    ),
    ArgumentCase(
        "spark-keep-raw-value-without-registry-format",
        "spark",
        {"keep_raw_value": True},
        "keep_raw_value is only used with a schema registry format",
    ),
    ArgumentCase(
        "spark-dead-letters-without-registry-format",
        "spark",
        {"on_bad_record": "dead-letter"},
        "on_bad_record='dead-letter' is only used with a schema registry format",
    ),
    ArgumentCase(
        "connect-unknown-on-bad-record",
        "spark_connect",
        {"value_format": "avro", "schema_registry_conn_id": "registry", "on_bad_record": "skip"},
        "unknown on_bad_record 'skip'; choose one of fail, dead-letter",
    ),
    ArgumentCase("health-dead-letter-share-above-one", "health", {"dead_letter_share": 1.5}, "must be a share in"),
    ArgumentCase("connect-stall-timeout-inf", "spark_connect", {"stall_timeout": float("inf")}, "stall timeout must"),
    ArgumentCase("connect-target-file-mb-zero", "spark_connect", {"target_file_mb": 0}, "target_file_mb must be"),
    ArgumentCase(
        "connect-secret-catalog-property",
        "spark_connect",
        {"catalog_properties": {"credential": "id:secret"}},
        "catalog_conn_id",
    ),
    ArgumentCase("plan-output-not-a-value", "plan", {"output": {"output_path": "/x"}}, "output must be a BatchOutput"),
    ArgumentCase("replay-no-range", "replay", {"start_offsets": None}, "a replay needs a range"),
    ArgumentCase(
        "replay-offsets-and-times",
        "replay",
        {"start_time": "2026-01-01T00:00:00Z", "end_time": "2026-01-02T00:00:00Z"},
        "either start/end offsets or start/end times",
    ),
    ArgumentCase("replay-whole-topic-and-offsets", "replay", {"whole_topic": True}, "whole_topic replays everything"),
    ArgumentCase(
        "replay-end-before-start-time",
        "replay",
        {"start_offsets": None, "start_time": "2026-01-02T00:00:00Z", "end_time": "2026-01-01T00:00:00Z"},
        "is not after start time",
    ),
    ArgumentCase("replay-offsets-not-json", "replay", {"start_offsets": '{"0": '}, "must be a JSON object"),
    ArgumentCase("replay-negative-offset", "replay", {"start_offsets": {"0": -1}}, "must not hold negative"),
    ArgumentCase("replay-offset-not-a-number", "replay", {"end_offsets": {"0": "ten"}}, "integer offsets"),
    ArgumentCase("replay-offset-nan", "replay", {"end_offsets": {"0": float("nan")}}, "integer offsets"),
    ArgumentCase("replay-offset-inf", "replay", {"end_offsets": {"0": float("inf")}}, "integer offsets"),
    ArgumentCase("replay-time-not-iso", "replay", {"start_offsets": None, "start_time": "yesterday"}, "ISO 8601"),
    ArgumentCase("upkeep-retention-minutes", "upkeep", {"retention_hours": 0.25}, "retention_hours must be at least 1"),
    ArgumentCase("upkeep-target-zero", "upkeep", {"target_file_mb": 0}, "target_file_mb must be between 1 and 4096"),
    ArgumentCase("upkeep-keep-none", "upkeep", {"keep_batches": 0}, "keep_batches must be at least 1"),
    ArgumentCase("upkeep-unknown-format", "upkeep", {"output_format": "csv"}, "unknown output_format 'csv'"),
]


def build(kind: str, kwargs: dict[str, Any]):
    from airflow.sdk import DAG

    from kafka_batch_provider.operators.commit import KafkaOffsetCommitOperator
    from kafka_batch_provider.operators.output import BatchOutput
    from kafka_batch_provider.operators.plan import KafkaOffsetPlanOperator, KafkaReplayPlanOperator
    from kafka_batch_provider.operators.spark import KafkaSparkBatchOperator
    from kafka_batch_provider.operators.spark_connect import KafkaSparkConnectBatchOperator

    # The output's parts go into the one output value the operators take.
    fields = {k: kwargs.pop(k) for k in list(kwargs) if k in BatchOutput.__dataclass_fields__}
    if kind in ("plan", "replay", "upkeep"):
        fields = {**NEVER_WRITTEN, **fields}
    if fields:
        kwargs.setdefault("output", BatchOutput(**fields))
    with DAG(dag_id=f"bad_{kind}", schedule=None):
        if kind == "plan":
            return KafkaOffsetPlanOperator(task_id="plan", **{**PLAN, **kwargs})
        if kind == "replay":
            return KafkaReplayPlanOperator(task_id="replay", **{**REPLAY, **kwargs})
        if kind == "upkeep":
            from kafka_batch_provider.operators.upkeep import KafkaBatchUpkeepOperator

            return KafkaBatchUpkeepOperator(task_id="upkeep", **kwargs)
        if kind == "health":
            from kafka_batch_provider.operators.health import KafkaLagHealthOperator

            return KafkaLagHealthOperator(task_id="health", group_id="g", topics=["t"], **kwargs)
        if kind == "commit":
            return KafkaOffsetCommitOperator(task_id="commit", plan_task_id="plan", **kwargs)
        if kind == "spark_connect":
            return KafkaSparkConnectBatchOperator(task_id="write", plan_task_id="plan", **kwargs)
        return KafkaSparkBatchOperator(task_id="write", plan_task_id="plan", **kwargs)


@pytest.mark.parametrize("case", ARGUMENT_CASES, ids=[c.id for c in ARGUMENT_CASES])
def test_bad_operator_argument_fails_the_dag_import_with_one_line(case: ArgumentCase, scene: Scene, verdict) -> None:
    from kafka_batch_provider.errors import KafkaBatchError

    before = scene.snapshot()
    try:
        build(case.operator, dict(case.kwargs))
    except (KafkaBatchError, ValueError) as exc:
        problems = one_line_problems(str(exc), case.expected)
    else:
        problems = [f"expected the operator to refuse {case.kwargs}, it was built"]
    verdict.judge(problems, before, scene.snapshot())


# -- the backfill DAG's params ---------------------------------------------------------------


@dataclass(frozen=True)
class ParamCase:
    id: str
    conf: Callable[[Scene], dict[str, Any]]
    expected: str
    #: Refused by the params' JSON schema when the run is triggered (Airflow's message: its
    #: first line says what is wrong, the schema follows) rather than by the first task.
    by_schema: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def future(hours: int) -> str:
    return (datetime.now(timezone.utc) + timedelta(hours=hours)).isoformat()


PARAM_CASES = [
    ParamCase("no-range-at-all", lambda s: {"topic": s.topic}, "a replay needs a range"),
    ParamCase(
        "topic-rendered-as-a-number",
        lambda s: {"topic": "2024", "whole_topic": True},
        "unknown topic(s) '2024'",
    ),
    ParamCase("unknown-topic", lambda s: {"topic": "no-such-topic", "whole_topic": True}, "unknown topic(s)"),
    ParamCase(
        "unknown-partition",
        lambda s: {"topic": s.topic, "partitions": [5], "whole_topic": True},
        "has no partition(s) [5]",
    ),
    ParamCase(
        "end-before-start",
        lambda s: {"topic": s.topic, "start_offsets": {"0": 4}, "end_offsets": {"0": 2}},
        "end offset 2 is before start offset 4",
    ),
    ParamCase(
        "offsets-beyond-the-end",
        lambda s: {"topic": s.topic, "end_offsets": {"0": 500}},
        "end offset 500 is beyond the end offset 5",
    ),
    ParamCase(
        "offsets-and-times",
        lambda s: {
            "topic": s.topic,
            "start_offsets": {"0": 1},
            "start_time": "2026-01-01T00:00:00Z",
            "end_time": "2026-01-02T00:00:00Z",
        },  # fmt: skip
        "either start/end offsets or start/end times",
    ),
    ParamCase(
        "whole-topic-and-offsets",
        lambda s: {"topic": s.topic, "whole_topic": True, "end_offsets": {"0": 2}},
        "whole_topic replays everything",
    ),
    ParamCase(
        "times-in-the-future",
        lambda s: {"topic": s.topic, "start_time": future(1), "end_time": future(2)},
        "is in the future",
    ),
    ParamCase(
        "time-not-iso",
        lambda s: {"topic": s.topic, "start_time": "yesterday", "end_time": "today"},
        "must be an ISO 8601 time",
    ),
    ParamCase(
        "offsets-malformed-json",
        lambda s: {"topic": s.topic, "start_offsets": '{"0": '},
        "is not of type 'null', 'object'",
        by_schema=True,
    ),
    ParamCase(
        "negative-offset",
        lambda s: {"topic": s.topic, "start_offsets": {"0": -1}},
        "-1 is less than the minimum of 0",
        by_schema=True,
    ),
    ParamCase(
        "negative-partition",
        lambda s: {"topic": s.topic, "partitions": [-1], "whole_topic": True},
        "-1 is less than the minimum of 0",
        by_schema=True,
    ),
    ParamCase("empty-topic", lambda s: {"topic": ""}, "should be non-empty", by_schema=True),
]


@pytest.fixture
def kafka_connection(scene: Scene, monkeypatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": scene.bootstrap_servers}}),
    )


def first_task_with_params(conf: dict[str, Any]):
    """The backfill DAG's first task, freshly parsed, its templates rendered from the params
    as a triggered run would render them (the schema's refusal is raised here)."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(str(DAGS)).dags["kafka_batch_backfill"]
    params = {name: dag.params.get_param(name).resolve(conf.get(name, dag.params[name])) for name in dag.params}
    task = dag.task_dict["plan_replay"]
    task.render_template_fields({"params": params}, dag.get_template_env())
    return task


@pytest.mark.parametrize("case", PARAM_CASES, ids=[c.id for c in PARAM_CASES])
def test_bad_backfill_param_fails_the_first_task_once_with_one_line(
    case: ParamCase, scene: Scene, kafka_connection, verdict
) -> None:
    from airflow.sdk.definitions.param import ParamValidationError
    from airflow.sdk.exceptions import AirflowFailException

    conf = {"output_path": str(scene.root / "replay"), **case.conf(scene)}
    before = scene.snapshot()
    problems: list[str] = []
    try:
        task = first_task_with_params(conf)
        if case.by_schema:
            problems.append(f"expected the params' schema to refuse {conf}, it accepted them")
        else:
            task.execute({})
            problems.append(f"expected the task to fail for {conf}, it succeeded")
    except ParamValidationError as exc:
        first_line = str(exc).strip().splitlines()[0]
        if not case.by_schema:
            problems.append(f"expected the task to refuse {conf}, the schema did: {first_line!r}")
        elif case.expected not in first_line:
            problems.append(f"expected the schema's first line to say {case.expected!r}, got {first_line!r}")
    except AirflowFailException as exc:  # fails the task without its retries
        problems += one_line_problems(str(exc), case.expected)
    except Exception as exc:  # noqa: BLE001 - any other type would be retried: part of the verdict
        problems.append(f"expected AirflowFailException (no retry), got {type(exc).__name__}: {exc}")
    verdict.judge(problems, before, scene.snapshot())


# -- one whole run of the DAG: the task fails once, not retried ----------------------------

RUN_CASES = [
    ParamCase("dag-run-without-a-range", lambda s: {"topic": s.topic}, "a replay needs a range"),
    ParamCase("dag-run-topic-2024", lambda s: {"topic": "2024", "whole_topic": True}, "unknown topic(s) '2024'"),
]


def run_backfill(conf: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """``dag.test()`` of a freshly parsed backfill DAG with one immediate retry allowed:
    ``{task_id: (state, tries)}``. A retryable failure would be run twice."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    dag = DagBag(str(DAGS)).dags["kafka_batch_backfill"]
    for task in dag.tasks:
        task.retries, task.retry_delay = 1, timedelta(0)
    dag_run = dag.test(run_conf=conf)
    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag.dag_id, TaskInstance.run_id == dag_run.run_id)
        ).all()
        return {ti.task_id: (str(ti.state), ti.try_number) for ti in tis}


@pytest.mark.usefixtures("airflow_db")
@pytest.mark.parametrize("case", RUN_CASES, ids=[c.id for c in RUN_CASES])
def test_a_refused_backfill_run_fails_its_first_task_once(
    case: ParamCase, scene: Scene, kafka_connection, capfd, verdict
) -> None:
    conf = {"output_path": str(scene.root / "replay"), **case.conf(scene)}
    before = scene.snapshot()
    states = run_backfill(conf)
    log = capfd.readouterr().out
    problems = []
    if states.get("plan_replay") != ("failed", 1):
        problems.append(f"expected plan_replay failed after 1 try (no retry), got {states.get('plan_replay')}")
    if states.get("spark_write", ("upstream_failed",))[0] != "upstream_failed":
        problems.append(f"expected spark_write upstream_failed, got {states.get('spark_write')}")
    lines = [line for line in log.splitlines() if case.expected in line]
    if not lines:
        problems.append(f"expected a task log line saying {case.expected!r}")
    verdict.judge(problems, before, scene.snapshot())


# -- the shipped DAGs' parse-time settings: a bad one fails the DAG file's import in one line -----------

ENV_CASES = [
    ("kafka_batch_ingest.py", "KAFKA_BATCH_MIN_LAG", "1k", "KAFKA_BATCH_MIN_LAG must be a whole number"),
    ("kafka_batch_ingest.py", "KAFKA_BATCH_SENSOR_DEFERRABLE", "on", "KAFKA_BATCH_SENSOR_DEFERRABLE must be one of"),
    ("kafka_batch_ingest.py", "KAFKA_BATCH_SENSOR_TIMEOUT_SECONDS", "ten", "KAFKA_BATCH_SENSOR_TIMEOUT_SECONDS must"),
    ("kafka_batch_ingest.py", "KAFKA_BATCH_KEEP_RAW_VALUE", "maybe", "KAFKA_BATCH_KEEP_RAW_VALUE must be one of"),
    ("kafka_batch_backfill.py", "KAFKA_BATCH_READER", "scala", "KAFKA_BATCH_READER must be one of native, python, jvm"),
    ("kafka_batch_ingest_on_lag.py", "KAFKA_BATCH_IN_FLIGHT_SECONDS", "-5", "KAFKA_BATCH_IN_FLIGHT_SECONDS must be"),
    ("kafka_batch_upkeep.py", "KAFKA_BATCH_UPKEEP_RETENTION_HOURS", "nan", "KAFKA_BATCH_UPKEEP_RETENTION_HOURS must"),
]


@pytest.mark.parametrize("dag_file, env, value, expected", ENV_CASES, ids=[f"{c[1]}={c[2]}" for c in ENV_CASES])
def test_a_bad_parse_time_setting_fails_the_dag_import_naming_the_variable(
    dag_file, env, value, expected, scene: Scene, verdict, monkeypatch
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    before = scene.snapshot()
    monkeypatch.setenv(env, value)
    errors = DagBag(str(DAGS / dag_file)).import_errors
    lines = [line for message in errors.values() for line in message.strip().splitlines()]
    problems = [f"expected an import error of {dag_file}, found none"] if not lines else []
    if lines:
        problems = one_line_problems(lines[-1], expected)  # the exception's own line, last in the traceback
    verdict.judge(problems, before, scene.snapshot())
