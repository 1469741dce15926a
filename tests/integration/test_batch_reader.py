"""One committed batch read back by its asset event's facts, with each output's own reader, and
still after upkeep compacted it (the Parquet layout) or later batches moved the table on."""

from __future__ import annotations

import pytest

from kafka_batch_provider.core.assets import batch_event_extra
from kafka_batch_provider.core.upkeep import UpkeepSettings
from kafka_batch_provider.errors import ManifestError
from kafka_batch_provider.output.batch_reader import read_batch
from kafka_batch_provider.steps.upkeep import upkeep
from kafka_batch_provider.testing.producers import produce, sample_records
from tests.integration.helpers import run_batch

pytestmark = pytest.mark.integration


def offsets_of(table) -> list[tuple[int, int]]:
    return sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))


def test_a_batch_is_read_back_exactly_by_its_event_before_and_after_upkeep(
    spark, kafka_config, new_topic, group_id, any_output
):
    topic = new_topic(partitions=2)
    events = []
    for first_id, count in ((0, 8), (8, 6), (14, 4)):
        produce(kafka_config, topic, sample_records(2, count, first_id=first_id))
        outcome, _ = run_batch(spark, kafka_config, any_output, group_id, [topic])
        entry = any_output.store().entry_of(outcome.plan)
        events.append(batch_event_extra(entry, {"format": any_output.store().format}, False))

    def expected(event) -> list[tuple[int, int]]:
        return sorted((r["partition"], o) for r in event["ranges"] for o in range(r["start"], r["end"]))

    for event in events:
        found = offsets_of(read_batch(any_output.store(), event, ["partition", "offset"]))
        assert found == expected(event), f"batch {event['seq']}: expected {expected(event)}, found {found}"

    upkeep(any_output.store(), UpkeepSettings(retention_hours=1))  # the Parquet layout compacts older batches
    store = any_output.store()
    if store.format == "parquet":
        first = store.log.entry(1)
        gone = [
            f["name"] for f in first["files"] if not store.data.fs.exists(store.data.path(first["location"], f["name"]))
        ]
        assert gone, "upkeep was expected to compact the first batch's files away (the reader's fallback)"
    found = offsets_of(read_batch(any_output.store(), events[0], ["partition", "offset"]))
    assert found == expected(events[0]), f"after upkeep: expected {expected(events[0])}, found {found}"
    with pytest.raises(ManifestError, match="has no batch b-other at entry 2: the event names another output"):
        read_batch(any_output.store(), {**events[1], "batch_id": "b-other"})


def test_a_database_batch_is_read_back_by_its_ranges(output_database):
    from kafka_batch_provider.output.formats import OutputSpec, open_store
    from tests.integration.test_postgres_output import staged_manifest

    spec = OutputSpec(format=output_database.format, table=output_database.table, database_url=output_database.url)
    store = open_store(spec)
    for seq, offsets in ((1, range(0, 5)), (2, range(5, 9))):
        assert store.log.append(staged_manifest(store, seq, f"b-{seq}", offsets)) is True
    second = store.log.entry(2)
    event = {"seq": 2, "batch_id": "b-2", "ranges": [{"topic": "t", "partition": 0, "start": 5, "end": 9}]}
    rows = read_batch(store, event, ["partition", "offset", "value"])
    assert offsets_of(rows) == [(0, o) for o in range(5, 9)], f"expected batch 2's offsets, found {offsets_of(rows)}"
    assert rows.column("value").to_pylist() == [b"v%d" % o for o in range(5, 9)]
    assert second["batch_id"] == "b-2"
    with pytest.raises(ManifestError, match="names another output"):
        read_batch(store, {**event, "batch_id": "b-other"})
