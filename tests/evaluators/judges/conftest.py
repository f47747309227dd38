"""Every judge-engine test runs over both transports: the direct HTTP path that OpenAI-compatible
providers take by default, and litellm, which every other provider takes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spanjudge.evaluators._judge.judges import litellm_judge


@pytest.fixture(autouse=True, params=["direct", "litellm"])
def transport(request: pytest.FixtureRequest) -> Iterator[str]:
    previous = litellm_judge.DEFAULT_TRANSPORT
    litellm_judge.DEFAULT_TRANSPORT = request.param
    try:
        yield request.param
    finally:
        litellm_judge.DEFAULT_TRANSPORT = previous
