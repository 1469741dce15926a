"""Arrow record batches as PostgreSQL's binary ``COPY`` format, in compiled code. Pure.

The text form (:mod:`kafka_batch_provider.output.postgres_copy`) makes the server parse every value,
and a Kafka key or value twice its size in hex. The binary form hands it each value as it stores
it: a row is its field count (int16) then, per field, its length (int32, -1 for null) and its bytes.
pyarrow's compute functions build each column's fields (a 4-byte big-endian length joined to the
payload) and join them row by row: no Python object per value, except JSON for nested columns.

Payloads, as PostgreSQL's ``*_recv`` functions read them: ``bytea`` and ``text`` their bytes;
integers and floats big-endian; ``boolean`` one byte; ``timestamp``/``timestamptz`` microseconds
and ``date`` days since 2000-01-01 (int64, int32); ``jsonb`` a version byte (1) and the JSON text.
A column of any other type (``numeric``, ``time``, arrays) is not encoded here: the batch goes as
text (:func:`encodable`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_batch_provider.output.postgres_copy import fixed_width, json_text, large, length_prefixed, no_nul

SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
TRAILER = (-1).to_bytes(2, "big", signed=True)
#: 2000-01-01, PostgreSQL's epoch, in microseconds and days since 1970-01-01.
EPOCH_MICROS = 946_684_800 * 1_000_000
EPOCH_DAYS = 10_957
#: Arrow type -> (numpy big-endian dtype) for the fixed-width columns.
FIXED = {
    pa.int8(): ">i2", pa.int16(): ">i2", pa.int32(): ">i4", pa.int64(): ">i8",
    pa.uint8(): ">i2", pa.uint16(): ">i4", pa.uint32(): ">i8",
    pa.float32(): ">f4", pa.float64(): ">f8", pa.bool_(): ">u1",
}  # fmt: skip


def encodable(schema: pa.Schema) -> bool:
    """Whether every column of ``schema`` has a binary form here."""
    return all(encodable_type(f.type) for f in schema)


def encodable_type(kind: pa.DataType) -> bool:
    if pa.types.is_timestamp(kind):  # (nanoseconds go as text: the server rounds them, as it rounds text)
        return kind.unit != "ns"
    if kind in FIXED or pa.types.is_date32(kind):
        return True
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return True
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return True
    if pa.types.is_struct(kind) or pa.types.is_map(kind):
        return True
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):  # (jsonb for nested values only)
        inner = kind.value_type
        return pa.types.is_struct(inner) or pa.types.is_map(inner) or pa.types.is_list(inner)
    return False


def binary_rows(batch: pa.RecordBatch | pa.Table) -> bytes:
    """``batch``'s rows in the binary ``COPY`` format (without the signature and the trailer)."""
    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    if table.num_rows == 0:
        return b""
    # (large_binary: a chunk's rows may hold more than 2 GiB between them, beyond int32 offsets)
    count = large(len(table.column_names).to_bytes(2, "big"))
    fields = [field_bytes(table.column(i).combine_chunks(), name) for i, name in enumerate(table.column_names)]
    rows = pc.binary_join_element_wise(count, *fields, large(b""))
    offsets = np.frombuffer(rows.buffers()[1], dtype=np.int64)[rows.offset : rows.offset + len(rows) + 1]
    return bytes(memoryview(rows.buffers()[2])[offsets[0] : offsets[-1]])


def field_bytes(column: pa.Array, name: str = "") -> pa.Array:
    """Each value's field: its length (int32, big-endian; -1 for null) and its bytes."""
    return length_prefixed(payload_of(column, name))


def payload_of(column: pa.Array, name: str) -> pa.Array:
    """The column's values as the server reads them (binary; nulls stay null)."""
    kind = column.type
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return column.cast(pa.large_binary())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return no_nul(column.cast(pa.large_string()), name).cast(pa.large_binary())
    if pa.types.is_struct(kind) or pa.types.is_map(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        text = no_nul(json_text(column, name), name).cast(pa.binary())
        return pc.binary_join_element_wise(pa.scalar(b"\x01"), text, b"")  # (jsonb's version 1)
    if pa.types.is_timestamp(kind):
        micros = column.cast(pa.timestamp("us", kind.tz)).cast(pa.int64())
        values = pc.subtract(micros, EPOCH_MICROS)
        dtype = ">i8"
    elif pa.types.is_date32(kind):
        values, dtype = pc.subtract(column.cast(pa.int32()), EPOCH_DAYS), ">i4"
    else:
        values, dtype = column, FIXED[kind]
    numbers = pc.fill_null(values, False if kind == pa.bool_() else 0).to_numpy(zero_copy_only=False)
    width = np.dtype(dtype).itemsize
    encoded = fixed_width(numbers.astype(dtype).view(np.uint8), width, len(column))
    return pc.if_else(column.is_null(), pa.scalar(None, pa.binary()), encoded) if column.null_count else encoded
