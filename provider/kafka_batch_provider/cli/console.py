"""What every command prints: progress lines on stderr, one JSON object as the last stdout line."""

from __future__ import annotations

import json
import sys
from typing import Any


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def emit(result: dict[str, Any]) -> None:
    print(json.dumps(result, sort_keys=True), flush=True)
