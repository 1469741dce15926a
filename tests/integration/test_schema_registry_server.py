"""The embedded schema registry, driven only as its users drive it: confluent-kafka's
``SchemaRegistryClient`` and serializers, and the ``kafka-batch schema-registry`` command."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from kafka_batch_provider.dev.local_servers import free_port, pid_alive
from kafka_batch_provider.dev.schema_registry import EmbeddedSchemaRegistry
from kafka_batch_provider.dev.schema_registry.auth import Credential
from tests.support import cli_runner

pytestmark = [pytest.mark.integration, pytest.mark.check]  # check: in make check's tier

LEVELS = ("NONE", "BACKWARD", "FORWARD", "FULL")


@pytest.fixture
def client(schema_registry: str):
    with SchemaRegistryClient({"url": schema_registry, "max.retries": 0}) as made:
        yield made


@pytest.fixture
def fresh_client(schema_registry: str):
    """A client with an empty cache, to see what the server answers now."""

    def make() -> SchemaRegistryClient:
        return SchemaRegistryClient({"url": schema_registry, "max.retries": 0})

    return make


@pytest.fixture
def subject(request: pytest.FixtureRequest) -> str:
    return f"{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def private_registry(tmp_path_factory: pytest.TempPathFactory):
    """A registry of this module's own, for tests that change global settings."""
    with EmbeddedSchemaRegistry(log_path=tmp_path_factory.mktemp("private-registry") / "registry.log") as server:
        yield server.url


def avro(*fields: dict, name: str = "User") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "kbtest", "fields": list(fields)})


def error_of(call, *args, **kwargs) -> SchemaRegistryError:
    with pytest.raises(SchemaRegistryError) as raised:
        call(*args, **kwargs)
    return raised.value


def assert_error(error: SchemaRegistryError, status: int, code: int) -> None:
    found = (error.http_status_code, error.error_code)
    assert found == (status, code), f"expected HTTP {status} error {code}, found {found}: {error.error_message}"


# -- subjects, versions, ids ----------------------------------------------------------------

USER_V1 = avro({"name": "id", "type": "int"})
USER_V2 = avro({"name": "id", "type": "int"}, {"name": "email", "type": "string", "default": ""})


def test_register_lookup_and_read_back_by_id_version_and_latest(client, fresh_client, subject):
    first = client.register_schema(subject, Schema(USER_V1, "AVRO"))
    second = client.register_schema(subject, Schema(USER_V2, "AVRO"))
    assert second != first, f"expected a new id for a new schema, found {first} twice"
    reader = fresh_client()
    versions = reader.get_versions(subject)
    assert versions == [1, 2], f"expected versions [1, 2], found {versions}"
    latest = reader.get_latest_version(subject)
    found = (latest.version, latest.schema_id, json.loads(latest.schema.schema_str))
    assert found == (2, second, json.loads(USER_V2)), f"expected version 2 (id {second}) as latest, found {found}"
    by_version = reader.get_version(subject, 1)
    assert (by_version.schema_id, by_version.subject) == (first, subject), f"expected id {first}, found {by_version}"
    by_id = reader.get_schema(first)
    assert (json.loads(by_id.schema_str), by_id.schema_type) == (json.loads(USER_V1), "AVRO"), f"found {by_id}"
    looked_up = reader.lookup_schema(subject, Schema(USER_V1, "AVRO"))
    assert (looked_up.version, looked_up.schema_id) == (1, first), f"expected version 1 id {first}, found {looked_up}"
    # An id belongs to a schema, not to a subject: the session's other tests may use the same one.
    uses = [(v.subject, v.version) for v in reader.get_schema_versions(second) if v.subject == subject]
    assert uses == [(subject, 2)], f"expected id {second} used by ({subject}, 2), found {uses}"
    assert subject in reader.get_subjects(), f"expected {subject} among {reader.get_subjects()}"
    types = sorted(reader.get_schema_types())
    assert types == ["AVRO", "JSON", "PROTOBUF"], f"expected the three schema types, found {types}"


def test_the_same_schema_gets_the_same_id_under_any_subject_and_spacing(fresh_client, subject):
    first = fresh_client().register_schema(subject, Schema(USER_V1, "AVRO"))
    again = fresh_client().register_schema_full_response(subject, Schema(USER_V1, "AVRO"))
    assert (again.schema_id, again.version) == (first, 1), f"expected id {first} version 1 again, found {again}"
    spaced = json.dumps(json.loads(USER_V1), indent=4)
    other = fresh_client().register_schema(f"{subject}-other", Schema(spaced, "AVRO"))
    assert other == first, f"expected id {first} for the same schema in another subject, found {other}"
    versions = fresh_client().get_versions(subject)
    assert versions == [1], f"expected one version after registering the same schema twice, found {versions}"


