"""The kafka_batch_backfill trigger form in a real headless Chromium against the live UI.

Screenshots go to each test's output directory (``tmp_path``); with
``KAFKA_BATCH_UPDATE_DOCS_IMAGES=1`` the form's is also copied to docs/images/.
"""

from __future__ import annotations

import os
import shutil
import urllib.parse
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from kafka_batch_provider.testing.producers import Record, produce, sample_records
from tests.integration.helpers import assert_exactly_once
from tests.live.conftest import BACKFILL
from tests.live.helpers import runs_since, wait_for
from tests.live.trigger_form import SECTIONS, open_dag, open_section, open_trigger_form, set_datetime, set_json, trigger

pytestmark = pytest.mark.browser

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


@pytest.fixture(scope="module", autouse=True)
def backfill_unpaused(airflow_stack) -> None:
    airflow_stack.set_paused(BACKFILL, False)  # no schedule: runs only when triggered


@pytest.fixture
def topic(new_topic, kafka_config) -> str:
    name = new_topic(partitions=2)
    produce(kafka_config, name, sample_records(2, 40))  # offsets 0-19 in each partition
    return name


def fill_source_and_offsets(form, topic: str, start: dict | None, end: dict | None, output: str) -> None:
    open_section(form, "Source")
    form.locator("#element_topic").fill(topic)
    open_section(form, "Output")
    form.locator("#element_output_path").fill(output)
    open_section(form, "Range by offsets")
    if start is not None:
        set_json(form, "start_offsets", start)
    if end is not None:
        set_json(form, "end_offsets", end)


def the_new_run(stack, known: set[str]) -> dict:
    [run] = wait_for("the run the form triggered", lambda: (runs_since(stack, BACKFILL, known)[-1:], known), timeout=30)
    return stack.wait_for_run(BACKFILL, run["dag_run_id"], timeout=240)


def show_task_log(page: Page, base_url: str, run_id: str, task_id: str, expected: str) -> None:
    """Open the task's log view and wait until it shows ``expected``."""
    open_dag(page, base_url, f"/dags/{BACKFILL}/runs/{urllib.parse.quote(run_id)}/tasks/{task_id}")
    expect(page.get_by_text(expected, exact=False).first).to_be_visible(timeout=60_000)


def test_trigger_form_dry_run_by_offsets_shows_its_ranges_in_the_task_log(airflow_stack, page, topic, tmp_path):
    replay = tmp_path / "replay"
    known = {r["dag_run_id"] for r in airflow_stack.dag_runs(BACKFILL)}
    form = open_trigger_form(page, airflow_stack.base_url, BACKFILL)
    for section in SECTIONS:
        expect(form.get_by_role("button", name=section, exact=True)).to_be_visible()
    fill_source_and_offsets(form, topic, {"0": 5}, {"0": 15, "1": 3}, str(replay))
    open_section(form, "Output")
    form.get_by_text("Dry run (plan only)").click()
    expect(form.locator("input[name=element_dry_run]")).to_be_checked()
    open_section(form, "Range by offsets")
    page.screenshot(path=tmp_path / "trigger-form.png")
    trigger(form)

    run = the_new_run(airflow_stack, known)
    states = airflow_stack.task_states(BACKFILL, run["dag_run_id"])
    assert run["state"] == "success" and states == {"plan_replay": "success", "spark_write": "skipped"}, (
        f"expected a dry run (plan only, Spark skipped), found {run['state']} with {states}"
    )
    assert run["conf"]["start_offsets"] == {"0": 5} and run["conf"]["end_offsets"] == {"0": 15, "1": 3}, run["conf"]
    show_task_log(
        page, airflow_stack.base_url, run["dag_run_id"], "plan_replay", f"{topic}[0] [5, 15), {topic}[1] [0, 3)"
    )
    page.screenshot(path=tmp_path / "finished-run.png", full_page=True)
    assert not replay.exists(), "a dry run must write nothing"
    # The docs' picture of the form is published only from a run that did what the form asked.
    if os.environ.get("KAFKA_BATCH_UPDATE_DOCS_IMAGES"):
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / "trigger-form.png", DOCS_IMAGES / "backfill-trigger-form.png")


