"""Our schema-registry decoding against confluent-kafka's own deserializers, on generated schemas.

Each case (tests/support/generated_schemas.py) registers a schema and the schemas it references
(each under a subject of its own, by ``SchemaReference``) in the embedded registry over HTTP,
serializes its values with confluent-kafka's AvroSerializer, ProtobufSerializer or
JSONSerializer, and decodes the framed bytes with our decoders, built as the Spark tasks build
them (the pinned reader schema through our registry client, ``ValueDecoding.decoder``). Every
column value must be what confluent-kafka's AvroDeserializer, ProtobufDeserializer or
JSONDeserializer returns for the same bytes, turned into the mapping's column value by the
oracles (``avro_expected``, ``protobuf_expected``, ``json_expected``); the column types must be
the mapping's (``ValueDecoding.value_columns``). Avro is decoded both ways: one by one (fastavro)
and in blocks (the compiled reader, which must really be taken where the schema allows it).

``make test`` runs a fixed set of cases (hypothesis, derandomized, no example database):
AVRO_EXAMPLES + PROTOBUF_EXAMPLES + JSON_EXAMPLES. Before a release, run more:

    KAFKA_BATCH_DIFFERENTIAL_EXAMPLES=2000 .venv/bin/python -m pytest -n0 -p no:randomly \\
        tests/integration/test_decoding_differential.py

(that many cases per format, ~15 minutes). ``KAFKA_BATCH_DIFFERENTIAL_SEED=<n>`` draws other
cases than the fixed ones (still repeatable with the same seed). A failure names the format, the
schema, the row, the column path, the value expected and the value found.

The regression cases at the end are the disagreements these runs found, each with its schema.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import os
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import HealthCheck, given, seed, settings

from kafka_batch_provider.decoding.avro_blocks import MIN_VALUES, native_reader
from kafka_batch_provider.registry.client import SchemaRegistry
from kafka_batch_provider.registry.reader_schema import ReaderSchemaRequest
from kafka_batch_provider.registry.settings import RegistrySettings
from kafka_batch_provider.spark.value_decoding import ValueDecoding, reader_schema_text
from tests.support.generated_schemas import (
    AvroCase,
    JsonCase,
    JsonText,
    ProtobufCase,
    avro_cases,
    avro_expected,
    avro_names,
    fill,
    json_expected,
    json_resolver,
    json_schema_cases,
    protobuf_cases,
    protobuf_expected,
)
from tests.support.generated_tally import DIFFERENTIAL, Differential

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("KAFKA_BATCH_DIFFERENTIAL_EXAMPLES") or 0)
SEED = os.environ.get("KAFKA_BATCH_DIFFERENTIAL_SEED")
#: Cases per format in ``make test`` (~60 s in all on two cores).
AVRO_EXAMPLES, PROTOBUF_EXAMPLES, JSON_EXAMPLES = 120, 100, 100


def differential(default: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Hypothesis settings of a differential test: repeatable (derandomized, or the given seed),
    no deadline, no example database (no .hypothesis folder), ``default`` cases or the
    environment's number."""
    configured = settings(
        max_examples=EXAMPLES or default,
        derandomize=SEED is None,
        database=None,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.function_scoped_fixture,  # differential_count: a counter every case adds to
        ],
    )

    def decorate(test: Callable[..., None]) -> Callable[..., None]:
        return seed(int(SEED))(configured(test)) if SEED is not None else configured(test)

    return decorate


@pytest.fixture
def differential_count(request: pytest.FixtureRequest) -> Differential:
    """The test's count of cases that passed, for make test's summary (tests/support/generated_tally.py)."""
    return DIFFERENTIAL.new_case(request)


@pytest.fixture(scope="module")
def client(schema_registry: str) -> SchemaRegistryClient:
    """confluent-kafka's client, for its serializers and deserializers (the producers' and the reference's)."""
    return SchemaRegistryClient({"url": schema_registry})


