"""The Responses API's shapes of a run's parts: its status and usage, items (``message``,
``function_call``), text parts, a Response's end fields; used by the event mapper
(``responses_events``) and the stateless answers (``responses_stateless``)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

FAILED = "server_error"  # a failed response's error code (one of OpenAI's ResponseError codes)
_STOP_INCOMPLETE = {"length": "max_output_tokens", "budget_exceeded": "max_output_tokens"}


# A run interrupted by its server's end (recovered after a crash, or not finished at a
# shutdown): the response failed, with the reason in its error.
_LOST = {
    "server_restart": "the server restarted",
    "shutdown": "the server shut down",
    "replica_lost": "its server stopped answering",
}


def response_status(run_status: str, stop_reason: str | None) -> str:
    """The Response's ``status`` for a run's status (a run cut by max tokens: incomplete; one
    its server lost: failed)."""
    if run_status == "completed" and stop_reason in _STOP_INCOMPLETE:
        return "incomplete"
    if run_status == "interrupted" and stop_reason in _LOST:
        return "failed"
    return {
        "queued": "queued",
        "running": "in_progress",
        "completed": "completed",
        "requires_action": "completed",  # its mcp_approval_request items wait for the client
        "failed": "failed",
        "cancelled": "cancelled",
        "interrupted": "cancelled",
    }.get(run_status, "in_progress")


def usage_of(run: dict[str, Any]) -> dict[str, Any]:
    """A run's usage in the Responses shape."""
    prompt, completion = tokens(run)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def text_of(content: Any) -> str:
    """A message's content as text."""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)


def is_call(formatted: Any) -> bool:
    return (
        isinstance(formatted, dict)
        and isinstance(formatted.get("action"), dict)
        and formatted.get("status") == 1  # ToolStatusCode.VALID_TOOL
    )


def is_result(formatted: Any) -> bool:
    return isinstance(formatted, dict) and "result" in formatted and "state" in formatted


def text_part(text: str) -> dict[str, Any]:
    """An ``output_text`` content part."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    """An assistant ``message`` output item."""
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def function_call_item(item_id: str, call: dict[str, Any], arguments: str) -> dict[str, Any]:
    """A ``function_call`` output item for a chat ``tool_calls`` entry (``arguments``: so far)."""
    fn = call.get("function") or {}
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": str(call.get("id")),
        "name": str(fn.get("name")),
        "arguments": arguments,
        "status": "in_progress",
    }


def call_arguments(call: dict[str, Any]) -> str:
    """A chat ``tool_calls`` entry's arguments (a JSON string)."""
    return str((call.get("function") or {}).get("arguments") or "")


def end_response(
    response: dict[str, Any],
    run: dict[str, Any],
    error: dict[str, Any] | None,
    finished_at: float | None,
) -> str:
    """Set a Response's end fields from its run's end (``run``: status, stop_reason, usage);
    returns its terminal event's type."""
    status = response_status(str(run.get("status", "failed")), run.get("stop_reason"))
    response["status"] = status
    response["usage"] = usage_of(run)
    if status == "incomplete":
        response["incomplete_details"] = {"reason": _STOP_INCOMPLETE[run["stop_reason"]]}
    if status == "failed":
        error = error or run.get("error") or {}
        lost = _LOST.get(str(run.get("stop_reason")))
        message = f"{lost} while the response ran; it did not finish" if lost else None
        response["error"] = {
            "code": FAILED,
            "message": str(error.get("message") or message or "the run failed"),
        }
    if finished_at is not None and status != "in_progress":
        response["completed_at"] = finished_at
    return TERMINAL_TYPES.get(status, "response.failed")


TERMINAL_TYPES = {"completed": "response.completed", "incomplete": "response.incomplete"}


def tokens(run: dict[str, Any]) -> tuple[int, int]:
    """A run's prompt and completion tokens so far (its public shape)."""
    usage = run.get("usage") or {}
    return int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))


def execution_error(message: str) -> dict[str, Any]:
    """A failed ``mcp_call``'s ``error`` (the openai package's ``McpToolExecutionError``: the
    tool's result content, MCP's shape)."""
    return {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": message}]}


def timestamp(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
