"""Arrow record batches as PostgreSQL ``COPY ... (FORMAT csv)`` text, in compiled code. Pure.

A batch's rows reach its table by ``COPY``. Row by row from Python (psycopg's ``write_row``) that
was ~97,000 rows/s for Kafka records of ~120 bytes; here pyarrow's CSV writer (C++) writes the
text and PostgreSQL parses it. Kafka keys and values are ``bytea``: CSV has no bytes, so they are
written in ``bytea``'s hex form (``\\x0aff``), built with numpy in one pass
(:func:`bytea_hex`). Nested columns (structs, maps, lists of structs such as the ``headers``) are
``jsonb`` text, bytes in them as base64 (:func:`json_text`); lists of plain values are array
literals (:func:`array_text`). A null is an unquoted empty field, an empty string a quoted one:
``COPY``'s CSV rules.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from kafka_batch_provider.errors import ConfigError

#: Each byte's two hex digits, as one 16-bit word (little or big endian alike: the bytes are text).
HEX_PAIRS = np.frombuffer(b"".join(b"%02x" % i for i in range(256)), dtype=np.uint16)


def csv_text(batch: pa.RecordBatch | pa.Table) -> bytes:
    """``batch`` as ``COPY`` CSV (no header), each column in the text its PostgreSQL type reads."""
    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    columns = [as_text(table.column(i).combine_chunks(), name) for i, name in enumerate(table.column_names)]
    out = io.BytesIO()
    pa_csv.write_csv(pa.table(columns, names=table.column_names), out, pa_csv.WriteOptions(include_header=False))
    return out.getvalue()


def as_text(column: pa.Array, name: str = "") -> pa.Array:
    """A column as pyarrow's CSV writer can write it for PostgreSQL; a value PostgreSQL cannot hold
    is refused in one line naming the column (every retry would fail the same way)."""
    kind = column.type
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return bytea_hex(column.cast(pa.binary()))
    if pa.types.is_struct(kind) or pa.types.is_map(kind):
        return no_nul(json_text(column, name), name)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        inner = kind.value_type
        nested = pa.types.is_struct(inner) or pa.types.is_map(inner) or pa.types.is_list(inner)
        return no_nul(json_text(column, name) if nested else array_text(column), name)
    if pa.types.is_null(kind):
        return column.cast(pa.string())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return no_nul(column.cast(pa.string()), name)
    return column


def no_nul(text: pa.Array, name: str) -> pa.Array:
    """``text``, unless a value holds a NUL character (raw, or ``\u0000`` in JSON), which PostgreSQL's
    text and jsonb cannot store."""
    if len(text) and pc.any(pc.or_(pc.match_substring(text, "\x00"), pc.match_substring(text, "\\u0000"))).as_py():
        raise ConfigError(
            f"column {name}: a value holds a NUL character (\\u0000), which PostgreSQL text and jsonb cannot store"
        )
    return text


def bytea_hex(column: pa.Array) -> pa.Array:
    """Binary values as ``bytea``'s hex text, ``\\x`` then two digits a byte (nulls stay null)."""
    n = len(column)
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int32)[column.offset : column.offset + n + 1].astype(np.int64)
    data_buffer = column.buffers()[2]
    data = (
        np.frombuffer(data_buffer, dtype=np.uint8)[offsets[0] : offsets[-1]]
        if data_buffer is not None
        else np.empty(0, np.uint8)
    )
    out_offsets = 2 * (offsets - offsets[0]) + 2 * np.arange(n + 1)
    if out_offsets[-1] > np.iinfo(np.int32).max:  # (a batch of more than 1 GB of hex: large offsets)
        return pa.array([None if v is None else "\\x" + v.hex() for v in column.to_pylist()], pa.large_string())
    out = np.empty(int(out_offsets[-1]), dtype=np.uint8)
    starts = out_offsets[:-1]
    digits = np.ones(len(out), dtype=bool)
    digits[starts] = digits[starts + 1] = False
    out[starts], out[starts + 1] = ord("\\"), ord("x")
    out[digits] = HEX_PAIRS[data].view(np.uint8)
    text = pa.StringArray.from_buffers(n, pa.py_buffer(out_offsets.astype(np.int32)), pa.py_buffer(out))
    return pc.if_else(column.is_null(), pa.scalar(None, pa.string()), text) if column.null_count else text


