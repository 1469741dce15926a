"""The wire format's framing, checked against confluent-kafka's own encoder of it."""

from __future__ import annotations

import io
import struct

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.common.serde import SchemaId

from kafka_batch_provider.decoding.wire import NOT_FRAMED, TOMBSTONE, message_indexes, schema_ids


def framed(schema_id: int, body: bytes = b"payload") -> bytes:
    return struct.pack(">bI", 0, schema_id) + body


def test_schema_ids_of_a_column_are_read_at_once_with_tombstones_and_unframed_values_apart():
    values = pa.array(
        [framed(1), None, framed(2**31 + 7), b"\x01abcdefgh", b"\x00\x00", b"", framed(42, b"")], pa.binary()
    )
    found = schema_ids(values)
    expected = [1, TOMBSTONE, 2**31 + 7, NOT_FRAMED, NOT_FRAMED, NOT_FRAMED, 42]
    assert found.ids.tolist() == expected, f"expected ids {expected}, found {found.ids.tolist()}"
    assert sorted(found.problems) == [3, 4, 5], f"expected problems on rows 3, 4, 5, found {found.problems}"
    assert "magic byte 0x01" in found.problems[3]
    assert "2 byte(s)" in found.problems[4] and "0 byte(s)" in found.problems[5]


def test_schema_ids_of_a_sliced_and_of_an_all_null_column():
    values = pa.array([b"junk", framed(5), framed(6)], pa.binary()).slice(1)
    assert schema_ids(values).ids.tolist() == [5, 6]
    assert schema_ids(pa.array([None, None], pa.binary())).ids.tolist() == [TOMBSTONE, TOMBSTONE]
    assert schema_ids(pa.array([], pa.binary())).ids.tolist() == []
    assert schema_ids(pa.array([b"", b""], pa.binary())).ids.tolist() == [NOT_FRAMED, NOT_FRAMED]


@pytest.mark.parametrize("indexes", [[0], [1], [3, 0, 2], [70, 200], [0, 0]])
def test_protobuf_message_indexes_as_confluent_kafka_writes_them(indexes):
    header = SchemaId("PROTOBUF", 9, message_indexes=indexes).id_to_bytes()
    value = header + b"\x08\x01"
    found, position = message_indexes(value)
    expected = indexes
    assert found == expected, f"expected indexes {expected}, found {found}"
    assert value[position:] == b"\x08\x01"
    reread = SchemaId("PROTOBUF")
    reread.from_bytes(io.BytesIO(value))
    assert reread.message_indexes == found


def test_a_message_index_that_runs_past_the_value_is_an_error():
    with pytest.raises(ValueError, match="past the end"):
        message_indexes(framed(1, b"\x04\x02"))  # says two indexes, has one
