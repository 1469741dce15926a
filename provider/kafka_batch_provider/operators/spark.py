"""``KafkaSparkBatchOperator``: the read and write steps, as a ``SparkSubmitOperator``."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from kafka_batch_provider.batch_store import BatchStore
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.hooks.offsets import KafkaOffsetsHook
from kafka_batch_provider.operators.errors import task_errors
from kafka_batch_provider.operators.xcom import pull_plan
from kafka_batch_provider.spark.app import CONFIG_FILE_ENV
from kafka_batch_provider.spark.options import DEFAULT_MAX_OFFSETS_PER_TASK, DEFAULT_STALL_TIMEOUT, WriteOptions
from kafka_batch_provider.spark.submit import DEFAULT_APPLICATION, application_args, private_config_file


def shippable(kafka_config: dict[str, Any]) -> dict[str, Any]:
    """The config as Spark will get it (JSON); callables (oauth_cb, error_cb, ...) cannot go."""
    callbacks = sorted(k for k, v in kafka_config.items() if callable(v) and k != "logger")
    if callbacks:
        raise ConfigError(
            f"the Kafka connection sets callback(s) {', '.join(callbacks)} (e.g. MSK IAM or managed-cloud OAuth): "
            "Spark executors get the config as JSON and cannot run them; use credentials in the connection's "
            "extra (e.g. SASL/SCRAM) for the Spark reader"
        )
    return {k: v for k, v in kafka_config.items() if k != "logger"}


class KafkaSparkBatchOperator(SparkSubmitOperator):
    """Run the Spark application on the plan pushed by ``plan_task_id``, through a ``spark`` connection.

    Skips when the plan is empty or a dry run. The Kafka connection's settings (secrets
    included) reach Spark in a private temporary file named by an environment variable (in
    cluster deploy mode the file is shipped with ``--files``), never on the command line.
    Pushes the batch's row count and location from its manifest.

    :param plan_task_id: task id of the plan operator (inside a task group: ``group.plan``).
    :param kafka_config_id: the ``kafka`` connection the plan used.
    :param reader: ``python`` (default) or ``jvm`` (needs spark-sql-kafka-0-10 on the cluster).
    :param value_format: ``bytes`` (default), ``string`` or ``json`` (with ``value_schema``).
    :param application: the Spark application file (default: the one installed with this package;
        ``spark_apps/kafka_batch_ingest.py`` in the repository is the same program).
    :param conn_id: the ``spark`` connection (default ``spark_default``).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "plan_task_id")
    ui_color = "#fdf2e0"

    def __init__(
        self,
        *,
        plan_task_id: str,
        kafka_config_id: str = "kafka_default",
        reader: str = "python",
        value_format: str = "bytes",
        value_schema: str | None = None,
        max_offsets_per_task: int = DEFAULT_MAX_OFFSETS_PER_TASK,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
        application: str = DEFAULT_APPLICATION,
        name: str = "kafka-batch-ingest",
        **kwargs: Any,
    ) -> None:
        super().__init__(application=application, name=name, **kwargs)
        self.plan_task_id = plan_task_id
        self.kafka_config_id = kafka_config_id
        # Checked here, so a bad option is a DAG import error rather than a failed run.
        self.write_options = WriteOptions(reader, value_format, value_schema, max_offsets_per_task, stall_timeout)

    def execute(self, context: Any) -> dict[str, Any]:
        summary, plan = pull_plan(context, self.plan_task_id, "write")
        if not plan.has_data:
            from airflow.sdk.exceptions import AirflowSkipException

            raise AirflowSkipException(f"batch {plan.batch_id} has nothing to read: Spark is not started")
        with task_errors():
            kafka_config = shippable(KafkaOffsetsHook(self.kafka_config_id).kafka_config)
        self.log.info(
            "batch %s: %d range(s), up to %d offsets", plan.batch_id, len(plan.readable_ranges), plan.planned_offsets
        )
        with private_config_file(kafka_config) as config_path:
            self.application_args = application_args(summary["plan_path"], summary["output_path"], self.write_options)
            self._hand_over_config(config_path)
            super().execute(context)
        manifest = BatchStore(summary["output_path"]).load_manifest(plan.batch_id)
        return {"batch_id": plan.batch_id, "rows": manifest["rows"], "location": manifest["location"]}

    def _hand_over_config(self, config_path: str) -> None:
        deploy_mode = self._deploy_mode or self._get_hook()._connection.get("deploy_mode")
        if deploy_mode == "cluster":
            # The driver runs elsewhere: ship the file; it lands in the driver's working dir.
            self.files = ",".join(filter(None, [self.files, config_path]))
            self.application_args += ["--kafka-config-file", Path(config_path).name]
        else:
            env = dict(self.env_vars or {})
            env[CONFIG_FILE_ENV] = config_path
            # A local master's Python workers must use this interpreter (it has the dependencies).
            env.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", sys.executable))
            self.env_vars = env
        self._hook = None  # rebuilt in execute() with the arguments above
