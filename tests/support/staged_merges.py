"""Merged batches through a table sink without Spark or Kafka: the records staged as the Spark
tasks stage them (one Parquet file of Kafka columns in ``data/<batch>/<attempt>/``), then the
log entry the write step appends, so the sink's own merge (its schema rules, ordering, deletes
and key changes) commits them.

The subject of these tests is the merge, not the read: the Spark side of a merged batch is the
appended batch's (tests/integration/test_merged_tables.py runs whole batches through Spark).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kafka_batch_provider.core.arrow_upserts import TYPED_FORMATS
from kafka_batch_provider.core.merging import ORDER_COLUMN, MergeSpec
from kafka_batch_provider.decoding.connect_json import arrow_type, is_enveloped
from kafka_batch_provider.output.tables import KAFKA_SCHEMA
from tests.integration.helpers import TableOutput


@dataclass
class Staged:
    """A Kafka record as the Spark tasks stage it (``value`` ``None``: a tombstone)."""

    key: Any
    value: Any
    partition: int = 0
    headers: list[tuple[str, Any]] | None = None

    def as_bytes(self, part: Any) -> bytes | None:
        if part is None or isinstance(part, bytes):
            return part
        return json.dumps(part, separators=(",", ":")).encode()  # compact, as Kafka Connect writes JSON


@dataclass
class StagedTopic:
    """A topic's batches committed one after another into ``output`` (a ``TableOutput``)."""

    output: Any
    topic: str = "t"
    topic_id: str = "AAAAAAAAAAAAAAAAAAAAAQ"
    value_format: str = "bytes"
    #: (typed staging) the key's struct type, as the registry's key schema gives it to the Spark tasks
    key_type: pa.DataType | None = None
    ends: dict[int, int] = field(default_factory=dict)
    batches: list[dict[str, Any]] = field(default_factory=list)

    def commit(self, records: Sequence[Staged]) -> dict[str, Any]:
        """Stage ``records`` as the next batch and append its entry (the sink merges it)."""
        store = self.output.store()
        seq = len(self.batches) + 1
        batch_id = f"b-{seq}"
        folder = f"data/{batch_id}/a{seq}"
        partitions = sorted({r.partition for r in records} | set(self.ends))
        starts = {p: self.ends.get(p, 0) for p in partitions}
        offsets, next_offset = [], dict(starts)
        for record in records:
            offsets.append(next_offset[record.partition])
            next_offset[record.partition] += 1
        columns = {f.name: pa.nulls(len(records), f.type) for f in KAFKA_SCHEMA}
        columns["key"] = pa.array([r.as_bytes(r.key) for r in records], pa.binary())
        columns["value"] = pa.array([r.as_bytes(r.value) for r in records], pa.binary())
        columns["topic"] = pa.array([self.topic] * len(records))
        columns["partition"] = pa.array([r.partition for r in records], pa.int32())
        columns["offset"] = pa.array(offsets, pa.int64())
        columns["headers"] = pa.array(
            [
                None if r.headers is None else [{"key": k, "value": r.as_bytes(v)} for k, v in r.headers]
                for r in records
            ],
            KAFKA_SCHEMA.field("headers").type,
        )
        staged = pa.table(columns, schema=KAFKA_SCHEMA)
        if self.value_format in TYPED_FORMATS:  # as the Spark tasks decode a registry format: typed columns
            staged = typed_columns(staged.drop_columns(["key", "value"]), records, self.key_type)
        with store.data.write_stream(f"{folder}/part-0.parquet") as f:
            pq.write_table(staged, f)
        size = store.data.file_sizes(folder)["part-0.parquet"]
        previous = self.batches[-1] if self.batches else None
        manifest = {
            "format_version": 1,
            "seq": seq,
            "batch_id": batch_id,
            "previous": None if previous is None else {"seq": previous["seq"], "batch_id": previous["batch_id"]},
            "mode": "incremental",
            "group_id": "g",
            "topic_ids": {self.topic: self.topic_id},
            "offsets": {f"{self.topic}:{p}": next_offset[p] for p in partitions},
            "ranges": [
                {
                    "topic": self.topic,
                    "partition": p,
                    "start": starts[p],
                    "end": next_offset[p],
                    "rows": next_offset[p] - starts[p],
                }
                for p in partitions
            ],  # fmt: skip
            "rows": len(records),
            "location": folder,
            "staging": folder,
            "files": [{"name": "part-0.parquet", "bytes": size, "rows": len(records)}],
            "options": {"value_format": self.value_format, "merge": self.output.merge.describe()},
        }
        assert store.log.append(manifest) is True, f"batch {seq} was not committed"
        self.ends = next_offset
        self.batches.append(manifest)
        return manifest

    def rows(self, key: str = "id") -> dict[Any, dict[str, Any]]:
        """The table's rows by ``key``, without the ordering column; a key twice fails."""
        found = self.output.read()
        if found is None and self.output.format == "postgres":
            return {}  # (a database table is created by the first batch with rows)
        assert found is not None, "the table does not exist"
        rows = found.drop_columns([ORDER_COLUMN]).to_pylist()
        by_key = {row[key]: row for row in rows}
        assert len(by_key) == len(rows), f"a key is in the table more than once: {sorted(r[key] for r in rows)}"
        return by_key

    def recreate(self, topic_id: str = "AAAAAAAAAAAAAAAAAAAAAg") -> None:
        """The topic deleted and created again: another id, offsets from 0."""
        self.topic_id, self.ends = topic_id, {}

    def schema(self) -> pa.Schema:
        found = self.output.read()
        assert found is not None, "the table does not exist"
        return found.schema


