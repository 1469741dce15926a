"""``kafka-batch``: the protocol's steps from the command line.

Each command mirrors an Airflow task: ``plan`` -> ``write`` -> ``commit`` (``run`` does all
three). Progress goes to stderr; the last stdout line is one JSON object. Errors are one
line on stderr (``error: ...``) with a non-zero exit code, and change nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from kafka_batch_provider import __version__
from kafka_batch_provider.core import validation
from kafka_batch_provider.core.planning import DataLossPolicy, NewPartitionPolicy, PlanPolicy
from kafka_batch_provider.core.reconcile import GroupMismatchPolicy
from kafka_batch_provider.core.settings import FLAGS_WORDING, worded
from kafka_batch_provider.errors import ConfigError, KafkaBatchError
from kafka_batch_provider.fail_points import fail_point
from kafka_batch_provider.kafka.config import LIBRDKAFKA_LOGGER, parse_key_values, read_config_file

log = logging.getLogger("kafka_batch_provider")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the usage text stays behind --help)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"error: {message} (see: {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def emit(result: dict[str, Any]) -> None:
    print(json.dumps(result, sort_keys=True), flush=True)


def int_at_least(minimum: int, what: str):
    """An argparse type: an integer >= ``minimum``, else a one-line usage error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


positive_int = int_at_least(1, "a positive integer")
non_negative_int = int_at_least(0, "an integer >= 0")


def checked(check):
    """An argparse type from a :mod:`kafka_batch_provider.core.validation` check (a one-line usage error)."""

    def parse(text: str):
        try:
            return check("the value", text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


positive_seconds = checked(validation.positive_seconds)
fraction = checked(validation.fraction)


# -- arguments shared between commands ------------------------------------------------------


def add_kafka_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Kafka")
    g.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
        help="host:port[,host:port] (default: $KAFKA_BOOTSTRAP_SERVERS)",
    )
    g.add_argument(
        "--kafka-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="librdkafka setting, repeatable (e.g. security.protocol=SASL_SSL); put secrets in --kafka-config-file",
    )
    g.add_argument(
        "--kafka-config-file",
        default=os.environ.get("KAFKA_BATCH_KAFKA_CONFIG_FILE"),
        help="JSON object of librdkafka settings, for secrets: they stay out of ps and shell history "
        "(default: $KAFKA_BATCH_KAFKA_CONFIG_FILE); --kafka-config and --bootstrap-servers override it",
    )
    g.add_argument(
        "--timeout", type=positive_seconds, default=30.0, help="seconds to wait for a broker request (default 30)"
    )


def add_plan_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("planning")
    g.add_argument("--topic", action="append", required=True, help="topic to ingest, repeatable")
    g.add_argument("--partition", action="append", type=non_negative_int, help="only these partitions, repeatable")
    g.add_argument("--group", required=True, help="consumer group whose committed offsets are the checkpoint")
    g.add_argument(
        "--new-partitions",
        choices=[p.value for p in NewPartitionPolicy],
        default="earliest",
        help="start of a partition the group never committed (default earliest)",
    )
    g.add_argument(
        "--on-data-loss",
        choices=[p.value for p in DataLossPolicy],
        default="fail",
        help="committed offset below the log start: fail (default) or skip to earliest and record the gap",
    )
    g.add_argument("--max-records-per-partition", type=positive_int, help="bound a batch per partition (offsets)")
    g.add_argument("--max-records", type=positive_int, help="bound a batch in total, shared fairly (offsets)")
    g.add_argument(
        "--on-group-mismatch",
        choices=[p.value for p in GroupMismatchPolicy],
        default="fail",
        help="the group's offsets disagree with the output's offset log: fail (default), output (resume from the "
        "output; the commit moves the group there) or group (accept a group that is ahead; the skipped offsets "
        "are recorded as a gap)",
    )


