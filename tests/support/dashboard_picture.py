"""docs/grafana/kafka-batch.json drawn from the metrics one test run sent (no Grafana runs here).

The points an OTLP receiver got are turned into the samples Prometheus would hold behind an
OpenTelemetry Collector (``kafka_batch.records.read`` -> ``kafka_batch_records_read_total``, a
histogram's sum -> ``..._sum``); each panel's query is evaluated over them, for the few forms the
dashboard uses (``sum|max [by (label)] (metric)`` and ``increase(metric[$__range])`` inside, the
whole run being the range), and the panels are laid out on the dashboard's grid as HTML for a real
browser to take a picture of.
"""

from __future__ import annotations

import html
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

QUERY = re.compile(r"^(sum|max)(?: by \((\w+)\))? ?\((.+)\)$")
INNER = re.compile(r"^(?:increase\()?(\w+)\{[^}]*\}(?:\[\$__range\]\))?$")


def samples(
    points: Iterable[tuple[str, float, Mapping[str, str]]], kinds: Mapping[str, str]
) -> dict[str, list[tuple[dict, float]]]:
    """``{prometheus name: [(labels, value)]}``: counters and histogram sums added up over the run's
    exports, gauges their last value (``kinds``: each name's OTLP data kind)."""
    totals: dict[tuple[str, tuple], float] = defaultdict(float)
    for name, value, labels in points:
        kind = kinds[name]
        base = name.replace(".", "_")
        key_labels = tuple(sorted(labels.items()))
        if kind == "sum":
            totals[(f"{base}_total", key_labels)] += value
        elif kind == "histogram":
            totals[(f"{base}_sum", key_labels)] += value
        else:
            totals[(base, key_labels)] = value
    found: dict[str, list[tuple[dict, float]]] = defaultdict(list)
    for (name, labels), value in totals.items():
        found[name].append((dict(labels), value))
    return found


def evaluate(expr: str, data: Mapping[str, list[tuple[dict, float]]]) -> list[tuple[str, float]]:
    """``[(series label, value)]`` of one of the dashboard's queries."""
    outer = QUERY.match(expr)
    inner = INNER.match(outer.group(3)) if outer else None
    if not outer or not inner:
        raise ValueError(f"a query the picture cannot evaluate: {expr!r}")
    how, by, name = outer.group(1), outer.group(2), inner.group(1)
    groups: dict[str, list[float]] = defaultdict(list)
    for labels, value in data.get(name, []):
        groups[labels.get(by, "") if by else ""].append(value)
    pick = sum if how == "sum" else max
    return sorted((label, pick(values)) for label, values in groups.items())


def panel_values(dashboard: Mapping[str, Any], data: Mapping[str, list[tuple[dict, float]]]) -> dict[str, list]:
    """``{panel title: [(legend, value)]}`` for every panel."""
    found = {}
    for panel in dashboard["panels"]:
        rows = []
        for target in panel["targets"]:
            for label, value in evaluate(target["expr"], data):
                legend = target.get("legendFormat", "").replace("{{topic}}", label) or label or panel["title"]
                rows.append((legend, value))
        found[panel["title"]] = rows
    return found


def page_html(dashboard: Mapping[str, Any], values: Mapping[str, list], note: str) -> str:
    """The dashboard on its grid (24 columns, 30 px rows), in Grafana's dark colours."""
    cells = []
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        style = f"grid-column:{g['x'] + 1}/span {g['w']};grid-row:{g['y'] + 1}/span {g['h']}"
        body = (
            stat_html(panel, values[panel["title"]]) if panel["type"] == "stat" else bars_html(values[panel["title"]])
        )
        cells.append(f'<section style="{style}"><h2>{html.escape(panel["title"])}</h2>{body}</section>')
    title = html.escape(dashboard["title"])
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><style>{STYLE}</style></head><body><h1>{title}</h1>'
        f'<div class="note">{html.escape(note)}</div><div class="grid">{"".join(cells)}</div></body></html>'
    )


STYLE = " ".join(
    [
        "body{background:#111217;color:#ccccdc;font-family:Inter,Helvetica,Arial,sans-serif;margin:16px;width:1200px}",
        "h1{font-size:18px;font-weight:500;margin:0 0 4px} .note{font-size:12px;color:#8e8e9e;margin-bottom:12px}",
        ".grid{display:grid;grid-template-columns:repeat(24,1fr);grid-auto-rows:30px;gap:8px}",
        "section{background:#181b1f;border:1px solid #2c3235;border-radius:2px;padding:8px;overflow:hidden}",
        "h2{font-size:13px;font-weight:500;margin:0 0 8px}",
        ".stat{font-size:42px;font-weight:500;text-align:center;margin-top:18px}",
        ".row{display:flex;align-items:center;font-size:12px;margin:5px 0}",
        ".label{width:34%;overflow:hidden;white-space:nowrap;text-overflow:ellipsis}",
        ".bar{height:14px;background:#73bf69;margin:0 8px} .value{white-space:nowrap}",
    ]
)


def stat_html(panel: Mapping[str, Any], rows: list) -> str:
    value = rows[0][1] if rows else None
    text, colour = ("-" if value is None else f"{value:,.0f}"), "#73bf69"
    for mapping in panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", []):
        found = mapping["options"].get(f"{value:g}" if value is not None else "")
        if found:
            text, colour = found["text"], {"green": "#73bf69", "yellow": "#fade2a"}.get(found["color"], "#f2495c")
    return f'<div class="stat" style="color:{colour}">{html.escape(text)}</div>'


def bars_html(rows: list) -> str:
    top = max((v for _, v in rows), default=0) or 1
    return "".join(
        f'<div class="row"><span class="label">{html.escape(label)}</span>'
        f'<span class="bar" style="width:{max(2, 55 * value / top):.1f}%"></span>'
        f'<span class="value">{number(value)}</span></div>'
        for label, value in rows
    )


def number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 or value == int(value) else f"{value:.2f}"
