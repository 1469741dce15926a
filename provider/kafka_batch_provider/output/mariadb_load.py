"""Arrow record batches as the text ``LOAD DATA`` reads by default, in compiled code. Pure.

MariaDB's and MySQL's fastest bulk path is ``LOAD DATA LOCAL INFILE``: the client sends a file and
the server parses it. Its default format is one line a row, fields separated by a tab, ``\\N`` for a
null, and a backslash escaping a backslash, tab, newline or NUL inside a field (``\\\\``, ``\\t``,
``\\n``, ``\\0``). Bytes need no other encoding: the file is loaded as ``CHARACTER SET binary``, so a
Kafka key or value reaches its ``BLOB`` as it is and text reaches ``utf8mb4`` unchanged. Each column
is turned into such fields by pyarrow's compute functions, then joined row by row
(:func:`load_text`): no Python object per value, except JSON for nested columns
(:func:`~kafka_batch_provider.output.postgres_copy.json_text`, as for PostgreSQL).

Timestamps are written as their UTC wall time (``DATETIME(6)`` has no zone), booleans as 0/1.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_batch_provider.output.postgres_copy import json_text

#: What a field must escape, in the order it is escaped (the backslash first).
ESCAPES = ((b"\\", b"\\\\"), (b"\t", b"\\t"), (b"\n", b"\\n"), (b"\x00", b"\\0"))
NULL = b"\\N"


def load_text(batch: pa.RecordBatch | pa.Table) -> bytes:
    """``batch`` as ``LOAD DATA``'s default text, its columns in order."""
    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    if table.num_rows == 0:
        return b""
    fields = [
        pc.fill_null(field_text(table.column(i).combine_chunks(), name), NULL)
        for i, name in enumerate(table.column_names)
    ]
    rows = pc.binary_join_element_wise(*fields, b"\t") if len(fields) > 1 else fields[0]
    lines = pc.binary_join_element_wise(rows, pa.scalar(b""), b"\n")  # each row and its newline
    return contiguous_bytes(lines)


def field_text(column: pa.Array, name: str = "") -> pa.Array:
    """A column's values as ``LOAD DATA`` fields (binary; nulls stay null)."""
    kind = column.type
    if pa.types.is_struct(kind) or pa.types.is_map(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return escaped(json_text(column, name).cast(pa.binary()))
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return escaped(column.cast(pa.binary()))
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return escaped(column.cast(pa.string()).cast(pa.binary()))
    if pa.types.is_timestamp(kind):
        column = column.cast(pa.timestamp(kind.unit))  # (its UTC wall time)
    elif pa.types.is_boolean(kind):
        column = column.cast(pa.int8())
    elif pa.types.is_null(kind):
        return pa.nulls(len(column), pa.binary())
    return column.cast(pa.string()).cast(pa.binary())


def escaped(values: pa.Array) -> pa.Array:
    for plain, escape in ESCAPES:
        values = pc.replace_substring(values, plain, escape)
    return values


def contiguous_bytes(values: pa.Array) -> bytes:
    """The bytes of a binary array without nulls, back to back."""
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset : values.offset + len(values) + 1]
    return bytes(memoryview(values.buffers()[2])[offsets[0] : offsets[-1]])
