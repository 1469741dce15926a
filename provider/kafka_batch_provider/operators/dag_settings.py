"""What the shipped DAGs share: settings read from Airflow Variables at run time, with
environment defaults read when the file is parsed, and the ingestion's output built from them.

Nothing is looked up while a DAG file is parsed (the values are Jinja templates), so parsing
opens no connection.
"""

from __future__ import annotations

import os
from datetime import timedelta

from kafka_batch_provider.core.write_options import DEFAULT_READER, ON_BAD_RECORD, READERS
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.operators.output import BatchOutput
from kafka_batch_provider.output.kinds import kind_of, known_kind, named_by_path, named_by_table

#: The words a boolean setting takes (any letter case); anything else is refused, never read as false.
TRUE_WORDS = ("true", "1", "yes")
FALSE_WORDS = ("false", "0", "no")


def env_number(env: str, default: float, kind: type = float) -> float:
    """A number from the parse-time environment; one that is not refuses the DAG file in one line
    naming the variable and the form it takes."""
    text = os.environ.get(env)
    if text is None or text.strip() == "":
        return kind(default)
    try:
        value = kind(text.strip())
    except ValueError:
        value = None
    if value is None or value != value or value in (float("inf"), float("-inf")) or value < 0:
        form = "a whole number" if kind is int else "a number"
        raise ConfigError(f"{env} must be {form} (0 or more), got {text!r}")
    return value


def env_int(env: str, default: int) -> int:
    return int(env_number(env, default, int))


def env_bool(env: str, default: bool) -> bool:
    """A boolean from the parse-time environment: only the documented words (true/false, 1/0, yes/no)."""
    text = os.environ.get(env)
    if text is None or text.strip() == "":
        return default
    if text.strip().lower() in TRUE_WORDS:
        return True
    if text.strip().lower() in FALSE_WORDS:
        return False
    raise ConfigError(f"{env} must be one of {', '.join(TRUE_WORDS + FALSE_WORDS)}, got {text!r}")


def seconds(env: str, default: float) -> timedelta:
    return timedelta(seconds=env_number(env, default))


def lookup(variable: str, env: str, default: str) -> str:
    """A Jinja expression: the Airflow Variable at run time, else the parse-time environment default."""
    fallback = os.environ.get(env, default).replace("'", "\\'")
    return f"var.value.get('{variable}', '{fallback}')"


FORMAT = lookup("kafka_batch_format", "KAFKA_BATCH_FORMAT", "parquet")


def setting(variable: str, env: str, default: str, formats: tuple[str, ...] | None = None) -> str:
    """A Jinja template of :func:`lookup`; with ``formats``, empty unless the output format is one of them."""
    value = lookup(variable, env, default)
    if formats:  # e.g. the output path of a parquet/delta default must not reach an iceberg run
        value = f"({value} if {FORMAT} in {formats!r} else '')"
    return f"{{{{ {value} }}}}"


def required_output() -> tuple[str, str, str]:
    """The output every shipped DAG writes or follows, from the parse-time environment: its format
    (``KAFKA_BATCH_FORMAT``, default ``parquet``), its path or URI (``KAFKA_BATCH_OUTPUT``, parquet
    and delta) or its table (``KAFKA_BATCH_TABLE``, iceberg). There is no default location: a
    missing one refuses the DAG file in one line (a DAG that wrote to some local folder would
    plan from the group and commit it, taking its records from the real output).

    :returns: ``(format, path, table)``, the one not used empty.
    """
    output_format = os.environ.get("KAFKA_BATCH_FORMAT") or "parquet"
    kind = known_kind(output_format)
    if kind is not None and kind.by_table:
        table = os.environ.get("KAFKA_BATCH_TABLE", "").strip()
        if not table:
            raise ConfigError(
                f"KAFKA_BATCH_TABLE is not set: the shipped DAGs write the {output_format} table it names (NS.NAME)"
            )
        return output_format, "", table
    path = os.environ.get("KAFKA_BATCH_OUTPUT", "").strip()
    if not path:
        raise ConfigError(
            f"KAFKA_BATCH_OUTPUT is not set: the shipped DAGs write the {output_format} output it names (a path or "
            "URI, e.g. s3://lake/orders); there is no default location"
        )
    return output_format, path, ""


def ingest_output() -> BatchOutput:
    """The ingest DAG's output: :func:`required_output`; a run may name another through the Airflow
    Variables ``kafka_batch_format``, ``kafka_batch_output``, ``kafka_batch_table`` (tests and one-off
    runs: the lag-fired and downstream DAGs follow the environment only)."""
    output_format, path, table = required_output()
    return BatchOutput(
        output_format=setting("kafka_batch_format", "KAFKA_BATCH_FORMAT", output_format),
        output_path=setting("kafka_batch_output", "KAFKA_BATCH_OUTPUT", path, named_by_path()),
        table=setting("kafka_batch_table", "KAFKA_BATCH_TABLE", table, named_by_table()),
        partition_by=setting("kafka_batch_partition_by", "KAFKA_BATCH_PARTITION_BY", ""),
        storage_conn_id=os.environ.get("KAFKA_BATCH_STORAGE_CONN_ID") or None,
        catalog_conn_id=os.environ.get("KAFKA_BATCH_CATALOG_CONN_ID") or None,
        database_conn_id=os.environ.get("KAFKA_BATCH_DATABASE_CONN_ID") or None,
        **merge_settings(),
    )


def merge_settings() -> dict[str, str | None]:
    """How batches become rows (parse-time environment): ``KAFKA_BATCH_MODE`` (``append``,
    ``upsert``, ``changes``), ``KAFKA_BATCH_MERGE_KEY``, ``KAFKA_BATCH_ORDER_BY``,
    ``KAFKA_BATCH_CHANGE_FORMAT``, ``KAFKA_BATCH_ON_TRUNCATE``; unset: the table's own mode."""
    names = ("mode", "merge_key", "order_by", "change_format", "on_truncate")
    return {name: os.environ.get(f"KAFKA_BATCH_{name.upper()}") or None for name in names}


