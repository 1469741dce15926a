"""The protocol's steps as commands: ``plan``, ``write``, ``commit``, ``run`` (all three), ``discard``."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from kafka_batch_provider.cli.arguments import (
    load_plan_and_output,
    metrics_sinks_from,
    offsets_client,
    output_spec_from,
    plan_output,
    policy_from,
    reader_schema_request,
    registry_from,
    replay_range_from,
    store_from,
    write_options,
)
from kafka_batch_provider.cli.console import progress
from kafka_batch_provider.cli.metrics import send_metrics
from kafka_batch_provider.cli.spark_step import spark_submit
from kafka_batch_provider.core.manifest import dead_letter_count, recorded_dead_letters
from kafka_batch_provider.core.planning import DataLossPolicy
from kafka_batch_provider.core.reconcile import GroupMismatchPolicy
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.fail_points import fail_point


def plan_step(args: argparse.Namespace, kafka: Any, store: Any, reader_schema: Any):
    """:param reader_schema: from :func:`reader_schema_request`, made before the output was opened
    (opening may create an Iceberg table: a refused run must not)."""
    from kafka_batch_provider.steps.plan import plan_batch

    return plan_batch(
        kafka,
        store,
        args.group,
        args.topic or [],
        policy_from(args),
        args.partition,
        progress,
        GroupMismatchPolicy(args.on_group_mismatch),
        reader_schema,
        adopt_group=args.adopt_group,
        topic_pattern=args.topic_pattern,
    )


def cmd_plan(args: argparse.Namespace) -> dict[str, Any]:
    spec = output_spec_from(args)
    if spec.per_topic:
        from kafka_batch_provider.cli.tables import cmd_plan_tables

        return cmd_plan_tables(args, spec)
    request = reader_schema_request(args, registry_from(args))
    outcome = plan_step(args, offsets_client(args), store_from(args), request)
    return {
        **outcome.plan.summary(),
        "records": outcome.plan.planned_offsets,
        "plan_path": outcome.plan_path,
        "reused": outcome.reused,
        "repaired": outcome.repaired,
        "notes": outcome.notes,
    }


def submit_write(
    args: argparse.Namespace, options: Any, plan_path: str, spec: Any, kafka: Any, registry: Any
) -> dict[str, Any]:
    """The Spark step: through a Spark Connect server (``--spark-remote``) or with spark-submit.

    ``spec`` is the output as the flags named it: the same value reaches the Spark application
    (as its arguments) or the Spark Connect driver.
    """
    if args.spark_remote:
        return connect_write(args, options, plan_path, spec, kafka, registry)
    return spark_submit(args, options, plan_path, spec, kafka, registry, "one batch")


def connect_write(
    args: argparse.Namespace, options: Any, plan_path: str, spec: Any, kafka: Any, registry: Any
) -> dict[str, Any]:
    from kafka_batch_provider.output.formats import open_store
    from kafka_batch_provider.output.store import load_plan_file
    from kafka_batch_provider.spark.connect import remote_address, write_through_connect

    store = open_store(spec, create=False)
    plan = load_plan_file(plan_path, store.location.storage_options)
    progress(f"Spark Connect at {remote_address(args.spark_remote)} ({args.reader} reader, {spec.format} output)")
    entry = write_through_connect(
        args.spark_remote, plan, store, kafka.kafka_config, options, progress, registry=registry
    )
    return {"batch_id": plan.batch_id, "seq": entry["seq"], "rows": entry["rows"], "timings": entry.get("timings", {})}


def cmd_write(args: argparse.Namespace) -> dict[str, Any]:
    options, registry = write_options(args)
    plan, spec, store = load_plan_and_output(args)
    kafka = offsets_client(args)
    if not plan.has_data:
        progress(f"batch {plan.batch_id} has nothing to read: Spark is not started; the commit step records it")
        return {"batch_id": plan.batch_id, "seq": plan.seq, "records": 0, "location": None, "skipped": True}
    plan_path = args.plan if "://" in args.plan else os.path.abspath(args.plan)
    submit_write(args, options, plan_path, spec, kafka, registry)
    entry = store.entry_of(plan) or {}
    return {
        "batch_id": plan.batch_id,
        "seq": plan.seq,
        "records": entry.get("rows", 0),
        "dead_letters": dead_letter_count(entry),
        "location": store.data_uri(entry),
        "skipped": False,
    }


def cmd_commit(args: argparse.Namespace) -> dict[str, Any]:
    from kafka_batch_provider.steps.commit import commit_batch

    sinks = metrics_sinks_from(args)
    plan, _, store = load_plan_and_output(args)
    clock = time.perf_counter()
    kafka = offsets_client(args)
    committed = commit_batch(kafka, store, plan, progress)
    send_metrics(sinks, kafka, store, plan, store.entry_of(plan), {"commit_seconds": time.perf_counter() - clock})
    record = store.commit_record(plan.seq, plan.batch_id) or {}
    return {
        "batch_id": plan.batch_id,
        "seq": plan.seq,
        "records": record.get("rows", 0),
        "dead_letters": recorded_dead_letters(record),
        "committed": committed,
    }


def cmd_run(args: argparse.Namespace) -> dict[str, Any]:
    from kafka_batch_provider.output.formats import open_store
    from kafka_batch_provider.steps.commit import commit_batch

    spec = output_spec_from(args)
    if spec.per_topic:
        from kafka_batch_provider.cli.tables import cmd_run_tables

        return cmd_run_tables(args, spec)
    options, registry = write_options(args)
    sinks = metrics_sinks_from(args)
    request = reader_schema_request(args, registry)
    kafka = offsets_client(args)
    store = open_store(spec)
    clock = time.perf_counter()
    outcome = plan_step(args, kafka, store, request)
    plan = outcome.plan
    timings = {"plan_seconds": round(time.perf_counter() - clock, 3)}
    result: dict[str, Any] = {
        **plan.summary(),
        "plan_path": outcome.plan_path,
        "reused": outcome.reused,
        "repaired": outcome.repaired,
        "notes": outcome.notes,
    }
    if not plan.ranges:
        return {**result, "records": 0, "committed": {}, "skipped": True, "timings": timings}
    fail_point("after-plan")
    if plan.has_data:
        clock = time.perf_counter()
        written = submit_write(args, options, outcome.plan_path, spec, kafka, registry)
        timings["spark_seconds"] = round(time.perf_counter() - clock, 3)  # spark-submit or Spark Connect
        timings.update(written.get("timings", {}))
    else:
        progress(f"batch {plan.batch_id} has nothing to read: Spark is not started")
    fail_point("after-log-entry")
    clock = time.perf_counter()
    committed = commit_batch(kafka, store, plan, progress)
    timings["commit_seconds"] = round(time.perf_counter() - clock, 3)
    entry = store.entry_of(plan) or {}
    send_metrics(sinks, kafka, store, plan, entry, timings)
    return {
        **result,
        "records": entry.get("rows", 0),
        "dead_letters": dead_letter_count(entry),
        **({"merged": entry["merged"]} if entry.get("merged") else {}),
        "committed": committed,
        "skipped": False,
        "location": store.data_uri(entry),
        "timings": timings,
        "spark": "connect" if args.spark_remote else "submit",
    }


def cmd_replay(args: argparse.Namespace) -> dict[str, Any]:
    """The backfill DAG's replay: plan the chosen range into the output and write it; never commits."""
    from kafka_batch_provider.output.formats import open_store
    from kafka_batch_provider.steps.replay import plan_replay_batch

    chosen = replay_range_from(args)
    options, registry = write_options(args)
    request = reader_schema_request(args, registry)
    kafka = offsets_client(args)
    spec = output_spec_from(args)
    # A dry run creates no Iceberg table: replaying into a new one is planned for real only.
    store = open_store(spec, create=not args.dry_run)
    outcome = plan_replay_batch(
        kafka,
        store,
        args.topic,
        partitions=args.partition,
        dry_run=args.dry_run,
        progress=progress,
        reader_schema=request,
        on_data_loss=DataLossPolicy(args.on_data_loss),
        formats={"value_format": options.value_format, "key_format": options.key_format},
        **chosen,
    )
    plan = outcome.plan
    result: dict[str, Any] = {
        **plan.summary(),
        "plan_path": outcome.plan_path,
        "reused": outcome.reused,
        "notes": outcome.notes,
        "dry_run": args.dry_run,
        "records": 0,
        "location": None,
    }
    if args.dry_run or not plan.has_data:
        return {**result, "planned_offsets": plan.planned_offsets}
    submit_write(args, options, outcome.plan_path, spec, kafka, registry)
    entry = store.entry_of(plan) or {}
    return {
        **result,
        "records": entry.get("rows", 0),
        "dead_letters": dead_letter_count(entry),
        "location": store.data_uri(entry),
    }


def cmd_discard(args: argparse.Namespace) -> dict[str, Any]:
    from kafka_batch_provider.output.store import load_plan_file, parse_numbered, split_plan_path
    from kafka_batch_provider.steps.commit import discard_batch

    store = store_from(args, plan_output(args))
    try:
        plan = load_plan_file(args.plan, store.location.storage_options)
    except ConfigError as exc:
        # A damaged plan file must not block every later plan step: remove it by its name.
        name = split_plan_path(args.plan)[1]
        numbered = parse_numbered(name.split("/", 1)[1])
        if numbered is None or not store.location.exists(name):
            raise
        store.remove_unpublished_plan_file(*numbered)
        progress(f"plan file {args.plan} could not be read ({exc}); removed with its staged files")
        return {"batch_id": numbered[1], "discarded": True}
    discard_batch(store, plan, progress)
    return {"batch_id": plan.batch_id, "discarded": True}
