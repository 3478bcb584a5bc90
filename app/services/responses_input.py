"""A Responses request's input items and tools, as the model's chat messages and tools.

Input items (docs/responses.md, "Items"):

- messages (``type: message`` or just a ``role``): ``system``, ``developer`` (a system message),
  ``user``, ``assistant``; content a string or parts (``input_text``, ``output_text``,
  ``text``); ``input_image``, ``input_file`` and ``input_audio`` parts are a 400 naming the
  part (the models served here read text only: nothing is dropped silently); other unknown
  parts are dropped with a logged note;
- ``function_call`` (an earlier call of the client's function) and ``function_call_output``
  (its result: a ``tool`` message with the call's ``call_id``);
- ``mcp_approval_response`` (a decision about a waiting call: ``approvals``);
- ``reasoning`` items and ``item_reference`` are dropped (nothing of this server's is
  encrypted or referenced); other item types are dropped with a logged note.

Tools: ``function`` tools go to the model; tools this server does not host (``web_search``,
``file_search``, ``computer_use_preview``, ``image_generation``, ``local_shell``, ``shell``,
``custom``, ``namespace``, ``apply_patch``, ``code_interpreter``, ``mcp`` on a raw model, ...)
are dropped with a logged note (an agent's own tools are its spec's).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from app.errors import BadRequest

log = logging.getLogger(__name__)

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "refusal")
DROPPED_ITEMS = ("reasoning", "item_reference", "compaction")
# Parts no model here can read (images, files, audio): a 400 naming the part, never dropped.
UNREAD_PARTS = ("input_image", "input_file", "input_audio", "image_url", "file")


@dataclass
class Input:
    """A request's input as chat messages, with the decisions it carries."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    approvals: list[dict[str, Any]] = field(default_factory=list)  # mcp_approval_response

    def text(self) -> str:
        """The text of the trailing user messages (or of the last message): the run's input
        as REST shows it."""
        users: list[str] = []
        for message in reversed(self.messages):
            if message.get("role") != "user":
                break
            users.insert(0, str(message.get("content") or ""))
        if users:
            return "\n\n".join(users)
        last = self.messages[-1] if self.messages else {}
        return str(last.get("content") or "")


def parts_text(content: Any, param: str) -> str:
    """A message's content (a string or a list of parts) as text."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise BadRequest("content must be a string or a list of parts", param=param)
    texts: list[str] = []
    for i, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, dict):
            raise BadRequest("a content part must be an object", param=f"{param}[{i}]")
        kind = part.get("type")
        if kind in TEXT_PARTS:
            texts.append(str(part.get("text") or part.get("refusal") or ""))
        elif kind in UNREAD_PARTS:  # never lost silently: the client hears it at once
            raise BadRequest(
                f"{kind} parts are not supported: the models served here read text only "
                "(send the content as input_text)",
                param=f"{param}[{i}]",
                code="not_supported",
            )
        else:
            log.info("responses: content part %r dropped (not text)", part.get("type"))
    return "".join(texts)


def parse_input(raw: str | list[dict[str, Any]], field: str = "input") -> Input:
    """The request's ``input`` (or a conversation's ``items``: ``field``) as chat messages
    (400 naming the item that cannot be read)."""
    out = Input()
    if isinstance(raw, str):
        out.messages.append({"role": "user", "content": raw})
        return out
    for i, item in enumerate(raw):
        param = f"{field}[{i}]"
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = ROLES.get(str(item.get("role")))
            if role is None:
                raise BadRequest(
                    "role must be one of system, developer, user, assistant",
                    param=f"{param}.role",
                )
            text = parts_text(item.get("content"), f"{param}.content")
            out.messages.append({"role": role, "content": text})
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise BadRequest("a function_call needs call_id and name", param=param)
            arguments = item.get("arguments")
            args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
            entry = {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": args},
            }
            last = out.messages[-1] if out.messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(entry)  # parallel calls: one assistant message
            else:
                out.messages.append({"role": "assistant", "content": None, "tool_calls": [entry]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise BadRequest(f"a {kind} needs call_id", param=f"{param}.call_id")
            output = parts_text(item.get("output"), f"{param}.output")
            out.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        elif kind == "mcp_approval_response":
            request_id = item.get("approval_request_id")
            if not isinstance(request_id, str) or not isinstance(item.get("approve"), bool):
                raise BadRequest(
                    "an mcp_approval_response needs approval_request_id and approve (a boolean)",
                    param=param,
                )
            out.approvals.append(item)
        elif kind in DROPPED_ITEMS:
            continue
        elif kind is None:
            raise BadRequest("an input item needs a type (or a role)", param=param)
        else:
            log.info("responses: input item of type %r dropped", kind)
    return out


@dataclass
class ModelTools:
    """The request's tools as the model's chat-completion parameters."""

    params: dict[str, Any] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)


def model_tools(tools: list[dict[str, Any]], tool_choice: Any, parallel: bool) -> ModelTools:
    """``function`` tools as chat tools, ``tool_choice`` in the chat shape; others dropped."""
    out = ModelTools()
    functions: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        kind = tool.get("type")
        if kind != "function":
            out.dropped.append(str(kind))
            continue
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise BadRequest("a function tool needs a name", param=f"tools[{i}].name")
        function: dict[str, Any] = {
            "name": name,
            "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
        }
        if tool.get("description"):
            function["description"] = tool["description"]
        if tool.get("strict") is not None:
            function["strict"] = bool(tool["strict"])
        functions.append({"type": "function", "function": function})
    if out.dropped:
        log.info("responses: tools not hosted here, dropped: %s", ", ".join(out.dropped))
    if not functions:
        return out
    out.params = {"tools": functions, "parallel_tool_calls": parallel}
    if tool_choice in ("auto", "required", "none"):
        out.params["tool_choice"] = tool_choice
    elif isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        name = tool_choice.get("name")
        if name not in {f["function"]["name"] for f in functions}:
            raise BadRequest(
                f"tool_choice names {name!r}, which is not among the function tools",
                param="tool_choice",
                code="unknown_tool",
            )
        out.params["tool_choice"] = {"type": "function", "function": {"name": name}}
    return out


def response_format(text: Any) -> dict[str, Any] | None:
    """``text.format`` as a chat ``response_format`` (None: plain text)."""
    fmt = getattr(text, "format", None)
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    schema = {"name": fmt.name or "response", "schema": fmt.schema_ or {}}
    if fmt.strict is not None:
        schema["strict"] = fmt.strict
    return {"type": "json_schema", "json_schema": schema}
