"""ActionExecutor / AsyncActionExecutor: routing, error paths, hooks, session routing."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from agents.actions import (
    ActionExecutor,
    AsyncActionExecutor,
    BaseAction,
    Calculator,
    current_session_id,
    tool_api,
)
from agents.hooks import Hook
from agents.schema import ActionReturn, ActionStatusCode, ActionValidCode, AgentMessage


class Notes(BaseAction):
    """Per-session notes."""

    def __init__(self) -> None:
        super().__init__()
        self.notes: dict[Any, list[str]] = {}
        self.threads: set[str] = set()

    @tool_api
    async def add(self, text: str, times: int = 1) -> str:
        """Add a note.

        Args:
            text: the note
            times: how often
        """
        await asyncio.sleep(0)  # let concurrent sessions interleave
        self.notes.setdefault(current_session_id.get(), []).extend([text] * times)
        return f"added {text}"

    @tool_api
    def read(self) -> list[str]:
        """All notes of this session."""
        self.threads.add(threading.current_thread().name)
        return self.notes.get(current_session_id.get(), [])

    @tool_api
    def fail(self, why: str) -> str:
        """Always fails."""
        raise RuntimeError(why)

    @tool_api
    def custom(self) -> ActionReturn:
        """Returns an ActionReturn of its own."""
        return ActionReturn(result=[{"type": "image", "content": "/tmp/x.png"}])


def call(name: str, parameters: Any = None) -> AgentMessage:
    return AgentMessage(sender="agent", content={"name": name, "parameters": parameters or {}})


async def test_success_returns_actionreturn_message_in_utf8() -> None:
    executor = AsyncActionExecutor([Notes()])
    reply = await executor(call("Notes.add", {"text": "急 ✓", "times": "2"}), session_id=3)
    assert reply.sender == "AsyncActionExecutor"
    result = reply.content
    assert isinstance(result, ActionReturn)
    assert result.state == ActionStatusCode.SUCCESS and result.valid == ActionValidCode.OPEN
    assert result.args == {"text": "急 ✓", "times": 2}  # lax conversion of "2"
    assert result.format_result() == "added 急 ✓"
    listed = await executor(call("Notes.read"), session_id=3)
    assert listed.content.format_result() == '["急 ✓", "急 ✓"]'


@pytest.mark.parametrize(
    ("name", "parameters", "problem"),
    [
        ("Nope", {}, "unknown tool 'Nope'; available tools: Notes.add, Notes.read"),
        ("Notes.nope", {}, "tool 'Notes' has no API 'nope' (available: add, read, fail, custom)"),
        ("Notes.add", {}, "invalid arguments for Notes.add: missing required argument 'text'"),
        ("Notes.add", {"text": "a", "colour": 1}, "unknown argument 'colour'"),
        ("Notes.add", {"text": "a", "times": "x"}, "argument 'times': Input should be a valid"),
        ("Notes.add", {"text": ["a"]}, "argument 'text': Input should be a valid string"),
        ("Notes.add", '{"text": ', "invalid JSON arguments for Notes.add"),
        ("Notes.add", "[1, 2]", "arguments for Notes.add must be a JSON object"),
    ],
)
async def test_bad_calls_are_args_errors(name: str, parameters: Any, problem: str) -> None:
    reply = await AsyncActionExecutor([Notes()])(call(name, parameters))
    assert reply.content.state == ActionStatusCode.ARGS_ERROR
    assert problem in reply.content.errmsg
    assert reply.content.result is None


async def test_malformed_message_is_args_error() -> None:
    for content in ["just text", {"parameters": {}}, {"name": 3}]:
        reply = await AsyncActionExecutor([Notes()])(AgentMessage(content=content))
        assert reply.content.state == ActionStatusCode.ARGS_ERROR
        assert "a tool call needs {'name': str, 'parameters': dict}" in reply.content.errmsg


async def test_tool_exception_is_api_error() -> None:
    reply = await AsyncActionExecutor([Notes()])(call("Notes.fail", {"why": "disk full"}))
    assert reply.content.state == ActionStatusCode.API_ERROR
    assert reply.content.errmsg == "RuntimeError: disk full"
    assert reply.content.args == {"why": "disk full"}


async def test_own_actionreturn_is_completed() -> None:
    reply = await AsyncActionExecutor([Notes()])(call("Notes.custom"))
    assert reply.content.type == "Notes"
    assert reply.content.format_result() == "[image](/tmp/x.png)"


async def test_fenced_json_string_and_openai_names() -> None:
    executor = AsyncActionExecutor([Notes(), Calculator()])
    fenced = '```json\n{"text": "hi"}\n```'
    assert (await executor(call("Notes__add", fenced))).content.format_result() == "added hi"
    calc = await executor(call("Calculator", "2 + 3 * 4"))  # a bare string for a 1-arg tool
    assert calc.content.format_result() == "14"


async def test_sessions_are_routed_concurrently() -> None:
    notes = Notes()
    executor = AsyncActionExecutor([notes])
    await asyncio.gather(
        *(executor(call("Notes.add", {"text": f"s{i}"}), session_id=f"t:{i}") for i in range(5))
    )
    assert notes.notes == {f"t:{i}": [f"s{i}"] for i in range(5)}
    assert current_session_id.get() == 0  # reset after each call


async def test_sync_tools_run_off_the_event_loop_unless_cheap() -> None:
    notes = Notes()
    await AsyncActionExecutor([notes])(call("Notes.read"))
    assert notes.threads and threading.current_thread().name not in notes.threads

    class CheapNotes(Notes):
        sync_in_thread = False

    cheap = CheapNotes()
    await AsyncActionExecutor([cheap])(call("CheapNotes.read"))
    assert cheap.threads == {threading.current_thread().name}


async def test_forward_runs_a_call_without_hooks() -> None:
    recorder = Recorder()
    executor = AsyncActionExecutor([Notes()], hooks=[recorder])
    result = await executor.forward("Notes.add", {"text": "x"})
    assert result.format_result() == "added x" and recorder.seen == []


def test_sync_forward() -> None:
    assert ActionExecutor([Notes()]).forward("Notes.add", '{"text": "y"}').args == {"text": "y"}


def test_sync_executor_same_behaviour() -> None:
    executor = ActionExecutor(Notes())
    reply = executor(call("Notes.add", {"text": "x"}), session_id="a")
    assert reply.sender == "ActionExecutor"
    assert reply.content.format_result() == "added x"
    assert executor(call("Missing")).content.state == ActionStatusCode.ARGS_ERROR
    assert executor.keys() == ["Notes"] and "Notes" in executor


class Recorder(Hook):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any, Any]] = []

    def before_action(self, executor: Any, message: AgentMessage, session_id: Any) -> AgentMessage:
        self.seen.append(("before", message.content["name"], session_id))
        content = {**message.content, "parameters": {"text": "rewritten"}}
        return AgentMessage(sender=message.sender, content=content)

    async def after_action(self, executor: Any, message: AgentMessage, session_id: Any) -> None:
        self.seen.append(("after", message.content.format_result(), session_id))


class Tagger(Hook):
    def after_action(self, executor: Any, message: AgentMessage, session_id: Any) -> AgentMessage:
        return AgentMessage(sender="tagged", content=message.content)


async def test_hooks_sync_and_async_replace_messages() -> None:
    recorder = Recorder()
    executor = AsyncActionExecutor([Notes()], hooks=[recorder, Tagger()])
    reply = await executor(call("Notes.add", {"text": "original"}), session_id=7)
    assert recorder.seen == [("before", "Notes.add", 7), ("after", "added rewritten", 7)]
    assert reply.sender == "tagged"


async def test_hook_handle_removes_hook() -> None:
    recorder = Recorder()
    executor = AsyncActionExecutor([Notes()])
    handle = executor.register_hook(recorder)
    await executor(call("Notes.add", {"text": "x"}))
    handle.remove()
    await executor(call("Notes.add", {"text": "x"}))
    assert len(recorder.seen) == 2


def test_description_and_schemas() -> None:
    executor = ActionExecutor([Notes(), Calculator()])
    assert [d["name"] for d in executor.description()] == [
        "Notes.add", "Notes.read", "Notes.fail", "Notes.custom", "Calculator",
    ]  # fmt: skip
    names = [t["function"]["name"] for t in executor.tool_schemas()]
    assert names == ["Notes__add", "Notes__read", "Notes__fail", "Notes__custom", "Calculator"]


async def test_finish_and_no_action() -> None:
    executor = AsyncActionExecutor([Notes()], finish_in_action=True)
    done = await executor(call("FinishAction", {"response": "42"}))
    assert done.content.valid == ActionValidCode.FINISH
    assert done.content.format_result() == "42"
    nothing = await executor(call("NoAction"))
    assert nothing.content.valid == ActionValidCode.INVALID
    assert nothing.content.errmsg == "Please follow the format"
