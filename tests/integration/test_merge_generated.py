"""Generated change streams through Delta and Iceberg (issue 47): both tables equal a model of the
source database after every batch.

Hypothesis draws sequences of inserts, updates (some leaving a TOASTed column alone: Debezium's
placeholder), deletes with their tombstones, primary-key changes (a moved row's placeholder too),
truncates, an added column and redeliveries of events already sent, cut into batches at random.
The events are Debezium PostgreSQL events as Kafka Connect's JsonConverter writes them with
``schemas.enable=true`` or ``false`` (the columnar reader's input, core/arrow_changes.py; records with a
placeholder and their keys take the record rule), or as the Spark tasks stage a registry format's
decoded columns, staged and committed through each sink's own merge (tests/support/staged_merges.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_batch_provider.core.merging import UNAVAILABLE, MergeSpec
from kafka_batch_provider.output import merge_source
from tests.support.staged_merges import Staged, staged_topic

CHANGES = MergeSpec(mode="changes", change_format="debezium", on_truncate="apply")
KEYS = range(6)


def column(kind: str, name: str) -> dict[str, Any]:
    return {"type": kind, "optional": name != "id", "field": name}


def envelope_schema(extra: bool) -> dict[str, Any]:
    row = [column("int32", "id"), column("string", "name"), column("string", "doc"), column("int64", "n")]
    row += [column("int32", "extra")] if extra else []
    source = [column("string", "connector"), column("string", "snapshot"), column("string", "sequence"),
              column("int64", "lsn")]  # fmt: skip
    return {
        "type": "struct", "name": "db.public.t.Envelope",
        "fields": [
            {"type": "struct", "fields": row, "optional": True, "field": "before"},
            {"type": "struct", "fields": row, "optional": True, "field": "after"},
            {"type": "struct", "fields": source, "optional": False, "field": "source"},
            column("string", "op"),
        ],
    }  # fmt: skip


KEY_SCHEMA = {"type": "struct", "fields": [column("int32", "id")]}


@dataclass
class Source:
    """The source table (the model) and the events Debezium would send for its changes."""

    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    extra: bool = False
    #: Connect JSON with schemas (schemas.enable=true), or without
    schemas: bool = True
    lsn: int = 1000
    sent: list[Staged] = field(default_factory=list)
    pending: list[Staged] = field(default_factory=list)

    def event(self, op: str, key: int, after: dict | None, moved_from: int | None = None) -> None:
        self.lsn += 10
        row_fields = ["id", "name", "doc", "n"] + (["extra"] if self.extra else [])
        after = None if after is None else {f: after.get(f) for f in row_fields}
        before = {f: (key if f == "id" else None) for f in row_fields} if op == "d" else None
        source = {"connector": "postgresql", "snapshot": "false", "sequence": json.dumps([str(self.lsn)] * 2),
                  "lsn": self.lsn}  # fmt: skip
        value = self.json(envelope_schema(self.extra), {"before": before, "after": after, "source": source, "op": op})
        headers = None
        if moved_from is not None:
            headers = [("__debezium.oldkey", self.json(KEY_SCHEMA, {"id": moved_from}))]
        key_json = None if op == "t" else self.json(KEY_SCHEMA, {"id": key})  # (a truncate has no key)
        staged = Staged(key_json, value, headers=headers)
        self.pending.append(staged)
        if op == "d":  # its tombstone
            self.pending.append(Staged(staged.key, None))

    def json(self, schema: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
        return {"schema": schema, "payload": payload} if self.schemas else payload

    def apply(self, step: tuple) -> None:
        kind = step[0]
        if kind == "upsert":
            _, key, toast, n = step
            if key in self.rows:
                row = {**self.rows[key], "n": n, "name": f"n{n}"}
                self.rows[key] = row
                self.event("u", key, {**row, "doc": UNAVAILABLE} if toast else row)
            else:
                row = {"id": key, "name": f"n{n}", "doc": f"doc-{key}-{n}" * 20, "n": n}
                row |= {"extra": n % 7} if self.extra else {}
                self.rows[key] = row
                self.event("c", key, row)
        elif kind == "delete" and step[1] in self.rows:
            del self.rows[step[1]]
            self.event("d", step[1], None)
        elif kind == "move" and step[1] in self.rows and step[2] not in self.rows:
            _, old, new, toast = step
            row = {**self.rows.pop(old), "id": new}
            self.rows[new] = row
            self.event("d", old, None)
            self.event("c", new, {**row, "doc": UNAVAILABLE} if toast else row, moved_from=old)
        elif kind == "truncate":
            self.rows.clear()
            self.event("t", 0, None)
        elif kind == "add_column" and not self.extra:
            self.extra = True
            self.rows = {k: {**r, "extra": None} for k, r in self.rows.items()}
        elif kind == "redeliver" and self.sent:  # a connector restarted from an older offset: its tail again
            self.pending += self.sent[-(step[1] % 8 + 1) :]

    def batch(self) -> list[Staged]:
        found, self.pending = self.pending, []
        self.sent += [s for s in found if s.value is not None and s.key is not None]  # (no tombstone, no truncate)
        return found


UPSERT = st.tuples(st.just("upsert"), st.sampled_from(KEYS), st.booleans(), st.integers(0, 999))
MOVE = st.tuples(st.just("move"), st.sampled_from(KEYS), st.sampled_from(KEYS), st.booleans())
DELETE = st.tuples(st.just("delete"), st.sampled_from(KEYS))
BATCH = st.tuples(st.just("batch"))
KINDS = {
    "upsert": UPSERT, "move": MOVE, "delete": DELETE, "batch": BATCH,
    "redeliver": st.tuples(st.just("redeliver"), st.integers(0, 1000)),
    "truncate": st.tuples(st.just("truncate")), "add_column": st.tuples(st.just("add_column")),
}  # fmt: skip
# mostly row changes, a batch boundary now and then, rarely a truncate or a new column
STEPS = st.sampled_from(["upsert"] * 6 + ["move"] * 2 + ["delete"] * 2 + ["batch"] * 2 + ["redeliver"] * 2
                        + ["truncate", "add_column"]).flatmap(KINDS.__getitem__)  # fmt: skip


# Connect JSON with and without schemas, or typed columns (a registry format), into Delta; into
# Iceberg (and PostgreSQL below) the typed columns: the decoding is every format's, the merge each
# one's own (the suite's time: Iceberg's Connect JSON variant took 31 s of a worker)
@pytest.mark.parametrize(
    "fmt, value_format", [("delta", "bytes"), ("delta", "schemaless"), ("delta", "avro"), ("iceberg", "avro")]
)
@settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEPS, min_size=20, max_size=80))
def test_generated_change_streams_leave_each_table_equal_to_the_source(
    fmt, value_format, steps, tmp_path_factory, monkeypatch
):
    monkeypatch.setattr(merge_source, "CHUNK_RECORDS", 3)  # several chunks a batch: unions, the read-ahead
    key_type = pa.struct([("id", pa.int32())])
    staged_as = "bytes" if value_format == "schemaless" else value_format
    topic = staged_topic(fmt, tmp_path_factory.mktemp(fmt), CHANGES, staged_as, key_type)
    replay(steps, topic, Source(schemas=value_format != "schemaless"), fmt)


def replay(steps: list, topic, source: Source, label: str) -> None:
    """``steps`` applied to ``source``, each batch committed to ``topic``'s table, which must equal
    the source after every batch."""
    for step in [*steps, ("batch",)]:
        if step[0] != "batch":
            source.apply(step)
            continue
        events = source.batch()
        if not events:
            continue
        topic.commit(events)
        found = {k: {c: r.get(c) for c in source_columns(source)} for k, r in topic.rows("id").items()}
        expected = {k: {c: r.get(c) for c in source_columns(source)} for k, r in source.rows.items()}
        assert found == expected, (
            f"{label} after {len(topic.batches)} batch(es) of {steps}: expected {expected}, found {found}"
        )


def source_columns(source: Source) -> list[str]:
    return ["id", "name", "doc", "n"] + (["extra"] if source.extra else [])


# The same engine merges into a database table (issue 50): the same streams, the same model.
# Connect JSON and typed columns into PostgreSQL, Connect JSON into MariaDB (each database's merge
# statements are its own; the decodings are every output's, schemaless JSON's is run into Delta
# above). 15 examples each: the suite's time.
@pytest.mark.parametrize("fmt, value_format", [("postgres", "bytes"), ("postgres", "avro"), ("mysql", "bytes")])
@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEPS, min_size=20, max_size=80))
def test_generated_change_streams_leave_a_database_table_equal_to_the_source(fmt, value_format, steps, request):
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(merge_source, "CHUNK_RECORDS", 3)
        database = request.getfixturevalue("postgres_database" if fmt == "postgres" else "mariadb_database")
        key_type = pa.struct([("id", pa.int32())])
        staged_as = "bytes" if value_format == "schemaless" else value_format
        topic = staged_topic(fmt, None, CHANGES, staged_as, key_type, database_url=database.url)
        replay(steps, topic, Source(schemas=value_format != "schemaless"), fmt)
