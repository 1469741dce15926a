"""``KafkaSparkBatchOperator``: the read and write steps, as a ``SparkSubmitOperator``."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException

from kafka_batch_provider.core.file_sizing import DEFAULT_TARGET_FILE_MB
from kafka_batch_provider.core.reader_schema import check_plan_formats
from kafka_batch_provider.core.write_options import (
    DEFAULT_MAX_OFFSETS_PER_TASK,
    DEFAULT_READER,
    DEFAULT_STALL_TIMEOUT,
    WriteOptions,
    check_table_per_topic,
)
from kafka_batch_provider.errors import ConfigError, KafkaBatchError
from kafka_batch_provider.hooks.offsets import KafkaOffsetsHook
from kafka_batch_provider.hooks.schema_registry import registry_conn_for, registry_settings
from kafka_batch_provider.operators.errors import spark_step_error, task_errors
from kafka_batch_provider.operators.lineage import BatchFacts, BatchLineage, planned_task_facts
from kafka_batch_provider.operators.output import BatchOutput, connections_of, open_output
from kafka_batch_provider.operators.tables import is_per_topic, planned_tables
from kafka_batch_provider.operators.xcom import load_plan, pull_summary
from kafka_batch_provider.output.formats import open_store
from kafka_batch_provider.spark.app import (
    CATALOG_PROPERTIES_FILE_ENV,
    CONFIG_FILE_ENV,
    REGISTRY_SETTINGS_FILE_ENV,
    STORAGE_OPTIONS_FILE_ENV,
)
from kafka_batch_provider.spark.jvm_start import lean_submit_conf
from kafka_batch_provider.spark.kafka_connector import jars_for_reader
from kafka_batch_provider.spark.py_files import needs_py_files, package_zip
from kafka_batch_provider.spark.submit import (
    DEFAULT_APPLICATION,
    application_args,
    private_config_file,
    private_json_file,
)


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


def planned_batch(context: Any, plan_task_id: str, output: BatchOutput) -> tuple[dict[str, Any], Any, Any]:
    """The plan's XCom, its output and the plan; skips the task when there is nothing to read."""
    summary = pull_summary(context, plan_task_id, "write")
    output = output.planned(summary)
    with task_errors():
        spec, store = open_output(output, create=False)
        plan = load_plan(summary, store)
    if not plan.has_data:
        from airflow.sdk.exceptions import AirflowSkipException

        raise AirflowSkipException(f"batch {plan.batch_id} has nothing to read: Spark is not started")
    return summary, spec, plan


def batch_result(spec: Any, plan: Any, task: Any = None, context: Any = None) -> dict[str, Any]:
    """What the Spark step pushes: the batch's log entry number, rows and data location. A replay
    (which commits no group: this task ends it) is announced as an asset event through the
    task's alias outlets (:func:`~kafka_batch_provider.operators.assets.emit_batch_event`)."""
    # Reopened: a table's state is read again, after Spark's commit.
    store = open_store(spec, create=False)
    entry = store.entry_of(plan)
    if entry is None:
        raise KafkaBatchError(f"batch {plan.batch_id}: Spark finished but the output log has no entry {plan.seq}")
    # The data's location (a table's, not its _kafka_batch/ control folder's).
    from kafka_batch_provider.core.manifest import dead_letter_count

    result = {
        "batch_id": plan.batch_id,
        "seq": plan.seq,
        "rows": entry["rows"],
        "dead_letters": dead_letter_count(entry),
        "location": store.data_uri(entry),
    }
    if task is not None:
        task.lineage_entry = entry  # for OpenLineage's COMPLETE event
    if task is not None and not plan.commits_group:
        from kafka_batch_provider.operators.assets import emit_batch_event

        empty = getattr(task, "emit_empty_batches", False)
        event = emit_batch_event(task, context, entry, spec.describe(), True, empty, spec.catalog_properties)
        result["asset_event"] = event
    return result


