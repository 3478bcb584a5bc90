"""``NativeToolFormat``: tool calls in the model's own format, beside the prompt-based parsers.

Instead of describing tools in the prompt and finding a marked-up call in the reply
(``ToolParser``), the agent passes its executor's tools as OpenAI ``tools`` to the LLM call.
The backend renders them with the model's chat template and reads calls with the model's
tool-call parser (vLLM: the configured ``tool_call_parser``; an OpenAI-compatible server: its
``tool_calls``), reporting them in ``LLMDelta.extra["tool_calls"]``. This format turns them
into the call the executor takes, and the aggregator sends the call back as an assistant
``tool_calls`` message and its result as a ``tool`` message with the call's ``tool_call_id``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

from agents.parsers import ToolStatusCode


def merge_tool_calls(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``[{"id", "name", "arguments"}]`` from tool-call entries as backends report them.

    Accepts OpenAI stream deltas (``index`` + fragments of ``function.arguments``, merged by
    index), whole OpenAI message entries, and the short form ``{"name", "arguments"}`` (arguments
    a JSON string or a dict).
    """
    slots: dict[Any, dict[str, Any]] = {}
    for position, entry in enumerate(entries):
        key = entry.get("index", f"#{position}")
        fn = entry.get("function") or entry
        slot = slots.setdefault(key, {"id": None, "name": "", "arguments": ""})
        if entry.get("id"):
            slot["id"] = entry["id"]
        if fn.get("name"):
            slot["name"] = fn["name"]
        args = fn.get("arguments")
        if isinstance(args, dict):
            slot["arguments"] = json.dumps(args, ensure_ascii=False)
        elif args:
            slot["arguments"] += str(args)
    for slot in slots.values():
        slot["id"] = slot["id"] or f"call_{uuid.uuid4().hex[:24]}"
    return list(slots.values())


class NativeToolFormat:
    """Output format for tool agents whose model calls tools natively (chat template + parser).

    ``tool_choice`` (``"auto"``, ``"required"``, ``"none"`` or a named function) goes with the
    tools on every model call; a per-call ``tool_choice`` kwarg overrides it. One call per model
    turn is executed (the first, when the model makes several).
    """

    #: ``_generate`` passes the backend's tool calls to ``parse_response``.
    accepts_tool_calls = True

    def __init__(self, tool_choice: str | dict[str, Any] | None = None, tool_type: str = "plugin"):
        self.tool_choice = tool_choice
        self.tool_type = tool_type

    def format_instruction(self) -> str:
        """Nothing: the tools reach the model through its chat template, not the prompt."""
        return ""

    def llm_kwargs(self, executor: Any) -> dict[str, Any]:
        """The LLM call's ``tools`` (the executor's, as OpenAI schemas) and ``tool_choice``."""
        tools = executor.tool_schemas() if executor is not None else []
        if not tools:
            return {}
        kwargs: dict[str, Any] = {"tools": tools}
        if self.tool_choice is not None:
            kwargs["tool_choice"] = self.tool_choice
        return kwargs

    def parse_response(
        self, data: str, tool_calls: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """``{'tool_type', 'thought', 'action', 'status', 'tool_call_id'}`` like ``ToolParser``."""
        calls = merge_tool_calls(tool_calls or [])
        if not calls:
            return _parsed(None, data, None, ToolStatusCode.NO_TOOL)
        call = calls[0]
        try:
            params = json.loads(call["arguments"] or "{}")
        except json.JSONDecodeError:
            params = None
        if not isinstance(params, dict):  # kept as text, so the model sees what it wrote
            action = {"name": call["name"], "arguments": call["arguments"]}
            return _parsed(self.tool_type, data, action, ToolStatusCode.PARSING_ERROR, call["id"])
        action = {"name": call["name"], "parameters": params}
        return _parsed(self.tool_type, data, action, ToolStatusCode.VALID_TOOL, call["id"])

    def format_response(self, parsed: dict[str, Any]) -> str:
        """The reply's text (the call itself travels in ``tool_calls``)."""
        return str(parsed.get("thought") or "")

    def format_message(self, parsed: dict[str, Any]) -> dict[str, Any]:
        """The assistant message for a parsed reply: text plus its OpenAI ``tool_calls``."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.format_response(parsed)}
        action = parsed.get("action")
        if isinstance(action, dict) and parsed.get("tool_call_id"):
            args = action.get("parameters", action.get("arguments"))
            text = args if isinstance(args, str) else json.dumps(args or {}, ensure_ascii=False)
            function = {"name": action.get("name"), "arguments": text}
            msg["tool_calls"] = [
                {"id": parsed["tool_call_id"], "type": "function", "function": function}
            ]
        return msg

    def explain_error(self, parsed: dict[str, Any]) -> str:
        """Why the call was rejected, in words a model can act on."""
        action = parsed.get("action") or {}
        return (
            f"Could not parse the arguments of the {action.get('name')!r} call: they must be a "
            f"JSON object, got {action.get('arguments')!r}."
        )


def _parsed(
    tool_type: str | None, thought: str, action: Any, status: int, call_id: str | None = None
) -> dict[str, Any]:
    out = {"tool_type": tool_type, "thought": thought, "action": action, "status": int(status)}
    if call_id is not None:
        out["tool_call_id"] = call_id
    return out


__all__ = ["NativeToolFormat", "merge_tool_calls"]