def test_soft_then_permanent_delete_of_versions_and_subjects(client, fresh_client, subject):
    name = f"Deleted{uuid.uuid4().hex[:8]}"  # schemas of this test only: an id is kept while any subject uses it
    v1, v2 = (avro(*json.loads(v)["fields"], name=name) for v in (USER_V1, USER_V2))
    client.register_schema(subject, Schema(v1, "AVRO"))
    second = client.register_schema(subject, Schema(v2, "AVRO"))
    assert_error(error_of(fresh_client().delete_version, subject, 1, permanent=True), 404, 40407)
    assert fresh_client().delete_version(subject, 1) == 1, "expected the soft delete to answer version 1"
    assert_error(error_of(fresh_client().delete_version, subject, 1), 404, 40406)
    live, every = fresh_client().get_versions(subject), fresh_client().get_versions(subject, deleted=True)
    assert (live, every) == ([2], [1, 2]), f"expected [2] live and [1, 2] with deleted, found {live} and {every}"
    assert_error(error_of(fresh_client().get_version, subject, 1), 404, 40402)
    kept = fresh_client().get_version(subject, 1, deleted=True)
    assert kept.version == 1, f"expected the soft-deleted version with deleted=True, found {kept}"
    assert fresh_client().delete_version(subject, 1, permanent=True) == 1, "expected version 1 gone for good"

    assert_error(error_of(fresh_client().delete_subject, subject, permanent=True), 404, 40405)
    assert fresh_client().delete_subject(subject) == [2], "expected the soft delete of the subject to answer [2]"
    assert_error(error_of(fresh_client().delete_subject, subject), 404, 40404)
    assert subject not in fresh_client().get_subjects(), "expected a soft-deleted subject hidden"
    assert subject in fresh_client().get_subjects(deleted=True), "expected it listed with deleted=True"
    assert_error(error_of(fresh_client().get_latest_version, subject), 404, 40401)
    assert fresh_client().delete_subject(subject, permanent=True) == [2], "expected the permanent delete of [2]"
    assert subject not in fresh_client().get_subjects(deleted=True), "expected the subject gone for good"
    assert_error(error_of(fresh_client().get_schema, second), 404, 40403)
    new_id = fresh_client().register_schema(subject, Schema(v2, "AVRO"))
    assert new_id > second, f"expected a fresh id above {second} (ids are never reused), found {new_id}"


def test_documented_error_codes(client, subject):
    client.register_schema(subject, Schema(USER_V1, "AVRO"))
    cases = {
        "unknown subject": (lambda: client.get_version(f"{subject}-nope", 1), 404, 40401),
        "unknown version": (lambda: client.get_version(subject, 7), 404, 40402),
        "unknown schema id": (lambda: client.get_schema(987654), 404, 40403),
        "schema not in subject": (lambda: client.lookup_schema(subject, Schema(USER_V2, "AVRO")), 404, 40403),
        "invalid Avro": (lambda: client.register_schema(subject, Schema('{"type": "recor"}', "AVRO")), 422, 42201),
        "invalid JSON Schema": (
            lambda: client.register_schema(subject, Schema('{"type": 12}', "JSON")),
            422,
            42201,
        ),
        "invalid Protobuf": (
            lambda: client.register_schema(subject, Schema('syntax = "proto3"; message A { B b = 1; }', "PROTOBUF")),
            422,
            42201,
        ),
        "unknown schema type": (lambda: client.register_schema(subject, Schema("{}", "XML")), 422, 42201),
        "invalid version": (lambda: client.get_version(subject, "first"), 422, 42202),
        "version zero": (lambda: client.get_version(subject, 0), 422, 42202),
        "invalid level": (lambda: client.set_compatibility(subject, "SIDEWAYS"), 422, 42203),
        "no subject-level config": (lambda: client.get_compatibility(subject), 404, 40408),
        "compatibility against a missing version": (
            lambda: client.test_compatibility(subject, Schema(USER_V2, "AVRO"), version=9),
            404,
            40402,
        ),
        # Confluent answers a missing numbered version with 40402, even on a missing subject.
        "compatibility against a version of a missing subject": (
            lambda: client.test_compatibility(f"{subject}-nope", Schema(USER_V2, "AVRO"), version=1),
            404,
            40402,
        ),
    }
    found = {}
    for name, (call, status, code) in cases.items():
        try:
            call()
            found[name] = "no error"
        except SchemaRegistryError as exc:
            if (exc.http_status_code, exc.error_code) != (status, code):
                found[name] = f"HTTP {exc.http_status_code} error {exc.error_code}: {exc.error_message}"
    assert not found, f"expected each documented error code, found otherwise: {found}"


def test_subject_compatibility_is_set_read_and_applied(client, subject):
    set_level = client.set_compatibility(subject, "full")
    assert set_level == {"compatibility": "FULL"}, f"expected {{'compatibility': 'FULL'}}, found {set_level}"
    assert client.get_compatibility(subject) == "FULL", f"found {client.get_compatibility(subject)}"
    config = client.get_config(subject)
    assert str(config.compatibility_level) == "FULL", f"expected FULL in the config, found {config}"


