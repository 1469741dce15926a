"""The version in the package, the changelog's newest released entry and the docs agree."""

from __future__ import annotations

import re
from pathlib import Path

import kafka_batch_provider

ROOT = Path(__file__).resolve().parents[2]


def test_the_changelogs_newest_release_is_the_packages_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", text, flags=re.MULTILINE)
    assert released, "the changelog has no released entry (## [X.Y.Z] - YYYY-MM-DD)"
    version = kafka_batch_provider.__version__
    assert released[0] == version, f"the newest released entry is {released[0]}, the package is {version}"
    assert kafka_batch_provider.get_provider_info()["versions"][0] == version, "the provider info's version"
