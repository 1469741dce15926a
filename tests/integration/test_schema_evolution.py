"""Schema evolution, generated: random chains of changes a registry accepts, written batch after
batch into the Parquet layout, a Delta table and an Iceberg table.

For each registry format and compatibility level, a chain starts from a drawn model
(:mod:`tests.support.evolution`) and tries changes (fields added at the top or nested, optional
ones removed, required ones made optional, enum symbols added, numbers promoted); the embedded
registry, under the level, keeps the versions it accepts. After each accepted version, records
of it (and, where the level lets the new schema read the old one, late records of the version
before) go to Kafka, and one batch per output is planned, written by Spark and committed. Each
batch either

* lands, with its output still readable by its readers (the format's own reader, DuckDB, and
  ``read_batch`` for the batch) and every value as produced, read with the batch's reader schema
  (a field the reader does not have is not a column of its rows; one the writer did not have is
  null); or
* is refused in one line naming subject, version and field, terminal (a retry is refused the
  same way), with nothing changed: the output's log, the table's version and the group's offsets
  as they were. That output's chain ends there (its plan stays pending, as a user would find it).

What each change does in each format is :func:`outcome`; the evolution table of docs/formats.md says the same.
A fixed seed per chain runs in ``make test``; ``KAFKA_BATCH_EVOLUTION_SEEDS=N`` runs N seeds per
chain (the longer run before a release).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafka_batch_provider.core.offsets import TopicPartition
from kafka_batch_provider.core.planning import PlanPolicy
from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.errors import KafkaBatchError
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.output.batch_reader import read_batch
from kafka_batch_provider.registry.reader_schema import ReaderSchemaRequest
from kafka_batch_provider.registry.settings import RegistrySettings
from kafka_batch_provider.spark.ingest import stage_with
from kafka_batch_provider.steps.commit import commit_batch
from kafka_batch_provider.steps.plan import plan_batch
from kafka_batch_provider.steps.write import write_batch
from kafka_batch_provider.testing.producers import Record, produce
from tests.integration.helpers import Output, TableOutput, duckdb_connection
from tests.support import evolution
from tests.support.evolution import Model
from tests.support.generated_tally import EVOLUTION, Evolution
from tests.unit.decoding.test_protobuf_decoder import message_class

pytestmark = pytest.mark.integration

SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-schema": "JSON"}
LEVELS = ("BACKWARD", "FORWARD", "FULL")
FORMATS = ("parquet", "delta", "iceberg")
#: accepted versions after the first, per chain, and attempts to find them
CHANGES_PER_CHAIN = 3
ATTEMPTS = 10
SEEDS = int(os.environ.get("KAFKA_BATCH_EVOLUTION_SEEDS", "1"))


def outcome(fmt: str, before: Model, after: Model) -> str:
    """What a batch read with ``after`` does to an output last written with ``before``: ``lands``,
    or ``refused``. A promoted number (int to long, float to double) is refused by Delta (a
    column keeps its type: delta-rs cannot widen one); Iceberg widens the column (its type
    promotions); the Parquet layout keeps each batch's files as they are, and its readers widen them."""
    return "refused" if fmt == "delta" and evolution.promoted(before, after) else "lands"


@dataclass
class Version:
    model: Model
    schema_id: int
    number: int


@dataclass
class Landed:
    """What an output holds: every record's expected row, by id."""

    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    batches: int = 0
    written_with: Model | None = None
    stopped: str | None = None


def new_output(fmt: str, tmp_path, name: str) -> Output:
    if fmt == "parquet":
        return Output(str(tmp_path / f"{name}-lake"))
    if fmt == "delta":
        return TableOutput(str(tmp_path / f"{name}-delta"))
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/{name}.db", "warehouse": f"file://{tmp_path}/{name}-wh"}
    return TableOutput("", format="iceberg", table=f"lake.{name.replace('-', '_')}", catalog=catalog)


def serialized(url: str, value_format: str, topic: str, version: Version, records: list[dict]) -> list[bytes]:
    """The records as the format's own serializer writes them with ``version``'s registered id (a
    client of its own: confluent-kafka's cache would hand the Protobuf serializer the text it registered,
    where it asks for the serialized form)."""
    client = SchemaRegistryClient({"url": url})
    conf = {"auto.register.schemas": False, "use.schema.id": version.schema_id}
    text = evolution.rendered(value_format, version.model)
    context = SerializationContext(topic, MessageField.VALUE)
    if value_format == "avro":
        serialize = AvroSerializer(client, text, conf=conf)
        return [serialize(r, context) for r in records]
    if value_format == "json-schema":
        serialize = JSONSerializer(text, client, conf=conf)
        return [serialize(evolution.producer_value(value_format, r), context) for r in records]
    cls = message_class(text, f"{evolution.NAMESPACE}.Order")
    serialize = ProtobufSerializer(cls, client, {**conf, "use.deprecated.format": False})
    return [serialize(cls(**without_nulls(r)), context) for r in records]


def without_nulls(record: dict[str, Any]) -> dict[str, Any]:
    return {k: without_nulls(v) if isinstance(v, dict) else v for k, v in record.items() if v is not None}


