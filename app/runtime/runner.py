"""One turn of an agent: build it, load its memory, stream it, and persist only what is new."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from agents.llms.base import Usage, usage_scope
from agents.schema import AgentMessage, AgentStatusCode
from app.runtime.approvals import Resumption
from app.runtime.events import RunChannel
from app.runtime.messages import dump_message, jsonable
from app.runtime.registry import ServableAgent
from app.schemas.vocab import EventType

# Chunks in these states are a message still being written; any other state completes one.
# A message in progress: the model's text, or a tool call being written (lagent's
# PLUGIN_START / CODING, completed by PLUGIN_END / CODE_END).
GENERATING = frozenset(
    {AgentStatusCode.STREAM_ING, AgentStatusCode.PLUGIN_START, AgentStatusCode.CODING}
)


def merge_state(
    empty: dict[str, Any], stored: dict[str, list[dict[str, Any]]]
) -> dict[str, list[Any]]:
    """The agent's keys, filled from storage (keys with no rows stay empty; others are dropped)."""
    return {key: stored.get(key, []) for key in empty}


@dataclass
class TurnResult:
    """What a turn produced."""

    final: AgentMessage | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)


_SECOND: tuple[int, str] = (-1, "")  # the last second formatted (a turn's events share it)


def _iso(t: float) -> str:
    """A wall-clock time as the API writes times (UTC, to the ms): 1.5 us, a third of
    ``datetime.isoformat``'s cost, three times per message event."""
    global _SECOND
    second = int(t)
    cached = _SECOND
    if cached[0] != second:
        cached = _SECOND = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{cached[1]}.{int((t - second) * 1000):03d}Z"


class _Segmenter:
    """Turns an agent's chunk stream into message.delta and message events.

    A ``message`` event says when its step began (the previous message's end, or the turn's
    start or resumption), when its first chunk and its end came, and the tokens the model
    calls spent since the previous message (a model's reply): a run's timeline (docs/api.md).
    """

    def __init__(self, channel: RunChannel | None, result: TurnResult, index: int = 0) -> None:
        self.channel = channel
        self.result = result
        self.index = index - 1
        self.open: AgentMessage | None = None
        self.text: Any = None
        self.mark = time.time()  # the current step's start
        self.first: float | None = None  # the open message's first non-empty chunk
        self.counted = (0, 0)  # the turn's usage at the previous message

    def step(self, chunk: AgentMessage) -> bool:
        """A chunk that goes on writing the open message (same sender, still generating):
        its delta handled here, no coroutine (once per token of every answer, issue 25);
        False for any other chunk, which ``feed`` takes (nothing done)."""
        open_ = self.open
        if open_ is None or open_.sender != chunk.sender:
            return False
        state = int(chunk.stream_state)
        if state not in GENERATING:
            return False
        content, text = chunk.content, self.text
        if type(content) is str and type(text) is str and content.startswith(text):
            delta = content[len(text) :]
        else:  # (also for text of a subclass of str: as ``feed``)
            delta = self._delta(content)
        self.open, self.text = chunk, content
        if delta is not None and delta != "":
            if self.first is None:
                self.first = time.time()  # a model's first token (an empty chunk may come first)
            if self.channel is not None:
                self.channel.put_delta(self.index, chunk.sender, delta, state)
        return True

    async def feed(self, chunk: AgentMessage) -> None:
        # The state as an int (``GENERATING``'s members compare and hash as ints): an enum
        # conversion per chunk cost ~1.5 us, per token of every answer.
        state = int(chunk.stream_state)
        continues = self.open is not None and self.open.sender == chunk.sender
        if not continues:
            await self.close()
            self.index += 1
            self.text = None
            self.first = None
        delta = self._delta(chunk.content)
        if self.first is None and delta not in (None, ""):
            self.first = time.time()  # a model's first token (an empty chunk may come first)
        self.open, self.text = chunk, chunk.content
        if self.channel is not None and delta not in (None, ""):
            self.channel.put_delta(self.index, chunk.sender, delta, state)
        if state not in GENERATING:
            await self.close()

    def _delta(self, content: Any) -> Any:
        if (
            isinstance(content, str)
            and isinstance(self.text, str)
            and content.startswith(self.text)
        ):
            return content[len(self.text) :]
        if content == self.text:
            return None
        return jsonable(content)

    async def close(self) -> None:
        if self.open is None:
            return
        data = dump_message(self.open)
        self.result.messages.append(data)
        now = time.time()
        if self.channel is not None:
            event: dict[str, Any] = {
                "index": self.index,
                "message": data,
                "started_at": _iso(self.mark),
                "first_at": _iso(self.first if self.first is not None else now),
                "at": _iso(now),
            }
            usage = self.result.usage
            prompt, completion = usage.prompt_tokens, usage.completion_tokens
            if (prompt, completion) != self.counted:
                event["usage"] = {
                    "prompt_tokens": prompt - self.counted[0],
                    "completion_tokens": completion - self.counted[1],
                }
                self.counted = (prompt, completion)
            # Stored by the channel's next flush (≤ flush_s) or with the run's final status:
            # the message rows themselves are only written when the run ends.
            await self.channel.emit(EventType.MESSAGE, event)
        self.mark = now
        self.first = None
        self.open = None
        self.text = None


def turn_params(agent: ServableAgent, gen_params: dict[str, Any]) -> dict[str, Any]:
    """A turn's LLM parameters: the spec's (set by the builder), overridden by the run's."""
    return {**getattr(agent, "agentstation_gen_params", {}), **gen_params}


async def resume_turn(
    agent: ServableAgent,
    resume: Resumption,
    session_key: str,
    gen_params: dict[str, Any],
    channel: RunChannel | None = None,
    result: TurnResult | None = None,
) -> TurnResult:
    """Go on with a turn that stopped before tool calls: the decided calls' results, then the
    agent's next model turns (``agent.resume_stream``), as ``run_turn`` streams a turn."""
    result = result if result is not None else TurnResult()
    segmenter = _Segmenter(channel, result, resume.message_index)
    params = turn_params(agent, gen_params)
    with usage_scope() as usage:
        result.usage = usage
        stream = agent.resume_stream(  # type: ignore[attr-defined]
            resume.decisions, session_id=session_key, pending=resume.pending, **params
        )
        async for chunk in stream:
            if not segmenter.step(chunk):
                await segmenter.feed(chunk)
            if AgentStatusCode(int(chunk.stream_state)) == AgentStatusCode.END:
                result.final = chunk
        await segmenter.close()
    return result


async def run_turn(
    agent: ServableAgent,
    message: AgentMessage,
    session_key: str,
    gen_params: dict[str, Any],
    channel: RunChannel | None = None,
    result: TurnResult | None = None,
) -> TurnResult:
    """Run one turn to its END message; ``result`` fills in as it goes (usage included)."""
    result = result if result is not None else TurnResult()
    # The agent's chunks straight into the segmenter (a generator between them was one more
    # layer every token passed through, issue 25).
    segmenter = _Segmenter(channel, result)
    params = turn_params(agent, gen_params)
    with usage_scope() as usage:
        result.usage = usage  # the live counter: a cancelled turn still reports its usage
        async for chunk in agent.stream(message, session_id=session_key, **params):
            if not segmenter.step(chunk):
                await segmenter.feed(chunk)
            if int(chunk.stream_state) == AgentStatusCode.END:
                result.final = chunk
        await segmenter.close()
    return result
