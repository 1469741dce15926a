"""The flags the commands share, and what they turn into (a Kafka client, an output, a policy).

Every check here happens before anything is planned, read or written: a refused run leaves
nothing behind.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from kafka_batch_provider.core import validation
from kafka_batch_provider.core.planning import DataLossPolicy, NewPartitionPolicy, PlanPolicy
from kafka_batch_provider.core.reconcile import GroupMismatchPolicy
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.kafka.config import parse_key_values, read_config_file


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the usage text stays behind --help)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"error: {message} (see: {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


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
share = checked(validation.share)


def add_pairs_and_file(g: Any, flag: str, pairs_help: str, file_flag: str, env: str, file_help: str) -> None:
    """A repeatable ``KEY=VALUE`` flag for what may be seen, and a JSON file for secrets (argv is public)."""
    g.add_argument(flag, action="append", default=[], metavar="KEY=VALUE", help=pairs_help)
    g.add_argument(file_flag, default=os.environ.get(env), help=f"{file_help} (default: ${env})")


def add_kafka_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Kafka")
    g.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
        help="host:port[,host:port] (default: $KAFKA_BOOTSTRAP_SERVERS)",
    )
    add_pairs_and_file(
        g,
        "--kafka-config",
        "librdkafka setting, repeatable (e.g. security.protocol=SASL_SSL); put secrets in --kafka-config-file",
        "--kafka-config-file",
        "KAFKA_BATCH_KAFKA_CONFIG_FILE",
        "JSON object of librdkafka settings, for secrets: they stay out of ps and shell history; "
        "--kafka-config and --bootstrap-servers override it",
    )
    g.add_argument(
        "--timeout", type=positive_seconds, default=30.0, help="seconds to wait for a broker request (default 30)"
    )


def add_topics_or_pattern(g: Any, topic_help: str, pattern_help: str) -> None:
    """``--topic`` (repeatable) or ``--topic-pattern``, one of the two required."""
    which = g.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", help=topic_help)
    which.add_argument("--topic-pattern", metavar="REGEX", help=pattern_help)


def add_plan_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("planning")
    add_topics_or_pattern(
        g,
        "topic to ingest, repeatable",
        "ingest every topic whose whole name matches (resolved at every plan, so a new topic is in the next "
        "batch; Kafka's own __ topics never match)",
    )
    g.add_argument("--partition", action="append", type=non_negative_int, help="only these partitions, repeatable")
    g.add_argument("--group", required=True, help="consumer group whose committed offsets are the checkpoint")
    g.add_argument(
        "--new-partitions",
        choices=[p.value for p in NewPartitionPolicy],
        default="earliest",
        help="start of a partition the group never committed (default earliest)",
    )
    g.add_argument(
        "--new-topic-start",
        choices=[NewPartitionPolicy.EARLIEST.value, NewPartitionPolicy.LATEST.value],
        default="earliest",
        help="with --topic-pattern and one output: start of a topic met after the output's first batch "
        "(default earliest; recorded in the log entry); a table per topic starts as --new-partitions says",
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
    g.add_argument(
        "--adopt-group",
        action="store_true",
        help="a new output may start from a group another output committed (refused otherwise: a group feeds "
        "one output); its first log entry records the adoption",
    )


def add_replay_args(p: argparse.ArgumentParser) -> None:
    """What the backfill DAG's form asks: the topic, the partitions and one way of choosing the range."""
    g = p.add_argument_group("replay (the group is never read or moved)")
    g.add_argument("--topic", action="append", required=True, help="topic to replay, repeatable")
    g.add_argument("--partition", action="append", type=non_negative_int, help="only these partitions, repeatable")
    g.add_argument("--start-offsets", metavar="JSON", help="first offset per partition, e.g. '{\"0\": 100}'")
    g.add_argument("--end-offsets", metavar="JSON", help="end offset (exclusive) per partition, e.g. '{\"0\": 200}'")
    g.add_argument("--start-time", metavar="ISO8601", help="replay records from this time (e.g. 2026-01-31T00:00:00Z)")
    g.add_argument("--end-time", metavar="ISO8601", help="up to this time (exclusive, not in the future)")
    g.add_argument("--whole-topic", action="store_true", help="every offset of the chosen partitions")
    g.add_argument(
        "--on-data-loss",
        choices=[p.value for p in DataLossPolicy],
        default="fail",
        help="the range reaches offsets already deleted (retention, DeleteRecords): fail (default) or replay what "
        "is left and record the gap",
    )
    g.add_argument("--dry-run", action="store_true", help="plan and check only: nothing is written")