def register(client, subject: str, value_format: str, model: Model, latest: Version | None) -> Version | None:
    """Register ``model``; ``None`` when the registry refuses it (incompatible) or it is no new version."""
    schema = Schema(evolution.rendered(value_format, model), SCHEMA_TYPES[value_format])
    try:
        schema_id = client.register_schema(subject, schema)
    except SchemaRegistryError as exc:
        assert exc.http_status_code == 409, f"the registry answered {exc.http_status_code}: {exc}"
        return None
    # (not get_latest_version: the client caches a subject's latest version)
    number = client.lookup_schema(subject, schema).version
    if latest is not None and number == latest.number:
        return None  # the same schema in this format (a JSON integer stays an integer)
    return Version(model, schema_id, number)


def ingest(spark, kafka_config, output: Output, group: str, topic: str, registry: RegistrySettings, fmt: str):
    kafka = KafkaOffsets(kafka_config, timeout=10)
    store = output.store()
    request = ReaderSchemaRequest(fmt, registry)
    plan = plan_batch(kafka, store, group, [topic], PlanPolicy(), reader_schema=request).plan
    entry = write_batch(plan, store, kafka_config, stage_with(spark, registry), WriteOptions(value_format=fmt))
    commit_batch(kafka, store, plan)
    return entry


def snapshot(output: Output, kafka_config, group: str, topic: str) -> dict[str, Any]:
    """What a refused batch must leave as it was: the log's tail, the table's version, the group."""
    store = output.store()
    table = store.sink.table() if isinstance(output, TableOutput) else None
    version = None
    if table is not None:
        version = table.version() if output.format == "delta" else table.metadata.current_snapshot_id
    committed = KafkaOffsets(kafka_config).committed_offsets(group, [TopicPartition(topic, 0)])
    return {"tail": store.log.tail(), "table_version": version, "committed": dict(committed)}


