"""``kafka-batch upkeep``: compaction and cleanup of one output (the upkeep DAG's task)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kafka_batch_provider.cli.arguments import add_storage_args, positive_int, store_from
from kafka_batch_provider.core.upkeep import UpkeepSettings


def add_upkeep_args(p: argparse.ArgumentParser) -> None:
    add_storage_args(p)
    g = p.add_argument_group("upkeep")
    defaults = UpkeepSettings()
    g.add_argument(
        "--target-file-mb",
        type=positive_int,
        default=defaults.target_file_mb,
        help=f"compaction's target file size in MB (default {defaults.target_file_mb})",
    )
    g.add_argument(
        "--retention-hours",
        type=float,
        default=defaults.retention_hours,
        help="remove replaced files, old snapshots and failed attempts' files only when older than this "
        f"(default {defaults.retention_hours:g}, at least 1)",
    )
    g.add_argument(
        "--keep-batches",
        type=positive_int,
        default=defaults.keep_batches,
        help=f"keep the plans and Kafka commit records of the newest N batches (default {defaults.keep_batches})",
    )
    g.add_argument(
        "--deleted-keys-retention-days",
        type=float,
        default=defaults.deleted_keys_retention_days,
        help="merged tables: remember deleted keys this long, so older changes cannot bring them back "
        f"(default {defaults.deleted_keys_retention_days:g}, at least 1)",
    )
    g.add_argument("--dry-run", action="store_true", help="count what would be done, change nothing")


def cmd_upkeep(args: argparse.Namespace) -> dict[str, Any]:
    from kafka_batch_provider.steps.upkeep import upkeep

    settings = UpkeepSettings(
        target_file_mb=args.target_file_mb,
        retention_hours=args.retention_hours,
        keep_batches=args.keep_batches,
        dry_run=args.dry_run,
        deleted_keys_retention_days=args.deleted_keys_retention_days,
    )  # checked before the output is opened: a refused run touches nothing
    store = store_from(args, create=False)
    report = upkeep(store, settings, progress=lambda line: print(line, file=sys.stderr, flush=True))
    return report.to_dict()
