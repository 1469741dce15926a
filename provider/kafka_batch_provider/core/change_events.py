"""A batch's records as :class:`~kafka_batch_provider.core.merging.Change` s, and the row type they
make. Pure: an Arrow table of the batch's records in, changes out.

Where a record's fields come from:

* the registry formats (``avro``, ``protobuf``, ``json-schema``): the typed columns the Spark
  tasks decoded (a Debezium envelope's ``before``, ``after``, ``source`` and ``op`` columns);
  the key is the decoded ``key`` struct;
* ``json`` with a DDL: the ``value_json`` struct;
* ``bytes`` or ``string``: the value is Kafka Connect's ``JsonConverter`` output, typed by its
  embedded schema (:mod:`kafka_batch_provider.decoding.connect_json`), or plain JSON objects
  without one; the key likewise.

A record that cannot be a change (no key, a value that is not a Debezium envelope, a key column
the value lacks) fails the batch in one line naming its topic, partition and offset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kafka_batch_provider.core.merging import (
    CHANGES,
    DELETE_OP,
    MERGE_KEY,
    ON_TRUNCATE_SETTING,
    TRUNCATE_OP,
    UPSERT_OP,
    Change,
    MergeSpec,
    debezium_order,
    upsert_order,
)
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.decoding import connect_json
from kafka_batch_provider.errors import ConfigError, SchemaError

#: The Kafka columns a table row never takes (the Kafka timestamp is a value column only in append mode).
KAFKA_COLUMNS = (
    "key",
    "key_string",
    "value",
    "value_string",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestampType",
    "headers",
)
JSON_FORMATS = ("bytes", "string")
DEBEZIUM_OPS = {"c": UPSERT_OP, "r": UPSERT_OP, "u": UPSERT_OP, "d": DELETE_OP, "t": TRUNCATE_OP}


@dataclass
class Changes:
    """A batch's changes in offset order, with the key's columns and the rows' type."""

    changes: list[Change] = field(default_factory=list)
    key_columns: tuple[str, ...] = ()
    #: every row column seen in the batch, in the order first seen, with its type
    row_fields: dict[str, pa.Field] = field(default_factory=dict)
    #: Debezium tombstones (the null value after a delete) and messages with nothing to apply
    skipped: int = 0

    def add_fields(self, fields: list[pa.Field]) -> None:
        for f in fields:
            self.row_fields.setdefault(f.name, f.with_nullable(True))

    def check_key(self) -> None:
        missing = [k for k in self.key_columns if k not in self.row_fields]
        if missing and self.changes:
            raise ConfigError(
                f"key column {missing[0]!r} is not in the value's columns ({', '.join(self.row_fields) or 'none'}): "
                f"name value columns with {MERGE_KEY}",
                setting=MERGE_KEY,
            )


def changes_of(batch: pa.Table, spec: MergeSpec, value_format: str) -> Changes:
    """The batch's records as changes (see the module's docstring for where fields come from)."""
    rows = batch.to_pylist()
    found = Changes()
    if spec.mode == CHANGES:
        for record in rows:
            debezium_change(record, batch.schema, spec, value_format, found)
    else:
        for record in rows:
            upsert_change(record, batch.schema, spec, value_format, found)
    found.check_key()
    return found


def where_of(record: Mapping[str, Any]) -> str:
    return f"{record.get('topic')}/{record.get('partition')}@{record.get('offset')}"


# -- Debezium -------------------------------------------------------------------------------------


def debezium_change(
    record: Mapping[str, Any], schema: pa.Schema, spec: MergeSpec, value_format: str, found: Changes
) -> None:
    where = where_of(record)
    if value_format in JSON_FORMATS:
        value_schema, envelope = connect_json.parse(record.get("value"), f"{where}: the value")
        if envelope is None:
            found.skipped += 1  # the tombstone Debezium sends after a delete, for log compaction
            return
        if not is_envelope(envelope):
            raise SchemaError(f"{where}: the value is not a Debezium change event (it has no op and source)")
        after_schema = connect_json.struct_fields(value_schema, "after")
        before_schema = connect_json.struct_fields(value_schema, "before")
        after = connect_json.value_of(envelope.get("after"), after_schema)
        before = connect_json.value_of(envelope.get("before"), before_schema)
        if after_schema is not None:
            found.add_fields(list(connect_json.arrow_type(after_schema, where)))
        elif isinstance(envelope.get("after"), Mapping):
            found.add_fields(list(pa.Table.from_pylist([envelope["after"]]).schema))
        key_doc = connect_json.parse(record.get("key"), f"{where}: the key")
        key = connect_json.value_of(key_doc[1], key_doc[0])
    else:
        if "op" not in schema.names or "source" not in schema.names:
            raise SchemaError(f"{where}: the value is not a Debezium change event (it has no op and source)")
        envelope = record
        if record.get("op") is None and record.get("source") is None:
            found.skipped += 1  # a tombstone: every value column is null
            return
        after, before = record.get("after"), record.get("before")
        if "after" in schema.names:
            found.add_fields(list(schema.field("after").type))
        key = record.get("key")
    op = DEBEZIUM_OPS.get(str(envelope.get("op")))
    if op is None:
        raise SchemaError(f"{where}: unknown Debezium op {envelope.get('op')!r} (expected c, r, u, d or t)")
    order = debezium_order(envelope.get("source"), str(envelope.get("op")), int(record["offset"]))
    if op == TRUNCATE_OP:
        if spec.on_truncate != "apply":
            raise ConfigError(
                f"{where}: a truncate event would empty the table; to apply it, run with "
                f"{Setting(ON_TRUNCATE_SETTING.name, 'apply')} (nothing was written)",
                setting=ON_TRUNCATE_SETTING,
            )
        found.changes.append(Change((), TRUNCATE_OP, order, None, where))
        return
    row = after if op == UPSERT_OP else before
    if op == UPSERT_OP and not isinstance(after, Mapping):
        raise SchemaError(f"{where}: a Debezium {envelope.get('op')!r} event without an after row")
    names, values = key_of(key, row, spec, where)
    if not found.key_columns:
        found.key_columns = names
    elif names != found.key_columns:
        raise ConfigError(f"{where}: the key's columns {list(names)} differ from the batch's {list(found.key_columns)}")
    found.changes.append(Change(values, op, order, dict(after) if op == UPSERT_OP else None, where))


