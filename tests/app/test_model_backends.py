"""Model backends come from the ``agentstation.models`` entry points: a new backend is one module.

The backend below (``shout``) is declared as an installed package would declare it (an entry
point in the group, loaded by its import path); a ``MODELS`` entry naming it is built by it, and
both the raw chat API and an agent on that model answer through it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from importlib.metadata import EntryPoint
from typing import Any

import httpx
import pytest

from agents.llms.base import AsyncBaseLLM, LLMDelta, Messages, Usage
from app.engines.base import ModelHandle
from app.main import create_app
from app.models import backends
from app.models.raw import LLMRawBackend
from app.settings import Settings
from tests.app.conftest import KEY_A, MODELS, make_agent, make_session
from tests.lifespan import LifespanManager

POINT = EntryPoint("shout", f"{__name__}:create_shout_handle", backends.GROUP)


class ShoutLLM(AsyncBaseLLM):
    """Answers the last user message in capitals (``prefix`` from the model's config)."""

    def __init__(self, prefix: str, **gen_params: Any) -> None:
        super().__init__(**gen_params)
        self.prefix = prefix

    async def _astream(self, messages: Messages, **params: Any) -> AsyncIterator[LLMDelta]:
        users = [m for m in messages if m.get("role") == "user"]
        text = self.prefix + str(users[-1].get("content") or "").upper()
        yield LLMDelta(text=text)
        usage = Usage(prompt_tokens=1, completion_tokens=len(text.split()))
        yield LLMDelta(finish_reason="stop", usage=usage)


def create_shout_handle(config: dict[str, Any]) -> ModelHandle:
    """The ``shout`` backend's factory: the whole MODELS entry in, a handle (not started) out."""
    llm = ShoutLLM(str(config.get("prefix", "")))
    return ModelHandle(config["name"], "shout", llm, LLMRawBackend(llm, config["name"]))


@pytest.fixture
def shout_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if a package declaring ``shout = "...:create_shout_handle"`` were installed."""

    def entry_points(*, group: str) -> list[EntryPoint]:
        return [POINT] if group == backends.GROUP else []

    monkeypatch.setattr(backends, "entry_points", entry_points)


def test_backends_are_the_builtins_plus_the_entry_points(shout_installed: None) -> None:
    assert backends.backend_names() == ["openai", "scripted", "shout", "vllm"]
    assert backends.backend_factory("shout") is create_shout_handle
    with pytest.raises(ValueError, match="unknown model backend 'nope'"):
        backends.backend_factory("nope")


def test_a_models_entry_must_name_a_registered_backend() -> None:
    with pytest.raises(ValueError, match="unknown model backend 'shout'"):
        Settings(models='[{"name": "loud", "backend": "shout"}]')


async def test_a_registered_backend_is_picked_by_its_config(
    shout_installed: None, settings_factory: Callable[..., Settings]
) -> None:
    models = [*MODELS, {"name": "loud", "backend": "shout", "prefix": "> "}]
    app = create_app(settings_factory(models=json.dumps(models)))
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers=headers
        ) as client:
            ready = (await client.get("/readyz")).json()
            assert ready["models"]["loud"] == "ready"
            raw = await client.post(
                "/v1/chat/completions",
                json={"model": "loud", "messages": [{"role": "user", "content": "hi there"}]},
            )
            assert raw.status_code == 200, raw.text
            assert raw.json()["choices"][0]["message"]["content"] == "> HI THERE"
            await make_agent(client, model="loud")
            sid = await make_session(client)
            turn = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "quiet"})
            assert turn.status_code == 200, turn.text
            assert turn.json()["message"]["content"] == "> QUIET"


def test_a_scripted_template_fills_in_the_conversations_own_messages() -> None:
    from app.models.scripted import create_scripted_handle

    handle = create_scripted_handle(
        {
            "name": "t",
            "backend": "scripted",
            "replies": ["run {user}", "got {last}"],
            "cycle": "conversation",
            "template": True,
        }
    )
    llm = handle.llm
    one = [{"role": "user", "content": "x = 1"}]
    assert llm.next_reply(one) == "run x = 1"  # type: ignore[attr-defined]
    two = [
        *one,
        {"role": "assistant", "content": "run x = 1"},
        {"role": "environment", "content": "1"},
    ]
    assert llm.next_reply(two) == "got 1"  # type: ignore[attr-defined]
