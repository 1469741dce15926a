"""A batch's records as :class:`~kafka_batch_provider.core.merging.Change` s, and the row type they
make. Pure: an Arrow table of the batch's records in, changes out.

Where a record's fields come from:

* the registry formats (``avro``, ``protobuf``, ``json-schema``): the typed columns the Spark
  tasks decoded (a Debezium envelope's ``before``, ``after``, ``source`` and ``op`` columns);
  the key is the decoded ``key`` struct;
* ``json`` with a DDL: the ``value_json`` struct (a Debezium envelope inside it too);
* ``bytes`` or ``string``: the value is Kafka Connect's ``JsonConverter`` output, typed by its
  embedded schema (:mod:`kafka_batch_provider.decoding.connect_json`), or a plain JSON object
  without one, whose column types are inferred from all of the batch's rows at once. The key
  likewise when it is Connect JSON or a JSON object; any other key (a ``StringConverter`` key, a
  number as text) is kept as its bytes.

The key's columns come from the key itself (its Connect schema, its struct), so a batch of
deletes alone knows them. A record that cannot be a change (no key, a value that is not a
Debezium envelope, a key column the value lacks, one key in two partitions) fails the batch in one
line naming its topic, partition and offset.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kafka_batch_provider.core.merge_schema import doubled_type
from kafka_batch_provider.core.merging import (
    CHANGES,
    DELETE_OP,
    MERGE_KEY,
    ON_TRUNCATE_SETTING,
    ORDER_BY,
    TRUNCATE_OP,
    UNKNOWN_ORIGIN,
    UPSERT_OP,
    Change,
    MergeSpec,
    debezium_order,
    ordered_by_offset,
    upsert_order,
)
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.decoding import connect_json
from kafka_batch_provider.errors import ConfigError, SchemaError

#: The Kafka columns a table row never takes.
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


def no_key(where: str) -> ConfigError:
    """A record without a key (Debezium sends a null Kafka key for a table without a primary key)."""
    return ConfigError(
        f"{where}: the record has no key (a null key or key column): it cannot name a row; for a source "
        f"table without a primary key, name the value columns that identify a row with {MERGE_KEY}",
        setting=MERGE_KEY,
    )


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
    #: rows (and keys) without a schema: their column types are inferred from all of them at once
    untyped: list[Mapping[str, Any]] = field(default_factory=list)
    #: the partition each key was seen in (a key in two partitions cannot be ordered by offsets)
    partitions: dict[tuple[Any, ...], tuple[int, str]] = field(default_factory=dict)
    #: the topics some of whose changes are ordered by their Kafka offsets (not a source position
    #: or an ``--order-by`` column)
    by_offset: set[str] = field(default_factory=set)

    def add_fields(self, fields: list[pa.Field]) -> None:
        """Columns with their types; a column known only as all-null takes the first real type."""
        for f in fields:
            known = self.row_fields.get(f.name)
            if known is None or (pa.types.is_null(known.type) and not pa.types.is_null(f.type)):
                self.row_fields[f.name] = f.with_nullable(True)

    def infer_untyped(self, where: str) -> None:
        """The types of schemaless rows, from all of them at once; their numbers are doubles
        (:mod:`kafka_batch_provider.core.merge_schema`)."""
        if not self.untyped:
            return
        try:
            inferred = pa.array(self.untyped)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise SchemaError(f"{where}: the JSON values' types disagree across the batch: {exc}") from None
        except OverflowError as exc:  # an integer beyond 64 bits
            raise beyond_a_double(where, exc) from None
        doubles = doubled_type(inferred.type)
        try:
            inferred.cast(doubles)
        except pa.ArrowInvalid as exc:  # an integer beyond 2**53
            raise beyond_a_double(where, exc) from None
        self.add_fields([f for f in doubles if not pa.types.is_null(f.type)])

    def set_key_columns(self, names: tuple[str, ...], where: str) -> None:
        if not self.key_columns:
            self.key_columns = names
        elif names != self.key_columns:
            raise ConfigError(
                f"{where}: the key's columns {list(names)} differ from the batch's {list(self.key_columns)}"
            )

    def note_partition(self, key: tuple[Any, ...], partition: int, where: str, spec: MergeSpec) -> None:
        """Offsets order a key's records only within one partition: a key ordered by offsets (an
        upsert without ``--order-by``, an event of a Debezium connector ordered by offsets) in two
        partitions of one batch is refused."""
        seen = self.partitions.setdefault(key, (partition, where))
        if seen[0] == partition:
            return
        clash = (
            f"{where}: key {list(key)} is also in partition {seen[0]} ({seen[1]}): "
            "offsets cannot order records of two partitions"
        )
        if spec.mode == CHANGES:
            raise ConfigError(
                f"{clash}; this connector's events are ordered by their offsets, so a key must stay in one "
                "partition (Kafka's default partitioner keeps it there: was the topic's partition count raised?)"
            )
        raise ConfigError(f"{clash}; name a timestamp column with {ORDER_BY}", setting=ORDER_BY)

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
    convert = debezium_change if spec.mode == CHANGES else upsert_change
    for record in rows:
        convert(record, batch.schema, spec, value_format, found)
    found.infer_untyped(where_of(rows[-1]) if rows else "the batch")
    found.check_key()
    return found


def beyond_a_double(where: str, exc: Exception) -> SchemaError:
    return SchemaError(
        f"{where}: a JSON number without a schema is held as a double, and a double cannot hold it "
        f"exactly ({str(exc).splitlines()[0]}): give the values a schema (Connect JSON with "
        "schemas.enable=true, or a registry format)"
    )


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
            after_type = connect_json.arrow_type(after_schema, where)
            if not pa.types.is_struct(after_type):
                raise SchemaError(
                    f"{where}: the Debezium event's after is {after_type}, not a row (the MongoDB connector sends "
                    "the document as JSON text): unwrap it first (Debezium's ExtractNewDocumentState transform)"
                )
            found.add_fields(list(after_type))
        elif isinstance(envelope.get("after"), Mapping):
            found.untyped.append(envelope["after"])
        key = json_key(record.get("key"), found, where)
    else:
        envelope, fields = typed_envelope(record, schema, value_format, where)
        if envelope is None:
            found.skipped += 1  # a tombstone: every value column is null
            return
        after, before = envelope.get("after"), envelope.get("before")
        found.add_fields(fields)
        key = typed_key(record, schema, found)
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
    if op == UPSERT_OP and not isinstance(after, Mapping):
        raise SchemaError(f"{where}: a Debezium {envelope.get('op')!r} event without an after row")
    names, values = key_of(key, after if op == UPSERT_OP else before, spec, where)
    found.set_key_columns(names, where)
    if ordered_by_offset(envelope.get("source")):
        found.note_partition(values, int(record.get("partition") or 0), where, spec)
        found.by_offset.add(str(record.get("topic")))
    moved_from = old_key(record.get("headers"), names) if op == UPSERT_OP else None
    if moved_from is None and envelope.get("op") == "c":
        # a create holds placeholders only after a key change: never the new key's values for them
        moved_from = UNKNOWN_ORIGIN
    found.changes.append(Change(values, op, order, dict(after) if op == UPSERT_OP else None, where, moved_from))


#: The header Debezium puts on a primary-key change's create event: the row's key before the change.
OLD_KEY_HEADER = "__debezium.oldkey"


def old_key(headers: Any, names: tuple[str, ...]) -> tuple[Any, ...] | None:
    """The key a moved row had (``names``' values), from its create event's ``__debezium.oldkey``
    header when the key converter wrote JSON (Connect JSON or a plain object); else ``None``."""
    raw = next((h.get("value") for h in headers or () if h.get("key") == OLD_KEY_HEADER), None)
    if raw is None:
        return None
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return None  # a registry format's bytes (not read here): the old key is unknown
    if connect_json.is_enveloped(document):
        document = connect_json.value_of(document["payload"], document["schema"])
    if isinstance(document, Mapping) and all(n in document for n in names):
        return tuple(document[n] for n in names)
    return None


def typed_envelope(
    record: Mapping[str, Any], schema: pa.Schema, value_format: str, where: str
) -> tuple[Mapping[str, Any] | None, list[pa.Field]]:
    """A decoded Debezium envelope (``None`` for a tombstone) and its ``after`` row's fields."""
    if value_format == "json":  # the envelope is the value_json struct
        if "value_json" not in schema.names:
            raise SchemaError(f"{where}: the value is not a Debezium change event (it has no op and source)")
        kind = schema.field("value_json").type
        if record.get("value") is None:
            return None, []
        envelope = record.get("value_json") or {}
        names = {f.name for f in kind}
    else:
        kind, envelope = None, record
        names = set(schema.names)
        if all(record.get(n) is None for n in ("op", "source", "after", "before")):
            return None, []
    if "op" not in names or "source" not in names:
        raise SchemaError(f"{where}: the value is not a Debezium change event (it has no op and source)")
    after_type = (
        (kind.field("after").type if kind is not None else schema.field("after").type) if "after" in names else None
    )
    return envelope, list(after_type) if after_type is not None and pa.types.is_struct(after_type) else []


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
            found.untyped.append(payload)
        key = json_key(record.get("key"), found, where, with_key_columns=not spec.merge_key)
    else:
        columns = [n for n in schema.names if n not in KAFKA_COLUMNS]
        if value_format == "json":
            payload = record.get("value_json")
            row = dict(payload) if payload is not None and record.get("value") is not None else None
            found.add_fields(list(schema.field("value_json").type) if "value_json" in schema.names else [])
        else:
            tombstone = (
                record.get("value") is None if "value" in schema.names else all(record.get(n) is None for n in columns)
            )
            row = None if tombstone else {n: record.get(n) for n in columns}
            found.add_fields([schema.field(n) for n in columns])
        key = typed_key(record, schema, found, with_key_columns=not spec.merge_key)
    names, values = key_of(key, row, spec, where)
    found.set_key_columns(names, where)
    if not spec.order_by:
        found.note_partition(values, int(record.get("partition") or 0), where, spec)
        found.by_offset.add(str(record.get("topic")))
    order = upsert_order(row, spec.order_by, int(record["offset"]), where, record.get("timestamp"))
    if row is None:
        found.changes.append(Change(values, DELETE_OP, order, None, where))
        return
    full = {**dict(zip(names, values)), **row} if not spec.merge_key else dict(row)
    found.changes.append(Change(values, UPSERT_OP, order, full, where))


# -- keys -----------------------------------------------------------------------------------------


def json_key(raw: bytes | None, found: Changes, where: str, with_key_columns: bool = True) -> Any:
    """A key beside Connect JSON values: Connect JSON (typed by its schema), a JSON object, or else
    (a ``StringConverter`` key, a number as text) its bytes; its columns join the row's."""
    if raw is None:
        return None
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        document = None
    if connect_json.is_enveloped(document):
        key_schema = document["schema"]
        key = connect_json.value_of(document["payload"], key_schema)
        if with_key_columns:
            kind = connect_json.arrow_type(key_schema, f"{where}: the key")
            found.add_fields(list(kind) if pa.types.is_struct(kind) else [pa.field("key", kind)])
        return key
    if isinstance(document, Mapping):
        if with_key_columns:
            found.untyped.append(document)
        return document
    if with_key_columns:
        found.add_fields([pa.field("key", pa.binary())])
    return raw


def typed_key(record: Mapping[str, Any], schema: pa.Schema, found: Changes, with_key_columns: bool = True) -> Any:
    """A decoded (registry) key, or the key's bytes; its columns join the row's."""
    kind = schema.field("key").type if "key" in schema.names else pa.binary()
    if with_key_columns:
        found.add_fields(list(kind) if pa.types.is_struct(kind) else [pa.field("key", kind)])
    return record.get("key")


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
        raise no_key(where)
    return tuple(names), values