def json_key(raw: bytes | None) -> tuple[Mapping[str, Any] | None, Any]:
    """A key beside Connect JSON values: Connect JSON too, or (a ``StringConverter`` key) its bytes."""
    try:
        return connect_json.parse(raw, "the key")
    except SchemaError:
        return None, raw


def is_envelope(document: Any) -> bool:
    return isinstance(document, Mapping) and "op" in document and "source" in document


# -- upserts --------------------------------------------------------------------------------------


def upsert_change(
    record: Mapping[str, Any], schema: pa.Schema, spec: MergeSpec, value_format: str, found: Changes
) -> None:
    where = where_of(record)
    if value_format in JSON_FORMATS:
        value_schema, payload = connect_json.parse(record.get("value"), f"{where}: the value")
        if payload is not None and not isinstance(payload, Mapping):
            raise SchemaError(f"{where}: the value is JSON but not an object: it has no columns to upsert")
        row = connect_json.value_of(payload, value_schema)
        if value_schema is not None:
            found.add_fields(list(connect_json.arrow_type(value_schema, where)))
        elif payload is not None:
            found.add_fields(list(pa.Table.from_pylist([payload]).schema))
        key_doc = json_key(record.get("key"))
        key = connect_json.value_of(key_doc[1], key_doc[0])
        key_fields = (
            list(connect_json.arrow_type(key_doc[0], where))
            if key_doc[0] is not None and key_doc[0].get("type") == "struct"
            else None
        )
    else:
        columns = [n for n in schema.names if n not in KAFKA_COLUMNS]
        if value_format == "json":
            columns = [n for n in columns if n != "value_json"]
            payload = record.get("value_json")
            row = dict(payload) if payload is not None else None
            found.add_fields(list(schema.field("value_json").type) if "value_json" in schema.names else [])
        else:
            tombstone = (
                record.get("value") is None if "value" in schema.names else all(record.get(n) is None for n in columns)
            )
            row = None if tombstone else {n: record.get(n) for n in columns}
            found.add_fields([schema.field(n) for n in columns])
        key = record.get("key")
        key_type = schema.field("key").type if "key" in schema.names else pa.binary()
        key_fields = list(key_type) if pa.types.is_struct(key_type) else [pa.field("key", key_type)]
    names, values = key_of(key, row, spec, where)
    if not spec.merge_key and key_fields is not None:
        found.add_fields(key_fields)  # the Kafka key's columns are row columns
    elif not spec.merge_key and not isinstance(key, Mapping):
        found.add_fields([pa.field("key", pa.binary() if isinstance(key, bytes) else pa.string())])
    if not found.key_columns:
        found.key_columns = names
    order = upsert_order(row, spec.order_by, int(record["offset"]), where, record.get("timestamp"))
    if row is None:
        found.changes.append(Change(values, DELETE_OP, order, None, where))
        return
    full = {**dict(zip(names, values)), **row} if not spec.merge_key else dict(row)
    found.changes.append(Change(values, UPSERT_OP, order, full, where))


# -- keys -----------------------------------------------------------------------------------------


def key_of(
    key: Any, row: Mapping[str, Any] | None, spec: MergeSpec, where: str
) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """The key's column names and values: ``--merge-key`` columns of the row, else the Kafka key."""
    if spec.merge_key:
        if row is None:
            raise ConfigError(
                f"{where}: a tombstone (null value) has no columns, so {MERGE_KEY} cannot name its row; "
                "key the topic's records instead (leave merge_key unset)",
                setting=MERGE_KEY,
            )
        missing = [k for k in spec.merge_key if k not in row]
        if missing:
            raise ConfigError(
                f"{where}: key column {missing[0]!r} is not in the value's columns ({', '.join(row) or 'none'})",
                setting=MERGE_KEY,
            )
        values = tuple(row[k] for k in spec.merge_key)
        names = spec.merge_key
    elif isinstance(key, Mapping):
        names, values = tuple(key), tuple(key.values())
    else:
        names, values = ("key",), (key,)
    if not names or any(v is None for v in values):
        raise ConfigError(f"{where}: the record has no key (a null key or key column): it cannot name a row")
    return tuple(names), values