def json_text(column: pa.Array, name: str = "") -> pa.Array:
    """Nested values as JSON text (``jsonb``); an empty list is ``[]`` without a Python object, and a
    list of flat structs of text and bytes (the Kafka headers) is turned into JSON once per distinct
    value (:func:`distinct_rows`): a producer's headers mostly repeat."""
    if (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)) and len(column):
        empty = pc.fill_null(pc.equal(pc.list_value_length(column), 0), False)
        if pc.all(pc.or_(empty, column.is_null())).as_py():  # (Kafka headers: mostly none)
            return pc.if_else(column.is_null(), pa.scalar(None, pa.string()), pa.scalar("[]"))
        found = distinct_rows(column)
        if found is not None:
            firsts, indices = found
            return pc.take(json_texts(column.take(firsts), name), indices)
    return json_texts(column, name)


def json_texts(column: pa.Array, name: str) -> pa.Array:
    """Each value's JSON, made by Python's ``json`` (bytes as base64, NaN refused)."""
    try:
        texts = [
            None if v is None else json.dumps(v, default=jsonable, separators=(",", ":"), allow_nan=False)
            for v in column.to_pylist()
        ]
    except ValueError:
        raise ConfigError(
            f"column {name}: a nested value holds NaN or an infinite number, which jsonb cannot store"
        ) from None
    return pa.array(texts, pa.string())


def distinct_rows(column: pa.Array) -> tuple[pa.Array, pa.Array] | None:
    """For a list of structs whose fields are all text or bytes: the first row of each distinct
    value and each row's index among those (``None`` for other types). A row's identity is its
    elements' fields, each length-prefixed (so no content can pass for a separator), in compiled code."""
    kind = column.type
    item = kind.value_type
    if not (pa.types.is_struct(item) and all(t in TEXTUAL for t in (f.type for f in item))):
        return None
    column = column.cast(pa.list_(item)) if pa.types.is_large_list(kind) else column
    elements = column.flatten()  # (the elements of the non-null rows, in order)
    parts = [length_prefixed(pc.struct_field(elements, [i])) for i in range(item.num_fields)]
    if elements.null_count:  # (a null element: its own marker)
        parts.append(pc.if_else(elements.is_null(), large(b"N"), large(b"V")))
    identity = pc.binary_join_element_wise(*parts, large(b"")) if len(parts) > 1 else parts[0]
    offsets = pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False).cumsum()
    grouped = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], offsets]), pa.int32()), identity)
    rows = pc.binary_join(grouped, large(b""))
    rows = pc.if_else(column.is_null(), large(b"null"), pc.binary_join_element_wise(large(b"["), rows, large(b"")))
    encoded = pc.dictionary_encode(rows)
    indices = encoded.indices
    firsts = pc.index_in(encoded.dictionary, rows)  # (the first row of each distinct value)
    return firsts, indices


TEXTUAL = (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())


def length_prefixed(values: pa.Array) -> pa.Array:
    """Each value (text or bytes) as its length (int32, big-endian; -1 for null) and its bytes, as
    ``large_binary`` (a chunk's values may hold more than 2 GiB between them): PostgreSQL's binary
    ``COPY`` fields (output/postgres_binary.py), and identities no content can forge (:func:`distinct_rows`)."""
    values = values.cast(pa.large_binary())
    lengths = pc.fill_null(pc.binary_length(values), -1).to_numpy(zero_copy_only=False).astype(">i4")
    prefix = fixed_width(lengths.view(np.uint8), 4, len(values)).cast(pa.large_binary())
    return pc.binary_join_element_wise(prefix, pc.fill_null(values, large(b"")), large(b""))


def fixed_width(data: np.ndarray, width: int, n: int) -> pa.Array:
    """``n`` values of ``width`` bytes each, back to back in ``data``, as a binary array."""
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, pa.py_buffer(data.tobytes())])
    return fixed.cast(pa.binary())


def large(value: bytes) -> pa.Scalar:
    return pa.scalar(value, pa.large_binary())


def array_text(column: pa.Array) -> pa.Array:
    """Lists of plain values as PostgreSQL array literals (``{1,2}``, ``{"a","b\\"c"}``)."""

    def element(value: Any) -> str:
        if value is None:
            return "NULL"
        if isinstance(value, (bytes, bytearray)):
            value = "\\x" + bytes(value).hex()
        if isinstance(value, bool):
            return "t" if value else "f"
        text = str(value)
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return pa.array(
        [None if v is None else "{" + ",".join(element(e) for e in v) + "}" for v in column.to_pylist()],
        pa.string(),
    )


def jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    return str(value)
