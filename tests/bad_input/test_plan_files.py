"""Missing, malformed and tampered plan files (``kafka-batch write/commit --plan``): one line, nothing changed."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.bad_input.scene import Scene, cli, cli_refusal_problems

pytestmark = pytest.mark.check  # in make check's tier


@dataclass(frozen=True)
class Case:
    id: str
    command: str
    plan: Callable[[Scene], str]
    expected: str


def edited(s: Scene, edit: Callable[[dict], None]) -> str:
    """The pending plan, edited, saved under its own name in another output's ``_plans/``."""
    data = json.loads(s.pending_plan.read_text())
    edit(data)
    return s.plan_file(json.dumps(data))


def set_range(data: dict, start, end) -> None:
    data["ranges"][0]["start"], data["ranges"][0]["end"] = start, end


CASES = [
    Case("commit-before-write", "commit", lambda s: str(s.pending_plan), "is not in the output log"),
    Case("missing-plan", "write", lambda s: str(s.pending / "_plans" / "00000000000000000009-b-nope.json"), "does not"),
    Case("plan-outside-a-plans-folder", "commit", lambda s: s.file("plan.json", "{}"), "is not a plan file inside"),
    Case("plan-not-json", "write", lambda s: s.plan_file("{'batch_id': 1"), "is not valid JSON"),
    Case("plan-not-utf8", "commit", lambda s: s.plan_file(b"\xff\xfe\x00plan"), "not UTF-8"),
    Case("plan-not-an-object", "write", lambda s: s.plan_file("[1, 2, 3]"), "a JSON object was expected"),
    Case(
        "plan-unknown-format-version",
        "write",
        lambda s: edited(s, lambda d: d.update(format_version=99)),
        "unsupported plan format_version 99",
    ),
    Case(
        "plan-without-ranges",
        "commit",
        lambda s: edited(s, lambda d: d.pop("ranges")),
        "plan file is malformed",
    ),
    Case(
        "tampered-plan-range",
        "write",
        lambda s: edited(s, lambda d: set_range(d, 0, 3)),
        "does not match its ranges",
    ),
    Case("tampered-plan-end-before-start", "commit", lambda s: edited(s, lambda d: set_range(d, 4, 2)), "invalid"),
    Case("plan-offset-nan", "write", lambda s: edited(s, lambda d: set_range(d, 0, float("nan"))), "malformed"),
    Case("plan-offset-not-a-number", "write", lambda s: edited(s, lambda d: set_range(d, 0, "five")), "malformed"),
    Case(
        "tampered-plan-group",
        "commit",
        lambda s: edited(s, lambda d: d.update(group_id=s.group)),
        "does not match its ranges",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_plan_file_is_one_line_and_changes_nothing(case: Case, scene: Scene, verdict) -> None:
    plan = case.plan(scene)
    before = scene.snapshot()
    result = cli(case.command, "--plan", plan, "--bootstrap-servers", scene.bootstrap_servers)
    verdict.judge(cli_refusal_problems(result, case.expected), before, scene.snapshot())
    assert Path(plan).exists() or case.id == "missing-plan", "a refused write/commit must not remove the plan file"
