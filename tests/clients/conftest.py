"""One live service per module for the client tests, behind a recording proxy."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.clients.harness import RecordingProxy, check_answers, client_service


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RecordingProxy]:
    """The live service (scripted models, SQLite) seen through a ``RecordingProxy``."""
    with client_service(tmp_path_factory.mktemp("svc")) as service:
        with RecordingProxy(service.url) as recording:
            yield recording


@pytest.fixture(autouse=True)
def answers_validate(proxy: RecordingProxy) -> Iterator[None]:
    """After each test: every Responses answer its client got validates against the
    ``openai`` package's models (bodies and streamed events)."""
    before = len(proxy.answers)
    yield
    assert check_answers(proxy.answers[before:]) > 0