def tables_to_write(task: Any, context: Any) -> tuple[dict[str, Any], Any, list, dict[str, Any], Any]:
    """A Spark task's tables of a table per topic: the plan's XCom, the output template, the tables
    with records to read (a skip when none has), the Kafka settings to ship and the registry's."""
    summary = pull_summary(context, task.plan_task_id, "write")
    with task_errors():
        spec = task.batch_output.planned(summary).spec()
        tables = planned_tables(summary, spec, "write", readable=True)
        kafka_config = shippable(KafkaOffsetsHook(task.kafka_config_id).kafka_config)
        return summary, spec, tables, kafka_config, registry_settings(task.schema_registry_conn_id)


def written_tables(tables: Any) -> dict[str, Any]:
    """What the Spark step of a table per topic pushes: each table's log entry, rows and location."""
    found: dict[str, Any] = {}
    for table in tables:
        entry = open_store(table.spec, create=False).entry_of(table.plan)  # reopened: read after Spark's commit
        if entry is None:
            raise KafkaBatchError(f"{table.name}: Spark finished but its output log has no entry {table.plan.seq}")
        found[table.topic] = {"batch_id": table.plan.batch_id, "seq": table.plan.seq, "rows": entry["rows"]}
    return {"tables": found, "rows": sum(t["rows"] for t in found.values())}


