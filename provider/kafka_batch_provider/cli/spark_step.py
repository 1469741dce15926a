"""The Spark step of ``kafka-batch run``/``write`` through spark-submit: one application, one or
several plans (a table per topic), the secrets in private files named by its environment."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from kafka_batch_provider.cli.arguments import spark_conf_from
from kafka_batch_provider.cli.console import progress


def spark_submit(
    args: argparse.Namespace,
    options: Any,
    plan_paths: str | Sequence[str],
    spec: Any,
    kafka: Any,
    registry: Any,
    what: str,
) -> dict[str, Any]:
    """spark-submit the application on ``plan_paths`` (``--spark-master``, default ``local[*]``);
    its result line. ``what``: how the progress line names the batch."""
    from kafka_batch_provider.spark.kafka_connector import jars_for_reader, with_jars
    from kafka_batch_provider.spark.submit import application_args, run_submit, submit_command

    master = args.spark_master or "local[*]"
    conf = spark_conf_from(args)
    app_args = application_args(plan_paths, spec, options)
    command = submit_command(app_args, master, with_jars(conf, jars_for_reader(options.reader, conf)))
    progress(f"spark-submit --master {master}: {what} ({options.reader} reader, {spec.format} output)")
    return run_submit(
        command,
        kafka.kafka_config,
        progress,
        spec.storage_options,
        spec.catalog_properties,
        registry.client_config() if registry else None,
        spec.database_url,
    )