def add_storage_args(p: argparse.ArgumentParser, output_help: str = "") -> None:
    from kafka_batch_provider.output.formats import add_partition_by_argument
    from kafka_batch_provider.output.sink import FORMATS

    g = p.add_argument_group("output")
    g.add_argument(
        "--format",
        choices=FORMATS,
        default=os.environ.get("KAFKA_BATCH_FORMAT", "parquet"),
        help="parquet (a folder per batch, default), delta (a Delta Lake table) or iceberg (an Iceberg table)",
    )
    g.add_argument(
        "--output",
        help=output_help
        or "where the data and its offset log live: a local path or a URI (s3://, gs://, abfs://, file://); "
        "for --format delta, the table's location",
    )
    g.add_argument("--table", help="--format iceberg: the table, NAMESPACE.NAME (created on first use)")
    g.add_argument(
        "--catalog-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="pyiceberg catalog property, repeatable (type=sql, uri=sqlite:///..., warehouse=..., s3.endpoint=...); "
        "secrets belong in --catalog-properties-file",
    )
    g.add_argument(
        "--catalog-properties-file",
        default=os.environ.get("KAFKA_BATCH_CATALOG_PROPERTIES_FILE"),
        help="JSON object of catalog properties, for secrets (default: $KAFKA_BATCH_CATALOG_PROPERTIES_FILE)",
    )
    add_partition_by_argument(g)
    g.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="fsspec option of the output's filesystem, repeatable (e.g. endpoint_url=http://127.0.0.1:9000); "
        "credentials belong in --storage-options-file or the usual AWS_*/GOOGLE_*/AZURE_* variables",
    )
    g.add_argument(
        "--storage-options-file",
        default=os.environ.get("KAFKA_BATCH_STORAGE_OPTIONS_FILE"),
        help="JSON object of fsspec storage options, for credentials (default: $KAFKA_BATCH_STORAGE_OPTIONS_FILE)",
    )


def add_spark_args(p: argparse.ArgumentParser) -> None:
    from kafka_batch_provider.core.write_options import WriteOptions

    g = p.add_argument_group("Spark")
    WriteOptions.add_arguments(g)
    g.add_argument("--spark-master", help="Spark master URL for spark-submit (default local[*])")
    g.add_argument(
        "--spark-remote",
        default=os.environ.get("SPARK_REMOTE") or None,
        metavar="sc://HOST:PORT",
        help="run the Spark step on this Spark Connect server instead of spark-submit (default: $SPARK_REMOTE)",
    )
    g.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting, repeatable")


def write_options(args: argparse.Namespace):
    """The Spark-side flags, checked before anything is planned or read (a refused run leaves no plan)."""
    from kafka_batch_provider.core.write_options import WriteOptions

    check_spark_target(args)
    spark_conf_from(args)
    return WriteOptions.from_namespace(args)


def kafka_config_from(args: argparse.Namespace) -> dict[str, Any]:
    config = read_config_file(args.kafka_config_file) if args.kafka_config_file else {}
    config.update(parse_key_values(args.kafka_config))
    if args.bootstrap_servers:
        config["bootstrap.servers"] = args.bootstrap_servers
    if not config.get("bootstrap.servers"):
        raise ConfigError("no Kafka: pass --bootstrap-servers or set KAFKA_BOOTSTRAP_SERVERS")
    return config


def offsets_client(args: argparse.Namespace):
    from kafka_batch_provider.kafka.client import KafkaOffsets

    client = KafkaOffsets(kafka_config_from(args), timeout=args.timeout)
    _ = client.kafka_config  # check the config now: a bad setting fails before any I/O
    return client


def storage_options_from(args: argparse.Namespace) -> dict[str, Any]:
    """The file's storage options (credentials), then ``--storage-option`` pairs (values parsed as JSON if they are)."""
    from kafka_batch_provider.output.location import read_storage_options_file

    options = read_storage_options_file(args.storage_options_file) if args.storage_options_file else {}
    for key, text in parse_key_values(args.storage_option, flag="--storage-option").items():
        try:
            options[key] = json.loads(text)
        except ValueError:
            options[key] = text
    return options


