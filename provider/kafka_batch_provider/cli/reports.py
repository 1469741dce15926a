"""What the output and the group look like: ``lag`` (lag and its health) and ``table`` (the batches)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from kafka_batch_provider.cli.arguments import metrics_sinks_from, offsets_client, store_from
from kafka_batch_provider.cli.console import emit
from kafka_batch_provider.errors import KafkaBatchError


def format_lag_table(report: Any, now: Any) -> str:
    rows = [("topic", "partition", "committed", "log start", "end", "lag", "oldest unconsumed", "status")]
    for p in report.partitions:
        age = "-" if p.age_seconds is None else f"{p.age_seconds:,.0f}s"
        s = p.state
        rows.append(
            (
                s.topic,
                str(s.partition),
                "-" if s.committed is None else str(s.committed),
                str(s.log_start),
                str(s.log_end),
                f"{s.lag:,}",
                age,
                p.status.value,
            )
        )
    rows.append(("total", "", "", "", "", f"{report.total_lag:,}", "", report.status.value))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) if i in (0, 7) else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
        for r in rows
    ]
    for p in report.problems():
        lines.append(f"{p.state.tp} {p.status.value}: {p.reason}")
    lines.extend(f"note: {n}" for n in report.notes)
    return "\n".join(lines)


def cmd_lag(args: argparse.Namespace) -> dict[str, Any]:
    from datetime import datetime, timedelta, timezone

    from kafka_batch_provider.core.lag_health import HealthPolicy
    from kafka_batch_provider.steps.lag import lag_report, topics_to_watch

    policy = HealthPolicy(
        window=args.window,
        stop_after=timedelta(seconds=args.stop_after) if args.stop_after else None,
        retention_risk=args.retention_risk,
        dead_letter_share=args.dead_letter_share,
    )
    now = datetime.now(timezone.utc)
    store = store_from(args, create=False) if args.output or args.table else None
    kafka = offsets_client(args)
    topics = topics_to_watch(kafka, args.topic or [], args.topic_pattern)
    report = lag_report(kafka, args.group, topics, store, policy, now)
    if not args.json:
        print(format_lag_table(report, now), flush=True)
    result = report.to_dict()
    sinks = metrics_sinks_from(args)
    if sinks:
        from kafka_batch_provider.core.metrics import health_metrics
        from kafka_batch_provider.metrics import emit as send

        send(health_metrics(result, store.root if store else "-"), sinks)
    if args.check and report.status.exit_code:
        emit(result)
        raise LagCheckFailed(report.message(), report.status.exit_code)
    return result


class LagCheckFailed(KafkaBatchError):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.exit_code = code


def batch_rows(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per batch of the output: what ``kafka-batch table`` prints."""
    from datetime import datetime, timezone

    rows = []
    for e in entries:
        moment = e.get("committed_at") or e.get("written_at")
        if isinstance(moment, (int, float)):  # table commits keep epoch milliseconds
            moment = datetime.fromtimestamp(moment / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")
        rows.append(
            {
                "seq": e["seq"],
                "batch_id": e["batch_id"],
                "committed_at": moment,
                "rows": e["rows"],
                "dead_letters": int((e.get("dead_letters") or {}).get("rows", 0)),
                "end_offsets": {f"{r['topic']}:{r['partition']}": r["end"] for r in e["ranges"]},
            }
        )
    return rows


def format_batch_table(rows: list[dict[str, Any]]) -> str:
    table = [("seq", "batch id", "committed at", "rows", "dead letters", "end offsets")]
    table += [
        (
            str(r["seq"]),
            r["batch_id"],
            str(r["committed_at"] or "-"),
            f"{r['rows']:,}",
            f"{r['dead_letters']:,}",
            " ".join(f"{k}={v}" for k, v in sorted(r["end_offsets"].items())) or "-",
        )
        for r in rows
    ]
    numbers = (3, 4)  # right-aligned
    widths = [max(len(row[i]) for row in table) for i in range(5)]
    return "\n".join(
        "  ".join(
            [*(cell.rjust(w) if i in numbers else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths)))]
            + [row[5]]
        )
        for row in table
    )


def cmd_table(args: argparse.Namespace) -> dict[str, Any]:
    store = store_from(args, create=False)
    rows = batch_rows(list(store.log.entries(args.last)))  # --last: only the newest are read
    if not args.json:
        print(format_batch_table(rows), flush=True)
    return {"format": store.format, "output": store.root, "batches": rows}
