"""The local servers for demos and tests, one start/status/stop shape for all five: ``kafka``
(Apache Kafka itself, single-node KRaft), ``broker`` (the embedded Kafka-protocol broker,
tansu), ``s3`` (the embedded S3-protocol server),
``schema-registry`` (the embedded schema registry) and ``spark-connect`` (a Spark Connect server
from the installed pyspark); and ``spark-archive``."""

from __future__ import annotations

import argparse
import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka_batch_provider.cli.arguments import positive_int, positive_seconds
from kafka_batch_provider.cli.console import progress
from kafka_batch_provider.kafka.config import parse_key_values


@dataclass(frozen=True)
class ServerCommand:
    """A ``kafka-batch <command> start|status|stop`` over the ``dev/<module>.py`` of one server
    (the server itself is a ``dev.local_servers.LocalServer``)."""

    what: str  # how progress lines name it
    module: str  # kafka_batch_provider.dev.<module>: start_detached, status, stop_detached
    address: str  # the key of its address in the status
    default_port: int
    default_timeout: float
    start: Callable[[Any, argparse.Namespace], dict[str, Any]]
    started: Callable[[dict[str, Any]], str]


def start_s3(module: Any, args: argparse.Namespace) -> dict[str, Any]:
    return module.start_detached(args.port, buckets=tuple(args.bucket or [module.DEFAULT_BUCKET]), timeout=args.timeout)


def start_spark_connect(module: Any, args: argparse.Namespace) -> dict[str, Any]:
    conf = parse_key_values(args.spark_conf, flag="--spark-conf")
    progress(f"starting a Spark Connect server ({args.master}) on 127.0.0.1:{args.port} ...")
    return module.start_detached(args.port, args.master, conf, timeout=args.timeout)


SERVERS = {
    "kafka": ServerCommand(
        "Apache Kafka broker",
        "kafka",
        "bootstrap_servers",
        9092,
        60.0,
        lambda module, args: module.start_detached(args.port, timeout=args.timeout),
        lambda info: (
            f"Apache Kafka {info['version']} listening on {info['bootstrap_servers']} (pid {info['pid']}, "
            f"single-node KRaft; topics kept in {info['data_dir']} across stop and start); "
            f"use it with: --bootstrap-servers {info['bootstrap_servers']}  or  "
            f"export KAFKA_BOOTSTRAP_SERVERS={info['bootstrap_servers']}"
        ),
    ),
    "broker": ServerCommand(
        "embedded broker",
        "broker",
        "bootstrap_servers",
        9092,
        30.0,
        lambda module, args: module.start_detached(args.port, timeout=args.timeout),
        lambda info: f"embedded broker listening on {info['bootstrap_servers']} (pid {info['pid']}, memory storage)",
    ),
    "s3": ServerCommand(
        "embedded S3 server",
        "s3",
        "endpoint_url",
        9000,
        30.0,
        start_s3,
        lambda info: (
            f"embedded S3 server at {info['endpoint_url']} (pid {info['pid']}, memory storage, buckets "
            f"{', '.join(info['buckets'])}); point clients at it with: "
            + " ".join(f"{k}={v}" for k, v in sorted(info["env"].items()))
        ),
    ),
    "schema-registry": ServerCommand(
        "embedded schema registry",
        "schema_registry",
        "url",
        8081,
        30.0,
        lambda module, args: module.start_detached(args.port, timeout=args.timeout),
        lambda info: (
            f"embedded schema registry at {info['url']} (pid {info['pid']}, memory storage, auth: {info['auth']}); "
            f"point clients at it with: SCHEMA_REGISTRY_URL={info['url']}"
        ),
    ),
    "spark-connect": ServerCommand(
        "Spark Connect server",
        "spark_connect",
        "remote",
        15002,
        120.0,
        start_spark_connect,
        lambda info: (
            f"Spark Connect server listening at {info['remote']} (pid {info['pid']}, {info['master']}); "
            f"use it with: --spark-remote {info['remote']}  or  export SPARK_REMOTE={info['remote']}"
        ),
    ),
}


def cmd_server(args: argparse.Namespace) -> dict[str, Any]:
    server = SERVERS[args.command]
    module = importlib.import_module(f"kafka_batch_provider.dev.{server.module}")
    if args.server_command == "start":
        info = server.start(module, args)
        progress(server.started(info))
        return info
    if args.server_command == "stop":
        info = module.stop_detached()
        progress(f"{server.what} stopped" if info.get("stopped") else f"no {server.what} was running")
        return info
    info = module.status()
    progress(f"{server.what}: {'running at ' + info[server.address] if info['running'] else 'not running'}")
    return info


def add_server_parsers(sub: Any) -> None:
    helps = {
        "kafka": "Apache Kafka itself (single-node KRaft, the jars of `make jvm-tools`) for demos and tests",
        "broker": "the embedded Kafka-protocol broker (tansu) for demos and tests",
        "s3": "the embedded S3-protocol server (moto) for demos and tests",
        "schema-registry": "the embedded Confluent-compatible schema registry for demos and tests "
        "(credentials: $KAFKA_BATCH_SCHEMA_REGISTRY_AUTH)",
        "spark-connect": "a local Spark Connect server from the installed pyspark",
    }
    for command, server in SERVERS.items():
        p = sub.add_parser(command, help=helps[command])
        p.add_argument("server_command", choices=["start", "stop", "status"])
        p.add_argument(
            "--port",
            type=positive_int,
            default=server.default_port,
            help=f"port on 127.0.0.1 (default {server.default_port})",
        )
        p.add_argument(
            "--timeout",
            type=positive_seconds,
            default=server.default_timeout,
            help=f"start: seconds to wait until it answers (default {server.default_timeout:g})",
        )
        if command == "s3":
            p.add_argument("--bucket", action="append", help="bucket to create, repeatable (default: lake)")
        if command == "spark-connect":
            p.add_argument("--master", default="local[*]", help="the server's Spark master (default local[*])")
            p.add_argument(
                "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="server setting, repeatable"
            )
        p.set_defaults(func=cmd_server)


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