def test_trigger_form_by_time_replays_exactly_the_middle_window(airflow_stack, page, new_topic, kafka_config, tmp_path):
    topic = new_topic(partitions=1)
    first_hour = datetime(2026, 3, 1, 11, 0, tzinfo=timezone.utc)
    for hour in range(3):  # four records in each of 11:xx, 12:xx and 13:xx (CreateTime)
        stamp = int((first_hour + timedelta(hours=hour, minutes=30)).timestamp() * 1000)
        produce(kafka_config, topic, [Record(0, b"h%d-%d" % (hour, i), timestamp_ms=stamp) for i in range(4)])
    replay = tmp_path / "replay"
    known = {r["dag_run_id"] for r in airflow_stack.dag_runs(BACKFILL)}
    form = open_trigger_form(page, airflow_stack.base_url, BACKFILL)
    open_section(form, "Source")
    form.locator("#element_topic").fill(topic)
    open_section(form, "Output")
    form.locator("#element_output_path").fill(str(replay))
    open_section(form, "Range by time")
    set_datetime(form, "Start time", "2026/03/01", "12:00")
    set_datetime(form, "End time", "2026/03/01", "13:00")
    trigger(form)

    run = the_new_run(airflow_stack, known)
    states = airflow_stack.task_states(BACKFILL, run["dag_run_id"])
    assert run["state"] == "success" and states == {"plan_replay": "success", "spark_write": "success"}, (
        f"expected the replay of [12:00, 13:00) to plan and write, found {run['state']} with {states}"
    )
    assert_exactly_once(replay, {(topic, 0, offset) for offset in range(4, 8)})  # the 12:xx records only


@pytest.mark.parametrize(
    "case, start, end, times, expected",
    [
        ("end before start", {"0": 15}, {"0": 5}, False, "end offset 5 is before start offset 15"),
        ("both offsets and times", {"0": 1}, None, True, "either start/end offsets or start/end times"),
    ],
)
def test_bad_params_fail_the_first_task_with_a_readable_line(
    airflow_stack, page, topic, tmp_path, case, start, end, times, expected
):
    known = {r["dag_run_id"] for r in airflow_stack.dag_runs(BACKFILL)}
    form = open_trigger_form(page, airflow_stack.base_url, BACKFILL)
    fill_source_and_offsets(form, topic, start, end, str(tmp_path / "replay"))
    if times:
        open_section(form, "Range by time")
        set_datetime(form, "Start time", "2026/03/01", "12:00")
        set_datetime(form, "End time", "2026/03/01", "13:00")
    trigger(form)

    run = the_new_run(airflow_stack, known)
    ti = airflow_stack.task_instances(BACKFILL, run["dag_run_id"])["plan_replay"]
    assert run["state"] == "failed" and ti["state"] == "failed", f"{case}: expected plan_replay to fail, found {ti}"
    assert ti["try_number"] == 1, f"{case}: bad input must not be retried, found try {ti['try_number']}"
    show_task_log(page, airflow_stack.base_url, run["dag_run_id"], "plan_replay", expected)
    page.screenshot(path=tmp_path / "rejected-run.png", full_page=True)
    assert not (tmp_path / "replay").exists()


def test_a_non_numeric_offset_is_refused_by_the_form_with_a_readable_message(airflow_stack, page, topic, tmp_path):
    known = {r["dag_run_id"] for r in airflow_stack.dag_runs(BACKFILL)}
    form = open_trigger_form(page, airflow_stack.base_url, BACKFILL)
    fill_source_and_offsets(form, topic, {"0": "abc"}, {"0": 10}, str(tmp_path / "replay"))
    trigger(form)

    message = "Invalid input for param start_offsets: 'abc' is not of type 'integer'"
    expect(form.get_by_text(message)).to_be_visible()
    page.screenshot(path=tmp_path / "refused-form.png")
    assert runs_since(airflow_stack, BACKFILL, known) == [], "a refused form must not create a run"