def value_settings() -> dict[str, object]:
    """How the values and keys are read (parse-time environment): the formats
    (``KAFKA_BATCH_VALUE_FORMAT``, ``KAFKA_BATCH_KEY_FORMAT``), and for a registry format the
    schema registry connection, the subjects, pinned versions, whether the bytes stay too and what
    an undecodable record does (``KAFKA_BATCH_ON_BAD_RECORD``: ``fail`` or ``dead-letter``), and the
    Spark task's reader (``KAFKA_BATCH_READER``: ``native``, ``python``, or ``jvm`` for Spark's own Kafka source)."""
    versions = {}
    for part in ("VALUE", "KEY"):
        version = os.environ.get(f"KAFKA_BATCH_{part}_SCHEMA_VERSION") or None
        if version is not None and not version.strip().isdigit():
            raise ConfigError(f"KAFKA_BATCH_{part}_SCHEMA_VERSION must be a version number, got {version!r}")
        versions[part] = int(version) if version is not None else None
    on_bad_record = os.environ.get("KAFKA_BATCH_ON_BAD_RECORD") or "fail"
    if on_bad_record not in ON_BAD_RECORD:
        raise ConfigError(f"KAFKA_BATCH_ON_BAD_RECORD must be one of {', '.join(ON_BAD_RECORD)}, got {on_bad_record!r}")
    reader = os.environ.get("KAFKA_BATCH_READER") or DEFAULT_READER
    if reader not in READERS:
        raise ConfigError(f"KAFKA_BATCH_READER must be one of {', '.join(READERS)}, got {reader!r}")
    return {
        "reader": reader,
        "value_format": os.environ.get("KAFKA_BATCH_VALUE_FORMAT", "bytes"),
        "value_subject": os.environ.get("KAFKA_BATCH_VALUE_SUBJECT") or None,
        "value_schema_version": versions["VALUE"],
        "key_format": os.environ.get("KAFKA_BATCH_KEY_FORMAT", "bytes"),
        "key_subject": os.environ.get("KAFKA_BATCH_KEY_SUBJECT") or None,
        "key_schema_version": versions["KEY"],
        "keep_raw_value": env_bool("KAFKA_BATCH_KEEP_RAW_VALUE", False),
        "schema_registry_conn_id": os.environ.get("KAFKA_BATCH_SCHEMA_REGISTRY_CONN_ID") or None,
        "on_bad_record": on_bad_record,
    }


#: What of :func:`value_settings` the plan task takes, and what the Spark task takes.
PLAN_VALUE_SETTINGS = (
    "value_format",
    "value_subject",
    "value_schema_version",
    "key_format",
    "key_subject",
    "key_schema_version",
    "schema_registry_conn_id",
)
WRITE_VALUE_SETTINGS = (
    "reader",
    "value_format",
    "key_format",
    "keep_raw_value",
    "schema_registry_conn_id",
    "on_bad_record",
)


def ingest_output_asset():
    """The ingest DAG's output as an asset, by the parse-time environment (:func:`static_output`,
    ``KAFKA_BATCH_CATALOG_NAME``): what a downstream DAG is scheduled on. A schedule is fixed when
    the DAG is parsed, so it cannot follow the Variables the ingest DAG reads at run time: set the
    environment to the same output."""
    from airflow.sdk import Asset

    from kafka_batch_provider.operators.assets import output_asset_uri

    output = static_output()
    described = {"format": output.output_format, "output": output.output_path, "table": output.table or None}
    if known_kind(output.output_format) and kind_of(output.output_format).uses_database:
        described["database"] = parse_time_database(output.database_conn_id)
    return Asset(uri=output_asset_uri(described, {"name": os.environ.get("KAFKA_BATCH_CATALOG_NAME") or None}))


def parse_time_database(conn_id: str | None) -> str:
    """A database output's server and database (``SCHEME://HOST:PORT/DB``, no credentials), from its
    connection when the DAG is parsed: a table's asset names them, and a schedule is fixed then."""
    from kafka_batch_provider.hooks.database import database_url_from_connection
    from kafka_batch_provider.output.formats import database_without_credentials

    if not conn_id:
        raise ConfigError(
            "a database output's asset names its server: set KAFKA_BATCH_DATABASE_CONN_ID to its connection"
        )
    return database_without_credentials(str(database_url_from_connection(conn_id)))


def static_output(output_path: str | None = None) -> BatchOutput:
    """The output by the parse-time environment alone (``KAFKA_BATCH_FORMAT``, ``KAFKA_BATCH_OUTPUT``
    unless ``output_path`` is given, ``KAFKA_BATCH_TABLE``, ``KAFKA_BATCH_PARTITION_BY``, the
    connection ids): for what is fixed when the DAG is parsed, such as a trigger's arguments."""
    output_format, path, table = (
        required_output()
        if not output_path
        else (
            os.environ.get("KAFKA_BATCH_FORMAT") or "parquet",
            output_path,
            "",
        )
    )
    return BatchOutput(
        output_format=output_format,
        output_path=path,
        table=table,
        partition_by=os.environ.get("KAFKA_BATCH_PARTITION_BY", ""),
        storage_conn_id=os.environ.get("KAFKA_BATCH_STORAGE_CONN_ID") or None,
        catalog_conn_id=os.environ.get("KAFKA_BATCH_CATALOG_CONN_ID") or None,
        database_conn_id=os.environ.get("KAFKA_BATCH_DATABASE_CONN_ID") or None,
    )
