"""Many Avro values of one schema decoded at once by a compiled reader, checked record by record.

Decoding one value at a time in Python (fastavro) costs ~20 µs a record: four times what the
whole bytes pipeline spends on it (docs/performance.md). The registry's payloads are Avro's
plain binary encoding, which is exactly what an Avro object container file's data block holds:
the payloads of one schema, put one after the other behind a container header naming that
schema, are a file that a compiled reader decodes into Arrow in one call. polars-avro's reader
(Rust, arrow-avro) does that at ~0.5 µs a record.

A block has no record boundaries, so one corrupt value would shift every value after it, and
the reader reports that only sometimes. So each decoded row is checked: the size its values
take in Avro's binary encoding (:func:`encoded_sizes`) must be the size of its payload. A block
whose rows do not all match is not used; the caller decodes its values one by one (fastavro),
which finds the culprits. The check is conservative: a producer that encodes a value in more
bytes than needed (an array in several blocks, a padded decimal) only costs that speed.

Used for the values written with the batch's reader schema itself (most of a batch: the reader
schema is the subject's latest version). Values of other schema ids need Avro's resolution
rules (defaults, promotions), which stay fastavro's. Schemas with parts the check or the
columns do not cover (a union of several types, ``uuid``, ``duration``, a decimal above 38
digits, a record without fields, a fixed of size 0, null but in a union or as a field of the value's
record) are decoded one by one too (:func:`unsupported`).
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_batch_provider.decoding.wire import HEADER_BYTES

#: Below this many values, decoding one by one costs less than setting up a block.
MIN_VALUES = 16
#: The container's sync marker: any 16 bytes, written after the header and the block.
SYNC = b"kafka-batch-sync"
INTEGERS = ("int", "long")
#: Logical types whose values are the plain int/long they annotate (what the check sizes).
INTEGER_LOGICAL = {
    ("date", "int"),
    ("time-millis", "int"),
    ("time-micros", "long"),
    ("timestamp-millis", "long"),
    ("timestamp-micros", "long"),
    ("local-timestamp-millis", "long"),
    ("local-timestamp-micros", "long"),
}
#: Varint sizes: a value below 2**7 takes one byte, below 2**14 two, ...
VARINT_LIMITS = np.array([1 << (7 * n) for n in range(1, 10)], dtype=np.uint64)
POWERS_OF_TWO = np.array([1 << n for n in range(64)], dtype=np.uint64)


def native_reader() -> Any | None:
    """polars-avro's native reader class, or ``None`` where it is not installed (then every value is
    decoded one by one). Its Python wrapper builds a polars frame first; the native class hands
    Arrow over as it is, at twice the speed, and the pinned version (constraints.txt) is tested."""
    try:
        from polars_avro._avro_rs import AvroSource
    except ImportError:
        return None
    return AvroSource


class AvroBlocks:
    """Decodes values written with ``schema`` (parsed, self-contained; named types ``named``) in blocks."""

    def __init__(self, schema: Any, named: Mapping[str, Any]) -> None:
        self.schema = schema
        self.named = named
        self.header = container_header(json.dumps(namespaced(schema)))
        self.reader = native_reader()

    def read(self, values: pa.Array, columns: pa.Schema) -> pa.Table | None:
        """The decoded rows of ``values`` (whole wire-format values, all of this schema's id) as
        ``columns``, or ``None`` when the block cannot be trusted: the reader failed, a row's size is
        not its payload's, or a value is one the one-by-one decoding refuses (a decimal wider than
        its precision, a date or time outside what it reads): the same record must not be a row in
        one batch and a dead letter in another."""
        if self.reader is None:
            return None
        try:
            table = self.native(values)
            if table.num_rows != len(values):
                return None
            expected = pc.binary_length(values).to_numpy(zero_copy_only=False) - HEADER_BYTES
            sizes = record_sizes(table, self.schema, self.named)  # raises ValueError on a value out of range
            if not np.array_equal(sizes, expected):
                # fastavro writes a decimal of -2**(8k-1) in one byte more than Java does: either size is right
                padded = record_sizes(table, self.schema, self.named, padded=True)
                if not np.all((sizes == expected) | (padded == expected)):
                    return None
            return table.cast(columns)
        except Exception:  # the reader's AvroError, a cast out of range, a refused value: one by one
            return None

    def native(self, values: pa.Array) -> pa.Table:
        """The compiled reader's rows of ``values``, as it gives them (Avro's own units and types)."""
        body = data_of(pc.binary_slice(values, HEADER_BYTES, 2**31 - 1))
        blob = b"".join([self.header, varint(len(values)), varint(body.size), memoryview(body), SYNC])
        source = self.reader([lambda: contextlib.nullcontext(io.BytesIO(blob))], False, False)
        # One batch of all the rows, and never a second: asked for more, the reader spins forever
        # on a block with bytes left after its rows (a value with trailing bytes).
        return pa.Table.from_batches([pa.record_batch(next(iter(source.batch_iter(len(values), None))))])


def unsupported(schema: Any, named: Mapping[str, Any], seen: frozenset[str] = frozenset()) -> str | None:
    """What in a (parsed) schema keeps its values from being decoded in blocks, or ``None``."""
    if isinstance(schema, str):
        if schema in ("boolean", "float", "double", "string", "bytes", *INTEGERS):
            return None
        if schema == "null":  # (a union's null branch and a null field of the value's record never get here)
            return "the type null inside a record, array or map"
        if schema in seen:
            return f"{schema} refers to itself"
        if schema not in named:
            return f"the named type {schema}"
        return unsupported(named[schema], named, seen | {schema})
    if isinstance(schema, list):
        others = [branch for branch in schema if branch != "null"]
        if len(schema) != 2 or len(others) != 1:
            return "a union that is not [null, T]"
        return unsupported(others[0], named, seen)
    kind, logical = schema.get("type"), schema.get("logicalType")
    if isinstance(kind, (Mapping, list)):
        return unsupported(kind, named, seen)
    if logical == "decimal":
        return None if int(schema.get("precision", 0)) <= 38 else "a decimal of more than 38 digits"
    if logical in ("uuid", "duration"):
        return f"the logical type {logical}"
    if kind in ("record", "error"):
        # The compiled reader takes a null field in the value's record (only: elsewhere it fails, as on a
        # record without fields), but not a record of nothing else (its values take no bytes).
        fields = [f for f in schema["fields"] if seen or f["type"] not in ("null", {"type": "null"})]
        if not fields:
            return f"the record {schema.get('name')} without fields (but null ones)"
        inner = seen | {str(schema.get("name"))}
        return next((found for f in fields if (found := unsupported(f["type"], named, inner))), None)
    if kind == "array":
        return unsupported(schema["items"], named, seen)
    if kind == "map":
        return unsupported(schema["values"], named, seen)
    if kind == "fixed" and int(schema.get("size", 0)) == 0:  # the compiled reader fails on it (SystemError)
        return f"the fixed {schema.get('name')} of size 0"
    if kind in ("enum", "fixed"):
        return None
    return unsupported(kind, named, seen) if isinstance(kind, str) else f"the type {kind!r}"


def record_sizes(
    table: pa.Table, schema: Mapping[str, Any], named: Mapping[str, Any], padded: bool = False
) -> np.ndarray:
    """Each row's size in Avro's binary encoding: the sum of its fields' (``padded``: :func:`decimal_lengths`)."""
    total = np.zeros(table.num_rows, dtype=np.int64)
    for avro_field in schema["fields"]:
        column = table.column(avro_field["name"])
        total += encoded_sizes(
            column.combine_chunks() if column.num_chunks != 1 else column.chunk(0), avro_field["type"], named, padded
        )
    return total


