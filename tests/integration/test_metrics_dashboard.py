"""docs/grafana/kafka-batch.json, drawn from the metrics of a real run and pictured in Chromium.

A batch of a pattern into a table per topic and a lag health check send their metrics to an OTLP receiver;
every panel of the dashboard is evaluated over them (tests/support/dashboard_picture.py) and must
show the run's numbers; then the page is pictured (with ``KAFKA_BATCH_UPDATE_DOCS_IMAGES=1`` also
into docs/images/metrics-dashboard.png).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path

import pytest

from kafka_batch_provider.testing.producers import create_topics, produce, sample_records
from tests.bad_input.scene import cli
from tests.integration.test_metrics import OtlpReceiver
from tests.live.conftest import CHROMIUM
from tests.support.dashboard_picture import page_html, panel_values, samples

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "kafka-batch.json"


def test_the_dashboard_shows_a_runs_numbers_panel_by_panel(
    kafka_config, kafka_bootstrap_servers, group_id, spark_connect_remote, tmp_path
):
    prefix = f"dash{uuid.uuid4().hex[:6]}"
    counts = {f"{prefix}.orders": 120, f"{prefix}.payments": 45}
    create_topics(kafka_config, {t: 2 for t in counts})
    for topic, count in counts.items():
        produce(kafka_config, topic, sample_records(2, count))
    otlp = OtlpReceiver()
    pattern = re.escape(prefix) + r"\..*"
    common = ["--bootstrap-servers", kafka_bootstrap_servers, "--topic-pattern", pattern, "--group", group_id,
              "--metrics-otlp", otlp.url]  # fmt: skip
    run = [
        *common,
        "--format",
        "delta",
        "--output",
        f"{tmp_path}/lake/{{topic}}",
        "--spark-remote",
        spark_connect_remote,
    ]
    try:
        ran = cli("run", *run, timeout=600)
        assert ran.returncode == 0, ran.stderr[-1500:]
        produce(kafka_config, f"{prefix}.orders", sample_records(2, 30, first_id=120))  # behind again
        checked = cli("lag", *common, "--json", timeout=120)
        assert checked.returncode == 0, checked.stderr[-1500:]
    finally:
        otlp.server.shutdown()

    dashboard = json.loads(DASHBOARD.read_text())
    values = panel_values(dashboard, samples(otlp.points, otlp.kinds))
    orders, payments = counts
    assert values["Records read, per topic"] == [(orders, 120), (payments, 45)], values["Records read, per topic"]
    assert values["Rows written"] == [("Rows written", 165)], values["Rows written"]
    assert values["Batches"] == [("Batches", 2)], "one batch per table"
    assert values["Lag after each batch, per topic"] == [(orders, 0), (payments, 0)], values
    assert values["Lag before each batch, per topic"] == [(orders, 120), (payments, 45)], values
    assert values["Lag health"] == [("Lag health", 0)], values["Lag health"]  # 30 behind, fresh: OK
    assert [label for label, seconds in values["Seconds per step"] if seconds > 0] == ["plan", "write", "commit"]

    from playwright.sync_api import sync_playwright

    page_file = tmp_path / "dashboard.html"
    note = f"{len(otlp.points)} points from a batch of {pattern} into a Delta table per topic and a lag check"
    page_file.write_text(page_html(dashboard, values, note))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1240, "height": 760})
            page.goto(page_file.as_uri())
            assert page.locator("section h2").count() == len(dashboard["panels"])
            assert page.locator(".stat").first.inner_text() == "OK", "the health panel should map 0 to OK"
            page.screenshot(path=str(tmp_path / "metrics-dashboard.png"), full_page=True)
        finally:
            browser.close()
    if os.environ.get("KAFKA_BATCH_UPDATE_DOCS_IMAGES"):
        shutil.copy(tmp_path / "metrics-dashboard.png", ROOT / "docs" / "images" / "metrics-dashboard.png")
