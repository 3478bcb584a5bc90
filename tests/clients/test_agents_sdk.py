"""The OpenAI Agents SDK with ``set_default_openai_api("responses")`` against a live server
(issue 25's acceptance): a plain run (JSON and streamed), a ``previous_response_id``
continuation, and a function tool that the scripted model calls and the SDK runs."""

from __future__ import annotations

import pytest

from tests.clients.harness import RecordingProxy, run_agents_sdk

pytestmark = [pytest.mark.live, pytest.mark.slow]


def test_a_plain_run_answers_as_json_and_as_a_stream(proxy: RecordingProxy) -> None:
    got = run_agents_sdk("plain", proxy.url)
    assert got["output"] == "Hello from the Agents SDK"  # the echo model
    assert got["response_id"].startswith("resp_")
    assert got["streamed_output"] == "Hello again, streamed"
    assert "".join(got["streamed_deltas"]) == "Hello again, streamed"
    assert len(got["streamed_deltas"]) > 1  # streamed word by word, not in one piece
    sent = [b for b in proxy.bodies() if b.get("model") == "echo"]
    assert [b.get("stream", False) for b in sent] == [False, True]
    assert all(b.get("instructions") == "Repeat the user." for b in sent)


def test_previous_response_id_continues_the_conversation(proxy: RecordingProxy) -> None:
    got = run_agents_sdk("chain", proxy.url)
    assert got["first"] == "First answer."
    # The scripted model answers by the history it is given: the second answer only when
    # the first exchange came back from the server's store.
    assert got["second"] == "Second answer, after the first."
    assert got["without_previous"] == "First answer."
    assert got["second_id"] != got["first_id"]
    second = [
        b for b in proxy.bodies() if b.get("model") == "chain" and b.get("previous_response_id")
    ]
    assert [b["previous_response_id"] for b in second] == [got["first_id"]]


def test_a_function_tool_runs_in_the_sdk_and_its_output_goes_back(
    proxy: RecordingProxy,
) -> None:
    before = len(proxy.bodies())
    got = run_agents_sdk("tool", proxy.url)
    assert got["tool_calls"] == ["Paris"]  # the SDK ran get_weather(city="Paris")
    assert got["output"] == "It is sunny in Paris."
    assert got["items"] == ["tool_call_item", "tool_call_output_item", "message_output_item"]
    # What the SDK sent back: the model's call and the tool's output, paired by call_id.
    sent = proxy.bodies()[before:]
    followup = sent[1]["input"]
    call = next(i for i in followup if i.get("type") == "function_call")
    output = next(i for i in followup if i.get("type") == "function_call_output")
    assert call["name"] == "get_weather"
    assert call["call_id"] == output["call_id"]
    assert "sunny, 21 C in Paris" in output["output"]
    # With auto_previous_response_id the follow-up carries only the output and the chain id.
    assert got["chained_tool_calls"] == ["Paris"]
    assert got["chained_output"] == "It is sunny in Paris."
    chained = sent[3]
    assert chained["previous_response_id"].startswith("resp_")
    assert [i.get("type") for i in chained["input"]] == ["function_call_output"]