def new_topic(kind: str) -> str:
    return f"differential-{kind}-{uuid.uuid4().hex[:12]}"


def register(client: SchemaRegistryClient, topic: str, kind: str, references: Sequence[Any]) -> dict[str, str]:
    """Each referenced schema under a subject of its own (its references by ``SchemaReference``);
    the subject of each, by reference name."""
    subjects: dict[str, str] = {}
    for reference in references:
        subject = f"{topic}-{reference.name}"
        text = json.dumps(reference.schema)
        refs = [SchemaReference(name, subjects[name], 1) for name in reference.references]
        client.register_schema(subject, Schema(text, kind, refs))
        subjects[reference.name] = subject
    return subjects


def task_decoding(registry_url: str, topic: str, value_format: str) -> tuple[ValueDecoding, Any]:
    """The decoding of ``topic``'s values as a batch's tasks get it: the subject's latest schema
    pinned (the plan step), its text and references fetched by id (the write step), a
    ``ValueDecoding`` and its decoder over our registry client."""
    settings_ = RegistrySettings(registry_url)
    pinned = ReaderSchemaRequest(value_format, settings_).pin([topic])
    registry = SchemaRegistry(settings_)
    text, references = reader_schema_text(registry, pinned)
    decoding = ValueDecoding(text, settings_.client_config(), reader_references=references, value_format=value_format)
    return decoding, decoding.decoder(decoding.registry())


def with_tombstone(values: list[bytes], where: int | None) -> list[bytes | None]:
    return values if where is None else [*values[:where], None, *values[where:]]


# -- comparing ----------------------------------------------------------------------------------


def differences(expected: Any, found: Any, path: str) -> list[str]:
    """Where ``found`` (a column's ``to_pylist()`` value) is not ``expected``: strict about types
    (True is not 1, a date is not a datetime, naive is not aware), NaN equal to NaN, -0.0 not 0.0."""
    if isinstance(expected, JsonText):
        if not isinstance(found, str):
            return [f"{path}: expected JSON text of {expected.value!r}, found {found!r}"]
        return differences(expected.value, json.loads(found), f"{path} (JSON text {found!r})")
    if expected is None or found is None:
        return [] if expected is found else [f"{path}: expected {expected!r}, found {found!r}"]
    sequences = isinstance(expected, (list, tuple)) and isinstance(found, (list, tuple))
    if type(expected) is not type(found) and not sequences:
        return [f"{path}: expected {expected!r} ({type(expected).__name__}), found {found!r} ({type(found).__name__})"]
    if isinstance(expected, float):
        same = (math.isnan(expected) and math.isnan(found)) or (
            expected == found and math.copysign(1, expected) == math.copysign(1, found)
        )
        return [] if same else [f"{path}: expected {expected!r}, found {found!r}"]
    if isinstance(expected, dt.datetime):
        if (expected.tzinfo is None) != (found.tzinfo is None) or expected != found:
            return [f"{path}: expected {expected!r}, found {found!r}"]
        return []
    if isinstance(expected, dict):
        if list(expected) != list(found):
            return [f"{path}: expected the fields {list(expected)}, found {list(found)}"]
        return [d for key in expected for d in differences(expected[key], found[key], f"{path}.{key}")]
    if isinstance(expected, (list, tuple)):
        if len(expected) != len(found):
            return [f"{path}: expected {len(expected)} items {expected!r}, found {len(found)} {found!r}"]
        return [d for i, (e, f) in enumerate(zip(expected, found)) for d in differences(e, f, f"{path}[{i}]")]
    return [] if expected == found else [f"{path}: expected {expected!r}, found {found!r}"]


