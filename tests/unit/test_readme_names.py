"""Every name the user's guide imports from this package can be imported from where it says."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMPORT = re.compile(r"^\s*from (kafka_batch_provider[\w.]*) import ([\w, ]+)$", re.MULTILINE)
GUIDES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def imports_in(path: Path) -> list[tuple[str, str]]:
    return [(module, name.strip()) for module, names in IMPORT.findall(path.read_text()) for name in names.split(",")]


FOUND = sorted({pair for guide in GUIDES for pair in imports_in(guide)})


def test_the_guide_shows_imports_at_all():
    assert len(imports_in(ROOT / "README.md")) >= 5, "expected the README's examples to import from the package"


@pytest.mark.parametrize("module, name", FOUND, ids=[f"{m}.{n}" for m, n in FOUND])
def test_a_name_the_guide_imports_exists(module, name):
    found = getattr(importlib.import_module(module), name, None)
    assert found is not None, f"the docs import {name} from {module}, which has no such name"