def connect_json(schema: Mapping[str, Any] | None, payload: Any) -> dict[str, Any]:
    """A value as Kafka Connect's JsonConverter writes it with ``schemas.enable=true``."""
    return {"schema": schema, "payload": payload}


def staged_topic(
    fmt: str,
    tmp_path: Any,
    merge: MergeSpec,
    value_format: str = "bytes",
    key_type: pa.DataType | None = None,
    database_url: str | None = None,
) -> StagedTopic:
    """A topic merged into a new local Delta table or Iceberg table (SQL catalog) under ``tmp_path``,
    or a new PostgreSQL or MariaDB table at ``database_url``; ``value_format`` avro: the records staged as typed
    columns (keys and values given as Connect JSON are staged as their payloads)."""
    if fmt in ("postgres", "mysql"):
        import uuid
        from urllib.parse import urlsplit

        schema = "public" if fmt == "postgres" else urlsplit(str(database_url)).path.strip("/")
        table = f"{schema}.t_{uuid.uuid4().hex[:10]}"
        output = TableOutput("", format=fmt, table=table, merge=merge, database_url=database_url)
    elif fmt == "delta":
        output = TableOutput(str(tmp_path / "table"), merge=merge)
    else:
        catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
        output = TableOutput("", format="iceberg", table="lake.t", catalog=catalog, merge=merge)
    return StagedTopic(output, value_format=value_format, key_type=key_type)


def typed_columns(kafka: pa.Table, records: Sequence[Staged], key_type: pa.DataType | None = None) -> pa.Table:
    """The Kafka columns with the records' key as a struct and their value's fields as columns (a
    tombstone: every field null), as the Spark tasks stage a registry format."""

    def payload(part: Any) -> Any:
        return part.get("payload") if is_enveloped(part) else part

    def widest(parts: list[Any]) -> pa.DataType | None:
        """The reader's type: the Arrow type of the records' widest Connect schema (a field some lack: null)."""
        schemas = [p["schema"] for p in parts if is_enveloped(p)]
        return arrow_type(max(schemas, key=lambda x: len(json.dumps(x)))) if schemas else None

    values = pa.array([payload(r.value) for r in records], widest([r.value for r in records]))
    keys = pa.array([payload(r.key) for r in records], widest([r.key for r in records]) or key_type)
    columns = {"key": keys}
    columns |= {f.name: pc.struct_field(values, [i]) for i, f in enumerate(values.type)}
    for name, column in columns.items():
        kafka = kafka.append_column(name, column)
    return kafka


def debezium(
    op: str, after: Mapping[str, Any] | None = None, before: Mapping[str, Any] | None = None, **source: Any
) -> dict[str, Any]:
    """A schemaless Debezium change event (``source``: connector, lsn, sequence, ...)."""
    return {"before": before, "after": after, "op": op, "source": {"connector": "postgresql", **source}}
