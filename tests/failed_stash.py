"""Whether the test that owns a fixture failed in its call phase: fixtures that dump process
logs on failure ask :func:`call_failed` (the root conftest's report hook fills it in)."""

from __future__ import annotations

import pytest

FAILED = pytest.StashKey[bool]()


def call_failed(request: pytest.FixtureRequest) -> bool:
    return request.node.stash.get(FAILED, False)
