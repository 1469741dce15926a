"""The documentation site builds, strict (every link and anchor resolves), and says what the code says.

The site is MkDocs (mkdocs.yml, docs/): the CLI page is generated from the real parser
(scripts/mkdocs_hooks.py), the reference pages from the docstrings (mkdocstrings), the changelog
page includes CHANGELOG.md. The README is the front page: short, its links into docs/ resolve.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

import kafka_batch_provider
from kafka_batch_provider.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250


def nav_pages(nav: list) -> list[str]:
    """Every page of mkdocs.yml's nav, nested sections included."""
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages.extend(nav_pages(value) if isinstance(value, list) else [value])
    return pages


def built_page(site: Path, page: str) -> Path:
    """Where MkDocs writes a page: ``index.md`` -> ``index.html``, ``a/b.md`` -> ``a/b/index.html``."""
    stem = page.removesuffix(".md")
    return site / "index.html" if stem == "index" else site / stem / "index.html"


def subcommand_names(parser: argparse.ArgumentParser) -> list[str]:
    return [
        name for action in parser._actions if isinstance(action, argparse._SubParsersAction) for name in action.choices
    ]


def provider_operator_classes() -> list[str]:
    """``module.Class`` of every operator class the modules ``get_provider_info()`` lists define."""
    from airflow.sdk import BaseOperator

    found = []
    for group in kafka_batch_provider.get_provider_info()["operators"]:
        for module_name in group["python-modules"]:
            module = importlib.import_module(module_name)
            found.extend(
                f"{module_name}.{name}"
                for name, value in vars(module).items()
                if inspect.isclass(value) and issubclass(value, BaseOperator) and value.__module__ == module_name
            )
    return found


def test_the_site_builds_strict_and_says_what_the_code_says(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    problems = [line for line in (done.stdout + done.stderr).splitlines() if re.match(r"(WARNING|ERROR)\b", line)]
    assert done.returncode == 0, (
        f"expected `mkdocs build --strict` to exit 0, it exited {done.returncode}:\n"
        + "\n".join(problems or (done.stdout + done.stderr).splitlines()[-30:])
    )

    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    pages = nav_pages(config["nav"])
    missing = [page for page in pages if not built_page(site, page).is_file()]
    assert not missing, f"expected every page of the nav built into the site; not built: {missing}"

    cli = built_page(site, "cli.md").read_text()
    commands = subcommand_names(build_parser())
    undocumented = [name for name in commands if f"usage: kafka-batch {name}" not in cli]
    assert not undocumented, (
        f"expected the CLI page to hold the generated usage of every command of the parser {commands}; "
        f"no `usage: kafka-batch <command>` for {undocumented}"
    )

    operators = built_page(site, "reference/operators.md").read_text()
    classes = provider_operator_classes()
    assert classes, "expected the provider info's operator modules to define operator classes, found none"
    absent = [name for name in classes if f'id="{name}"' not in operators]
    assert not absent, (
        f"expected the operators reference to document every operator the provider registers {classes}; "
        f"missing: {absent}"
    )

    changelog = built_page(site, "changelog.md").read_text()
    version = kafka_batch_provider.__version__
    assert version in changelog, f"expected the changelog page to include CHANGELOG.md's {version} entry; it does not"

    started = (ROOT / "docs" / "getting-started.md").read_text()
    named = sorted(set(re.findall(r"airflow-provider-kafka-batch[^\s\"']*==([\w.]+)", started)))
    assert named == [version], (
        f"expected Getting started to install the package's version {version}, it names {named or 'none'}"
    )
    # Every version the front page and the guide name beside the package, its wheel or `version`.
    mentions = {
        f"{path.relative_to(ROOT)}: {found}"
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
        for found in VERSION_MENTION.findall(path.read_text())
        if found != version
    }
    assert not mentions, f"expected every mention of the package's version to be {version}, found {sorted(mentions)}"

    # The front page's links into the guide land on a heading that exists (GitHub shows the same ids).
    readme = (ROOT / "README.md").read_text()
    missing = [
        f"{page}.md#{anchor}"
        for page, anchor in re.findall(r"\]\(docs/([\w/-]+)\.md#([\w-]+)\)", readme)
        if f'id="{anchor}"' not in built_page(site, f"{page}.md").read_text()
    ]
    assert not missing, f"expected each README link's anchor to be a heading of its page; missing: {missing}"


#: A version beside the distribution's name, its wheel's file name, or "version" in prose.
VERSION_MENTION = re.compile(
    r"(?:airflow-provider-kafka-batch\S*?==|airflow_provider_kafka_batch-|airflow-provider-kafka-batch` |version )"
    r"(\d+\.\d+\.\d+)"
)


def test_the_readme_is_a_short_front_page_whose_links_resolve():
    readme = (ROOT / "README.md").read_text()
    count = len(readme.splitlines())
    assert count <= README_MAX_LINES, f"expected README.md to have at most {README_MAX_LINES} lines, it has {count}"

    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    relative = [link for link in links if not re.match(r"[a-z][a-z0-9+.-]*:", link) and not link.startswith("#")]
    assert relative, "expected the README to link into docs/, found no relative link"
    broken = [link for link in relative if not (ROOT / link.split("#", 1)[0]).exists()]
    assert not broken, f"expected each relative link of the README to name a file of the repository; broken: {broken}"
