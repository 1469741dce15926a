"""Dead letters: the records of a batch whose value could not be decoded, kept whole.

With ``--on-bad-record dead-letter`` such a record is not a row of the data: it becomes one row
of the batch's dead letters, with everything Kafka gave (raw key, value, headers, topic,
partition, offset, timestamp), the schema id its value named (null when it named none) and
why it could not be decoded. The Spark task writes them to files of their own beside its data
files; the batch's log entry lists them, so they are logged, published and counted exactly
once with the batch (:mod:`kafka_batch_provider.output.dead_letter_files`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

#: The columns of a dead letter, in this order.
DEAD_LETTER_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ("schema_id", pa.int64()),
        ("error", pa.string()),
    ]
)


@dataclass(frozen=True)
class DeadLetterBatch:
    """Dead letters on their way from the decoding to the task writer, in the same stream as the
    data's Arrow batches (the writer tells them apart by this type)."""

    rows: pa.RecordBatch


def dead_letters_of(batch: pa.RecordBatch, problems: Mapping[int, str], schema_ids: Sequence[int]) -> DeadLetterBatch:
    """The rows ``problems`` names, of a batch in Spark's Kafka schema, as dead letters.

    :param problems: row -> why its value could not be decoded.
    :param schema_ids: each row's schema id (negative: the value named none).
    """
    rows = pa.array(sorted(problems), pa.int64())
    taken = pa.Table.from_batches([batch]).take(rows)
    ids = [schema_ids[row] if schema_ids[row] >= 0 else None for row in rows.to_pylist()]
    columns = [taken.column(name).cast(DEAD_LETTER_SCHEMA.field(name).type) for name in DEAD_LETTER_SCHEMA.names[:8]]
    columns += [pa.array(ids, pa.int64()), pa.array([problems[row] for row in sorted(problems)], pa.string())]
    return DeadLetterBatch(pa.Table.from_arrays(columns, schema=DEAD_LETTER_SCHEMA).combine_chunks().to_batches()[0])