def encoded_sizes(array: pa.Array, schema: Any, named: Mapping[str, Any], padded: bool = False) -> np.ndarray:
    """The size of each value of ``array`` (as the native reader gives ``schema``) in Avro's binary
    encoding, as every serializer writes it (shortest varints; an array or map in one block; a
    decimal in :func:`decimal_lengths`, ``padded`` or not)."""
    count = len(array)
    if isinstance(schema, str):
        if schema in named:
            return encoded_sizes(array, named[schema], named, padded)
        return primitive_sizes(array, schema)
    if isinstance(schema, list):  # [null, T]: the branch's index (one byte), then the value if not null
        inner = next(branch for branch in schema if branch != "null")
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        return 1 + np.where(valid, encoded_sizes(array, inner, named, padded), 0)
    kind, logical = schema.get("type"), schema.get("logicalType")
    if isinstance(kind, (Mapping, list)) or (isinstance(kind, str) and kind in named):
        return encoded_sizes(array, named.get(kind, kind) if isinstance(kind, str) else kind, named, padded)
    if logical == "decimal":
        check_precision(array, int(schema["precision"]))
    if kind == "fixed":
        return np.full(count, int(schema["size"]), dtype=np.int64)
    if logical == "decimal" and kind == "bytes":
        length = decimal_lengths(array, padded)
        return varint_sizes(length) + length
    if (logical, kind) in INTEGER_LOGICAL:
        values = integers(array)
        low, high = PYTHON_RANGE[logical]
        if len(values) and (values.min() < low or values.max() > high):
            raise ValueError(f"a {logical} value outside what Python's datetime reads")
        return varint_sizes(values)
    if kind in ("record", "error"):
        total = np.zeros(count, dtype=np.int64)
        for index, avro_field in enumerate(schema["fields"]):
            total += encoded_sizes(array.field(index), avro_field["type"], named, padded)
        return total
    if kind == "enum":
        return varint_sizes(np.asarray(array.indices.fill_null(0), dtype=np.int64))
    if kind == "array":
        return block_sizes(array, encoded_sizes(array.values, schema["items"], named, padded))
    if kind == "map":
        entries = array.values  # the map's key/value structs, all rows' entries one after the other
        per_entry = primitive_sizes(entries.field(0), "string") + encoded_sizes(
            entries.field(1), schema["values"], named, padded
        )
        return block_sizes(array, per_entry)
    return primitive_sizes(array, kind)