def test_global_settings_and_read_only_mode(private_registry, subject):
    with SchemaRegistryClient({"url": private_registry, "max.retries": 0}) as client:
        before = client.get_compatibility()
        assert before == "BACKWARD", f"expected the default level BACKWARD, found {before}"
        client.set_compatibility(level="NONE")
        try:
            client.register_schema(subject, Schema(USER_V1, "AVRO"))
            changed = avro({"name": "id", "type": "string"})
            assert client.test_compatibility(subject, Schema(changed, "AVRO")), "expected NONE to accept a type change"
        finally:
            client.set_compatibility(level="BACKWARD")
        assert client.get_global_mode() == "READWRITE", f"expected READWRITE, found {client.get_global_mode()}"
        assert client.update_mode(subject, "READONLY") == "READONLY", "expected the subject to turn read-only"
        try:
            assert_error(error_of(client.register_schema, subject, Schema(USER_V2, "AVRO")), 422, 42205)
            assert client.get_mode(subject) == "READONLY", f"expected READONLY, found {client.get_mode(subject)}"
        finally:
            client.update_mode(subject, "READWRITE")
        assert client.register_schema(subject, Schema(USER_V2, "AVRO")) > 0, "expected writes back after READWRITE"


def test_concurrent_registrations_of_one_schema_share_one_id_and_version(schema_registry, subject):
    def register(_: int) -> tuple[int, int]:
        with SchemaRegistryClient({"url": schema_registry, "max.retries": 0}) as own:
            found = own.register_schema_full_response(subject, Schema(USER_V1, "AVRO"))
            return found.schema_id, found.version

    with ThreadPoolExecutor(8) as pool:
        outcomes = set(pool.map(register, range(16)))
    assert len(outcomes) == 1, f"expected one (id, version) for 16 concurrent registrations, found {outcomes}"


# -- compatibility --------------------------------------------------------------------------


def outcome(client: SchemaRegistryClient, subject: str, level: str, old: str, new: str, schema_type: str) -> bool:
    """Register ``old`` then ``new`` under ``level``; the test endpoint and the registration must agree."""
    client.set_compatibility(subject, level)
    client.register_schema(subject, Schema(old, schema_type))
    tested = client.test_compatibility(subject, Schema(new, schema_type), verbose=True)
    try:
        client.register_schema(subject, Schema(new, schema_type))
        registered, details = True, "registered"
    except SchemaRegistryError as exc:
        registered, details = False, f"HTTP {exc.http_status_code} error {exc.error_code}: {exc.error_message}"
        assert (exc.http_status_code, exc.error_code) == (409, 409), (
            f"expected 409 for an incompatible schema, {details}"
        )
    assert tested == registered, f"test_compatibility said {tested}, registering said: {details}"
    return registered


def expect(case: str, level: str, expected: dict[str, bool], found: bool, details: str = "") -> None:
    assert found == expected[level], (
        f"{case} under {level}: expected {'compatible' if expected[level] else 'incompatible'}, "
        f"found {'compatible' if found else 'incompatible'} {details}"
    )


