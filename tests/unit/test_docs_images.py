"""Every picture in the docs is taken by a test that checks the state it shows.

A picture is published (copied into docs/images/ with ``KAFKA_BATCH_UPDATE_DOCS_IMAGES=1``) only by
the test that took it, after that test's checks of what the picture illustrates passed. A picture
nobody retakes would drift from the product; one retaken before its checks could show a failure.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PICTURES = sorted((ROOT / "docs" / "images").glob("*.png"))
SOURCES = {path: path.read_text() for path in (ROOT / "tests").rglob("*.py") if path != Path(__file__).resolve()}


def is_check(node: ast.AST) -> bool:
    """An ``assert``, or a Playwright ``expect(...)`` (which waits for the page to show a state)."""
    if isinstance(node, ast.Assert):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "expect"


def publishers(picture: str) -> list[tuple[Path, ast.FunctionDef, ast.Call, bool]]:
    """Each ``shutil.copy(..., <.../picture>)`` of a test file, with the function it is in and
    whether it runs only under ``if ... KAFKA_BATCH_UPDATE_DOCS_IMAGES ...:``."""
    found = []
    for path, text in SOURCES.items():
        if f'"{picture}"' not in text:
            continue
        for function in (n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)):
            gated = {
                id(inner)
                for block in ast.walk(function)
                if isinstance(block, ast.If) and "KAFKA_BATCH_UPDATE_DOCS_IMAGES" in ast.unparse(block.test)
                for inner in ast.walk(block)
            }
            for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
                named = ast.unparse(call.func) == "shutil.copy" and len(call.args) == 2
                if named and f"'{picture}'" in ast.unparse(call.args[1]):
                    found.append((path, function, call, id(call) in gated))
    return found


def test_the_docs_have_pictures():
    assert PICTURES, "expected pictures in docs/images/"


@pytest.mark.parametrize("picture", PICTURES, ids=[p.name for p in PICTURES])
def test_each_picture_is_published_by_a_test_after_its_checks(picture):
    found = publishers(picture.name)
    assert found, f"expected a test that copies its picture to docs/images/{picture.name}, found none"
    for path, function, copy, gated in found:
        where = f"{path.relative_to(ROOT)}:{copy.lineno} ({function.name})"
        assert gated, (
            f"{where} copies {picture.name} into docs/ on every run, not only with KAFKA_BATCH_UPDATE_DOCS_IMAGES"
        )
        checks = [n.lineno for n in ast.walk(function) if is_check(n)]
        assert any(line < copy.lineno for line in checks), f"{where} publishes {picture.name} before any check"
        later = [line for line in checks if line > copy.lineno]
        assert not later, f"{where} publishes {picture.name} before the checks on lines {later}: expected it last"