def catalog_properties_from(args: argparse.Namespace) -> dict[str, str]:
    """The file's catalog properties, then ``--catalog-property`` pairs (never secrets: argv is public)."""
    from kafka_batch_provider.kafka.config import is_secret
    from kafka_batch_provider.output.location import read_storage_options_file

    pairs = parse_key_values(args.catalog_property, flag="--catalog-property")
    secret = sorted(k for k, v in pairs.items() if is_secret(k, v))
    if secret:
        raise ConfigError(
            f"--catalog-property {secret[0]}=... would show the secret in ps and shell history: "
            "put it in --catalog-properties-file (or an Airflow connection)"
        )
    properties = read_storage_options_file(args.catalog_properties_file) if args.catalog_properties_file else {}
    return {str(k): str(v) for k, v in {**properties, **pairs}.items()}


def output_spec_from(args: argparse.Namespace, output: str | None = None):
    from kafka_batch_provider.output.formats import OutputSpec

    return OutputSpec(
        format=args.format,
        output=output or args.output,
        table=args.table,
        catalog_properties=catalog_properties_from(args),
        storage_options=storage_options_from(args),
        partition_by=args.partition_by,
    )


def store_from(args: argparse.Namespace, output: str | None = None, create: bool = True):
    from kafka_batch_provider.output.formats import open_store

    return open_store(output_spec_from(args, output), create)


def policy_from(args: argparse.Namespace) -> PlanPolicy:
    return PlanPolicy(
        new_partitions=NewPartitionPolicy(args.new_partitions),
        on_data_loss=DataLossPolicy(args.on_data_loss),
        max_records_per_partition=args.max_records_per_partition,
        max_records=args.max_records,
    )


# -- commands ------------------------------------------------------------------------------


def plan_step(args: argparse.Namespace, kafka: Any, store: Any):
    from kafka_batch_provider.steps.plan import plan_batch

    return plan_batch(
        kafka,
        store,
        args.group,
        args.topic,
        policy_from(args),
        args.partition,
        progress,
        GroupMismatchPolicy(args.on_group_mismatch),
    )


def cmd_plan(args: argparse.Namespace) -> dict[str, Any]:
    outcome = plan_step(args, offsets_client(args), store_from(args))
    return {
        **outcome.plan.summary(),
        "records": outcome.plan.planned_offsets,
        "plan_path": outcome.plan_path,
        "reused": outcome.reused,
        "repaired": outcome.repaired,
        "notes": outcome.notes,
    }


def spark_conf_from(args: argparse.Namespace) -> dict[str, str]:
    return parse_key_values(args.spark_conf, flag="--spark-conf")


def submit_write(args: argparse.Namespace, options: Any, plan_path: str, store: Any, kafka: Any) -> dict[str, Any]:
    """The Spark step: through a Spark Connect server (``--spark-remote``) or with spark-submit."""
    from kafka_batch_provider.spark.submit import application_args, run_submit, submit_command

    spec = output_spec_from(args, None if args.format == "iceberg" else (args.output or store_output(store)))
    if args.spark_remote:
        return connect_write(args, options, plan_path, spec, kafka)
    master = args.spark_master or "local[*]"
    app_args = application_args(plan_path, spec, options)
    command = submit_command(app_args, master, spark_conf_from(args))
    progress(f"spark-submit --master {master} ({args.reader} reader, {spec.format} output)")
    return run_submit(command, kafka.kafka_config, progress, spec.storage_options, spec.catalog_properties)


def connect_write(args: argparse.Namespace, options: Any, plan_path: str, spec: Any, kafka: Any) -> dict[str, Any]:
    from kafka_batch_provider.output.formats import open_store
    from kafka_batch_provider.output.store import load_plan_file
    from kafka_batch_provider.spark.connect import remote_address, write_through_connect

    store = open_store(spec, create=False)
    plan = load_plan_file(plan_path, store.location.storage_options)
    progress(f"Spark Connect at {remote_address(args.spark_remote)} ({args.reader} reader, {spec.format} output)")
    entry = write_through_connect(args.spark_remote, plan, store, kafka.kafka_config, options, progress)
    return {"batch_id": plan.batch_id, "seq": entry["seq"], "rows": entry["rows"], "timings": entry.get("timings", {})}


