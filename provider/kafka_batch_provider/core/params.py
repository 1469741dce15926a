"""Parsing of backfill parameters that arrive as JSON-ish values from the UI or templates."""

from __future__ import annotations

import ast
import json
from datetime import datetime, timezone
from typing import Any

from kafka_batch_provider.errors import ConfigError


def parse_offsets(name: str, value: Any) -> dict[int, int] | None:
    """``{"0": 10, "1": 20}`` (or its JSON text) -> ``{0: 10, 1: 20}``; empty -> ``None``."""
    if value in (None, "", {}, "None", "null"):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            try:  # a template rendered without native objects gives Python's repr
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                raise ConfigError(f"{name} must be a JSON object of partition -> offset, got {value!r}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be an object of partition -> offset, got {value!r}")
    try:
        parsed = {int(k): int(v) for k, v in value.items()}
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
        raise ConfigError(f"{name} must map partition numbers to integer offsets, got {value!r}") from None
    negative = {p: o for p, o in parsed.items() if o < 0 or p < 0}
    if negative:
        raise ConfigError(f"{name} must not hold negative partitions or offsets, got {negative}")
    return parsed


def parse_time(name: str, value: Any) -> int | None:
    """ISO 8601 text or a datetime -> epoch milliseconds (naive times are UTC)."""
    if value in (None, "", "None", "null"):
        return None
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(f"{name} must be an ISO 8601 time such as 2026-01-31T12:00:00Z, got {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def parse_bool(name: str, value: Any) -> bool:
    """A flag from a param or template: a bool, or the text true/false (any case)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", "", "none", "null"):
        return False
    raise ConfigError(f"{name} must be true or false, got {value!r}")
