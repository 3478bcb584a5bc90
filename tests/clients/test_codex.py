"""OpenAI's Codex CLI (``codex exec --json``, a custom provider with ``wire_api="responses"``)
against a live server (issue 25's acceptance): it answers a prompt, and it runs the
``exec_command`` call a scripted model asks for, sends the command's output back as a
``function_call_output`` and prints the model's final answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.clients.harness import RecordingProxy, run_codex

pytestmark = [pytest.mark.live, pytest.mark.slow]


def _messages(events: list[dict[str, Any]]) -> list[str]:
    return [
        e["item"]["text"]
        for e in events
        if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"
    ]


def test_codex_answers_a_prompt(proxy: RecordingProxy, tmp_path: Path) -> None:
    events, done = run_codex("Say hi", "greeter", proxy.url, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _messages(events) == ["Hello from AgentStation."]
    assert events[-1]["type"] == "turn.completed", events[-3:]
    assert not [e for e in events if e.get("type") in ("error", "turn.failed")]
    sent = [b for b in proxy.bodies() if b.get("model") == "greeter"]
    assert len(sent) == 1 and sent[0]["stream"] is True and sent[0]["store"] is False


def test_codex_runs_the_command_the_model_asks_for(proxy: RecordingProxy, tmp_path: Path) -> None:
    events, done = run_codex("Print the answer with the shell.", "shell", proxy.url, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    commands = [
        e["item"]
        for e in events
        if e.get("type") == "item.completed" and e["item"].get("type") == "command_execution"
    ]
    assert len(commands) == 1, events
    assert "echo agentstation-$((6*7))" in commands[0]["command"]
    assert "agentstation-42" in commands[0]["aggregated_output"]  # the shell ran it
    assert _messages(events) == ["The command printed 42."]
    # The second request carried the model's call and the command's output, by call_id.
    sent = [b for b in proxy.bodies() if b.get("model") == "shell"]
    assert len(sent) == 2
    call = next(i for i in sent[1]["input"] if i.get("type") == "function_call")
    output = next(i for i in sent[1]["input"] if i.get("type") == "function_call_output")
    assert call["name"] == "exec_command" and call["call_id"] == output["call_id"]
    assert "agentstation-42" in str(output["output"])