def check_spark_target(args: argparse.Namespace) -> None:
    """Either a Spark Connect server or a master for spark-submit, before anything is planned."""
    if args.spark_remote and args.spark_master:
        raise ConfigError(
            "--spark-master and --spark-remote (or $SPARK_REMOTE) both given: choose spark-submit or Spark Connect"
        )
    if args.spark_remote:
        from kafka_batch_provider.spark.connect import check_reachable

        if args.spark_conf:
            raise ConfigError("--spark-conf is for spark-submit; a Spark Connect server has its own settings")
        if "token=" in args.spark_remote and args.spark_remote != os.environ.get("SPARK_REMOTE"):
            raise ConfigError(
                "--spark-remote with a token would show it in ps and shell history: export SPARK_REMOTE=... instead"
            )
        check_reachable(args.spark_remote)  # before a plan is written for a batch that cannot run


def store_output(store: Any) -> str:
    """The ``--output`` that opens ``store`` again (the table's location for Delta)."""
    return store.data.output


def load_plan_and_store(args: argparse.Namespace):
    from kafka_batch_provider.output.store import load_plan_file

    store = store_from(args, plan_output(args))
    return load_plan_file(args.plan, store.location.storage_options), store


def plan_output(args: argparse.Namespace) -> str | None:
    """The output holding ``--plan`` when ``--output`` does not say (a table's: above ``_kafka_batch/``)."""
    from kafka_batch_provider.output.formats import output_of_plan

    if args.output or args.format == "iceberg":
        return args.output
    return output_of_plan(args.format, args.plan)


def location_of(store: Any, entry: dict[str, Any]) -> str | None:
    return store.data_uri(entry)


def cmd_write(args: argparse.Namespace) -> dict[str, Any]:
    options = write_options(args)
    plan, store = load_plan_and_store(args)
    kafka = offsets_client(args)
    if not plan.has_data:
        progress(f"batch {plan.batch_id} has nothing to read: Spark is not started; the commit step records it")
        return {"batch_id": plan.batch_id, "seq": plan.seq, "records": 0, "location": None, "skipped": True}
    plan_path = args.plan if "://" in args.plan else os.path.abspath(args.plan)
    submit_write(args, options, plan_path, store, kafka)
    entry = store.entry_of(plan) or {}
    return {
        "batch_id": plan.batch_id,
        "seq": plan.seq,
        "records": entry.get("rows", 0),
        "location": location_of(store, entry),
        "skipped": False,
    }


def cmd_commit(args: argparse.Namespace) -> dict[str, Any]:
    from kafka_batch_provider.steps.commit import commit_batch

    plan, store = load_plan_and_store(args)
    committed = commit_batch(offsets_client(args), store, plan, progress)
    record = store.commit_record(plan.seq, plan.batch_id) or {}
    return {"batch_id": plan.batch_id, "seq": plan.seq, "records": record.get("rows", 0), "committed": committed}


def cmd_run(args: argparse.Namespace) -> dict[str, Any]:
    from kafka_batch_provider.steps.commit import commit_batch

    options = write_options(args)
    kafka = offsets_client(args)
    store = store_from(args)
    clock = time.perf_counter()
    outcome = plan_step(args, kafka, store)
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
        written = submit_write(args, options, outcome.plan_path, store, kafka)
        timings["spark_seconds"] = round(time.perf_counter() - clock, 3)  # spark-submit or Spark Connect
        timings.update(written.get("timings", {}))
    else:
        progress(f"batch {plan.batch_id} has nothing to read: Spark is not started")
    fail_point("after-log-entry")
    clock = time.perf_counter()
    committed = commit_batch(kafka, store, plan, progress)
    timings["commit_seconds"] = round(time.perf_counter() - clock, 3)
    entry = store.entry_of(plan) or {}
    return {
        **result,
        "records": entry.get("rows", 0),
        "committed": committed,
        "skipped": False,
        "location": location_of(store, entry),
        "timings": timings,
        "spark": "connect" if args.spark_remote else "submit",
    }


