"""PostgreSQL's binary COPY format built in compiled code (output/postgres_binary.py), compared with
psycopg's own encoder (the reference: what the server's *_recv functions read) on generated rows."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_batch_provider.output.postgres_binary import binary_rows, encodable

pytestmark = pytest.mark.check

#: Arrow type, PostgreSQL type (as the sink declares it), values of it.
COLUMNS = [
    (pa.binary(), "bytea", st.binary(max_size=40)),
    (
        pa.string(),
        "text",
        st.text(st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]), max_size=20),
    ),
    (pa.int8(), "int2", st.integers(-(2**7), 2**7 - 1)),
    (pa.int16(), "int2", st.integers(-(2**15), 2**15 - 1)),
    (pa.int32(), "int4", st.integers(-(2**31), 2**31 - 1)),
    (pa.int64(), "int8", st.integers(-(2**63), 2**63 - 1)),
    (pa.uint32(), "int8", st.integers(0, 2**32 - 1)),
    (pa.float64(), "float8", st.floats(allow_nan=False)),
    (pa.float32(), "float4", st.floats(width=32, allow_nan=False)),
    (pa.bool_(), "bool", st.booleans()),
    (pa.date32(), "date", st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31))),
    (
        pa.timestamp("us", tz="UTC"),
        "timestamptz",
        st.datetimes(dt.datetime(1, 1, 2), dt.datetime(9999, 12, 30)).map(lambda d: d.replace(tzinfo=dt.timezone.utc)),
    ),
    (pa.timestamp("us"), "timestamp", st.datetimes(dt.datetime(1, 1, 2), dt.datetime(9999, 12, 30))),
    (
        pa.timestamp("ms", tz="Europe/Paris"),  # (another unit and zone: the same instant)
        "timestamptz",
        st.datetimes(dt.datetime(1900, 1, 2), dt.datetime(9999, 12, 30)).map(
            lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000, tzinfo=dt.timezone.utc)
        ),
    ),
    (pa.uint8(), "int2", st.integers(0, 2**8 - 1)),
    (pa.uint16(), "int4", st.integers(0, 2**16 - 1)),
]


def reference(rows: list[list], pg_types: list[str]) -> bytes:
    """psycopg's binary COPY rows of the same values."""
    from psycopg._copy_base import format_row_binary
    from psycopg.adapt import Transformer
    from psycopg.postgres import types
    from psycopg.pq import Format

    transformer = Transformer()
    transformer.set_dumper_types([types.get(name).oid for name in pg_types], Format.BINARY)
    out = bytearray()
    for row in rows:
        format_row_binary(row, transformer, out)
    return bytes(out)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), picked=st.lists(st.sampled_from(range(len(COLUMNS))), min_size=1, max_size=6))
def test_rows_are_encoded_byte_for_byte_as_psycopg_encodes_them(data, picked):
    n = data.draw(st.integers(0, 8))
    offset = data.draw(st.integers(0, 2))  # (a slice of a longer batch, as the merge hands them)
    columns = [COLUMNS[i] for i in picked]
    values = [[data.draw(st.none() | strategy) for _ in range(n)] for _, _, strategy in columns]
    padded = {f"c{i}": pa.array([None] * offset + v, kind) for i, ((kind, _, _), v) in enumerate(zip(columns, values))}
    table = pa.table(padded).slice(offset)
    assert encodable(table.schema)
    rows = [list(row) for row in zip(*values)] if n else []
    expected = reference(rows, [pg for _, pg, _ in columns])
    assert binary_rows(table) == expected, f"columns {[str(k) for k, _, _ in columns]}, rows {rows!r}"


def test_nested_values_are_jsonb_version_1_and_other_types_are_left_to_the_text_form():
    headers = pa.array(
        [[{"key": "h", "value": b"\xff"}], None], pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    )
    encoded = binary_rows(pa.table({"headers": headers}))
    first_length = int.from_bytes(encoded[2:6], "big")
    assert encoded[6] == 1, "jsonb's binary form starts with its version, 1"
    assert json.loads(encoded[7 : 6 + first_length]) == [{"key": "h", "value": "/w=="}]
    assert encoded[6 + first_length :] == b"\x00\x01\xff\xff\xff\xff", "the second row: one null field"
    # (nanoseconds: the text form, which the server rounds; a cast to microseconds would refuse them)
    for kind in (pa.decimal128(10, 2), pa.time64("us"), pa.list_(pa.int64()), pa.uint64(), pa.timestamp("ns")):
        assert not encodable(pa.schema([("x", kind)])), f"{kind} must go as text"