def replay_range_from(args: argparse.Namespace) -> dict[str, Any]:
    """The range flags, parsed and checked (one way of choosing it, complete, in the past)."""
    from kafka_batch_provider.core.params import parse_offsets, parse_time
    from kafka_batch_provider.steps.replay import check_replay_range

    chosen = {
        "start_offsets": parse_offsets("--start-offsets", args.start_offsets),
        "end_offsets": parse_offsets("--end-offsets", args.end_offsets),
        "start_ms": parse_time("--start-time", args.start_time),
        "end_ms": parse_time("--end-time", args.end_time),
        "whole_topic": args.whole_topic,
    }
    check_replay_range(**chosen)
    return chosen


def add_storage_args(p: argparse.ArgumentParser, output_help: str = "") -> None:
    from kafka_batch_provider.output.formats import add_merge_arguments, add_partition_by_argument
    from kafka_batch_provider.output.kinds import kinds

    g = p.add_argument_group("output")
    g.add_argument(
        "--format",
        choices=tuple(kinds()),
        default=os.environ.get("KAFKA_BATCH_FORMAT", "parquet"),
        help="parquet (a folder per batch, default), delta (a Delta Lake table), iceberg (an Iceberg table), "
        "postgres (a PostgreSQL table) or mysql (a MariaDB or MySQL table): in a database, rows and offsets in one "
        "transaction",
    )
    g.add_argument(
        "--output",
        help=output_help
        or "where the data and its offset log live: a local path or a URI (s3://, gs://, abfs://, file://); "
        "for --format delta, the table's location",
    )
    g.add_argument(
        "--table",
        help="--format iceberg: the table, NAMESPACE.NAME; postgres: SCHEMA.NAME; mysql: DB.NAME "
        "(created on first use)",
    )
    g.add_argument(
        "--database-url-file",
        default=os.environ.get("KAFKA_BATCH_DATABASE_URL_FILE") or None,
        help="--format postgres or mysql: a file holding the database's URL, postgresql:// or "
        "mysql://USER:PASSWORD@HOST:PORT/DB "
        "(default: $KAFKA_BATCH_DATABASE_URL; never on the command line: it holds the password)",
    )
    add_pairs_and_file(
        g,
        "--catalog-property",
        "pyiceberg catalog property, repeatable (type=sql, uri=sqlite:///..., warehouse=..., s3.endpoint=...); "
        "secrets belong in --catalog-properties-file",
        "--catalog-properties-file",
        "KAFKA_BATCH_CATALOG_PROPERTIES_FILE",
        "JSON object of catalog properties, for secrets",
    )
    add_partition_by_argument(g)
    add_merge_arguments(g)
    add_pairs_and_file(
        g,
        "--storage-option",
        "fsspec option of the output's filesystem, repeatable (e.g. endpoint_url=http://127.0.0.1:9000); "
        "credentials belong in --storage-options-file or the usual AWS_*/GOOGLE_*/AZURE_* variables",
        "--storage-options-file",
        "KAFKA_BATCH_STORAGE_OPTIONS_FILE",
        "JSON object of fsspec storage options, for credentials",
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


def add_registry_args(p: argparse.ArgumentParser, pins: bool = True, value_format: bool = False) -> None:
    """Where the schema registry is and, for the steps that plan, which schemas the values and keys are read with."""
    g = p.add_argument_group("schema registry (--value-format / --key-format avro|protobuf|json-schema)")
    if value_format:
        from kafka_batch_provider.core.write_options import KEY_FORMATS, VALUE_FORMATS

        g.add_argument(
            "--value-format",
            choices=VALUE_FORMATS,
            default="bytes",
            help="the values' format; avro, protobuf and json-schema pin the batch's reader schema in its plan "
            "(default bytes)",
        )
        g.add_argument(
            "--key-format",
            choices=KEY_FORMATS,
            default="bytes",
            help="the keys' format; avro, protobuf and json-schema pin the keys' reader schema in the plan too "
            "(default bytes)",
        )
    g.add_argument(
        "--schema-registry-url",
        default=os.environ.get("KAFKA_BATCH_SCHEMA_REGISTRY_URL"),
        metavar="URL",
        help="http(s)://host:port[,...] of a Confluent-compatible schema registry, no credentials in it "
        "(default: $KAFKA_BATCH_SCHEMA_REGISTRY_URL)",
    )
    g.add_argument(
        "--schema-registry-config-file",
        default=os.environ.get("KAFKA_BATCH_SCHEMA_REGISTRY_CONFIG_FILE"),
        help="JSON object of the registry client's settings, for credentials: basic.auth.user.info, "
        "bearer.auth.*, ssl.ca.location, ssl.certificate.location, ssl.key.location "
        "(default: $KAFKA_BATCH_SCHEMA_REGISTRY_CONFIG_FILE)",
    )
    if pins:
        for part in ("value", "key"):
            g.add_argument(f"--{part}-subject", help=f"the subject the {part}s follow (default <topic>-{part})")
            g.add_argument(
                f"--{part}-schema-version",
                type=positive_int,
                help=f"read the {part}s with this version of their subject (default: its latest when the batch "
                "is planned)",
            )


def registry_from(args: argparse.Namespace):
    """The registry's settings (``None`` without a URL); a bad URL or settings file is refused here."""
    from kafka_batch_provider.registry.settings import settings_from

    return settings_from(args.schema_registry_url, args.schema_registry_config_file)


def reader_schema_request(args: argparse.Namespace, registry: Any):
    """What pins the reader schemas of the parts in a registry format when planning (``None`` when
    neither values nor keys are in one).

    :param registry: :func:`registry_from` ``args``, read once per command.
    """
    from kafka_batch_provider.core.reader_schema import REGISTRY_FORMATS, check_schema_choice
    from kafka_batch_provider.core.write_options import check_key_format
    from kafka_batch_provider.registry.reader_schema import ReaderSchemaRequest, ReaderSchemas

    check_key_format(args.key_format, args.value_format)
    requests = []
    for part in ("value", "key"):
        fmt, subject, version = (getattr(args, f"{part}_{name}") for name in ("format", "subject", "schema_version"))
        if fmt not in REGISTRY_FORMATS:
            check_schema_choice(fmt, subject, version, part)
            continue
        requests.append(ReaderSchemaRequest(fmt, registry, subject, version, wait=args.timeout, part=part))
    return ReaderSchemas.of(*requests)


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


def add_metrics_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("metrics (kafka_batch.* of each committed batch; nothing is sent without these)")
    g.add_argument(
        "--metrics-statsd",
        metavar="HOST:PORT",
        default=os.environ.get("KAFKA_BATCH_METRICS_STATSD"),
        help="send DogStatsD lines over UDP (StatsD, the Datadog agent, Telegraf)",
    )
    g.add_argument(
        "--metrics-otlp",
        metavar="URL",
        default=os.environ.get("KAFKA_BATCH_METRICS_OTLP"),
        help="send OpenTelemetry metrics over OTLP/HTTP (e.g. http://127.0.0.1:4318: a Collector, Alloy, Prometheus)",
    )


def metrics_sinks_from(args: argparse.Namespace) -> list:
    """The receivers the command line names (checked before anything runs)."""
    from kafka_batch_provider.metrics.otlp import OtlpSink
    from kafka_batch_provider.metrics.statsd import StatsdSink

    sinks: list = []
    if getattr(args, "metrics_statsd", None):
        sinks.append(StatsdSink(args.metrics_statsd))
    if getattr(args, "metrics_otlp", None):
        sinks.append(OtlpSink(args.metrics_otlp))
    return sinks


def output_spec_from(args: argparse.Namespace, output: str | None = None):
    from kafka_batch_provider.output.formats import OutputSpec, merge_of_args

    return OutputSpec(
        format=args.format,
        output=output or args.output,
        table=args.table,
        catalog_properties=catalog_properties_from(args),
        storage_options=storage_options_from(args),
        partition_by=args.partition_by,
        merge=merge_of_args(args),
        database_url=database_url_from(args),
    )


def database_url_from(args: argparse.Namespace) -> str | None:
    """The database output's URL: ``--database-url-file``'s first line, else ``$KAFKA_BATCH_DATABASE_URL``."""
    path = getattr(args, "database_url_file", None)
    if path:
        try:
            text = Path(path).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"--database-url-file {path}: {exc.strerror or exc}") from None
        return text.splitlines()[0].strip() if text else None
    return os.environ.get(DATABASE_URL_ENV) or None