def format_lag_table(report: Any, now: Any) -> str:
    rows = [("topic", "partition", "committed", "log start", "end", "lag", "oldest unconsumed", "status")]
    for p in report.partitions:
        age = "-" if p.age_seconds is None else f"{p.age_seconds:,.0f}s"
        s = p.state
        rows.append(
            (
                s.topic,
                str(s.partition),
                "-" if s.committed is None else str(s.committed),
                str(s.log_start),
                str(s.log_end),
                f"{s.lag:,}",
                age,
                p.status.value,
            )
        )
    rows.append(("total", "", "", "", "", f"{report.total_lag:,}", "", report.status.value))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) if i in (0, 7) else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
        for r in rows
    ]
    for p in report.problems():
        lines.append(f"{p.state.tp} {p.status.value}: {p.reason}")
    lines.extend(f"note: {n}" for n in report.notes)
    return "\n".join(lines)


def cmd_lag(args: argparse.Namespace) -> dict[str, Any]:
    from datetime import datetime, timedelta, timezone

    from kafka_batch_provider.core.lag_health import HealthPolicy
    from kafka_batch_provider.steps.lag import lag_report

    policy = HealthPolicy(
        window=args.window,
        stop_after=timedelta(seconds=args.stop_after) if args.stop_after else None,
        retention_risk=args.retention_risk,
    )
    now = datetime.now(timezone.utc)
    store = store_from(args, create=False) if args.output or args.table else None
    report = lag_report(offsets_client(args), args.group, args.topic, store, policy, now)
    if not args.json:
        print(format_lag_table(report, now), flush=True)
    result = report.to_dict()
    if args.check and report.status.exit_code:
        emit(result)
        raise LagCheckFailed(report.message(), report.status.exit_code)
    return result


class LagCheckFailed(KafkaBatchError):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.exit_code = code


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