def primitive_sizes(array: pa.Array, kind: str) -> np.ndarray:
    count = len(array)
    if kind == "null":
        return np.zeros(count, dtype=np.int64)
    if kind == "boolean":
        return np.ones(count, dtype=np.int64)
    if kind == "float":
        return np.full(count, 4, dtype=np.int64)
    if kind == "double":
        return np.full(count, 8, dtype=np.int64)
    if kind in INTEGERS:
        return varint_sizes(integers(array))
    if kind in ("string", "bytes"):
        length = np.asarray(pc.binary_length(array).fill_null(0), dtype=np.int64)
        return varint_sizes(length) + length
    raise ValueError(f"no encoded size for the Avro type {kind!r}")


def block_sizes(array: pa.ListArray | pa.MapArray, item_sizes: np.ndarray) -> np.ndarray:
    """An array or map of n items: n (a varint), the items, then 0 (one byte); an empty one is just 0."""
    offsets = np.asarray(array.offsets, dtype=np.int64)
    running = np.concatenate([[0], np.cumsum(item_sizes, dtype=np.int64)])
    items = running[offsets[1:]] - running[offsets[:-1]]
    counts = np.diff(offsets)
    return np.where(counts > 0, varint_sizes(counts) + items + 1, 1)


#: What fastavro (Python's datetime) reads of each logical type, in its own unit: a value outside
#: is refused one by one, so a block holding one is refused too.
_DAYS = (-719_162, 2_932_896)  # 0001-01-01 .. 9999-12-31, days from 1970-01-01
_MS = (-62_135_596_800_000, 253_402_300_799_999)
PYTHON_RANGE = {
    "date": _DAYS,
    "time-millis": (0, 86_399_999),
    "time-micros": (0, 86_399_999_999),
    "timestamp-millis": _MS,
    "local-timestamp-millis": _MS,
    "timestamp-micros": (_MS[0] * 1000, _MS[1] * 1000 + 999),
    "local-timestamp-micros": (_MS[0] * 1000, _MS[1] * 1000 + 999),
}