def check_columns(
    what: str,
    schema: Any,
    decoded: Any,
    expected_rows: list[dict[str, Any] | None],
    columns: pa.Schema,
    normalize: Callable[[Any, pa.DataType], Any] = lambda value, _: value,
) -> None:
    """Our decoded columns against the reference's rows, value by value; their types against the mapping's."""
    shown = schema if isinstance(schema, str) else json.dumps(schema, ensure_ascii=False, default=str)
    assert not decoded.problems, (
        f"{what}: the reference decoded every value, ours reported problems {decoded.problems}; schema {shown}"
    )
    found_schema = decoded.columns.schema
    assert found_schema == columns, (
        f"{what}: expected the mapping's column types\n{columns}\nfound\n{found_schema}\nschema {shown}"
    )
    found_columns = {f.name: (decoded.columns.column(f.name).to_pylist(), f.type) for f in found_schema}
    names = next((list(row) for row in expected_rows if row is not None), list(found_columns))
    assert names == list(found_columns), f"{what}: expected the columns {names}, found {list(found_columns)}"
    problems: list[str] = []
    for row, expected in enumerate(expected_rows):
        for name, (values, arrow_type) in found_columns.items():
            want = None if expected is None else expected[name]
            problems += [
                f"row {row}, {d}" for d in differences(want, normalize(values[row], arrow_type), f"column {name}")
            ]
    assert not problems, f"{what}: {len(problems)} value(s) differ; schema {shown}\n" + "\n".join(problems[:10])


# -- Avro -----------------------------------------------------------------------------------------


def avro_differential(client: SchemaRegistryClient, registry_url: str, case: AvroCase, tombstone: int | None) -> None:
    topic = new_topic("avro")
    subjects = register(client, topic, "AVRO", case.references)
    refs = [SchemaReference(r.name, subjects[r.name], 1) for r in case.references]
    context = SerializationContext(topic, MessageField.VALUE)
    serializer = AvroSerializer(client, Schema(json.dumps(case.schema), "AVRO", refs))
    values = with_tombstone([serializer(v, context) for v in case.values], tombstone)
    array = pa.array(values, pa.binary())

    deserializer = AvroDeserializer(client, return_record_name=True)
    parsed, named = avro_names(case.schema, [r.schema for r in case.references])

    def read(value: bytes) -> Any:
        if len(value) == 5:
            # confluent-kafka's deserializers refuse a frame with no payload ("Expecting data framing
            # of length 6 bytes or more"), though Avro writes a record of nulls and empty records in
            # no bytes at all (and its own serializer framed it so): fastavro, as it reads the rest.
            readable, _ = avro_names(case.schema, [r.schema for r in case.references], write_hint=True)
            return fastavro.schemaless_reader(io.BytesIO(b""), readable, None, return_record_name=True)
        return deserializer(value, context)

    expected = [None if v is None else avro_expected(parsed, read(v), named) for v in values]

    decoding, one_by_one = task_decoding(registry_url, topic, "avro")
    one_by_one.blocks = None
    check_columns("avro, one by one", case.schema, one_by_one.decode(array), expected, decoding.value_columns())

    _, in_blocks = task_decoding(registry_url, topic, "avro")
    decoded = in_blocks.decode(array)
    check_columns("avro, in blocks", case.schema, decoded, expected, decoding.value_columns())
    if in_blocks.blocks is not None and native_reader() is not None:
        assert len(case.values) >= MIN_VALUES
        assert in_blocks.counts["blocks"] == len(case.values), (
            f"avro: expected all {len(case.values)} values decoded in blocks, found counts {in_blocks.counts}; "
            f"schema {json.dumps(case.schema, default=str)}"
        )
    if case.block_friendly:
        assert in_blocks.blocks is not None, f"expected a schema the blocks take: {json.dumps(case.schema)}"


@differential(AVRO_EXAMPLES)
@given(case=avro_cases())
def test_avro_columns_are_what_confluents_avro_deserializer_reads(client, schema_registry, case, differential_count):
    avro_differential(client, schema_registry, case, tombstone=len(case.values) // 2)
    differential_count.count("avro")


# -- Protobuf -------------------------------------------------------------------------------------


def message_class(case: ProtobufCase) -> Any:
    """The value's message class, from the case's files (and the well-known ones) in a pool of their own."""
    from google.protobuf import timestamp_pb2, wrappers_pb2

    pool = descriptor_pool.DescriptorPool()
    for module in (timestamp_pb2, wrappers_pb2):
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb))
    for file in case.files:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(case.message))