def batch_rows(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per batch of the output: what ``kafka-batch table`` prints."""
    from datetime import datetime, timezone

    rows = []
    for e in entries:
        moment = e.get("committed_at") or e.get("written_at")
        if isinstance(moment, (int, float)):  # table commits keep epoch milliseconds
            moment = datetime.fromtimestamp(moment / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")
        rows.append(
            {
                "seq": e["seq"],
                "batch_id": e["batch_id"],
                "committed_at": moment,
                "rows": e["rows"],
                "end_offsets": {f"{r['topic']}:{r['partition']}": r["end"] for r in e["ranges"]},
            }
        )
    return rows


def format_batch_table(rows: list[dict[str, Any]]) -> str:
    table = [("seq", "batch id", "committed at", "rows", "end offsets")]
    table += [
        (
            str(r["seq"]),
            r["batch_id"],
            str(r["committed_at"] or "-"),
            f"{r['rows']:,}",
            " ".join(f"{k}={v}" for k, v in sorted(r["end_offsets"].items())) or "-",
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    return "\n".join(
        "  ".join(
            [*(cell.rjust(w) if i == 3 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))), row[4]]
        )
        for row in table
    )


def cmd_table(args: argparse.Namespace) -> dict[str, Any]:
    store = store_from(args, create=False)
    rows = batch_rows(list(store.log.entries()))
    if args.last:
        rows = rows[-args.last :]
    if not args.json:
        print(format_batch_table(rows), flush=True)
    return {"format": store.format, "output": store.root, "batches": rows}


def cmd_broker(args: argparse.Namespace) -> dict[str, Any]:
    from kafka_batch_provider.dev import broker as embedded

    if args.broker_command == "start":
        info = embedded.start_detached(args.port, timeout=args.timeout)
        progress(f"embedded broker listening on {info['bootstrap_servers']} (pid {info['pid']}, memory storage)")
        return info
    if args.broker_command == "stop":
        info = embedded.stop_detached()
        progress("embedded broker stopped" if info.get("stopped") else "no embedded broker was running")
        return info
    info = embedded.status()
    progress(f"embedded broker: {'running at ' + info['bootstrap_servers'] if info['running'] else 'not running'}")
    return info


def cmd_s3(args: argparse.Namespace) -> dict[str, Any]:
    from kafka_batch_provider.dev import s3 as embedded

    if args.s3_command == "start":
        info = embedded.start_detached(args.port, buckets=tuple(args.bucket or [embedded.DEFAULT_BUCKET]))
        progress(
            f"embedded S3 server at {info['endpoint_url']} (pid {info['pid']}, memory storage, buckets "
            f"{', '.join(info['buckets'])}); point clients at it with: "
            + " ".join(f"{k}={v}" for k, v in sorted(info["env"].items()))
        )
        return info
    if args.s3_command == "stop":
        info = embedded.stop_detached()
        progress("embedded S3 server stopped" if info.get("stopped") else "no embedded S3 server was running")
        return info
    info = embedded.status()
    progress(f"embedded S3 server: {'running at ' + info['endpoint_url'] if info['running'] else 'not running'}")
    return info


def cmd_spark_connect(args: argparse.Namespace) -> dict[str, Any]:
    from kafka_batch_provider.dev import spark_connect as connect_server

    if args.connect_command == "start":
        conf = parse_key_values(args.spark_conf, flag="--spark-conf")
        progress(f"starting a Spark Connect server ({args.master}) on 127.0.0.1:{args.port} ...")
        info = connect_server.start_detached(args.port, args.master, conf, timeout=args.timeout)
        progress(
            f"Spark Connect server listening at {info['remote']} (pid {info['pid']}, {info['master']}); "
            f"use it with: --spark-remote {info['remote']}  or  export SPARK_REMOTE={info['remote']}"
        )
        return info
    if args.connect_command == "stop":
        info = connect_server.stop_detached()
        progress("Spark Connect server stopped" if info.get("stopped") else "no Spark Connect server was running")
        return info
    info = connect_server.status()
    progress(f"Spark Connect server: {'running at ' + info['remote'] if info['running'] else 'not running'}")
    return info


def cmd_spark_archive(args: argparse.Namespace) -> dict[str, Any]:
    from kafka_batch_provider.spark import jvm_start
    from kafka_batch_provider.spark.class_archive import build_class_archive

    info = jvm_start.archive_status()
    if args.archive_command == "build":
        if info["exists"] and not args.force:
            progress(f"Spark's class archive is already at {info['path']} (--force records it again)")
            return info
        started = time.monotonic()
        build_class_archive(progress)
        info = {**jvm_start.archive_status(), "build_seconds": round(time.monotonic() - started, 1)}
        progress(
            f"recorded {info['bytes'] / 2**20:.0f} MB in {info['build_seconds']:g} s: spark-submit batches "
            "of this installation start from it"
        )
        return info
    if info["path"] is None:
        progress(f"Spark's class archive is switched off ({jvm_start.ARCHIVE_ENV}=off)")
    elif info["exists"]:
        progress(f"Spark's class archive: {info['path']} ({info['bytes'] / 2**20:.0f} MB)")
    else:
        progress(f"no class archive for this Java and Spark yet ({info['path']}): run kafka-batch spark-archive build")
    return info


# -- parser --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="kafka-batch", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and librdkafka logs")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    p = sub.add_parser(
        "plan", help="reconcile the group with the output's offset log, then plan the next batch and persist it"
    )
    add_kafka_args(p)
    add_plan_args(p)
    add_storage_args(p)
    p.set_defaults(func=cmd_plan)

    def plan_file_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--plan", required=True, help="plan file or URI (<output>/_plans/<seq>-<batch_id>.json)")
        add_storage_args(p, output_help="the output (default: the one holding the plan)")

    p = sub.add_parser("write", help="read a plan's ranges with Spark, check them, append to the output's log")
    plan_file_args(p)
    add_kafka_args(p)
    add_spark_args(p)
    p.set_defaults(func=cmd_write)

    p = sub.add_parser("commit", help="check a batch's log entry and files, commit its end offsets (compare-and-set)")
    plan_file_args(p)
    add_kafka_args(p)
    p.set_defaults(func=cmd_commit)

    p = sub.add_parser("run", help="plan, write and commit one batch")
    add_kafka_args(p)
    add_plan_args(p)
    add_storage_args(p)
    add_spark_args(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("discard", help="remove a batch that is not in the output's log (staged files, plan)")
    plan_file_args(p)
    p.set_defaults(func=cmd_discard)

    p = sub.add_parser("lag", help="lag per partition and its health (OK, WARN, STALL, STOP, REWIND, ...)")
    add_kafka_args(p)
    p.add_argument("--group", required=True, help="consumer group")
    p.add_argument("--topic", action="append", required=True, help="topic, repeatable")
    add_storage_args(
        p,
        output_help="the ingestion's output (path or URI): its offset log gives the position where the group has "
        "none, and its batch history enables WARN/STALL/STOP/REWIND",
    )
    p.add_argument("--json", action="store_true", help="print only the JSON report")
    p.add_argument(
        "--check",
        action="store_true",
        help="exit non-zero unless every status is OK: "
        "10 WARN, 11 STALL, 12 STOP, 13 REWIND, 14 RETENTION_RISK, 15 DATA_LOSS",
    )
    p.add_argument("--window", type=positive_int, default=5, help="batches the trend statuses look at (default 5)")
    p.add_argument(
        "--stop-after", type=positive_seconds, help="STOP when lag > 0 and no batch committed for this many seconds"
    )
    p.add_argument(
        "--retention-risk", type=fraction, default=0.8, help="fraction of retention.ms that is at risk (default 0.8)"
    )
    p.set_defaults(func=cmd_lag)

    p = sub.add_parser("table", help="the output's batches: batch id, commit time, rows, end offsets per partition")
    add_storage_args(p)
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.add_argument("--last", type=positive_int, help="only the newest N batches")
    p.set_defaults(func=cmd_table)

    p = sub.add_parser("broker", help="the embedded Kafka-protocol broker (tansu) for demos and tests")
    p.add_argument("broker_command", choices=["start", "stop", "status"])
    p.add_argument("--port", type=positive_int, default=9092, help="port on 127.0.0.1 (default 9092)")
    p.add_argument("--timeout", type=positive_seconds, default=30.0, help="seconds to wait for readiness")
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser("s3", help="the embedded S3-protocol server (moto) for demos and tests")
    p.add_argument("s3_command", choices=["start", "stop", "status"])
    p.add_argument("--port", type=positive_int, default=9000, help="port on 127.0.0.1 (default 9000)")
    p.add_argument("--bucket", action="append", help="bucket to create, repeatable (default: lake)")
    p.set_defaults(func=cmd_s3)

    p = sub.add_parser("spark-connect", help="a local Spark Connect server from the installed pyspark")
    p.add_argument("connect_command", choices=["start", "stop", "status"])
    p.add_argument("--port", type=positive_int, default=15002, help="port on 127.0.0.1 (default 15002)")
    p.add_argument("--master", default="local[*]", help="the server's Spark master (default local[*])")
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="server setting, repeatable")
    p.add_argument("--timeout", type=positive_seconds, default=120.0, help="seconds to wait for the server to listen")
    p.set_defaults(func=cmd_spark_connect)

    p = sub.add_parser(
        "spark-archive", help="the archive of Spark's classes that spark-submit batches start from (build once)"
    )
    p.add_argument("archive_command", choices=["build", "status"])
    p.add_argument("--force", action="store_true", help="record the archive again even when it exists")
    p.set_defaults(func=cmd_spark_archive)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    # librdkafka retries loudly while a broker is down; the error we raise says it in one line.
    LIBRDKAFKA_LOGGER.setLevel(logging.DEBUG if args.debug else logging.CRITICAL)
    try:
        with worded(FLAGS_WORDING):  # advice names --flags, not the operators' keyword arguments
            if getattr(args, "topic", None) is not None:
                validation.check_topics(args.topic)
            if getattr(args, "group", None) is not None:
                validation.check_group_id(args.group)
            emit(args.func(args))
        return 0
    except KafkaBatchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: still one line, with the traceback behind --debug
        if args.debug:
            raise
        print(f"error: unexpected {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
