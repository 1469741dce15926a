"""Driving Airflow 3's "Trigger Dag" form in Chromium (Playwright): sections, JSON editors, date pickers."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from playwright.sync_api import Locator, Page, expect

SECTIONS = ("Source", "Range by offsets", "Range by time", "Output")


def open_dag(page: Page, base_url: str, path: str) -> None:
    """Open ``path`` of the UI, logged in (SimpleAuthManager with every user an admin)."""
    page.goto(f"{base_url}/auth/token/login?next={urllib.parse.quote(path)}")


def open_trigger_form(page: Page, base_url: str, dag_id: str) -> Locator:
    open_dag(page, base_url, f"/dags/{dag_id}")
    page.get_by_role("button", name="Trigger").first.click()
    form = page.get_by_role("dialog")
    expect(form.get_by_text(f"Trigger Dag - {dag_id}")).to_be_visible()
    return form


def open_section(form: Locator, name: str) -> None:
    """Sections are an accordion: opening one closes the others."""
    button = form.get_by_role("button", name=name, exact=True)
    if button.get_attribute("aria-expanded") != "true":
        button.click()


def field(form: Locator, label: str) -> Locator:
    """The form row whose label starts with ``label``."""
    return form.locator(".chakra-field__root").filter(has=form.page.locator("label", has_text=label)).first


def set_json(form: Locator, param: str, value: Any) -> None:
    """Replace the JSON in a param's code editor (objects and arrays are edited as JSON)."""
    form.locator(f"#element_{param} .monaco-editor").click()
    page = form.page
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(json.dumps(value))  # inserted, so the editor adds no closing brackets


def set_datetime(form: Locator, label: str, date: str, time: str) -> None:
    """Pick ``date`` (YYYY/MM/DD) and ``time`` (HH:MM, UTC) in a date-time param's picker."""
    field(form, label).get_by_test_id("datetime-input").click()
    picker = form.page.locator("[data-scope=popover][data-part=content][data-state=open]")
    picker.get_by_placeholder("YYYY/MM/DD").fill(date)
    picker.get_by_placeholder("HH:mm").fill(time)
    field(form, label).locator("label").click()  # closes the picker


def trigger(form: Locator) -> None:
    form.get_by_role("button", name="Trigger", exact=True).click()
