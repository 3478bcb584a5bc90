"""``POST /v1/sessions``' 201 answer (``Created``): the bytes and headers ``JSONResponse`` sends."""

from __future__ import annotations

import math
from typing import Any

import pytest
from starlette.responses import JSONResponse

from app.api.sessions import Created

CONTENTS: list[dict[str, Any]] = [
    {},
    {"id": "sess_1", "agent": "a", "agent_version": 3, "metadata": {}, "usage": {"n": 0}},
    {"metadata": {"t": 'é "q" \\ \n\u2028 \U0001f600', "l": [1, 2.5, None, True, False, {}]}},
    {"metadata": {"big": 10**30, "small": 1e-300, "neg": -0.0, "f": 1e300}},
]


@pytest.mark.parametrize("content", CONTENTS)
def test_created_is_what_json_response_sends(content: dict[str, Any]) -> None:
    ours, theirs = Created(content), JSONResponse(content, status_code=201)
    assert ours.status_code == theirs.status_code == 201
    assert ours.body == theirs.body
    assert ours.raw_headers == theirs.raw_headers
    assert ours.background is None


@pytest.mark.parametrize("bad", [{"x": math.nan}, {"x": math.inf}, {"x": object()}])
def test_created_refuses_what_json_response_refuses(bad: dict[str, Any]) -> None:
    with pytest.raises((ValueError, TypeError)) as ours:
        Created(bad)
    with pytest.raises((ValueError, TypeError)) as theirs:
        JSONResponse(bad, status_code=201)
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)