def sorted_maps(value: Any, arrow_type: pa.DataType) -> Any:
    """A column value with each map's entries in key order: protobuf gives a map no order."""
    if value is None:
        return None
    if pa.types.is_map(arrow_type):
        inner = arrow_type.item_type
        return sorted(((k, sorted_maps(v, inner)) for k, v in value), key=lambda entry: entry[0])
    if pa.types.is_list(arrow_type):
        return [sorted_maps(v, arrow_type.value_type) for v in value]
    if pa.types.is_struct(arrow_type):
        return {f.name: sorted_maps(value[f.name], f.type) for f in arrow_type}
    return value


def protobuf_text(case: ProtobufCase) -> str:
    return "; ".join(str(file).replace("\n", " ") for file in case.files)


def protobuf_differential(client: SchemaRegistryClient, registry_url: str, case: ProtobufCase) -> None:
    topic = new_topic("protobuf")
    context = SerializationContext(topic, MessageField.VALUE)
    cls = message_class(case)
    serializer = ProtobufSerializer(
        cls,
        client,
        {
            "use.deprecated.format": False,
            # the imported files under subjects of this case (the default is the file's name)
            "reference.subject.name.strategy": lambda ctx, dependency: f"{ctx.topic}-{dependency.name}",
        },
    )
    values = [serializer(fill(cls(), v), context) for v in case.values]
    deserializer = ProtobufDeserializer(cls, {"use.deprecated.format": False}, client)

    decoding, decoder = task_decoding(registry_url, topic, "protobuf")
    columns = decoding.value_columns()
    expected = [protobuf_expected(deserializer(v, context)) for v in values]  # its maps in key order
    check_columns(
        "protobuf", protobuf_text(case), decoder.decode(pa.array(values, pa.binary())), expected, columns, sorted_maps
    )


@differential(PROTOBUF_EXAMPLES)
@given(case=protobuf_cases())
def test_protobuf_columns_are_what_confluents_protobuf_deserializer_reads(
    client, schema_registry, case, differential_count
):
    protobuf_differential(client, schema_registry, case)
    differential_count.count("protobuf")


# -- JSON Schema ----------------------------------------------------------------------------------


def json_differential(client: SchemaRegistryClient, registry_url: str, case: JsonCase) -> None:
    topic = new_topic("json")
    subjects = register(client, topic, "JSON", case.references)
    refs = [SchemaReference(r.name, subjects[r.name], 1) for r in case.references]
    context = SerializationContext(topic, MessageField.VALUE)
    serializer = JSONSerializer(Schema(json.dumps(case.schema), "JSON", refs), client)
    values = [serializer(v, context) for v in case.values]

    deserializer = JSONDeserializer(None, schema_registry_client=client)
    resolver = json_resolver(case.schema, [(r.name, r.schema) for r in case.references])
    expected = [json_expected(case.schema, deserializer(v, context), resolver) for v in values]

    decoding, decoder = task_decoding(registry_url, topic, "json-schema")
    check_columns(
        "json-schema", case.schema, decoder.decode(pa.array(values, pa.binary())), expected, decoding.value_columns()
    )


@differential(JSON_EXAMPLES)
@given(case=json_schema_cases())
def test_json_schema_columns_are_what_confluents_json_deserializer_reads(
    client, schema_registry, case, differential_count
):
    json_differential(client, schema_registry, case)
    differential_count.count("json-schema")


# -- regression cases: disagreements the generated cases found ----------------------------------