def check_precision(array: pa.Array, precision: int) -> None:
    """The compiled reader does not check a decimal's precision: a value of more digits is refused here.

    :raises ValueError: an unscaled value of ``precision`` digits or more.
    """
    words = np.frombuffer(array.buffers()[1], dtype=np.uint64)[2 * array.offset : 2 * (array.offset + len(array))]
    low, high = words[0::2], words[1::2]
    negative = high.view(np.int64) < 0
    low_magnitude = np.where(negative, ~low + np.uint64(1), low)  # two's complement: -v = ~v + 1
    high_magnitude = np.where(negative, ~high + (low_magnitude == 0).astype(np.uint64), high)
    limit = 10**precision
    limit_high, limit_low = np.uint64(limit >> 64), np.uint64(limit & (2**64 - 1))
    too_wide = (high_magnitude > limit_high) | ((high_magnitude == limit_high) & (low_magnitude >= limit_low))
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    if np.any(too_wide & valid):
        raise ValueError(f"a decimal of more than {precision} digits")


def integers(array: pa.Array) -> np.ndarray:
    """An int, long, date, time or timestamp column as its plain integers (nulls as 0)."""
    width = pa.int64() if array.type.bit_width == 64 else pa.int32()
    return np.asarray(array.view(width).fill_null(0), dtype=np.int64)


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes each long takes zig-zag encoded as a varint."""
    values = np.asarray(values, dtype=np.int64)
    zigzag = ((values << 1) ^ (values >> 63)).view(np.uint64)
    return np.searchsorted(VARINT_LIMITS, zigzag, side="right").astype(np.int64) + 1


def decimal_lengths(array: pa.Array, padded: bool = False) -> np.ndarray:
    """Bytes of each decimal's unscaled value as the shortest two's complement (Java's BigInteger),
    or with ``padded`` as fastavro (confluent-kafka's Python serializers) writes it: the same but
    for -2**(8k-1), in k + 1 bytes."""
    words = np.frombuffer(array.buffers()[1], dtype=np.uint64)[2 * array.offset : 2 * (array.offset + len(array))]
    low, high = words[0::2], words[1::2]
    negative = high.view(np.int64) < 0
    low, high = np.where(negative, ~low, low), np.where(negative, ~high, high)  # -v-1: the same bits to store
    bits = np.where(high > 0, 64 + bit_lengths(high), bit_lengths(low))
    if padded:  # -v-1 = 2**(8k-1) - 1: all ones below bit 8k-1
        ones = np.uint64(2**64 - 1)
        all_ones = np.where(
            high > 0, (low == ones) & ((high & (high + np.uint64(1))) == 0), (low & (low + np.uint64(1))) == 0
        )
        return bits // 8 + 1 + (negative & (bits % 8 == 7) & all_ones)
    return bits // 8 + 1


def bit_lengths(values: np.ndarray) -> np.ndarray:
    return np.searchsorted(POWERS_OF_TWO, values, side="right").astype(np.int64)


def data_of(payloads: pa.Array) -> pa.Buffer:
    """The bytes of a binary column's values, one after the other (no copy)."""
    offsets = np.frombuffer(payloads.buffers()[1], dtype=np.int32, count=len(payloads) + 1, offset=payloads.offset * 4)
    data = payloads.buffers()[2]
    if data is None:
        return pa.py_buffer(b"")
    return data.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))


def namespaced(avro: Any) -> Any:
    """A parsed schema with each named type defined by its short name and namespace (an empty one for
    the null namespace): fastavro writes full names (``lab.Colour``), which Avro allows and the
    compiled reader does not resolve."""
    if isinstance(avro, list):
        return [namespaced(branch) for branch in avro]
    if not isinstance(avro, Mapping):
        return avro
    found = {k: namespaced(v) if k in ("type", "items", "values") else v for k, v in avro.items()}
    if "fields" in avro:
        found["fields"] = [{**f, "type": namespaced(f["type"])} for f in avro["fields"]]
    if avro.get("type") in ("record", "error", "enum", "fixed") and "name" in avro:
        namespace, _, found["name"] = str(avro["name"]).rpartition(".")
        found["namespace"] = namespace
    return found


def container_header(schema_text: str) -> bytes:
    """An Avro object container file's header: magic, metadata (schema, no codec), sync marker."""
    metadata = [(b"avro.schema", schema_text.encode()), (b"avro.codec", b"null")]
    encoded = b"".join(varint(len(key)) + key + varint(len(value)) + value for key, value in metadata)
    return b"Obj\x01" + varint(len(metadata)) + encoded + varint(0) + SYNC


def varint(value: int) -> bytes:
    """A long as Avro writes it: zig-zag, then 7 bits a byte."""
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag & ~0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)
