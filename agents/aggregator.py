"""Aggregators: turn an agent's memory into the chat messages its model receives."""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import is_
from typing import Any, TypeGuard

from agents.hooks import action_return_text
from agents.memory import Memory
from agents.schema import RENDER_EDITS, ActionReturn, AgentMessage

Messages = list[dict[str, Any]]
SystemInstruction = str | dict[str, Any] | Sequence[dict[str, Any]]
_TOOL_KEYS = frozenset({"tool_type", "thought", "action", "status"})


def _messages_of(messages: Memory | Iterable[AgentMessage] | None) -> Sequence[AgentMessage]:
    """The messages to read (not copied when they are a plain ``Memory``'s whole list: the
    aggregators only read them)."""
    if messages is None:
        return []
    if type(messages) is Memory and messages.recent_n is None:
        return messages.memory
    if isinstance(messages, Memory):
        return messages.get_memory()
    return list(messages)


def _content(message: AgentMessage) -> Any:
    """A message's content as a model should read it (tool results become text)."""
    if isinstance(message.content, ActionReturn):
        return action_return_text(message.content)
    return message.content


class DefaultAggregator:
    """Own messages become ``assistant`` turns, everything else ``user`` turns (merged)."""

    def aggregate(
        self,
        messages: Memory | Iterable[AgentMessage] | None,
        name: str,
        parser: Any = None,
        system_instruction: SystemInstruction | None = None,
    ) -> Messages:
        """The chat messages for the next model call: the system instruction's, then those
        ``_render`` makes of the memory."""
        out = self.aggregate_system_instruction(system_instruction) if system_instruction else []
        self._render(out, _messages_of(messages), name, parser)
        return out

    def _render(
        self, out: Messages, messages: Sequence[AgentMessage], name: str, parser: Any
    ) -> None:
        """Append the chat messages for ``messages`` (``name``'s own and the others') to ``out``.

        A session's history is rendered again on every model call; the render of its messages
        is kept (``_KEPT``) and the next call that starts with the same message objects copies
        it and renders only the messages after them."""
        last = out[-1] if out else None
        merge = last is not None and last["role"] == "user" and isinstance(last["content"], str)
        start, edits = len(out), RENDER_EDITS[0]
        keep = not merge and len(messages) > 0  # renders kept start from no merge
        kept = _kept(messages, name, edits) if keep else None
        done = 0
        if kept is not None:
            out.extend(map(dict.copy, kept.rendered))  # copies: a caller may change its prompt
            last, merge, done = out[-1], kept.merge, len(kept.messages)
        plain = self._render_from(out, messages, done, name, last, merge)
        if keep and plain and len(messages) > done:
            _keep(messages, name, out, start, kept, edits)

    @staticmethod
    def _render_from(
        out: Messages,
        messages: Sequence[AgentMessage],
        done: int,
        name: str,
        last: dict[str, Any] | None,
        merge: bool,
    ) -> bool:
        """Append the chat messages for ``messages[done:]``; True when every one of them had text
        for content (a render that stays right while the message is not assigned anew)."""
        # One pass over the new messages per model call: kept tight (no lookups in the last
        # turn's dict, no conversion of text that is already a string).
        plain = True
        append = out.append
        for message in messages[done:] if done else messages:
            # The fields from the message's own dict: an attribute read of a pydantic model
            # goes through its ``__getattr__`` hook (three type lookups), once here, not twice.
            fields = message.__dict__
            content = fields["content"]
            if fields["sender"] == name:
                if type(content) is not str:
                    content = str(content)
                    plain = False
                append({"role": "assistant", "content": content})
                merge = False
                continue
            if type(content) is not str:
                content = _content(message)
                plain = False
            if merge and isinstance(content, str):
                assert last is not None
                last["content"] += content
            else:
                last = {"role": "user", "content": content}
                append(last)
                merge = isinstance(content, str)
        return plain

    @staticmethod
    def aggregate_system_instruction(system_instruction: SystemInstruction) -> Messages:
        """A system prompt (str, message dict or list of them) as a list of messages."""
        if isinstance(system_instruction, str):
            return [{"role": "system", "content": system_instruction}]
        items = [system_instruction] if isinstance(system_instruction, dict) else system_instruction
        result: Messages = []
        for msg in items:
            if not isinstance(msg, dict):
                raise TypeError(f"Unsupported message type: {type(msg)}")
            if not ("role" in msg and "content" in msg):
                raise KeyError(f"Missing required key 'role' or 'content': {msg}")
            result.append(dict(msg))
        return result

    # lagent's spelling, kept for ported subclasses.
    aggregate_system_intruction = aggregate_system_instruction


@dataclass(frozen=True)
class _Render:
    """``DefaultAggregator``'s render of ``messages`` for ``name`` (from no merge), valid while
    ``RENDER_EDITS`` is ``edits``: ``rendered`` never handed out, only copies of its dicts."""

    messages: list[AgentMessage]
    rendered: Messages
    merge: bool  # its last message is a user text the next user text joins
    edits: int


_KEPT: OrderedDict[tuple[int, str], _Render] = OrderedDict()  # (id of the first message, name)
_KEPT_MESSAGES = [0]  # messages held by ``_KEPT``
_KEPT_LIMIT = 50_000  # at most, over all renders (~100 bytes each: the dicts and references)
_KEPT_LOCK = threading.Lock()


def _kept(messages: Sequence[AgentMessage], name: str, edits: int) -> _Render | None:
    """The kept render of the first messages of ``messages`` (the same objects, in the same
    order, none assigned anew since), or None."""
    with _KEPT_LOCK:
        kept = _KEPT.get((id(messages[0]), name))
        if kept is None:
            return None
        _KEPT.move_to_end((id(messages[0]), name))
    prefix = kept.messages
    if kept.edits != edits or len(prefix) > len(messages) or not all(map(is_, prefix, messages)):
        return None
    return kept


