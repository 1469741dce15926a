"""The Spark application: ``spark-submit app.py --plan ... --output ...``.

Reads a plan file, runs the read and write steps (:func:`~kafka_batch_provider.steps.write.write_batch`)
and prints one JSON line with what it wrote. ``spark_apps/kafka_batch_ingest.py`` is a thin
copy-free entry point to this module for deployments that submit a file from the repository.

Kafka settings (including secrets) never travel on the command line: they come from a JSON
file named by ``--kafka-config-file`` (or ``$KAFKA_BATCH_KAFKA_CONFIG_FILE``), or from the
``$KAFKA_BATCH_KAFKA_CONFIG`` environment variable holding the JSON itself. Storage options
(object-store credentials) likewise come from ``--storage-options-file`` or
``$KAFKA_BATCH_STORAGE_OPTIONS_FILE``; without them the filesystem's own defaults apply
(``AWS_*`` variables, instance roles, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

from kafka_batch_provider.core.settings import WORDING_ENV, worded
from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.errors import ConfigError, KafkaBatchError
from kafka_batch_provider.kafka.config import check_config, config_object, read_config_file
from kafka_batch_provider.output.formats import (
    OutputSpec,
    add_merge_arguments,
    add_partition_by_argument,
    merge_of_args,
    open_store,
    output_of_plan,
)
from kafka_batch_provider.output.location import read_storage_options_file
from kafka_batch_provider.output.store import load_plan_file
from kafka_batch_provider.registry.settings import RegistrySettings
from kafka_batch_provider.settings_file import read_settings_file
from kafka_batch_provider.spark.error_lines import (
    ERROR_CLASS_PREFIX,
    ERROR_LINE_PREFIX,
    spark_error_line,
    spark_failure_exit_code,
    task_error_class,
)
from kafka_batch_provider.spark.jvm_options import REDACTION_CONF
from kafka_batch_provider.steps.tables import tables_of_plan_files

CONFIG_FILE_ENV = "KAFKA_BATCH_KAFKA_CONFIG_FILE"
CONFIG_JSON_ENV = "KAFKA_BATCH_KAFKA_CONFIG"
STORAGE_OPTIONS_FILE_ENV = "KAFKA_BATCH_STORAGE_OPTIONS_FILE"
CATALOG_PROPERTIES_FILE_ENV = "KAFKA_BATCH_CATALOG_PROPERTIES_FILE"
#: A database output's URL (its password included): the environment, never argv.
DATABASE_URL_ENV = "KAFKA_BATCH_DATABASE_URL"
#: The schema registry client's settings (url and credentials), for values in a registry format.
REGISTRY_SETTINGS_FILE_ENV = "KAFKA_BATCH_REGISTRY_SETTINGS_FILE"
#: When spark-submit was started (epoch seconds), set by the command line: the result's
#: ``spark_launch_seconds`` is the JVM's and this Python's start.
SUBMITTED_AT_ENV = "KAFKA_BATCH_SUBMITTED_AT"


def load_kafka_config(path: str | None) -> dict[str, Any]:
    path = path or os.environ.get(CONFIG_FILE_ENV)
    if path:
        return check_config(read_config_file(path))
    if not os.environ.get(CONFIG_JSON_ENV):
        raise ConfigError(f"no Kafka config: pass --kafka-config-file or set {CONFIG_FILE_ENV} or {CONFIG_JSON_ENV}")
    try:
        return check_config(config_object(json.loads(os.environ[CONFIG_JSON_ENV])))
    except ValueError as exc:
        raise ConfigError(f"{CONFIG_JSON_ENV} is not valid JSON: {exc}") from None


def load_storage_options(path: str | None) -> dict[str, Any]:
    path = path or os.environ.get(STORAGE_OPTIONS_FILE_ENV)
    return read_storage_options_file(path) if path else {}


def load_catalog_properties(path: str | None) -> dict[str, str]:
    path = path or os.environ.get(CATALOG_PROPERTIES_FILE_ENV)
    return {str(k): str(v) for k, v in read_storage_options_file(path).items()} if path else {}


def load_registry_settings(path: str | None) -> RegistrySettings | None:
    """The registry's settings from the private file (``None`` without one, or an empty one)."""
    path = path or os.environ.get(REGISTRY_SETTINGS_FILE_ENV)
    config = read_settings_file(path, "schema registry settings") if path else {}
    return RegistrySettings.from_client_config(config) if config else None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kafka_batch_ingest", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--plan",
        action="append",
        required=True,
        help="plan file (<output>/_plans/<seq>-<batch_id>.json); repeated with an output template: a table per topic",
    )
    parser.add_argument("--output", help="output path or URI (default: the one holding the plan)")
    parser.add_argument("--format", default="parquet", help="parquet, delta or iceberg")
    parser.add_argument("--table", help="the Iceberg table, NAMESPACE.NAME")
    parser.add_argument("--catalog-properties-file", help="JSON file of Iceberg catalog properties")
    parser.add_argument("--kafka-config-file", help="JSON file of librdkafka settings")
    parser.add_argument("--storage-options-file", help="JSON file of fsspec storage options (credentials)")
    parser.add_argument("--registry-settings-file", help="JSON file of the schema registry's url and credentials")
    add_partition_by_argument(parser)
    add_merge_arguments(parser)
    WriteOptions.add_arguments(parser)
    return parser.parse_args(argv)


