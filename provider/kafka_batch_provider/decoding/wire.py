"""The schema registry's wire format: what precedes every Avro, Protobuf or JSON Schema payload.

Confluent's serializers (and Karapace's, Redpanda's, Apicurio's in their compatible mode) write
``0x00`` (the magic byte), the schema id as 4 big-endian bytes, for Protobuf the index path of
the message type within its schema, then the payload. Pure: bytes in, ids and positions out.

:func:`schema_ids` reads the ids of a whole Arrow column at once (no Python per record), so a
batch is grouped by schema id before anything is decoded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

MAGIC = 0
#: Magic byte + schema id.
HEADER_BYTES = 5
#: The id of a null value (a tombstone): not an error, a row whose value columns are null.
TOMBSTONE = -1
#: The id of a value that is not in the wire format; its reason is in :attr:`Framing.problems`.
NOT_FRAMED = -2


@dataclass(frozen=True)
class Framing:
    """The schema id of each value of a column (or :data:`TOMBSTONE` / :data:`NOT_FRAMED`).

    :param problems: row -> why the value is not in the wire format.
    """

    ids: np.ndarray
    problems: dict[int, str]


def schema_ids(values: pa.Array) -> Framing:
    """Each value's schema id, read from its first 5 bytes for the whole column at once."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    values = values.cast(pa.binary()) if values.type != pa.binary() else values
    count = len(values)
    ids = np.full(count, NOT_FRAMED, dtype=np.int64)
    if count == 0:
        return Framing(ids, {})
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32, count=count + 1, offset=values.offset * 4)
    data_buffer = values.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    long_enough = valid & (lengths >= HEADER_BYTES)
    safe = np.where(long_enough, starts, 0)
    if len(data) < HEADER_BYTES:  # no value is long enough: nothing to read
        data = np.zeros(HEADER_BYTES, np.uint8)
    magic_ok = long_enough & (data[safe] == MAGIC)
    read = data[safe + 1].astype(np.int64) << 24 | data[safe + 2].astype(np.int64) << 16
    read |= data[safe + 3].astype(np.int64) << 8 | data[safe + 4].astype(np.int64)
    ids = np.where(magic_ok, read, ids)
    ids = np.where(valid, ids, TOMBSTONE)
    problems = {}
    for row in np.flatnonzero(valid & ~magic_ok).tolist():
        problems[row] = not_framed_reason(int(lengths[row]), int(data[starts[row]]) if lengths[row] else None)
    return Framing(ids, problems)


def not_framed_reason(length: int, first_byte: int | None) -> str:
    if length < HEADER_BYTES:
        return f"{length} byte(s), shorter than the wire format's 5-byte header (magic byte and schema id)"
    if first_byte == 1:  # confluent-kafka 2.16's schema GUIDs
        return "magic byte 0x01: a schema GUID, which this version does not read yet (only schema ids, 0x00)"
    return f"magic byte {first_byte:#04x}, not 0x00: not written by a schema-registry serializer"


def message_indexes(value: bytes, start: int = HEADER_BYTES) -> tuple[list[int], int]:
    """Protobuf: the index path of the message type (``[0]``: the schema's first message) and where
    the message starts. A count of zero is the short form of ``[0]``.

    :raises ValueError: the varints run past the value's end.
    """
    count, position = zigzag_varint(value, start)
    if count == 0:
        return [0], position
    if count < 0 or count > len(value):
        raise ValueError(f"message index count {count} is not a valid count")
    indexes = []
    for _ in range(count):
        index, position = zigzag_varint(value, position)
        indexes.append(index)
    return indexes, position


def zigzag_varint(value: bytes, position: int) -> tuple[int, int]:
    """A zig-zag encoded varint (Protobuf's ``sint32``) at ``position``, and the position after it."""
    result = shift = 0
    while True:
        if position >= len(value):
            raise ValueError("the message index runs past the end of the value")
        byte = value[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("the message index is not a valid varint")
    return (result >> 1) ^ -(result & 1), position