#: Where a database output's URL (with its password) comes from when no file is named.
DATABASE_URL_ENV = "KAFKA_BATCH_DATABASE_URL"


def store_from(args: argparse.Namespace, output: str | None = None, create: bool = True):
    from kafka_batch_provider.output.formats import open_store

    return open_store(output_spec_from(args, output), create)


def policy_from(args: argparse.Namespace) -> PlanPolicy:
    return PlanPolicy(
        new_partitions=NewPartitionPolicy(args.new_partitions),
        new_topic_start=NewPartitionPolicy(args.new_topic_start),
        on_data_loss=DataLossPolicy(args.on_data_loss),
        max_records_per_partition=args.max_records_per_partition,
        max_records=args.max_records,
    )


def spark_conf_from(args: argparse.Namespace) -> dict[str, str]:
    return parse_key_values(args.spark_conf, flag="--spark-conf")


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


def write_options(args: argparse.Namespace):
    """The Spark-side flags, checked before anything is planned or read (a refused run leaves no plan),
    and the schema registry's settings (:func:`registry_from`, read once per command), which a
    registry format needs."""
    from kafka_batch_provider.core.write_options import WriteOptions
    from kafka_batch_provider.registry.reader_schema import require_registry

    check_spark_target(args)
    conf = spark_conf_from(args)
    options = WriteOptions.from_namespace(args)
    if not args.spark_remote:  # a Spark Connect server has its own jars: its error says so
        from kafka_batch_provider.spark.kafka_connector import jars_for_reader

        jars_for_reader(options.reader, conf)  # the jvm reader without the connector: refused before planning
    registry = registry_from(args)
    for part, fmt in options.registry_parts.items():
        require_registry(fmt, registry, part)
    return options, registry


def plan_output(args: argparse.Namespace) -> str | None:
    """The output holding ``--plan`` when ``--output`` does not say (a table's: above ``_kafka_batch/``)."""
    from kafka_batch_provider.output.formats import output_of_plan
    from kafka_batch_provider.output.kinds import known_kind

    kind = known_kind(args.format)
    if args.output or (kind is not None and kind.by_table):
        return args.output
    return output_of_plan(args.format, args.plan)


def load_plan_and_output(args: argparse.Namespace):
    """``--plan``, the output holding it (one :class:`OutputSpec`, kept for the Spark step) and its store."""
    from kafka_batch_provider.output.formats import open_store
    from kafka_batch_provider.output.store import load_plan_file

    spec = output_spec_from(args, plan_output(args))
    store = open_store(spec)
    return load_plan_file(args.plan, store.location.storage_options), spec, store
