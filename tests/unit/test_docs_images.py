"""Every picture in the docs is taken by a test that checks the state it shows.

A picture is published (copied into docs/images/ with ``KAFKA_BATCH_UPDATE_DOCS_IMAGES=1``) only by
the test that took it, after that test's checks of what the picture illustrates passed. A picture
nobody retakes would drift from the product; one retaken before its checks could show a failure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PICTURES = sorted((ROOT / "docs" / "images").glob("*.png"))
TESTS = {path: path.read_text() for path in (ROOT / "tests").rglob("*.py") if path.name != Path(__file__).name}


def test_the_docs_have_pictures():
    assert PICTURES, "expected pictures in docs/images/"


@pytest.mark.parametrize("picture", PICTURES, ids=[p.name for p in PICTURES])
def test_each_picture_is_published_by_a_test_after_its_checks(picture):
    takers = [path for path, text in TESTS.items() if f'"{picture.name}"' in text]
    assert takers, f"expected a test that takes docs/images/{picture.name}, found none"
    for path in takers:
        text = TESTS[path]
        copy = text.rfind('environ.get("KAFKA_BATCH_UPDATE_DOCS_IMAGES")')
        assert copy != -1, f"{path.relative_to(ROOT)} names {picture.name} but never publishes it"
        start = text.rfind("\ndef ", 0, copy)
        end = text.find("\ndef ", copy)
        before, after = text[start:copy], text[copy : end if end != -1 else len(text)]
        assert "assert " in before or "expect(" in before, (
            f"{path.relative_to(ROOT)} publishes {picture.name} before checking anything it shows"
        )
        assert "assert " not in after and "expect(" not in after, (
            f"{path.relative_to(ROOT)} publishes {picture.name} before the last of its checks: expected the copy to "
            "come after every check of the function that takes it"
        )
