"""One table per topic: an output template (``s3://lake/{topic}``, ``lake.{topic}``) made a name per topic. Pure.

A template holds ``{topic}`` once. Each topic's name is made safe for where it goes:

* a path or URI (Parquet folders, Delta tables): every legal topic name (``a-z A-Z 0-9 . _ -``)
  is a legal folder name, so the topic goes in as it is;
* an Iceberg table name: ``.`` separates namespaces and catalogs differ on case and ``-``, so the
  name is lower-cased and every character but ``a-z 0-9 _`` becomes ``_``.

Two topics made the same name (``orders.eu`` and ``orders_eu`` in Iceberg) are refused in one
line before anything is planned: their batches would land in one table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import ConfigError

PLACEHOLDER = "{topic}"
UNSAFE_IN_TABLE = re.compile(r"[^a-z0-9_]")


def is_table_template(text: str | None) -> bool:
    return bool(text) and PLACEHOLDER in str(text)


def check_template(text: str, setting: Setting) -> str:
    """``text`` when it holds ``{topic}`` once (and no other ``{...}``), else one line."""
    if text.count(PLACEHOLDER) != 1:
        raise ConfigError(f"{setting} {text!r} must hold {PLACEHOLDER} once to name a table per topic", setting=setting)
    rest = text.replace(PLACEHOLDER, "")
    if "{" in rest or "}" in rest:
        raise ConfigError(f"{setting} {text!r}: {PLACEHOLDER} is the only placeholder", setting=setting)
    return text


def safe_name(topic: str, iceberg: bool) -> str:
    """The topic as it goes into a path (unchanged) or an Iceberg table name (``[a-z0-9_]``)."""
    return UNSAFE_IN_TABLE.sub("_", topic.lower()) if iceberg else topic


def table_names(template: str, topics: Iterable[str], iceberg: bool, setting: Setting) -> dict[str, str]:
    """``{topic: the template with the topic's safe name}``; two topics on one name are refused."""
    check_template(template, setting)
    names = {topic: template.replace(PLACEHOLDER, safe_name(topic, iceberg)) for topic in sorted(set(topics))}
    check_distinct(names, setting)
    return names


def check_distinct(names: Mapping[str, str], setting: Setting) -> None:
    by_name: dict[str, list[str]] = {}
    for topic, name in names.items():
        by_name.setdefault(name, []).append(topic)
    shared = {name: topics for name, topics in by_name.items() if len(topics) > 1}
    if shared:
        name, topics = sorted(shared.items())[0]
        raise ConfigError(
            f"topics {', '.join(map(repr, topics))} would share the table {name!r} ({setting} {PLACEHOLDER} makes "
            "names safe); choose a pattern that leaves one of them out, or a template that tells them apart",
            setting=setting,
        )
