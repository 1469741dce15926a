"""``KafkaBatchReportOperator``: a downstream DAG's task that counts exactly the batches that triggered it.

A DAG scheduled on an ingest output's asset (``schedule=[Asset("s3://lake/orders")]``) runs after
each committed batch; its run's triggering asset events carry the batches' facts
(:mod:`kafka_batch_provider.core.assets`). This task reads each batch back from the output with
the output's own reader (:mod:`kafka_batch_provider.output.batch_reader`), exactly its offset
ranges, and records its rows per topic in a small SQLite report table, keyed by batch and topic,
so a rerun of the same run, or a second event for the same batch, counts nothing twice.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from airflow.sdk import Asset, BaseOperator

from kafka_batch_provider.operators.errors import task_errors
from kafka_batch_provider.operators.output import BatchOutput, open_output

REPORT_TABLE = """
CREATE TABLE IF NOT EXISTS batch_rows (
    batch_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    topic TEXT NOT NULL,
    rows INTEGER NOT NULL,
    replay INTEGER NOT NULL,
    output TEXT NOT NULL,
    counted_at TEXT NOT NULL,
    PRIMARY KEY (batch_id, topic, output)
)
"""


class KafkaBatchReportOperator(BaseOperator):
    """Count the rows per topic of each batch whose asset event triggered this run.

    :param report_db: the SQLite file of the report table ``batch_rows``.
    :param storage_conn_id: the output's storage connection (as the ingest group's ``BatchOutput``).
    :param catalog_conn_id: the Iceberg catalog connection (Iceberg outputs).
    """

    template_fields = ("report_db",)
    ui_color = "#f3eefb"

    def __init__(
        self,
        *,
        report_db: str,
        storage_conn_id: str | None = None,
        catalog_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.report_db = report_db
        self.storage_conn_id = storage_conn_id
        self.catalog_conn_id = catalog_conn_id

    def execute(self, context: Any) -> list[dict[str, Any]]:
        events = batch_events(context.get("triggering_asset_events") or {})
        if not events:
            self.log.info("no batch asset event triggered this run: nothing to count")
        counted = []
        for uri, extra in events:
            with task_errors():
                rows = self.count(uri, extra)
            record_counts(self.report_db, extra, rows)
            self.log.info("batch %s on %s: %s", extra["batch_id"], uri, rows)
            counted.append({"batch_id": extra["batch_id"], "seq": extra["seq"], "uri": uri, "rows_by_topic": rows})
        return counted

    def count(self, uri: str, extra: Mapping[str, Any]) -> dict[str, int]:
        """The batch's rows per topic, read back from the output (the event's asset's, no other).

        :raises ConfigError: the extra names another output than the event's asset.
        """
        from kafka_batch_provider.errors import ConfigError
        from kafka_batch_provider.operators.assets import output_asset_uri
        from kafka_batch_provider.output.batch_reader import read_batch

        described = extra.get("output") or {}
        named = output_asset_uri(described, {"name": uri.split("/")[2]} if uri.startswith("iceberg://") else None)
        if named != uri:
            raise ConfigError(f"an event on {uri} names the output {named}: not read (it is another output)")
        output = BatchOutput(
            output_format=str(described.get("format") or "parquet"),
            output_path=described.get("output") or "",
            table=described.get("table") or "",
            storage_conn_id=self.storage_conn_id,
            catalog_conn_id=self.catalog_conn_id,
        )
        _, store = open_output(output, create=False)
        table = read_batch(store, extra, columns=["topic"])
        counts = table.group_by("topic").aggregate([("topic", "count")]).to_pylist()
        return {row["topic"]: int(row["topic_count"]) for row in sorted(counts, key=lambda r: r["topic"])}


def batch_events(triggering: Mapping[Any, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(asset uri, extra)`` of each batch event among a run's triggering events, once each (an
    event reached through an alias is listed under the alias too)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for key in triggering:
        if not isinstance(key, Asset):
            continue
        for event in triggering[key]:
            extra = dict(event.extra or {})
            if "batch_id" in extra and "ranges" in extra:
                found.setdefault((event.asset.uri, extra["batch_id"]), extra)
    return [(uri, extra) for (uri, _), extra in sorted(found.items(), key=lambda i: i[1]["seq"])]


def record_counts(report_db: str, extra: Mapping[str, Any], rows: Mapping[str, int]) -> None:
    """Upsert the batch's counts (a topic without rows in the batch is counted as 0)."""
    report_db = os.path.abspath(os.path.expanduser(report_db))
    os.makedirs(os.path.dirname(report_db), exist_ok=True)
    topics = sorted({r["topic"] for r in extra.get("ranges") or ()} | set(rows))
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    where = (extra.get("output") or {}).get("table") or (extra.get("output") or {}).get("output") or ""
    with sqlite3.connect(report_db) as db:
        db.execute(REPORT_TABLE)
        db.executemany(
            "INSERT OR REPLACE INTO batch_rows VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    extra["batch_id"],
                    int(extra["seq"]),
                    t,
                    int(rows.get(t, 0)),
                    int(bool(extra.get("replay"))),
                    where,
                    now,
                )
                for t in topics
            ],
        )