def readers(output: Output, value_columns: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The whole output as each of its readers sees it (the value columns and ``id``)."""
    columns = ", ".join(f'"{c}"' for c in value_columns)
    con = duckdb_connection()
    if isinstance(output, TableOutput) and output.format == "delta":
        own = output.read().to_pylist()
        query = f"select {columns} from delta_scan('{output.location.uri}')"
    elif isinstance(output, TableOutput):
        own = output.read().to_pylist()
        metadata = output.store().sink.table().metadata_location.removeprefix("file://")
        query = f"select {columns} from iceberg_scan('{metadata}')"
    else:
        own = None
        query = f"select {columns} from read_parquet('{output.uri}/batch_id=*/*.parquet', union_by_name=true)"
    found = {"DuckDB": con.sql(query).fetch_arrow_table().to_pylist()}
    if own is not None:
        found["its own reader"] = own
    return {reader: [values_only(row, value_columns) for row in rows] for reader, rows in found.items()}


def values_only(row: dict[str, Any], value_columns: list[str]) -> dict[str, Any]:
    """A row's value columns (the Kafka ones beside them are not the evolution's)."""
    return {k: v for k, v in row.items() if k in value_columns}


def differences(found: Any, expected: Any, path: str) -> list[str]:
    """Where ``found`` (a row as read) differs from ``expected``; a column or nested field the
    expectation does not name (another version's) must be null."""
    if isinstance(expected, dict) and isinstance(found, dict):
        problems = []
        for key in sorted(set(found) | set(expected)):
            if key in expected:
                problems += differences(found.get(key, MISSING), expected[key], f"{path}.{key}")
            elif not all_null(found[key]):
                problems.append(f"{path}.{key}: expected null (not in this row's reader schema), found {found[key]!r}")
        return problems
    return [] if found == expected else [f"{path}: expected {expected!r}, found {found!r}"]


MISSING = "<no such column>"


def all_null(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and all(all_null(v) for v in value.values()))


def check_output(output: Output, fmt: str, landed: Landed, entry: dict, value_columns: list[str]) -> None:
    for reader, rows in readers(output, value_columns).items():
        by_id = {r["id"]: r for r in rows}
        assert sorted(by_id) == sorted(landed.rows) and len(rows) == len(by_id), (
            f"{fmt} as {reader} reads it: expected ids {sorted(landed.rows)}, found {sorted(r['id'] for r in rows)}"
        )
        problems = [p for i, row in landed.rows.items() for p in differences(by_id[i], row, f"id {i}")]
        assert not problems, f"{fmt} as {reader} reads it: " + "; ".join(problems[:5])
    event = {"seq": entry["seq"], "batch_id": entry["batch_id"], "ranges": entry["ranges"]}
    batch = [values_only(row, value_columns) for row in read_batch(output.store(), event).to_pylist()]
    problems = [p for row in batch for p in differences(row, landed.rows[row["id"]], f"id {row['id']}")]
    assert not problems, f"{fmt}: read_batch of batch {entry['seq']}: " + "; ".join(problems[:5])


@pytest.fixture
def evolution_count(request: pytest.FixtureRequest) -> Evolution:
    return EVOLUTION.new_case(request)


def value_columns_of(chain: list[Version]) -> list[str]:
    return list(dict.fromkeys(f.name for v in chain for f in v.model.fields))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("value_format", ["avro", "protobuf", "json-schema"])
def test_generated_evolution_chains_land_readable_or_are_refused_in_one_line(
    value_format, level, spark, kafka_config, new_topic, group_id, schema_registry, tmp_path, evolution_count
):
    client = SchemaRegistryClient({"url": schema_registry})
    registry = RegistrySettings(schema_registry)
    for seed in range(SEEDS):
        rng = random.Random(f"{value_format}-{level}-{seed}")
        topic = new_topic(partitions=1)
        subject = f"{topic}-value"
        client.set_compatibility(subject, level)
        first = register(client, subject, value_format, evolution.base_model(rng), None)
        assert first is not None, f"the registry refused the first version of {subject}"
        chain = [first]
        outputs = {fmt: new_output(fmt, tmp_path, f"{fmt}-{seed}") for fmt in FORMATS}
        landed = {fmt: Landed() for fmt in FORMATS}
        groups = {fmt: f"{group_id}-{fmt}-{seed}" for fmt in FORMATS}
        late: list[dict] = []  # records of the version before, produced after the new one
        next_id = 0
        attempts = 0
        while True:
            version = chain[-1]
            records = [evolution.draw_record(version.model, next_id + i, rng) for i in range(3)]
            next_id += len(records)
            values = serialized(schema_registry, value_format, topic, version, records)
            if late and len(chain) > 1:
                values += serialized(schema_registry, value_format, topic, chain[-2], late)
            produce(kafka_config, topic, [Record(0, v) for v in values])
            written = [(version.model, r) for r in records] + [(chain[-2].model, r) for r in late if len(chain) > 1]
            for fmt, output in outputs.items():
                if landed[fmt].stopped is not None:
                    continue  # refused before: its plan stays pending
                run_one(
                    spark, kafka_config, fmt, output, landed[fmt], groups[fmt], topic, registry, value_format, version
                )
                evolution_count.count(fmt, landed=landed[fmt].stopped is None)
                if landed[fmt].stopped is None:
                    expect_rows(landed[fmt], written, version.model, value_format)
                    check_output(output, fmt, landed[fmt], output.store().log.tail(), value_columns_of(chain))
                    landed[fmt].written_with = version.model
            if len(chain) > CHANGES_PER_CHAIN:
                break
            # Late records of this version, once the next exists: only where the new schema reads the old.
            late = [evolution.draw_record(version.model, 10_000 + next_id + i, rng) for i in range(2)]
            late = late if level in ("BACKWARD", "FULL") else []
            next_id += len(late)
            found = None
            while found is None and attempts < ATTEMPTS:
                attempts += 1
                candidate = rng.choice(evolution.CHANGES)(version.model, rng)
                found = candidate and register(client, subject, value_format, candidate, version)
            if found is None:
                break
            chain.append(found)
        # JSON Schema under FULL takes no change of these: closed objects refuse an added property one
        # way and a removed one the other, and a JSON integer promoted is the same schema.
        if (value_format, level) != ("json-schema", "FULL"):
            assert len(chain) > 1, (
                f"{value_format} {level} seed {seed}: the registry accepted no change in {attempts} tries"
            )
        evolution_count.chains += 1
        evolution_count.versions += len(chain)


def expect_rows(landed: Landed, written: list[tuple[Model, dict]], reader: Model, value_format: str) -> None:
    landed.batches += 1
    for writer, record in written:
        landed.rows[record["id"]] = evolution.expected_row(writer, reader, record, value_format)


def run_one(spark, kafka_config, fmt, output, landed: Landed, group, topic, registry, value_format, reader) -> None:
    """One batch into one output, read with ``reader`` (the subject's newest version): it lands, or
    is refused, as :func:`outcome` says; a refused output stops there."""
    expected = "lands" if landed.written_with is None else outcome(fmt, landed.written_with, reader.model)
    before = snapshot(output, kafka_config, group, topic)
    try:
        ingest(spark, kafka_config, output, group, topic, registry, value_format)
    except KafkaBatchError as exc:
        message = str(exc)
        assert expected == "refused", f"{fmt}: after {reader.model.change}, expected the batch to land: {message}"
        assert not exc.transient, (
            f"{fmt}: a refusal must be terminal, found a transient {type(exc).__name__}: {message}"
        )
        assert "\n" not in message, f"{fmt}: expected one line, found {message!r}"
        promoted = evolution.promoted(landed.written_with, reader.model)[0]
        named = f"{topic}-value version {reader.number} makes field {promoted} "
        assert named in message, f"{fmt}: expected {named!r} in {message!r}"
        assert snapshot(output, kafka_config, group, topic) == before, f"{fmt}: the refused batch changed the output"
        with pytest.raises(KafkaBatchError) as again:
            ingest(spark, kafka_config, output, group, topic, registry, value_format)
        assert str(again.value) == message, f"{fmt}: a retry was refused otherwise: {again.value}"
        landed.stopped = message
        return
    assert expected == "lands", f"{fmt}: after {reader.model.change}, expected a refusal, but the batch landed"
