"""The output's asset page in Chromium: the lineage graph and the batches' events a user sees.

Screenshots go to the test's output directory; with ``KAFKA_BATCH_UPDATE_DOCS_IMAGES=1`` the asset
page's is also copied to docs/images/.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.live.trigger_form import open_dag

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


def check_asset_page(page: Page, base_url: str, asset_id: int, uri: str, alias: str, events: int, shots: Path) -> None:
    """The asset page draws ingest DAG → alias → output asset → downstream DAG, and lists the
    batches' events, each from the ingest DAG and each with the downstream run it triggered (the
    caller has checked that every one of those runs succeeded: the picture illustrates success)."""
    open_dag(page, base_url, f"/assets/{asset_id}")
    graph = page.locator(".react-flow")
    for node in ("kafka_batch_ingest", alias, uri, "kafka_batch_downstream"):
        expect(graph.get_by_text(node, exact=True).first).to_be_visible(timeout=60_000)
    expect(page.get_by_text(f"{events} Asset Events", exact=True)).to_be_visible()
    expect(page.get_by_text("Source:", exact=False)).to_have_count(events)
    expect(page.get_by_text("Triggered Dag Run:", exact=False)).to_have_count(events)
    page.screenshot(path=shots / "asset-page.png", full_page=True)
    if os.environ.get("KAFKA_BATCH_UPDATE_DOCS_IMAGES"):
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copy(shots / "asset-page.png", DOCS_IMAGES / "asset-page.png")