def launch_seconds(now: float) -> dict[str, float]:
    """Seconds from spark-submit's start to this application's ``main()``, when the caller said when."""
    try:
        return {"spark_launch_seconds": round(now - float(os.environ[SUBMITTED_AT_ENV]), 3)}
    except (KeyError, ValueError):
        return {}


def report(error_class: str | None, line: str, exit_code: int) -> int:
    """The error's class (for whoever started spark-submit to raise the same one), then its one
    line, last; returns the exit code, which carries the class's retry decision on its own."""
    if error_class:
        print(f"{ERROR_CLASS_PREFIX}{error_class}", file=sys.stderr)
    print(f"{ERROR_LINE_PREFIX}{line}", file=sys.stderr, flush=True)
    return exit_code


def main(argv: Sequence[str] | None = None) -> int:
    # Errors are worded for whoever started spark-submit: the command line or an operator.
    with worded(os.environ.get(WORDING_ENV)):
        return run(argv)


def run(argv: Sequence[str] | None) -> int:
    timings = launch_seconds(time.time())
    args = parse_args(argv)
    try:
        storage_options = load_storage_options(args.storage_options_file)
        options = WriteOptions.from_namespace(args)
        spec = OutputSpec(
            format=args.format,
            output=None if args.table else (args.output or output_of_plan(args.format, args.plan[0])),
            table=args.table,
            catalog_properties=load_catalog_properties(args.catalog_properties_file),
            storage_options=storage_options,
            partition_by=args.partition_by,
            merge=merge_of_args(args),
            database_url=os.environ.get(DATABASE_URL_ENV) or None,
        )
        if spec.per_topic:
            tables = tables_of_plan_files(spec, args.plan)
            name = f"{len(tables)} tables"
        else:
            if len(args.plan) > 1:
                raise ConfigError("several --plan files need an output template with {topic}: a table per topic")
            store = open_store(spec)
            plan = load_plan_file(args.plan[0], store.location.storage_options)
            name = plan.batch_id
        kafka_config = load_kafka_config(args.kafka_config_file)
        registry = load_registry_settings(args.registry_settings_file)
    except KafkaBatchError as exc:
        return report(type(exc).__name__, str(exc), exc.exit_code)

    from kafka_batch_provider.spark.worker_daemon import use_installed_pyspark

    clock = time.perf_counter()
    use_installed_pyspark()  # byte code from site-packages, not pyspark.zip compiled again
    from pyspark.sql import SparkSession

    from kafka_batch_provider.spark.ingest import stage_tables_with, stage_with
    from kafka_batch_provider.steps.tables import write_tables
    from kafka_batch_provider.steps.write import write_batch

    # The jvm reader's Kafka settings travel as kafka.* source options: keep every secret-looking
    # one out of plans, the UI, event logs and logs.
    builder = SparkSession.builder.appName(f"kafka-batch {name}").config("spark.sql.session.timeZone", "UTC")
    for key, value in REDACTION_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    timings["spark_session_seconds"] = round(time.perf_counter() - clock, 3)
    clock = time.perf_counter()
    try:
        if spec.per_topic:
            entries = write_tables(tables, kafka_config, stage_tables_with(spark, registry), options, progress)
        else:
            manifest = write_batch(plan, store, kafka_config, stage_with(spark, registry), options, progress)
    except KafkaBatchError as exc:
        return report(type(exc).__name__, str(exc), exc.exit_code)
    except Exception as exc:
        # An error raised in an executor arrives wrapped in Spark's traceback text.
        traceback.print_exc()
        found = task_error_class(str(exc))
        return report(found.__name__ if found else None, spark_error_line(exc), spark_failure_exit_code(exc))
    # No spark.stop(): its accumulator server polls every 0.5 s before it lets go, and
    # SparkSubmit's shutdown hook stops the context when this process returns.
    timings["spark_batch_seconds"] = round(time.perf_counter() - clock, 3)
    if spec.per_topic:
        print(json.dumps({"tables": {t: tables_result(e) for t, e in entries.items()}, "timings": timings}))
        return 0
    result = {
        "batch_id": plan.batch_id,
        "seq": manifest["seq"],
        "rows": manifest["rows"],
        "location": manifest["location"],
        # Where the Spark step's time went; the command line adds spark_exit_seconds.
        "timings": {**timings, **manifest.get("timings", {})},
    }
    print(json.dumps(result))
    return 0


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def tables_result(entry: dict[str, Any]) -> dict[str, Any]:
    """A table's part of the result line: its batch, entry, rows and where they are."""
    return {key: entry[key] for key in ("batch_id", "seq", "rows", "location")}


if __name__ == "__main__":
    sys.exit(main())
