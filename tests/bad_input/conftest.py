"""The bad-input matrix: every case must be refused with one clear line and change nothing.

The cases share one scene (a topic, a group with a committed batch, outputs, a pending plan)
built once per session on the real broker, so most refusals cost one short subprocess. The
terminal summary ends with ``bad inputs rejected: M/N, state changed: K``.
"""

from __future__ import annotations

import pytest

from tests.bad_input.scene import scene  # noqa: F401 - the shared fixture
from tests.bad_input.tally import MATRIX, Verdict
from tests.support.schema_registry_fixture import schema_registry  # noqa: F401 - the embedded schema registry


@pytest.fixture
def verdict(request: pytest.FixtureRequest) -> Verdict:
    return MATRIX.new_case(request)
