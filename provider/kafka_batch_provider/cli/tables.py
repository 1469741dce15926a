"""``kafka-batch run`` and ``plan`` with an output template: a table per topic, in one batch.

``--output 's3://lake/{topic}'`` (``--table 'lake.{topic}'`` for Iceberg) with ``--topic-pattern``
or several ``--topic``: every topic is planned into its own table, one Spark job (spark-submit or
Spark Connect) writes them all, and each table's offsets are committed once every table was
written (:mod:`kafka_batch_provider.steps.tables`).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from kafka_batch_provider.cli.arguments import (
    metrics_sinks_from,
    offsets_client,
    policy_from,
    reader_schema_request,
    write_options,
)
from kafka_batch_provider.cli.console import emit, progress
from kafka_batch_provider.cli.metrics import send_metrics, send_step_metrics
from kafka_batch_provider.cli.spark_step import spark_submit
from kafka_batch_provider.core.reconcile import GroupMismatchPolicy
from kafka_batch_provider.core.write_options import check_table_per_topic
from kafka_batch_provider.fail_points import fail_point


def plan_tables_step(args: argparse.Namespace, spec: Any, kafka: Any, request: Any) -> Any:
    from kafka_batch_provider.steps.tables import plan_tables

    return plan_tables(
        kafka,
        spec,
        args.group,
        args.topic or [],
        policy_from(args),
        progress,
        GroupMismatchPolicy(args.on_group_mismatch),
        request,
        adopt_group=args.adopt_group,
        topic_pattern=args.topic_pattern,
        partitions=args.partition,
    )


def done_but_failed(result: dict[str, Any], failures: dict, of: int, step: str = "ingested") -> Exception:
    """What a command did for the tables that went through, as its last stdout line (as on success,
    with each failed table), and the one error line naming the tables that did not, to raise."""
    from kafka_batch_provider.steps.tables import failure_of, tables_failed

    emit({**result, "failed": {topic: failure_of(exc) for topic, exc in failures.items()}})
    return tables_failed(failures, of, step)


def cmd_plan_tables(args: argparse.Namespace, spec: Any) -> dict[str, Any]:
    from kafka_batch_provider.cli.arguments import registry_from

    planned = plan_tables_step(args, spec, offsets_client(args), reader_schema_request(args, registry_from(args)))
    if planned.failures:  # the plans made stay (the next run uses them); the exit status says not all were
        raise done_but_failed(
            planned.summary(), planned.failures, len(planned.tables) + len(planned.failures), "planned"
        )
    return planned.summary()


def cmd_run_tables(args: argparse.Namespace, spec: Any) -> dict[str, Any]:
    """plan, one Spark job, one commit; the tables that could not be planned or committed are named
    in one line at the end, after the others were ingested."""
    from kafka_batch_provider.steps.tables import commit_tables

    options, registry = write_options(args)
    check_table_per_topic(options)
    sinks = metrics_sinks_from(args)
    request = reader_schema_request(args, registry)
    kafka = offsets_client(args)
    clock = time.perf_counter()
    planned = plan_tables_step(args, spec, kafka, request)
    timings = {"plan_seconds": round(time.perf_counter() - clock, 3)}
    busy = planned.with_work
    result = planned.summary()
    tables = len(planned.tables) + len(planned.failures)
    if not busy:
        skipped = {**result, "committed": {}, "skipped": True, "timings": timings}
        if planned.failures:
            raise done_but_failed(skipped, planned.failures, tables)
        return skipped
    fail_point("after-plan")
    readable = [t for t in busy if t.plan.has_data]
    if readable:
        clock = time.perf_counter()
        written = write_tables_with_spark(args, options, readable, spec, kafka, registry)
        timings["spark_seconds"] = round(time.perf_counter() - clock, 3)
        timings.update(written.get("timings", {}))
    fail_point("after-log-entry")
    clock = time.perf_counter()
    done = commit_tables(kafka, busy, progress)
    timings["commit_seconds"] = round(time.perf_counter() - clock, 3)
    rows = 0
    for table in (t for t in busy if t.topic in done.committed):
        entry = table.store.entry_of(table.plan) or {}
        rows += int(entry.get("rows", 0))
        result["tables"][table.topic].update(rows=entry.get("rows", 0), location=table.store.data_uri(entry))
        send_metrics(sinks, kafka, table.store, table.plan, entry, timings, with_steps=False)
    send_step_metrics(sinks, args.group, spec.table or spec.output, timings)  # each table's entry holds the job's
    progress(f"committed {len(done.committed)} table(s), {rows} rows, for group {args.group}")
    failures = {**planned.failures, **done.failures}
    finished = {**result, "rows": rows, "committed": done.committed, "skipped": False, "timings": timings}
    if failures:
        raise done_but_failed(finished, failures, tables)
    return finished


def write_tables_with_spark(
    args: argparse.Namespace, options: Any, tables: list, spec: Any, kafka: Any, registry: Any
) -> dict[str, Any]:
    """The Spark step of every table: one Spark Connect job (``--spark-remote``) or one spark-submit."""
    if args.spark_remote:
        from kafka_batch_provider.spark.connect import remote_address, run_on_connect
        from kafka_batch_provider.spark.ingest import stage_tables_with
        from kafka_batch_provider.steps.tables import write_tables

        progress(f"Spark Connect at {remote_address(args.spark_remote)}: {len(tables)} table(s) in one job")
        name = f"{len(tables)}-tables-{tables[0].plan.batch_id}"

        def job(spark: Any) -> dict[str, Any]:
            return write_tables(tables, kafka.kafka_config, stage_tables_with(spark, registry), options, progress)

        entries = run_on_connect(args.spark_remote, name, job)
        return {"tables": {topic: entry["seq"] for topic, entry in entries.items()}}
    paths = [t.outcome.plan_path for t in tables]
    return spark_submit(args, options, paths, spec, kafka, registry, f"{len(tables)} table(s) in one job")
