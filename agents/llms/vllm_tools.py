"""Tool calls on vLLM: forced calls through structured outputs, ``auto`` through a parser.

``tool_choice`` = a named function constrains the output to that function's parameter schema,
``required`` to a JSON array of ``{name, parameters}`` (vLLM's own schema), so even a model
that knows nothing of tools returns calls whose arguments validate. ``auto`` leaves the model
free and reads its calls with the model's tool-call parser (e.g. ``hermes`` for ChatML models).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

ToolMode = Literal["none", "named", "required", "auto"]
_ESCAPES = {chr(c): f"\\u{c:04x}" for c in range(0x20)}


@dataclass
class StrictJSON:
    """Makes JSON text strict as it streams in, piece by piece.

    Forced calls are generated under a JSON grammar (xgrammar, through vLLM's structured
    outputs) whose strings admit raw control characters (all of U+0000-U+001F except CR and
    LF). Strict parsers refuse them: ``json.loads`` did, so a ``required`` call whose string
    held a tab was read as no call at all (content, ``finish_reason`` "stop"), and a client's
    parser would refuse such ``arguments``. Inside strings they become ``\\u00XX`` escapes:
    the same string, now strict JSON. Text outside strings is left as it is.
    """

    in_string: bool = False
    escaped: bool = False

    def feed(self, text: str) -> str:
        """``text`` (the next piece) with the raw control characters of strings escaped."""
        out: list[str] = []
        for ch in text:
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif ch == "\\":
                    self.escaped = True
                elif ch == '"':
                    self.in_string = False
                elif ch < " ":
                    out.append(_ESCAPES[ch])
                    continue
            elif ch == '"':
                self.in_string = True
            out.append(ch)
        return "".join(out)


def new_call_id() -> str:
    """An OpenAI-style tool-call id."""
    return f"call_{uuid.uuid4().hex[:24]}"


def tool_mode(request: dict[str, Any], has_parser: bool) -> ToolMode:
    """How this request's tools are handled."""
    choice = request.get("tool_choice", "auto" if request.get("tools") else "none")
    if not request.get("tools") or choice == "none":
        return "none"
    if isinstance(choice, dict):
        return "named"
    if choice == "required":
        return "required"
    return "auto" if has_parser else "none"


def call_delta(index: int, name: str, arguments: str, call_id: str | None) -> dict[str, Any]:
    """One ``tool_calls`` entry of a stream delta; id/type/name only in a call's first delta."""
    entry: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        entry.update(id=call_id, type="function")
        entry["function"]["name"] = name
    return entry


def full_call(name: str, arguments: str, call_id: str) -> dict[str, Any]:
    """A complete ``tool_calls`` entry of a message."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


@dataclass
class ToolStream:
    """Turns one choice's generated text into content and tool-call deltas."""

    mode: ToolMode
    function_name: str = ""  # for mode "named"
    parser: Any = None  # a vLLM ToolParser for mode "auto"
    vllm_request: Any = None  # the vLLM ChatCompletionRequest the parser reads
    # The content is grammar-made JSON (``response_format`` json_schema or json_object, no
    # tools): made strict as it comes, as forced calls' arguments are.
    json_content: bool = False
    text: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)
    content: str | None = None
    _held: bool = False
    _sent: int = 0
    _named_id: str = field(default_factory=new_call_id)
    _strict: StrictJSON = field(default_factory=StrictJSON)

    def feed(self, delta: str) -> list[dict[str, Any]]:
        """Stream deltas (``{"content": ...}`` or ``{"tool_calls": [...]}``) for new text."""
        start = not self.text
        if self.mode in ("named", "required") or (self.json_content and self.mode == "none"):
            delta = self._strict.feed(delta)  # grammar-made JSON: made strict as it comes
        self.text += delta
        if self.mode == "none":
            return _content(delta)
        if self.mode == "named":  # the text is the arguments: stream them as they come
            out = []
            if start:
                out.append({"tool_calls": [call_delta(0, self.function_name, "", self._named_id)]})
            if delta:
                out.append({"tool_calls": [call_delta(0, self.function_name, delta, None)]})
            return out
        if self.mode == "auto" and not self._held:
            return _content(self._sendable())
        return []  # "required" (a JSON array) and a started "auto" call wait for the end

    def _sendable(self) -> str:
        marker = getattr(self.parser, "tool_call_start_token", None)
        if not marker:
            self._held = True
            return ""
        idx = self.text.find(marker, self._sent)
        if idx >= 0:
            self._held = True
            safe = idx
        else:  # keep back what may be the start of the marker
            hold = next(
                (k for k in range(len(marker) - 1, 0, -1) if self.text.endswith(marker[:k])), 0
            )
            safe = len(self.text) - hold
        out, self._sent = self.text[self._sent : safe], safe
        return out

    def finish(self) -> list[dict[str, Any]]:
        """The deltas held back until the end: parsed tool calls or the remaining text."""
        self.parse()
        if self.mode in ("none", "named"):
            return []
        if self.calls:
            deltas = [
                call_delta(i, c["function"]["name"], c["function"]["arguments"], c["id"])
                for i, c in enumerate(self.calls)
            ]
            return [{"tool_calls": deltas}]
        return _content(self.text[self._sent :])

    def parse(self) -> None:
        """Set ``calls`` and ``content`` from the whole text."""
        if self.calls or self.mode == "none":
            self.content = self.text if self.mode == "none" else self.content
            return
        if self.mode == "named":
            self.calls = [full_call(self.function_name, self.text, self._named_id)]
        elif self.mode == "required":
            self._parse_required()
        else:
            info = self.parser.extract_tool_calls(self.text, self.vllm_request)
            if info.tools_called:
                self.calls = [
                    full_call(c.function.name, c.function.arguments, c.id or new_call_id())
                    for c in info.tool_calls
                ]
                self.content = info.content or None
            else:
                self.content = self.text

    def _parse_required(self) -> None:
        try:
            items = json.loads(self.text)
        except json.JSONDecodeError:
            self.content = self.text  # cut off by max_tokens: no complete call
            return
        self.calls = [
            full_call(item["name"], json.dumps(item.get("parameters", {})), new_call_id())
            for item in items
        ]


def _content(text: str) -> list[dict[str, Any]]:
    return [{"content": text}] if text else []


def vllm_tool_request(tools: list[dict[str, Any]], tool_choice: Any = None) -> Any:
    """vLLM's ``ChatCompletionRequest`` carrying just the tools (what its parsers read)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    body: dict[str, Any] = {"messages": [], "tools": tools}
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    return ChatCompletionRequest.model_validate(body)


def forced_call_schema(vllm_request: Any) -> Any:
    """``StructuredOutputsParams`` for ``required`` or a named ``tool_choice`` (valid calls)."""
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.tool_parsers.utils import get_json_schema_from_tools

    schema = get_json_schema_from_tools(
        vllm_request.tool_choice, vllm_request.tools, vllm_request.parallel_tool_calls
    )
    # Compact JSON, as OpenAI's arguments are; also keeps small models from padding forever.
    return StructuredOutputsParams(json=schema, disable_any_whitespace=True)