ENUM = {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN"]}
LINE = {"type": "record", "name": "Line", "fields": [{"name": "sku", "type": "string"}]}
QTY = {"name": "qty", "type": "int"}
ID_NAME = ({"name": "id", "type": "int"}, {"name": "name", "type": "string"})
# case: (old, new, {level: compatible})
AVRO_CASES = {
    "field added with a default": (
        avro(*ID_NAME),
        avro(*ID_NAME, {"name": "email", "type": "string", "default": ""}),
        dict(NONE=True, BACKWARD=True, FORWARD=True, FULL=True),
    ),
    "field added without a default": (
        avro(*ID_NAME),
        avro(*ID_NAME, {"name": "email", "type": "string"}),
        dict(NONE=True, BACKWARD=False, FORWARD=True, FULL=False),
    ),
    "field without a default removed": (
        avro(*ID_NAME),
        avro(ID_NAME[0]),
        dict(NONE=True, BACKWARD=True, FORWARD=False, FULL=False),
    ),
    "field with a default removed": (
        avro(*ID_NAME, {"name": "email", "type": "string", "default": ""}),
        avro(*ID_NAME),
        dict(NONE=True, BACKWARD=True, FORWARD=True, FULL=True),
    ),
    "int promoted to long": (
        avro({"name": "id", "type": "int"}),
        avro({"name": "id", "type": "long"}),
        dict(NONE=True, BACKWARD=True, FORWARD=False, FULL=False),
    ),
    "float narrowed from double": (
        avro({"name": "x", "type": "double"}),
        avro({"name": "x", "type": "float"}),
        dict(NONE=True, BACKWARD=False, FORWARD=True, FULL=False),
    ),
    "string changed to bytes": (
        avro({"name": "x", "type": "string"}),
        avro({"name": "x", "type": "bytes"}),
        dict(NONE=True, BACKWARD=True, FORWARD=True, FULL=True),
    ),
    "int changed to string": (
        avro({"name": "id", "type": "int"}),
        avro({"name": "id", "type": "string"}),
        dict(NONE=True, BACKWARD=False, FORWARD=False, FULL=False),
    ),
    "enum symbol added": (
        avro({"name": "c", "type": ENUM}),
        avro({"name": "c", "type": {**ENUM, "symbols": ["RED", "GREEN", "BLUE"]}}),
        dict(NONE=True, BACKWARD=True, FORWARD=False, FULL=False),
    ),
    "enum symbol added to an enum with a default": (
        avro({"name": "c", "type": {**ENUM, "default": "RED"}}),
        avro({"name": "c", "type": {**ENUM, "symbols": ["RED", "GREEN", "BLUE"], "default": "RED"}}),
        dict(NONE=True, BACKWARD=True, FORWARD=True, FULL=True),
    ),
    "union gains a branch": (
        avro({"name": "u", "type": ["null", "string"], "default": None}),
        avro({"name": "u", "type": ["null", "string", "int"], "default": None}),
        dict(NONE=True, BACKWARD=True, FORWARD=False, FULL=False),
    ),
    "nested record in an array gains a field without a default": (
        avro({"name": "lines", "type": {"type": "array", "items": LINE}}),
        avro({"name": "lines", "type": {"type": "array", "items": {**LINE, "fields": [*LINE["fields"], QTY]}}}),
        dict(NONE=True, BACKWARD=False, FORWARD=True, FULL=False),
    ),
    "map values promoted": (
        avro({"name": "m", "type": {"type": "map", "values": "int"}}),
        avro({"name": "m", "type": {"type": "map", "values": "double"}}),
        dict(NONE=True, BACKWARD=True, FORWARD=False, FULL=False),
    ),
    "record renamed": (
        avro(*ID_NAME, name="User"),
        avro(*ID_NAME, name="Person"),
        dict(NONE=True, BACKWARD=False, FORWARD=False, FULL=False),
    ),
    "record renamed with the old name as an alias": (
        avro(*ID_NAME, name="User"),
        json.dumps({**json.loads(avro(*ID_NAME, name="Person")), "aliases": ["User"]}),
        dict(NONE=True, BACKWARD=True, FORWARD=False, FULL=False),
    ),
}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", AVRO_CASES)
def test_avro_compatibility(client, subject, case, level):
    old, new, expected = AVRO_CASES[case]
    expect(case, level, expected, outcome(client, subject, level, old, new, "AVRO"))


def json_object(properties: dict, closed: bool = False, required: tuple[str, ...] = ()) -> str:
    schema: dict = {"type": "object", "properties": properties}
    if closed:
        schema["additionalProperties"] = False
    if required:
        schema["required"] = list(required)
    return json.dumps(schema)


STRING = {"type": "string"}
JSON_CASES = {
    "property added to an open content model": (
        json_object({"a": STRING}),
        json_object({"a": STRING, "b": STRING}),
        dict(NONE=True, BACKWARD=False, FORWARD=True, FULL=False),
    ),
    "optional property added to a closed content model": (
        json_object({"a": STRING}, closed=True),
        json_object({"a": STRING, "b": STRING}, closed=True),
        dict(NONE=True, BACKWARD=True, FORWARD=False, FULL=False),
    ),
    "required property added to a closed content model": (
        json_object({"a": STRING}, closed=True),
        json_object({"a": STRING, "b": STRING}, closed=True, required=("b",)),
        dict(NONE=True, BACKWARD=False, FORWARD=False, FULL=False),
    ),
    "required property with a default added to a closed content model": (
        json_object({"a": STRING}, closed=True),
        json_object({"a": STRING, "b": {**STRING, "default": "x"}}, closed=True, required=("b",)),
        dict(NONE=True, BACKWARD=True, FORWARD=False, FULL=False),
    ),
    "property removed from an open content model": (
        json_object({"a": STRING, "b": STRING}),
        json_object({"a": STRING}),
        dict(NONE=True, BACKWARD=True, FORWARD=False, FULL=False),
    ),
    "property removed from a closed content model": (
        json_object({"a": STRING, "b": STRING}, closed=True),
        json_object({"a": STRING}, closed=True),
        dict(NONE=True, BACKWARD=False, FORWARD=True, FULL=False),
    ),
    "property type changed from string to integer": (
        json_object({"a": STRING}),
        json_object({"a": {"type": "integer"}}),
        dict(NONE=True, BACKWARD=False, FORWARD=False, FULL=False),
    ),
    "integer widened to number": (
        json_object({"a": {"type": "integer"}}),
        json_object({"a": {"type": "number"}}),
        dict(NONE=True, BACKWARD=True, FORWARD=False, FULL=False),
    ),
    "enum value added": (
        json_object({"a": {"enum": ["x", "y"]}}),
        json_object({"a": {"enum": ["x", "y", "z"]}}),
        dict(NONE=True, BACKWARD=True, FORWARD=False, FULL=False),
    ),
    "maxLength narrowed": (
        json_object({"a": {**STRING, "maxLength": 10}}),
        json_object({"a": {**STRING, "maxLength": 5}}),
        dict(NONE=True, BACKWARD=False, FORWARD=True, FULL=False),
    ),
}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", JSON_CASES)
def test_json_schema_compatibility(client, subject, case, level):
    old, new, expected = JSON_CASES[case]
    expect(case, level, expected, outcome(client, subject, level, old, new, "JSON"))


def proto(body: str, syntax: str = "proto3") -> str:
    return f'syntax = "{syntax}";\npackage kbtest;\n{body}\n'


ORDER = "message Order {\n  string id = 1;\n  int32 amount = 2;\n}"
PROTOBUF_CASES = {
    "field added": (
        proto(ORDER),
        proto("message Order { string id = 1; int32 amount = 2; string note = 3; }"),
        dict(NONE=True, BACKWARD=True, FORWARD=True, FULL=True),
    ),
    "field removed": (
        proto(ORDER),
        proto("message Order { string id = 1; }"),
        dict(NONE=True, BACKWARD=True, FORWARD=True, FULL=True),
    ),
    "field renamed": (
        proto(ORDER),
        proto("message Order { string id = 1; int32 total = 2; }"),
        dict(NONE=True, BACKWARD=True, FORWARD=True, FULL=True),
    ),
    "int32 changed to int64 (same wire group)": (
        proto(ORDER),
        proto("message Order { string id = 1; int64 amount = 2; }"),
        dict(NONE=True, BACKWARD=True, FORWARD=True, FULL=True),
    ),
    "field type changed from int32 to string": (
        proto(ORDER),
        proto("message Order { string id = 1; string amount = 2; }"),
        dict(NONE=True, BACKWARD=False, FORWARD=False, FULL=False),
    ),
    "field number reused for another type": (
        proto(ORDER),
        proto("message Order { string id = 1; double amount_eur = 2; int32 amount = 3; }"),
        dict(NONE=True, BACKWARD=False, FORWARD=False, FULL=False),
    ),
    "scalar changed to a message": (
        proto(ORDER),
        proto("message Order { string id = 1; Money amount = 2; }\nmessage Money { int64 cents = 1; }"),
        dict(NONE=True, BACKWARD=False, FORWARD=False, FULL=False),
    ),
    "message removed": (
        proto(ORDER + "\nmessage Line { string sku = 1; }"),
        proto(ORDER),
        dict(NONE=True, BACKWARD=False, FORWARD=True, FULL=False),
    ),
    "required field added (proto2)": (
        proto("message Order { optional string id = 1; }", syntax="proto2"),
        proto("message Order { optional string id = 1; required int32 amount = 2; }", syntax="proto2"),
        dict(NONE=True, BACKWARD=False, FORWARD=False, FULL=False),
    ),
    "field removed from a oneof": (
        proto("message Order { oneof pay { string card = 1; string iban = 2; } }"),
        proto("message Order { oneof pay { string card = 1; } }"),
        dict(NONE=True, BACKWARD=False, FORWARD=True, FULL=False),
    ),
    "enum value added, map and nested message unchanged": (
        proto(
            "message Order { map<string, Line> lines = 1; Kind kind = 2; }\n"
            "message Line { string sku = 1; }\nenum Kind { UNKNOWN = 0; }"
        ),
        proto(
            "message Order { map<string, Line> lines = 1; Kind kind = 2; }\n"
            "message Line { string sku = 1; }\nenum Kind { UNKNOWN = 0; RUSH = 1; }"
        ),
        dict(NONE=True, BACKWARD=True, FORWARD=True, FULL=True),
    ),
    "map value type changed": (
        proto("message Order { map<string, int32> counts = 1; }"),
        proto("message Order { map<string, string> counts = 1; }"),
        dict(NONE=True, BACKWARD=False, FORWARD=False, FULL=False),
    ),
}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", PROTOBUF_CASES)
def test_protobuf_compatibility(client, subject, case, level):
    old, new, expected = PROTOBUF_CASES[case]
    expect(case, level, expected, outcome(client, subject, level, old, new, "PROTOBUF"))


TRANSITIVE_AVRO = (
    avro({"name": "id", "type": "int"}),
    avro({"name": "id", "type": "int"}, {"name": "email", "type": "string", "default": ""}),
    avro({"name": "id", "type": "int"}, {"name": "email", "type": "string"}),
)


@pytest.mark.parametrize(
    ("level", "expected"),
    [("BACKWARD", True), ("BACKWARD_TRANSITIVE", False), ("FULL", True), ("FULL_TRANSITIVE", False)],
)
def test_transitive_levels_check_every_version(client, subject, level, expected):
    """v3 reads v2's data (email is there) but not v1's (no email, no default)."""
    client.set_compatibility(subject, level)
    for schema in TRANSITIVE_AVRO[:2]:
        client.register_schema(subject, Schema(schema, "AVRO"))
    found = client.test_compatibility_all_versions(subject, Schema(TRANSITIVE_AVRO[2], "AVRO"))
    against_latest = client.test_compatibility(subject, Schema(TRANSITIVE_AVRO[2], "AVRO"))
    assert found == expected, f"{level}: expected compatible={expected} against all versions, found {found}"
    assert against_latest, f"{level}: expected v3 compatible with the latest version alone, found {against_latest}"


def test_forward_transitive_checks_every_version(client, subject):
    """v3 drops email: v2 (email has a default) reads it, v1 (email without default) does not."""
    client.set_compatibility(subject, "FORWARD_TRANSITIVE")
    v1 = avro({"name": "id", "type": "int"}, {"name": "email", "type": "string"})
    v2 = avro({"name": "id", "type": "int"}, {"name": "email", "type": "string", "default": ""})
    v3 = avro({"name": "id", "type": "int"})
    client.register_schema(subject, Schema(v1, "AVRO"))
    client.register_schema(subject, Schema(v2, "AVRO"))
    assert_error(error_of(client.register_schema, subject, Schema(v3, "AVRO")), 409, 409)
    client.set_compatibility(subject, "FORWARD")
    assert client.register_schema(subject, Schema(v3, "AVRO")) > 0, "expected FORWARD to accept v3 after v2"


def test_a_new_schema_type_under_a_subject_is_incompatible_unless_none(client, subject):
    client.register_schema(subject, Schema(USER_V1, "AVRO"))
    assert_error(error_of(client.register_schema, subject, Schema(json_object({"a": STRING}), "JSON")), 409, 409)
    client.set_compatibility(subject, "NONE")
    assert client.register_schema(subject, Schema(json_object({"a": STRING}), "JSON")) > 0, "expected NONE to allow it"


# -- references -----------------------------------------------------------------------------


def test_avro_references_are_stored_returned_and_guard_the_referenced_version(client, fresh_client, subject):
    address = json.dumps(
        {"type": "record", "name": "Address", "namespace": "kbtest", "fields": [{"name": "city", "type": "string"}]}
    )
    client.register_schema(f"{subject}-address", Schema(address, "AVRO"))
    reference = SchemaReference("kbtest.Address", f"{subject}-address", 1)
    user = avro({"name": "id", "type": "int"}, {"name": "home", "type": "kbtest.Address"})
    user_id = client.register_schema(subject, Schema(user, "AVRO", [reference]))
    found = fresh_client().get_version(subject, 1)
    assert found.schema.references == [reference], f"expected references [{reference}], found {found.schema.references}"
    assert fresh_client().get_schema(user_id).references == [reference], "expected the references by id too"
    referenced_by = fresh_client().get_referenced_by(f"{subject}-address", 1)
    assert referenced_by == [user_id], f"expected id {user_id} to reference the address, found {referenced_by}"
    missing = SchemaReference("kbtest.Address", f"{subject}-nowhere", 1)
    assert_error(error_of(client.register_schema, f"{subject}-2", Schema(user, "AVRO", [missing])), 422, 42201)
    assert_error(error_of(client.register_schema, f"{subject}-3", Schema(user, "AVRO")), 422, 42201)
    assert_error(error_of(fresh_client().delete_version, f"{subject}-address", 1), 422, 42206)


def test_json_and_protobuf_references(client, subject):
    address = json.dumps({"type": "object", "properties": {"city": {"type": "string"}}})
    client.register_schema(f"{subject}-address-json", Schema(address, "JSON"))
    person = json.dumps({"type": "object", "properties": {"home": {"$ref": "address.json"}}})
    ref = SchemaReference("address.json", f"{subject}-address-json", 1)
    assert client.register_schema(f"{subject}-json", Schema(person, "JSON", [ref])) > 0, "expected the JSON reference"

    client.register_schema(
        f"{subject}-address-proto", Schema(proto("message Address { string city = 1; }"), "PROTOBUF")
    )
    order = proto('import "kbtest/address.proto";\nmessage Order { Address ship_to = 1; }')
    proto_ref = SchemaReference("kbtest/address.proto", f"{subject}-address-proto", 1)
    order_id = client.register_schema(f"{subject}-proto", Schema(order, "PROTOBUF", [proto_ref]))
    serialized = client.get_schema(order_id, fmt="serialized")
    fd = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized.schema_str))
    field = fd.message_type[0].field[0]
    found = (list(fd.dependency), field.type_name)
    assert found == (["kbtest/address.proto"], ".kbtest.Address"), f"expected the import resolved, found {found}"
    assert_error(error_of(client.register_schema, f"{subject}-proto2", Schema(order, "PROTOBUF")), 422, 42201)


