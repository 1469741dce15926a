"""``kafka-batch``: the protocol's steps from the command line.

Each command mirrors an Airflow task: ``plan`` -> ``write`` -> ``commit`` (``run`` does all
three). Progress goes to stderr; the last stdout line is one JSON object. An error is one
line, the last on stderr (``error: ...``), with a non-zero exit code, and changes nothing.

The commands live beside this parser: ``batch.py`` (the steps), ``reports.py`` (``lag``,
``table``), ``upkeep.py``, ``servers.py`` (the local servers, ``spark-archive``);
``arguments.py`` turns the shared flags into a Kafka client, an output and a policy.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from kafka_batch_provider import __version__
from kafka_batch_provider.cli.arguments import (
    OneLineParser,
    add_kafka_args,
    add_metrics_args,
    add_plan_args,
    add_registry_args,
    add_replay_args,
    add_spark_args,
    add_storage_args,
    add_topics_or_pattern,
    fraction,
    positive_int,
    positive_seconds,
    share,
)
from kafka_batch_provider.cli.batch import cmd_commit, cmd_discard, cmd_plan, cmd_replay, cmd_run, cmd_write
from kafka_batch_provider.cli.console import emit
from kafka_batch_provider.cli.reports import cmd_lag, cmd_table
from kafka_batch_provider.cli.servers import add_server_parsers, cmd_spark_archive
from kafka_batch_provider.cli.upkeep import add_upkeep_args, cmd_upkeep
from kafka_batch_provider.core import validation
from kafka_batch_provider.core.settings import FLAGS_WORDING, worded
from kafka_batch_provider.errors import KafkaBatchError
from kafka_batch_provider.kafka.config import LIBRDKAFKA_LOGGER

log = logging.getLogger("kafka_batch_provider")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="kafka-batch", description=__doc__.splitlines()[0].replace("``", ""))
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and librdkafka logs")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    def plan_file_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--plan", required=True, help="plan file or URI (<output>/_plans/<seq>-<batch_id>.json)")
        add_storage_args(p, output_help="the output (default: the one holding the plan)")

    def planning_registry_args(p: argparse.ArgumentParser) -> None:
        add_registry_args(p, value_format=True)

    def writing_registry_args(p: argparse.ArgumentParser) -> None:
        add_registry_args(p, pins=False)  # the plan says which schema

    # The protocol's steps: (command, help, the flag groups it takes, what it runs).
    steps = [
        (
            "plan",
            "reconcile the group with the output's offset log, then plan the next batch and persist it",
            (add_kafka_args, add_plan_args, add_storage_args, planning_registry_args),
            cmd_plan,
        ),
        (
            "write",
            "read a plan's ranges with Spark, check them, append to the output's log",
            (plan_file_args, add_kafka_args, add_spark_args, writing_registry_args),
            cmd_write,
        ),
        (
            "commit",
            "check a batch's log entry and files, commit its end offsets (compare-and-set)",
            (plan_file_args, add_kafka_args, add_metrics_args),
            cmd_commit,
        ),
        (
            "run",
            "plan, write and commit one batch",
            (add_kafka_args, add_plan_args, add_storage_args, add_spark_args, add_registry_args, add_metrics_args),
            cmd_run,
        ),
        (
            "replay",
            "the backfill DAG's replay: plan a range of offsets or times into the output and write it; "
            "the group is never read or moved",
            (add_kafka_args, add_replay_args, add_storage_args, add_spark_args, add_registry_args),
            cmd_replay,
        ),
        (
            "discard",
            "remove a batch that is not in the output's log (staged files, plan)",
            (plan_file_args,),
            cmd_discard,
        ),
    ]
    for command, help_text, flag_groups, run in steps:
        p = sub.add_parser(command, help=help_text)
        for add_flags in flag_groups:
            add_flags(p)
        p.set_defaults(func=run)

    p = sub.add_parser("lag", help="lag per partition and its health (OK, WARN, STALL, STOP, REWIND, ...)")
    add_kafka_args(p)
    p.add_argument("--group", required=True, help="consumer group")
    add_topics_or_pattern(p, "topic, repeatable", "the topics whose whole name matches, now")
    add_metrics_args(p)
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
        "10 WARN, 11 STALL, 12 STOP, 13 REWIND, 14 RETENTION_RISK, 15 DATA_LOSS, 16 DEAD_LETTERS",
    )
    p.add_argument("--window", type=positive_int, default=5, help="batches the trend statuses look at (default 5)")
    p.add_argument(
        "--stop-after", type=positive_seconds, help="STOP when lag > 0 and no batch committed for this many seconds"
    )
    p.add_argument(
        "--retention-risk", type=fraction, default=0.8, help="fraction of retention.ms that is at risk (default 0.8)"
    )
    p.add_argument(
        "--dead-letter-share",
        type=share,
        default=0.01,
        help="DEAD_LETTERS when more of a partition's records in the newest batch were dead letters (default 0.01)",
    )
    p.set_defaults(func=cmd_lag)

    p = sub.add_parser(
        "table", help="the output's batches: batch id, commit time, rows, dead letters, end offsets per partition"
    )
    add_storage_args(p)
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.add_argument("--last", type=positive_int, help="only the newest N batches")
    p.set_defaults(func=cmd_table)

    p = sub.add_parser(
        "upkeep",
        help="compact and clean the output (Delta optimize/vacuum/log cleanup, Iceberg snapshot expiry and "
        "orphan files, old plans and commit records); the offsets are kept",
    )
    add_upkeep_args(p)
    p.set_defaults(func=cmd_upkeep)

    add_server_parsers(sub)

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
