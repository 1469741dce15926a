"""The columns every reader gives: the schema of Spark's Kafka source, in Arrow."""

from __future__ import annotations

import pyarrow as pa

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

#: The Arrow schema of Spark's Kafka source (Spark's TimestampType is microseconds, UTC).
KAFKA_ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", HEADER_TYPE),
    ]
)


def kafka_batch(
    topic: str,
    partition: int,
    key: pa.Array,
    value: pa.Array,
    offset: pa.Array,
    timestamp: pa.Array,
    timestamp_type: pa.Array,
    headers: pa.Array,
) -> pa.RecordBatch:
    """One partition's records in :data:`KAFKA_ARROW_SCHEMA` (topic and partition repeated)."""
    rows = len(offset)
    return pa.RecordBatch.from_arrays(
        [
            key,
            value,
            pa.repeat(pa.scalar(topic, pa.string()), rows),
            pa.repeat(pa.scalar(partition, pa.int32()), rows),
            offset,
            timestamp,
            timestamp_type,
            headers,
        ],
        schema=KAFKA_ARROW_SCHEMA,
    )