class KafkaSparkBatchOperator(BatchLineage, SparkSubmitOperator):
    """Run the Spark application on the plan pushed by ``plan_task_id``, through a ``spark`` connection.

    Skips when the plan has nothing to read or is a dry run. The output (format, path or
    table, partitioning) comes from the plan's XCom. The Kafka connection's settings, the
    storage connection's credentials and the Iceberg catalog connection's properties reach
    Spark in private temporary files named by environment variables (in cluster deploy mode
    the files are shipped with ``--files``), never on the command line. For a cluster master
    (``spark://``, ``yarn``, ``k8s://``) this package is shipped to the executors as a zip
    (``py_files``), so the cluster needs only the third-party dependencies. Pushes the batch's
    log entry number, row count and location.

    Every ``SparkSubmitOperator`` argument works too (``conf``, ``packages``, ``archives``, ...),
    among them ``conn_id``, the ``spark`` connection (default ``spark_default``), and
    ``openlineage_inject_parent_job_info``, which hands the OpenLineage Spark listener this task as
    its parent job (``spark.openlineage.parent*``; default from ``[openlineage]
    spark_inject_parent_job_info``). Injecting the transport's settings
    (``openlineage_inject_transport_info``) is refused: they would be on the command line.

    :param plan_task_id: task id of the plan operator (inside a task group: ``group.plan``).
    :param kafka_config_id: the ``kafka`` connection the plan used.
    :param reader: ``native`` (default: librdkafka into Arrow in C, the
        airflow-provider-kafka-batch-native wheel; without it ``python`` reads, said in one log
        line), ``python`` (confluent-kafka's messages) or ``jvm``: Spark's Kafka source, whose connector jars
        (``make jvm-tools``, :mod:`~kafka_batch_provider.spark.kafka_connector`) are passed with
        ``--jars``; refused in one line without them (unless ``jars``, ``packages`` or the
        cluster's Spark provide ``spark-sql-kafka-0-10``).
    :param value_format: ``bytes`` (default), ``string``, ``json`` (with ``value_schema``) or
        ``avro``, ``protobuf``, ``json-schema`` (typed columns, with the reader schema the plan
        pinned; needs ``schema_registry_conn_id``, the plan task's ``schema_registry`` connection).
    :param key_format: ``bytes`` (default), ``string`` (adds ``key_string``) or a registry format
        (``key`` becomes the decoded key, with the key reader schema the plan pinned).
    :param keep_raw_value: (registry formats) keep the value's bytes beside its typed columns.
    :param on_bad_record: (registry formats) ``fail`` (default): a value that cannot be decoded fails the
        batch in one line; ``dead-letter``: such records are written whole to the batch's dead
        letters, committed with it (their count is in the pushed XCom, ``dead_letters``).
    :param max_tasks: read with at most this many Spark tasks: the partitions are packed into them by
        their offsets, a large one split over several (default: as many as the files' size asks).
    :param target_file_mb: files are rolled at about this size; a small batch writes one file per
        partition-date (default 128).
    :param application: the Spark application file (default: the one installed with this package;
        ``spark_apps/kafka_batch_ingest.py`` in the repository is the same program).
    :param output: the same :class:`~kafka_batch_provider.operators.output.BatchOutput` as the
        plan task's: its connections open the output; the format and location come from the plan.
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "plan_task_id")
    ui_color = "#fdf2e0"

    def __init__(
        self,
        *,
        plan_task_id: str,
        kafka_config_id: str = "kafka_default",
        reader: str = DEFAULT_READER,
        value_format: str = "bytes",
        value_schema: str | None = None,
        max_offsets_per_task: int = DEFAULT_MAX_OFFSETS_PER_TASK,
        max_tasks: int | None = None,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
        target_file_mb: int = DEFAULT_TARGET_FILE_MB,
        application: str = DEFAULT_APPLICATION,
        name: str = "kafka-batch-ingest",
        output: BatchOutput | None = None,
        keep_raw_value: bool = False,
        schema_registry_conn_id: str | None = None,
        on_bad_record: str = "fail",
        key_format: str = "bytes",
        emit_empty_batches: bool = False,
        openlineage_inject_transport_info: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if openlineage_inject_transport_info:
            raise ConfigError(
                "openlineage_inject_transport_info would put the OpenLineage transport's settings, its "
                "credentials included, on spark-submit's command line (--conf): set spark.openlineage.transport.* "
                "in the cluster's spark-defaults.conf instead"
            )
        # Never from [openlineage] spark_inject_transport_info either, for the same reason; the parent
        # job's names and run ids (openlineage_inject_parent_job_info) are no secret and pass as --conf.
        kwargs["openlineage_inject_transport_info"] = False
        super().__init__(application=application, name=name, **kwargs)
        self.plan_task_id = plan_task_id
        self.kafka_config_id = kafka_config_id
        self.batch_output = connections_of(output)
        # Checked here, so a bad option is a DAG import error rather than a failed run.
        self.write_options = WriteOptions(
            reader,
            value_format,
            value_schema,
            max_offsets_per_task,
            stall_timeout,
            target_file_mb,
            keep_raw_value,
            on_bad_record,
            key_format,
            max_tasks,
        )
        if self.batch_output.per_topic:  # a DAG import error, not a failed run after planning
            check_table_per_topic(self.write_options)
        self.schema_registry_conn_id = registry_conn_for(value_format, schema_registry_conn_id, key_format)
        self.emit_empty_batches = emit_empty_batches

    def execute(self, context: Any) -> dict[str, Any]:
        if is_per_topic(pull_summary(context, self.plan_task_id, "write")):
            return self.write_tables(context)
        summary, spec, plan = planned_batch(context, self.plan_task_id, self.batch_output)
        with task_errors():
            kafka_config = shippable(KafkaOffsetsHook(self.kafka_config_id).kafka_config)
            registry = registry_settings(self.schema_registry_conn_id)
            check_plan_formats(
                plan.batch_id, plan.extra, self.write_options.value_format, self.write_options.key_format
            )
        self.log.info(
            "batch %s: %d range(s), up to %d offsets", plan.batch_id, len(plan.readable_ranges), plan.planned_offsets
        )
        self.submit(context, summary["plan_path"], spec, kafka_config, registry)
        with task_errors():
            return batch_result(spec, plan, self, context)

    def write_tables(self, context: Any) -> dict[str, Any]:
        """A table per topic: one spark-submit of the application with every table's plan."""
        summary, spec, tables, kafka_config, registry = tables_to_write(self, context)
        self.log.info("%d table(s) in one Spark job", len(tables))
        paths = [summary["tables"][t.topic]["plan_path"] for t in tables]
        self.submit(context, paths, spec, kafka_config, registry)
        with task_errors():
            return written_tables(tables)

    def submit(self, context: Any, plan_paths: Any, spec: Any, kafka_config: Any, registry: Any) -> None:
        """spark-submit the application on ``plan_paths``, its secrets in private files."""
        with (
            private_config_file(kafka_config) as config_path,
            private_json_file(spec.storage_options, "kafka-batch-storage-") as storage_path,
            private_json_file(spec.catalog_properties, "kafka-batch-catalog-") as catalog_path,
            private_json_file(registry.client_config() if registry else {}, "kafka-batch-registry-") as registry_path,
        ):
            self.application_args = application_args(plan_paths, spec, self.write_options)
            self._hand_over(config_path, storage_path, catalog_path, registry_path)
            try:
                super().execute(context)
            except AirflowException as exc:
                raise self._spark_step_error(exc) from None

    def batch_facts(self, task_instance: Any) -> BatchFacts:
        """For OpenLineage (:mod:`~kafka_batch_provider.operators.lineage`): the plan, then the written entry."""
        return planned_task_facts(self, task_instance, wrote=True)

    def _spark_step_error(self, exc: AirflowException) -> AirflowException:
        """The application's one error line instead of the hook's command line and output tail
        (already in the log above); errors a retry cannot fix are not retried. An error before
        spark-submit ran (a bad connection) stays as the hook raised it."""
        process = getattr(self._hook, "_submit_sp", None)
        if process is None or process.returncode is None:
            return exc
        return spark_step_error(list(getattr(self._hook, "_last_submit_log_lines", [])), process.returncode)

    def _hand_over(self, config_path: str, storage_path: str, catalog_path: str, registry_path: str) -> None:
        """Secrets in files named by the environment; this package as a zip for a cluster master;
        the lean start-up settings (:mod:`~kafka_batch_provider.spark.jvm_start`); a spark-submit
        found next to this Python when PATH has none."""
        connection = self._get_hook()._connection
        master = str(connection.get("master") or "")
        if needs_py_files(master):
            self.py_files = ",".join(filter(None, [self.py_files, str(package_zip())]))
        deploy_mode = self._deploy_mode or connection.get("deploy_mode")
        self.conf = lean_submit_conf(master, self.conf, local_driver=deploy_mode != "cluster")
        with task_errors():
            binary_dir = spark_submit_directory(str(connection.get("spark_binary") or "spark-submit"))
            # The jvm reader's connector from `make jvm-tools` (--jars), or refused in one line.
            provided = {**self.conf, "spark.jars": self.jars or "", "spark.jars.packages": self.packages or ""}
            jars = jars_for_reader(self.write_options.reader, provided)
        self.jars = ",".join(filter(None, [self.jars, *jars])) or None
        if deploy_mode == "cluster":
            # The driver runs elsewhere: ship the files; they land in the driver's working dir.
            self.files = ",".join(filter(None, [self.files, config_path, storage_path, catalog_path, registry_path]))
            self.application_args += [
                "--kafka-config-file",
                Path(config_path).name,
                "--storage-options-file",
                Path(storage_path).name,
                "--catalog-properties-file",
                Path(catalog_path).name,
                "--registry-settings-file",
                Path(registry_path).name,
            ]
        else:
            env = dict(self.env_vars or {})
            env[CONFIG_FILE_ENV] = config_path
            env[STORAGE_OPTIONS_FILE_ENV] = storage_path
            env[CATALOG_PROPERTIES_FILE_ENV] = catalog_path
            env[REGISTRY_SETTINGS_FILE_ENV] = registry_path
            # A local master's Python workers must use this interpreter (it has the dependencies).
            env.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", sys.executable))
            self.env_vars = env
        if binary_dir:
            # This task's own process, which the hook's Popen inherits: never env_vars, which the
            # hook turns into --conf ...Env.PATH=... on YARN and Kubernetes (argv, and the
            # driver's environment) and does not hand to Popen there.
            os.environ["PATH"] = os.pathsep.join(filter(None, [binary_dir, os.environ.get("PATH")]))
        self._hook = None  # rebuilt in execute() with the arguments above


def spark_submit_directory(binary: str) -> str | None:
    """Where to find ``binary`` when PATH has none: next to this Python, as pip installs pyspark's
    scripts (Airflow started by its full path from a virtualenv that is not activated).

    :returns: that directory, or ``None`` when PATH finds the binary.
    :raises ConfigError: when neither has it (one line, not retried: a retry finds nothing more).
    """
    if shutil.which(binary):
        return None
    here = Path(sys.executable).parent
    if (here / binary).is_file() and os.access(here / binary, os.X_OK):
        return str(here)
    raise ConfigError(
        f"{binary} (the spark connection's binary) is neither on PATH nor next to this Python ({here}): "
        "install pyspark into Airflow's environment, put Spark's bin directory on the workers' PATH, "
        "or name an installed binary in the connection's spark-binary extra"
    )
