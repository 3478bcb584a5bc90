"""A reply that does not parse in the agent's output format is shown its error once (as
langroid feeds errors back); a second bad reply fails the call with ``OutputParseError``."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from agents import AsyncAgent, StatusCode, Task
from agents.parsers import JSONParser, OutputParseError
from agents.testing import ScriptedLLM


class Person(BaseModel):
    name: str
    age: int


async def test_a_bad_reply_is_shown_its_error_once_then_accepted() -> None:
    llm = ScriptedLLM(['{"name": "Ann", "age": "old"}', '{"name": "Ann", "age": 31}'])
    agent = AsyncAgent(llm, "Reply in JSON.", output_format=JSONParser(format=Person))
    reply = await agent("Who is Ann?", session_id="s")
    assert reply.formatted == {"status": 1, "data": {"name": "Ann", "age": 31}, "message": None}
    shown = llm.calls[1]["messages"]
    assert shown[-2] == {"role": "assistant", "content": '{"name": "Ann", "age": "old"}'}
    assert shown[-1]["role"] == "user"
    assert shown[-1]["content"].startswith("Your reply could not be parsed: JSON does not match")
    assert "age" in shown[-1]["content"]
    assert agent.memory is not None
    contents = [m.content for m in agent.memory.get_memory("s")]
    assert contents[0] == "Who is Ann?" and contents[-1] == '{"name": "Ann", "age": 31}'


async def test_a_second_bad_reply_fails_clearly() -> None:
    llm = ScriptedLLM(["not json", "still not json"])
    agent = AsyncAgent(llm, output_format=JSONParser(), name="Extractor", memory=None)
    with pytest.raises(OutputParseError) as failed:
        await agent("extract")
    assert "Extractor: the model's reply could not be parsed" in str(failed.value)
    assert "not a valid JSON" in failed.value.error and failed.value.reply == "still not json"
    assert len(llm.calls) == 2 and llm.calls[1]["messages"][-2]["content"] == "not json"


def test_in_a_task_the_failure_ends_the_run_with_the_error() -> None:
    agent = AsyncAgent(ScriptedLLM(["nope", "nope"]), output_format=JSONParser(), name="J")
    with pytest.raises(OutputParseError):
        Task(agent, single_round=True).run("go")
    ok = AsyncAgent(ScriptedLLM(["nope", '{"a": 1}']), output_format=JSONParser(), name="K")
    result = Task(ok, single_round=True).run("go")
    assert (result.status, result.content) == (StatusCode.DONE, '{"a": 1}')