def _keep(
    messages: Sequence[AgentMessage],
    name: str,
    out: Messages,
    start: int,
    kept: _Render | None,
    edits: int,
) -> None:
    """Keep the render of ``messages`` (``out[start:]``), made from ``kept``'s when not None."""
    if len(messages) > _KEPT_LIMIT:
        return
    if kept is None:
        rendered = list(map(dict.copy, out[start:]))
    else:  # its last dict may have had a new user text joined: copied again
        reused = len(kept.rendered) - 1
        rendered = kept.rendered[:reused] + list(map(dict.copy, out[start + reused :]))
    render = _Render(list(messages), rendered, out[-1]["role"] == "user", edits)
    key = (id(messages[0]), name)
    with _KEPT_LOCK:
        old = _KEPT.pop(key, None)
        if old is not None:
            _KEPT_MESSAGES[0] -= len(old.messages)
        _KEPT[key] = render
        _KEPT_MESSAGES[0] += len(messages)
        while _KEPT_MESSAGES[0] > _KEPT_LIMIT:
            _, evicted = _KEPT.popitem(last=False)
            _KEPT_MESSAGES[0] -= len(evicted.messages)


class ToolAggregator(DefaultAggregator):
    """Renders tool calls, tool results and failed parses for ``ToolParser`` agents.

    Own replies are re-rendered through the parser (``thought`` + markers + action), so the
    model sees exactly the call it made, even one that failed to parse; messages from
    ``user_names`` are user turns; everything else (tool results, other agents) is an
    ``environment_role`` turn wrapped in ``environment_begin``/``environment_end``. With a
    ``NativeToolFormat`` a call is an assistant ``tool_calls`` message and its result a ``tool``
    message with the call's ``tool_call_id``.
    """

    def __init__(
        self,
        environment_role: str = "environment",
        environment_begin: str = "",
        environment_end: str = "",
        user_names: list[str] | None = None,
        few_shot: list[list[dict[str, Any]]] | None = None,
    ) -> None:
        self.environment_role = environment_role
        self.environment_begin = environment_begin
        self.environment_end = environment_end
        self.user_names = user_names or ["user"]
        self.few_shot = few_shot or []

    def _render(
        self, out: Messages, messages: Sequence[AgentMessage], name: str, parser: Any
    ) -> None:
        out.extend(self._tool_instruction(parser))
        for shot in self.few_shot:
            out.extend(self._render_shot(shot, parser))
        tool_type = None
        call_id = None  # a native call's id: its result goes back as a ``tool`` message
        for message in messages:
            if message.sender == name:
                formatted = message.formatted
                if _is_tool_parse(formatted) and hasattr(parser, "format_message"):
                    out.append(parser.format_message(formatted))  # NativeToolFormat
                    call_id = formatted.get("tool_call_id")
                elif _is_tool_parse(formatted) and hasattr(parser, "format_response"):
                    out.append({"role": "assistant", "content": parser.format_response(formatted)})
                    tool_type = formatted["tool_type"]
                else:
                    out.append({"role": "assistant", "content": str(message.content)})
            elif message.sender in self.user_names:
                out.append({"role": "user", "content": _content(message)})
            elif call_id is not None:
                result = str(_content(message))
                out.append({"role": "tool", "tool_call_id": call_id, "content": result})
                call_id = None
            else:
                out.append(self._environment(str(_content(message)), tool_type))

    def _environment(self, content: str, tool_type: str | None) -> dict[str, Any]:
        if not content.startswith(self.environment_begin):
            content = self.environment_begin + content
        if not content.endswith(self.environment_end):
            content += self.environment_end
        msg: dict[str, Any] = {"role": self.environment_role, "content": content}
        if tool_type:
            msg["name"] = tool_type
        return msg

    @staticmethod
    def _tool_instruction(parser: Any) -> Messages:
        if parser is None or not hasattr(parser, "format_instruction"):
            return []
        instruction = parser.format_instruction()
        if not instruction:
            return []
        if isinstance(instruction, str):
            msg: dict[str, Any] = {"role": "system", "content": instruction}
            if getattr(parser, "tool_type", None):
                msg["name"] = parser.tool_type
            return [msg]
        if isinstance(instruction, dict):
            return [instruction]
        return list(instruction)

    def _render_shot(self, shot: list[dict[str, Any]], parser: Any) -> Messages:
        out: Messages = []
        i = 0
        while i < len(shot):
            msg = copy.deepcopy(shot[i])
            role = msg["role"]
            if role in ("assistant", "user", "system"):
                out.append(msg)
            elif role == self.environment_role:
                out.append({**msg, **self._environment(str(msg["content"]), None)})
            elif role in ("thought", "language"):
                call = shot[i + 1] if i + 1 < len(shot) and shot[i + 1]["role"] == "tool" else None
                parsed = {
                    "tool_type": call["name"] if call else None,
                    "thought": msg["content"],
                    "action": call["content"] if call else None,
                    "status": None,
                }
                out.append({"role": "assistant", "content": parser.format_response(parsed)})
                i += 1 if call else 0
            else:
                raise KeyError(f"Unknown role in few-shot: {role}")
            i += 1
        return out


def _is_tool_parse(formatted: Any) -> TypeGuard[dict[str, Any]]:
    return isinstance(formatted, dict) and _TOOL_KEYS <= formatted.keys()


#: lagent's name.
InternLMToolAggregator = ToolAggregator

__all__ = ["DefaultAggregator", "InternLMToolAggregator", "ToolAggregator"]
