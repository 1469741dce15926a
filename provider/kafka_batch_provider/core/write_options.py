"""How a batch is read and written: one value from the CLI or operator down to the Spark job.

The same options travel as keyword arguments (operators), command-line flags (the CLI and
the spark-submit application) and Python (``write_batch``); this value keeps the names,
defaults and checks in one place.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from kafka_batch_provider.core.ddl import check_ddl_schema
from kafka_batch_provider.core.file_sizing import DEFAULT_TARGET_FILE_MB, MB, check_target_file_mb
from kafka_batch_provider.core.reader_schema import REGISTRY_FORMATS
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.core.task_packing import check_max_tasks
from kafka_batch_provider.errors import ConfigError

#: ``native``: librdkafka into Arrow columns in C (the kafka_batch_native wheel; without it the
#: python reader reads, said in one log line); ``python``: confluent-kafka's messages; ``jvm``:
#: Spark's own Kafka source.
READERS = ("native", "python", "jvm")
DEFAULT_READER = "native"
#: The readers that run inside Spark's Python workers (the slice reader, receipts, one pass).
PYTHON_WORKER_READERS = ("native", "python")
VALUE_FORMATS = ("bytes", "string", "json", *REGISTRY_FORMATS)
#: A key in ``json`` would need a DDL of its own: JSON keys are read as ``string``.
KEY_FORMATS = ("bytes", "string", *REGISTRY_FORMATS)
DEFAULT_MAX_OFFSETS_PER_TASK = 250_000
DEFAULT_STALL_TIMEOUT = 120.0
#: What a record whose value cannot be decoded does to its batch (registry formats).
ON_BAD_RECORD = ("fail", "dead-letter")


def check_value_format(value_format: str) -> None:
    """One of :data:`VALUE_FORMATS` (the plan operators check theirs before any write option exists)."""
    if value_format not in VALUE_FORMATS:
        raise ConfigError(f"unknown value format {value_format!r}; choose one of {', '.join(VALUE_FORMATS)}")


def check_key_format(key_format: str, value_format: str = "bytes") -> None:
    """One of :data:`KEY_FORMATS`; a registry key beside ``json`` values is refused (Spark parses
    those, and the keys are decoded in the Python worker that ``json`` skips)."""
    if key_format not in KEY_FORMATS:
        hint = " (read JSON keys as string)" if key_format == "json" else ""
        raise ConfigError(
            f"unknown {Setting('key_format')} {key_format!r}; choose one of {', '.join(KEY_FORMATS)}{hint}",
            setting=Setting("key_format"),
        )
    if key_format in REGISTRY_FORMATS and value_format == "json":
        raise ConfigError(
            f"{Setting('key_format', key_format)} cannot go with {Setting('value_format', 'json')}: read the "
            f"values as json-schema from the registry, or the keys as string",
            setting=Setting("key_format"),
        )


@dataclass(frozen=True)
class WriteOptions:
    """:param reader: ``python`` (the confluent-kafka data source) or ``jvm`` (Spark's Kafka source).
    :param value_format: ``bytes``; ``string`` adds ``value_string``; ``json`` adds ``value_json``;
        ``avro`` (the schema registry's wire format) turns the value's fields into typed columns,
        read with the reader schema the plan recorded (:mod:`kafka_batch_provider.core.reader_schema`).
    :param value_schema: DDL schema of the JSON values (``json`` only).
    :param max_offsets_per_task: ranges are split into Spark tasks of at most this many offsets.
    :param max_tasks: at most this many reading tasks: the slices are packed into them by their
        offsets, and a partition larger than its share is split over several
        (:mod:`kafka_batch_provider.core.task_packing`); ``None``: as many as the file sizes ask.
    :param stall_timeout: seconds a read may make no progress before it fails.
    :param target_file_mb: files are rolled at about this size, and a batch's slices are
        grouped into as few writing tasks as its expected size needs
        (:mod:`kafka_batch_provider.core.file_sizing`).
    :param keep_raw_value: (registry formats) keep the ``value`` bytes beside the typed columns.
    :param on_bad_record: (registry formats) ``fail``: a value that cannot be decoded fails the batch
        in one line; ``dead-letter``: such records are written whole to the batch's dead letters,
        logged and published with the batch (:mod:`kafka_batch_provider.decoding.dead_letters`).
    :param key_format: ``bytes``; ``string`` adds ``key_string``; ``avro``, ``protobuf`` or
        ``json-schema`` turn ``key`` into the decoded key (a struct of the key's fields, or the
        value of an Avro key that is not a record), read with the plan's key reader schema.

    How a table is partitioned belongs to the output (:class:`~kafka_batch_provider.output.formats.OutputSpec`).
    """

    reader: str = DEFAULT_READER
    value_format: str = "bytes"
    value_schema: str | None = None
    max_offsets_per_task: int = DEFAULT_MAX_OFFSETS_PER_TASK
    stall_timeout: float = DEFAULT_STALL_TIMEOUT
    target_file_mb: int = DEFAULT_TARGET_FILE_MB
    keep_raw_value: bool = False
    on_bad_record: str = "fail"
    key_format: str = "bytes"
    max_tasks: int | None = None

    def __post_init__(self) -> None:
        if self.reader not in READERS:
            raise ConfigError(f"unknown reader {self.reader!r}; choose one of {', '.join(READERS)}")
        check_value_format(self.value_format)
        check_key_format(self.key_format, self.value_format)
        if self.value_format == "json" and not self.value_schema:
            json_values, schema = Setting("value_format", "json"), Setting("value_schema")
            raise ConfigError(
                f"{json_values} needs {schema}, a DDL string such as 'id long, name string'", setting=schema
            )
        if self.value_schema and self.value_format != "json":
            json_values = Setting("value_format", "json")
            raise ConfigError(f"{Setting('value_schema')} is only used with {json_values}", setting=json_values)
        for part, fmt in (("values", self.value_format), ("keys", self.key_format)):
            if fmt in REGISTRY_FORMATS and self.reader == "jvm":
                raise ConfigError(
                    f"{Setting('reader', 'jvm')} cannot decode {fmt} {part}: use {Setting('reader', 'python')}",
                    setting=Setting("reader"),
                )
        if self.keep_raw_value and self.value_format not in REGISTRY_FORMATS:
            raise ConfigError(
                f"{Setting('keep_raw_value')} is only used with a schema registry format "
                f"({Setting('value_format')}: {', '.join(REGISTRY_FORMATS)}); the other formats always keep value",
                setting=Setting("keep_raw_value"),
            )
        if self.on_bad_record not in ON_BAD_RECORD:
            raise ConfigError(
                f"unknown {Setting('on_bad_record')} {self.on_bad_record!r}; choose one of {', '.join(ON_BAD_RECORD)}",
                setting=Setting("on_bad_record"),
            )
        if self.on_bad_record != "fail" and not self.registry_parts:
            raise ConfigError(
                f"{Setting('on_bad_record', self.on_bad_record)} is only used with a schema registry format "
                f"({Setting('value_format')} or {Setting('key_format')}: {', '.join(REGISTRY_FORMATS)}): the other "
                "formats decode every record",
                setting=Setting("on_bad_record"),
            )
        if self.max_offsets_per_task < 1:
            raise ConfigError(f"max offsets per task must be positive, got {self.max_offsets_per_task}")
        check_max_tasks(self.max_tasks)
        if not math.isfinite(self.stall_timeout) or self.stall_timeout <= 0:
            raise ConfigError(f"stall timeout must be a positive, finite number of seconds, got {self.stall_timeout:g}")
        check_target_file_mb(self.target_file_mb)
        if self.value_schema:
            check_ddl_schema(self.value_schema)  # Spark would refuse it only after the batch was planned

    @property
    def registry_parts(self) -> dict[str, str]:
        """The parts (``value``, ``key``) read in a registry format, and their formats."""
        found = {"value": self.value_format, "key": self.key_format}
        return {part: fmt for part, fmt in found.items() if fmt in REGISTRY_FORMATS}

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
        parser.add_argument(
            "--reader", choices=READERS, default=DEFAULT_READER, help=f"Kafka reader (default {DEFAULT_READER})"
        )
        parser.add_argument(
            "--value-format",
            choices=VALUE_FORMATS,
            default="bytes",
            help="bytes (default), string, json (with --value-schema), or avro, protobuf, json-schema from a "
            "schema registry (typed columns; --schema-registry-url)",
        )
        parser.add_argument("--value-schema", help="DDL schema of the JSON values, for --value-format json")
        parser.add_argument(
            "--key-format",
            choices=KEY_FORMATS,
            default="bytes",
            help="bytes (default), string (adds key_string), or avro, protobuf, json-schema from a schema "
            "registry (key becomes the decoded key; --schema-registry-url)",
        )
        parser.add_argument(
            "--keep-raw-value",
            action="store_true",
            help="registry formats: keep the value's bytes beside its typed columns",
        )
        parser.add_argument(
            "--on-bad-record",
            choices=ON_BAD_RECORD,
            default="fail",
            help="registry formats: a value that cannot be decoded fails the batch (fail, default) or is written "
            "whole to the batch's dead letters (dead-letter)",
        )
        parser.add_argument(
            "--max-offsets-per-task",
            type=int,
            default=DEFAULT_MAX_OFFSETS_PER_TASK,
            help=f"split ranges into Spark tasks of at most this many offsets (default {DEFAULT_MAX_OFFSETS_PER_TASK})",
        )
        parser.add_argument(
            "--max-tasks",
            type=int,
            help="read with at most this many Spark tasks: partitions are packed into them by their offsets, a "
            "large one split over several (default: as many as the files' target size asks)",
        )
        parser.add_argument(
            "--stall-timeout",
            type=float,
            default=DEFAULT_STALL_TIMEOUT,
            help=f"seconds a read may make no progress before it fails (default {DEFAULT_STALL_TIMEOUT:g})",
        )
        parser.add_argument(
            "--target-file-mb",
            type=int,
            default=DEFAULT_TARGET_FILE_MB,
            help=f"write files of about this size; small batches write one file per partition-date "
            f"(default {DEFAULT_TARGET_FILE_MB})",
        )

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> WriteOptions:
        return cls(
            args.reader,
            args.value_format,
            args.value_schema,
            args.max_offsets_per_task,
            args.stall_timeout,
            args.target_file_mb,
            args.keep_raw_value,
            args.on_bad_record,
            args.key_format,
            args.max_tasks,
        )

    def to_args(self) -> list[str]:
        """The flags :meth:`add_arguments` reads back (for spark-submit's application arguments)."""
        args = ["--reader", self.reader, "--value-format", self.value_format, "--key-format", self.key_format]
        if self.value_schema:
            args += ["--value-schema", self.value_schema]
        args += ["--max-offsets-per-task", str(self.max_offsets_per_task), "--stall-timeout", str(self.stall_timeout)]
        args += ["--target-file-mb", str(self.target_file_mb)]
        args += ["--on-bad-record", self.on_bad_record]
        args += ["--max-tasks", str(self.max_tasks)] if self.max_tasks is not None else []
        return args + (["--keep-raw-value"] if self.keep_raw_value else [])

    @property
    def target_bytes(self) -> int:
        return self.target_file_mb * MB


def check_table_per_topic(options: WriteOptions) -> None:
    """A table per topic is read and written in one pass by the python reader: the options that
    write one output (Spark's JSON parsing, Spark's Kafka source) are refused in one line."""
    if options.reader not in PYTHON_WORKER_READERS or options.value_format == "json":
        raise ConfigError(
            f"a table per topic is read and written in one pass by {Setting('reader', 'python')}; "
            f"{Setting('value_format', 'json')} and {Setting('reader', 'jvm')} write one output",
            setting=Setting("value_format"),
        )