# -- serializers ----------------------------------------------------------------------------


def context(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def test_avro_serializer_round_trip(client, subject):
    schema = avro({"name": "id", "type": "int"}, {"name": "email", "type": ["null", "string"], "default": None})
    record = {"id": 7, "email": "a@example.org"}
    data = AvroSerializer(client, schema)(record, context(subject))
    decoded = AvroDeserializer(SchemaRegistryClient({"url": client.config()["url"]}))(data, context(subject))
    assert decoded == record, f"expected {record} back, found {decoded}"
    latest = client.get_latest_version(f"{subject}-value")
    assert latest.version == 1, f"expected the serializer to register version 1 of {subject}-value, found {latest}"


def test_json_serializer_round_trip(client, subject):
    schema = json.dumps(
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": "Order",
            "type": "object",
            "properties": {"id": {"type": "string"}, "amount": {"type": "number"}},
            "required": ["id"],
        }
    )
    record = {"id": "o-1", "amount": 12.5}
    data = JSONSerializer(schema, client)(record, context(subject))
    fresh = SchemaRegistryClient({"url": client.config()["url"]})
    decoded = JSONDeserializer(None, schema_registry_client=fresh)(data, context(subject))
    assert decoded == record, f"expected {record} back, found {decoded}"


def order_class(package: str):
    """A generated-like message class, built from a descriptor (no protoc here)."""
    fd = descriptor_pb2.FileDescriptorProto(
        name=f"{package}/order.proto", package=package, syntax="proto3", dependency=["google/protobuf/timestamp.proto"]
    )
    message = fd.message_type.add(name="Order")
    Field = descriptor_pb2.FieldDescriptorProto
    message.field.add(name="id", number=1, type=Field.TYPE_STRING, label=Field.LABEL_OPTIONAL)
    message.field.add(name="amount", number=2, type=Field.TYPE_INT64, label=Field.LABEL_OPTIONAL)
    message.field.add(
        name="at", number=3, type=Field.TYPE_MESSAGE, label=Field.LABEL_OPTIONAL, type_name=".google.protobuf.Timestamp"
    )
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(fd.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Order"))


def test_protobuf_serializer_round_trip(client, subject):
    order_type = order_class(f"kb{uuid.uuid4().hex[:8]}")
    order = order_type(id="o-1", amount=1250)
    order.at.seconds = 1_700_000_000
    data = ProtobufSerializer(order_type, client)(order, context(subject))
    fresh = SchemaRegistryClient({"url": client.config()["url"]})
    decoded = ProtobufDeserializer(order_type, schema_registry_client=fresh)(data, context(subject))
    assert decoded == order, f"expected {order} back, found {decoded}"


def test_protobuf_text_schema_serves_serializers_as_a_descriptor(client, subject):
    """A ``.proto`` text registered by hand; the serializer uses it as the latest version."""
    package = f"kb{uuid.uuid4().hex[:8]}"
    text = (
        f'syntax = "proto3";\npackage {package};\nimport "google/protobuf/timestamp.proto";\n'
        "// the order as the producer writes it\n"
        "message Order {\n  string id = 1;\n  int64 amount = 2;\n  google.protobuf.Timestamp at = 3;\n}\n"
    )
    client.register_schema(f"{subject}-value", Schema(text, "PROTOBUF"))
    order_type = order_class(package)
    order = order_type(id="o-2", amount=99)
    serializer = ProtobufSerializer(order_type, client, {"auto.register.schemas": False, "use.latest.version": True})
    data = serializer(order, context(subject))
    fresh = SchemaRegistryClient({"url": client.config()["url"]})
    decoded = ProtobufDeserializer(order_type, schema_registry_client=fresh)(data, context(subject))
    assert decoded == order, f"expected {order} back, found {decoded}"


# -- authentication -------------------------------------------------------------------------

CREDENTIALS = (
    Credential(user="writer", password="w-secret"),
    Credential(user="reader", password="r-secret", read_only=True),
    Credential(token="token-rw"),
    Credential(token="token-ro", read_only=True),
)


@pytest.fixture(scope="module")
def secured_registry(tmp_path_factory: pytest.TempPathFactory):
    log = tmp_path_factory.mktemp("secured-registry") / "registry.log"
    with EmbeddedSchemaRegistry(log_path=log, credentials=CREDENTIALS) as server:
        yield server


def secured_client(url: str, **auth: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": url, "max.retries": 0, **auth})


def bearer(token: str) -> dict[str, str]:
    return {
        "bearer.auth.credentials.source": "STATIC_TOKEN",
        "bearer.auth.token": token,
        "bearer.auth.logical.cluster": "lsrc-test",
    }


def test_basic_auth_and_bearer_tokens_with_read_only_callers(secured_registry, subject):
    url = secured_registry.url
    writer = secured_client(url, **{"basic.auth.user.info": "writer:w-secret"})
    schema_id = writer.register_schema(subject, Schema(USER_V1, "AVRO"))
    reader = secured_client(url, **{"basic.auth.user.info": "reader:r-secret"})
    assert reader.get_schema(schema_id).schema_str == USER_V1, "expected the read-only user to read"
    assert reader.lookup_schema(subject, Schema(USER_V1, "AVRO")).version == 1, "expected a lookup to be a read"
    assert reader.test_compatibility(subject, Schema(USER_V2, "AVRO")), "expected a compatibility test to be a read"
    assert_error(error_of(reader.register_schema, subject, Schema(USER_V2, "AVRO")), 403, 40301)
    assert_error(error_of(reader.set_compatibility, subject, "NONE"), 403, 40301)
    assert_error(error_of(reader.delete_subject, subject), 403, 40301)

    token_writer = secured_client(url, **bearer("token-rw"))
    assert token_writer.register_schema(subject, Schema(USER_V2, "AVRO")) > 0, "expected the token to write"
    token_reader = secured_client(url, **bearer("token-ro"))
    assert token_reader.get_versions(subject) == [1, 2], "expected the read-only token to read"
    assert_error(error_of(token_reader.delete_version, subject, 2), 403, 40301)

    refused = {
        "no credentials": secured_client(url),
        "wrong password": secured_client(url, **{"basic.auth.user.info": "writer:nope"}),
        "unknown user": secured_client(url, **{"basic.auth.user.info": "nobody:w-secret"}),
        "wrong token": secured_client(url, **bearer("token-nope")),
    }
    for name, caller in refused.items():
        error = error_of(caller.get_subjects)
        found = (error.http_status_code, error.error_code)
        assert found == (401, 40101), f"{name}: expected HTTP 401 error 40101, found {found}: {error.error_message}"
    log = secured_registry.log_path.read_text()
    assert "secret" not in log and "token-" not in log, f"expected no credential in the log, found {log!r}"
    cmdline = Path(f"/proc/{secured_registry.pid}/cmdline").read_bytes().decode(errors="replace")
    assert "secret" not in cmdline and "token-" not in cmdline, f"expected no credential in argv, found {cmdline!r}"


# -- the command line -----------------------------------------------------------------------


def cli(*args: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, dict]:
    result = cli_runner.run(list(args), env, timeout=60)
    lines = result.stdout.strip().splitlines()
    return result, json.loads(lines[-1]) if lines else {}


def test_cli_start_status_stop(tmp_path, subject):
    env = {**os.environ, "KAFKA_BATCH_STATE_DIR": str(tmp_path / "state")}
    env.pop("KAFKA_BATCH_SCHEMA_REGISTRY_AUTH", None)
    port = free_port()
    started, info = cli("schema-registry", "start", "--port", str(port), env=env)
    try:
        expected_url = f"http://127.0.0.1:{port}"
        assert started.returncode == 0, f"expected start to succeed, found {started.returncode}: {started.stderr}"
        assert info.get("url") == expected_url and info.get("running"), f"expected {expected_url} running, found {info}"
        assert f"embedded schema registry at {expected_url}" in started.stderr, f"found {started.stderr!r}"
        status, found = cli("schema-registry", "status", "--port", str(port), env=env)
        assert found.get("running") and found.get("pid") == info["pid"], f"expected pid {info['pid']}, found {found}"
        with SchemaRegistryClient({"url": expected_url, "max.retries": 0}) as client:
            assert client.register_schema(subject, Schema(USER_V1, "AVRO")) == 1, "expected id 1 on a new registry"
        again, _ = cli("schema-registry", "start", "--port", str(free_port()), env=env)
        assert again.returncode == 2 and "already running" in again.stderr, f"found {again.returncode}: {again.stderr}"
    finally:
        stopped, gone = cli("schema-registry", "stop", env=env)
    assert stopped.returncode == 0 and gone.get("stopped"), f"expected it stopped, found {gone}: {stopped.stderr}"
    assert not pid_alive(info["pid"]), f"expected pid {info['pid']} gone after stop"
    _, after = cli("schema-registry", "status", env=env)
    assert after == {"running": False}, f"expected nothing running after stop, found {after}"


def test_cli_takes_credentials_from_the_environment_only(tmp_path):
    env = {**os.environ, "KAFKA_BATCH_STATE_DIR": str(tmp_path / "state")}
    env["KAFKA_BATCH_SCHEMA_REGISTRY_AUTH"] = json.dumps([{"user": "ops", "password": "cli-pass"}])
    port = free_port()
    started, info = cli("schema-registry", "start", "--port", str(port), env=env)
    try:
        assert started.returncode == 0 and info.get("auth") == "basic", f"found {info}: {started.stderr}"
        state = (tmp_path / "state" / "schema-registry.json").read_text()
        cmdline = Path(f"/proc/{info['pid']}/cmdline").read_bytes().decode(errors="replace")
        for where, text in {
            "stdout": started.stdout,
            "stderr": started.stderr,
            "state": state,
            "argv": cmdline,
        }.items():
            assert "cli-pass" not in text, f"expected no password in {where}, found {text!r}"
        url = info["url"]
        assert_error(error_of(secured_client(url).get_subjects), 401, 40101)
        assert secured_client(url, **{"basic.auth.user.info": "ops:cli-pass"}).get_subjects() == [], "expected access"
    finally:
        cli("schema-registry", "stop", env=env)

    env["KAFKA_BATCH_SCHEMA_REGISTRY_AUTH"] = '{"user": "ops"}'
    refused, _ = cli("schema-registry", "start", "--port", str(free_port()), env=env)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1, f"expected one error line and exit 2, found {refused.stderr!r}"
    assert "credentials must be a JSON list" in lines[0], f"expected the shape named, found {lines[0]!r}"
    assert not (tmp_path / "state" / "schema-registry.json").exists(), "expected no state file after a refused start"


def test_review_cases_answer_as_confluent_does(client, subject):
    """Reordered keys and {"type": "int"} are the same schema; a first schema is compatible with
    a subject that has none; "latest" is the newest live version, also for deletes."""
    first = client.register_schema(subject, Schema(USER_V1, "AVRO"))
    reordered = json.dumps(dict(reversed(list(json.loads(USER_V1).items()))))
    assert client.register_schema(subject, Schema(reordered, "AVRO")) == first, "reordered keys: same id"
    versions = client.get_versions(subject)
    assert versions == [1], f"expected one version after registering a reordered copy, found {versions}"
    new = f"{subject}-new"
    assert client.test_compatibility(new, Schema(USER_V1, "AVRO")) is True, "a first schema is compatible"
    client.register_schema(subject, Schema(USER_V2, "AVRO"))
    client.delete_version(subject, 2)
    latest = client.get_latest_version(subject).version
    assert latest == 1, f"expected latest to be the live version 1 after deleting 2, found {latest}"
    assert client.delete_version(subject, "latest") == 1, "deleting latest deletes the newest live version"
