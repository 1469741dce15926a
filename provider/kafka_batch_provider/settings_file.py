"""Settings files: a JSON object per file, for what must stay out of argv (credentials)."""

from __future__ import annotations

import json
from typing import Any

from kafka_batch_provider.errors import ConfigError


def read_settings_file(path: str, what: str) -> dict[str, Any]:
    """The JSON object in ``path``; any problem is one line naming ``what`` the file is."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read {what} file {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"{what} file {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} file {path} must hold a JSON object")
    return data