def test_an_avro_logical_type_on_a_type_it_does_not_annotate_is_the_plain_type_in_a_union_too(client, schema_registry):
    """{"type": "long", "logicalType": "date"} is a long (Avro: a reader ignores a logical type it
    cannot apply): fastavro reads an int, which no union branch took (every value a dead letter), and a
    union of it with a real date was refused as two dates."""
    misplaced = {"type": "long", "logicalType": "date"}
    schema = {
        "type": "record",
        "name": "Reading",
        "fields": [
            {"name": "either", "type": ["string", misplaced]},
            {"name": "day", "type": [misplaced, {"type": "int", "logicalType": "date"}, "null"]},
        ],
    }
    values = [{"either": -7 * n, "day": dt.date(2024, 2, n + 1) if n % 2 else n} for n in range(MIN_VALUES)]
    avro_differential(client, schema_registry, AvroCase(schema, (), tuple(values), False), tombstone=None)


@pytest.mark.parametrize(
    "part, sample",
    [
        ({"type": "record", "name": "Nothing", "fields": []}, {}),
        ({"type": "fixed", "name": "Empty", "size": 0}, b""),
        ({"type": "array", "items": "null"}, [None, None]),
        ({"type": "record", "name": "Holder", "fields": [{"name": "gap", "type": "null"}]}, {"gap": None}),
    ],
    ids=["record-without-fields", "fixed-of-size-0", "array-of-null", "null-in-a-record"],
)
def test_avro_parts_the_compiled_reader_fails_on_are_decoded_one_by_one(client, schema_registry, part, sample):
    """The compiled block reader raises on these (SystemError): such a schema is not block-eligible
    (avro_blocks.unsupported), instead of a native read failing in every batch."""
    from kafka_batch_provider.decoding.avro_blocks import unsupported
    from kafka_batch_provider.decoding.avro_types import parsed

    schema = {
        "type": "record",
        "name": "Row",
        "fields": [{"name": "id", "type": "long"}, {"name": "part", "type": part}],
    }
    named: dict[str, Any] = {}
    assert unsupported(parsed(schema, named), named) is not None, f"expected {part} not block-eligible, found it is"
    values = tuple({"id": n, "part": sample} for n in range(MIN_VALUES))
    avro_differential(client, schema_registry, AvroCase(schema, (), values, False), tombstone=3)


def test_avro_decimals_fastavro_writes_a_byte_longer_than_needed_are_decoded_in_blocks(client, schema_registry):
    """fastavro (so confluent-kafka's AvroSerializer) writes a decimal of -2**(8k-1) (-1.28 at scale 2)
    in k + 1 bytes, Java in k: the block check, sizing decimals as Java writes them, refused every
    block holding one, and the batch was decoded one by one."""
    schema = {
        "type": "record",
        "name": "Payment",
        "fields": [
            {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 2}},
            {
                "name": "parts",
                "type": {
                    "type": "array",
                    "items": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 0},
                },
            },
        ],
    }
    padded = [Decimal(-(2 ** (8 * k - 1))).scaleb(-2) for k in range(1, 9)]  # -1.28, -327.68, ...
    values = tuple(
        {"amount": padded[n % 8], "parts": [Decimal(-128), Decimal(-32768), Decimal(127), Decimal(n)]}
        for n in range(MIN_VALUES)
    )
    avro_differential(client, schema_registry, AvroCase(schema, (), values, True), tombstone=None)


def test_a_json_date_time_with_a_lower_case_t_and_z_is_a_timestamp(client, schema_registry):
    """RFC 3339 (section 5.6) allows "t" and "z" in lower case; Python's fromisoformat does not take them."""
    schema = {"type": "object", "properties": {"at": {"type": "string", "format": "date-time"}}}
    values = ({"at": "2024-02-29t23:59:58.25z"}, {"at": "2024-02-29t23:59:58+01:00"}, {"at": "2024-02-29T23:59:58Z"})
    json_differential(client, schema_registry, JsonCase(schema, (), values))
