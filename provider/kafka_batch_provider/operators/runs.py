"""What kind of DAG run a task runs in: a backfill run replays its data interval and leaves the
group alone, so its tasks that watch the group (the sensor, the health check) have nothing to do."""

from __future__ import annotations

from typing import Any

BACKFILL_RUN_TYPE = "backfill"


def run_type_of(context: Any) -> str:
    """``"scheduled"``, ``"manual"``, ``"backfill"``, ... whatever enum class carries it."""
    run_type = getattr(context.get("dag_run"), "run_type", "")
    return str(getattr(run_type, "value", run_type))


def is_backfill(context: Any) -> bool:
    return run_type_of(context) == BACKFILL_RUN_TYPE
