"""``KafkaBatchUpkeepOperator``: compaction and cleanup of an ingestion's output (the upkeep DAG)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from kafka_batch_provider.core.upkeep import UpkeepSettings
from kafka_batch_provider.operators.errors import task_errors
from kafka_batch_provider.operators.output import OUTPUT_TEMPLATE_FIELDS, BatchOutput, TemplatedOutput, open_output
from kafka_batch_provider.steps.upkeep import upkeep


class KafkaBatchUpkeepOperator(TemplatedOutput, BaseOperator):
    """Keep an output fit for a year of batches; the offsets are never touched.

    Delta: ``optimize`` to ``target_file_mb``, a checkpoint, log cleanup and ``vacuum``;
    Iceberg: snapshot expiry and orphan data files; the Parquet layout: compaction of small batch
    folders and failed attempts' staging folders; every format: plans and Kafka commit records
    older than the newest ``keep_batches``. It may run while ingestion runs: a batch committing
    meanwhile is committed again on top of upkeep's commit. Pushes the report to XCom: files
    before and after, files compacted, removed, snapshots expired, plans and commit records pruned.

    :param output: the ingestion's :class:`~kafka_batch_provider.operators.output.BatchOutput`.
    :param retention_hours: replaced files, old snapshots and failed attempts' files go only
        when older than this (at least 1).
    :param dry_run: count what would be done, change nothing.
    """

    template_fields: Sequence[str] = OUTPUT_TEMPLATE_FIELDS
    ui_color = "#eef6ee"

    def __init__(
        self,
        *,
        output: BatchOutput,
        target_file_mb: int = UpkeepSettings.target_file_mb,
        retention_hours: float = UpkeepSettings.retention_hours,
        keep_batches: int = UpkeepSettings.keep_batches,
        dry_run: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.keep_output(output)
        self.batch_output.check()
        # Checked when the DAG is parsed: unsafe settings never reach a run.
        self.settings = UpkeepSettings(target_file_mb, retention_hours, keep_batches, dry_run)

    def execute(self, context: Any) -> dict[str, Any]:
        with task_errors():
            _, store = open_output(self.batch_output, create=False)
            report = upkeep(store, self.settings, progress=self.log.info)
        for note in report.notes:
            self.log.info("note: %s", note)
        return report.to_dict()
