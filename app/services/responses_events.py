"""A run's event log as a Response and its stream events (items ↔ events, docs/responses.md).

``ResponseStream`` reads a run's events in order (``run.created``, ``message.delta``,
``message``, the terminal event) and produces the Responses API's stream events, numbered by
``sequence_number`` from 0, and the ``Response`` object they describe. It is a pure function
of the event log: replaying a run's stored log gives the same events with the same numbers,
so a stream resumed with ``starting_after`` (on any replica, after a restart) goes on exactly
where the client stopped, and a retrieved response is the one the stream ended with.

Items from messages:

- the agent's text → a ``message`` item (``output_text`` deltas as they stream; an agent that
  may call tools or other agents sends only whole messages, as chat completions does);
- a ``kind: model`` reply's ``tool_calls`` → ``function_call`` items (the client runs them);
- a tool agent's call and its result → a ``code_interpreter_call`` (the sandboxed Python tool)
  or an ``mcp_call`` (any other tool) item;
- other agents' messages (sub-agents, task members) → ``message`` items, in order;
- a run waiting for approval → one ``mcp_approval_request`` item per pending call; the response
  ends there, and the run's log after it is the response that answered it (a *segment*:
  ``ResponseStream``'s ``segment``).
"""

from __future__ import annotations

import json
from typing import Any

from agents.schema import AgentStatusCode
from app.schemas.vocab import EventType
from app.services.responses_shapes import (
    call_arguments,
    end_response,
    execution_error,
    function_call_item,
    is_call,
    is_result,
    message_item,
    response_status,
    text_of,
    text_part,
    timestamp,
    tokens,
    usage_of,
)

# Also the shapes the stateless answers (``responses_stateless``) and the reader use from here.
__all__ = [
    "GAP_STRIDE",
    "PYTHON_TOOLS",
    "TEXT_STATES",
    "ResponseStream",
    "call_arguments",
    "end_response",
    "function_call_item",
    "message_item",
    "response_status",
    "text_part",
    "usage_of",
]

TEXT_STATES = (int(AgentStatusCode.STREAM_ING), int(AgentStatusCode.END))
# Tools whose calls are ``code_interpreter_call`` items (the sandboxed Python interpreters).
PYTHON_TOOLS = frozenset(
    {
        "IPythonInterpreter",
        "AsyncIPythonInterpreter",
        "IPythonInteractive",
        "AsyncIPythonInteractive",
        "PythonInterpreter",
        "python",
    }
)
# Stream events a run event may become, at most (a ``run.gap`` skips the numbers of the events
# that may have been sent live and lost: the resumed stream's numbers stay above them).
GAP_STRIDE = 1000
_DELTA = EventType.MESSAGE_DELTA
# Run events after which a queued response is still not in progress: a gap, and an end
# before it ran (cancelled in the queue).
_QUIET_WHILE_QUEUED = frozenset({EventType.RUN_GAP, EventType.RUN_CANCELLED, EventType.ERROR})


class ResponseStream:
    """Builds the Response and its stream events from one run's events (module docstring).

    ``base``: the Response's request fields (``responses.response_base``); ``agent``: the name
    the run's agent speaks as; ``hold``: only whole messages (no text deltas); ``quiet``: only
    the Response is wanted (its events carry no copies of it).

    Segments: a run that waited for approval and went on is several responses, one per
    *segment* of its log (cut at each ``run.requires_action``): segment 0 is the run's own
    response, ending at its first pause (``completed`` with its ``mcp_approval_request``
    items), and segment ``k`` the response that answered the ``k``-th pause, from the event
    after it. ``segment`` is the one this stream maps: it reads the whole log (what earlier
    segments did, a call waiting for its result or an MCP server listed already, carries on)
    and makes events of its own segment only, numbered from 0, its output only its own items.

    Copies: an event carries copies of what changes later (an item's keys are replaced, never
    changed in place, so a shallow copy is one); the terminal event carries the Response
    itself, never changed after it."""

    def __init__(
        self,
        base: dict[str, Any],
        agent: str,
        hold: bool,
        quiet: bool = False,
        mcp: dict[str, dict[str, Any]] | None = None,
        segment: int = 0,
        decided: dict[str, bool] | None = None,
    ) -> None:
        self.response = base
        self.agent = agent
        self.hold = hold
        self.seq = -1
        self.ended = False  # this response had its terminal event: nothing after it is its
        self.quiet = quiet
        self.paused = False  # it ended waiting for approval
        self.queued = False  # created queued: not announced in progress yet
        self.segment = segment
        self.visible = segment == 0  # the log is in this response's segment
        self.spent = (0, 0)  # the run's prompt and completion tokens before this segment
        self._at = 0  # the segment the log is in
        self._between = False  # the log is at a pause before this response's segment
        # The Response being built: ``response``, or a scratch one for earlier segments.
        self._r = base if self.visible else {**base, "output": []}
        self._open: dict[str, Any] | None = None  # the message item being streamed
        self._call: dict[str, Any] | None = None  # a tool agent's call awaiting its result
        self._suffix = str(base["id"]).removeprefix("resp_")
        # The agent's MCP servers' tools by label (``responses_mcp``): an ``mcp_list_tools``
        # item goes before the first call (or approval request) of each server.
        self._mcp = mcp or {}
        self._listed: set[str] = set()
        # The calls the last pause waited on (approval request id, tool name), and this
        # response's decisions about them (id → approved): a call's item names its request;
        # a denied call did not run and has no item (the model read the denial).
        self._waited: list[tuple[str, str]] = []
        self._decided = decided or {}

    # -- events ------------------------------------------------------------------------------
    def _event(self, type_: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        return {"type": type_, "sequence_number": self.seq, **fields}

    def _snapshot(self, final: bool = False) -> dict[str, Any]:
        if final:
            return self._r  # never changed after its terminal event
        if self.quiet or not self.visible:
            return {}
        return {**self._r, "output": [dict(item) for item in self._r["output"]]}

    def _item_id(self, prefix: str) -> str:
        return f"{prefix}_{self._suffix}_{len(self._r['output'])}"

    def feed(self, type_: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        """The stream events for one run event (none for events a client does not see, nor
        for those of other segments)."""
        opened = self._open
        if (
            type_ == _DELTA
            and opened is not None
            and self.visible
            and not (self.ended or self.queued or self._between)
        ):
            # The hot path: a text delta of the message item being streamed (``_delta``'s
            # result without its layers: a stored streamed turn's per-event cost, issue 25).
            delta = data.get("delta")
            if (
                data.get("index", -1) == opened["index"]
                and type(delta) is str
                and delta
                and data.get("sender") == self.agent
                and data.get("stream_state") in TEXT_STATES
            ):
                opened["text"] += delta
                self.seq += 1
                return [
                    {
                        "type": "response.output_text.delta",
                        "sequence_number": self.seq,
                        "item_id": opened["item"]["id"],
                        "output_index": opened["at"],
                        "content_index": 0,
                        "delta": delta,
                        "logprobs": [],
                    }
                ]
        if self.ended:
            return []
        if self._between:  # the run went on after a pause: the next segment starts
            if type_ in (EventType.RUN_GAP, EventType.RUN_CREATED):
                return []
            return self._go_on() + self.feed(type_, data)
        out = self._map(type_, data)
        return out if self.visible or type_ == EventType.ERROR else []

    def _map(self, type_: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        if type_ == EventType.RUN_CREATED:
            run = data.get("run") or {}
            status = response_status(run.get("status", "running"), None)
            self._r["status"] = status
            created = self._event("response.created", response=self._snapshot())
            if status == "queued":  # OpenAI: created, queued; in_progress when it starts
                self.queued = True
                return [created, self._event("response.queued", response=self._snapshot())]
            return [created, self._in_progress()]
        if self.queued and type_ not in _QUIET_WHILE_QUEUED:
            # The run's first event after its creation: it started (its log has no start
            # event of its own; a queued run logs nothing until it runs).
            self.queued = False
            return [self._in_progress(), *self._map(type_, data)]
        if type_ == EventType.MESSAGE_DELTA:
            return self._delta(data)
        if type_ == EventType.MESSAGE:
            return self._message(data.get("message") or {}, int(data.get("index", -1)))
        if type_ in (
            EventType.RUN_COMPLETED,
            EventType.RUN_FAILED,
            EventType.RUN_CANCELLED,
            EventType.RUN_REQUIRES_ACTION,
        ):
            return self._end(type_, data)
        if type_ == EventType.ERROR:
            self.ended = True
            error = data.get("error") or data
            return [
                self._event(
                    "error",
                    code=error.get("code"),
                    message=str(error.get("message") or "the stream could not go on"),
                    param=error.get("param"),
                )
            ]
        if type_ == EventType.RUN_GAP:  # run events that may have been sent live and lost
            self.seq = max(self.seq, int(data.get("to_id") or 0) * GAP_STRIDE)
        return []

    def _in_progress(self) -> dict[str, Any]:
        self._r["status"] = "in_progress"
        return self._event("response.in_progress", response=self._snapshot())

    def _go_on(self) -> list[dict[str, Any]]:
        """The run went on after a pause (its calls were decided): the next segment starts.
        This response's own starts as any response does (``response.created``,
        ``response.in_progress``), numbered from 0."""
        self._between = False
        self._at += 1
        if self._at < self.segment:
            self._r["output"] = []
            return []
        self.visible, self._r, self.seq = True, self.response, -1
        self._r["status"] = "in_progress"
        created = self._event("response.created", response=self._snapshot())
        return [created, self._in_progress()]

    def _delta(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        delta = data.get("delta")
        if (
            self.hold
            or data.get("sender") != self.agent
            or not isinstance(delta, str)
            or data.get("stream_state") not in TEXT_STATES
            or not delta
        ):
            return []
        out: list[dict[str, Any]] = []
        index = int(data.get("index", -1))
        if self._open is not None and self._open["index"] != index:
            out += self._close_text(self._open["text"], "completed")
        if self._open is None:
            out += self._open_text(index)
        assert self._open is not None
        self._open["text"] += delta
        out.append(self._text_delta(delta))
        return out

    def _open_text(self, index: int) -> list[dict[str, Any]]:
        item = message_item(self._item_id("msg"), "in_progress", [])
        self._open = {"index": index, "item": item, "at": len(self._r["output"]), "text": ""}
        self._r["output"].append(item)
        part = text_part("")
        at = self._open["at"]
        return [
            self._event("response.output_item.added", output_index=at, item=dict(item)),
            self._event(
                "response.content_part.added",
                item_id=item["id"],
                output_index=at,
                content_index=0,
                part=part,
            ),
        ]

    def _text_delta(self, delta: str) -> dict[str, Any]:
        assert self._open is not None
        return self._event(
            "response.output_text.delta",
            item_id=self._open["item"]["id"],
            output_index=self._open["at"],
            content_index=0,
            delta=delta,
            logprobs=[],
        )

    def _close_text(self, text: str, status: str) -> list[dict[str, Any]]:
        assert self._open is not None
        opened, self._open = self._open, None
        item, at = opened["item"], opened["at"]
        part = text_part(text)
        item["content"] = [part]
        item["status"] = status
        return [
            self._event(
                "response.output_text.done",
                item_id=item["id"],
                output_index=at,
                content_index=0,
                text=text,
                logprobs=[],
            ),
            self._event(
                "response.content_part.done",
                item_id=item["id"],
                output_index=at,
                content_index=0,
                part=dict(part),
            ),
            self._event("response.output_item.done", output_index=at, item=dict(item)),
        ]

    def _whole_text(self, index: int, text: str) -> list[dict[str, Any]]:
        out = self._open_text(index)
        if text:
            self._open = {**(self._open or {}), "text": text}
            out.append(self._text_delta(text))
        return out + self._close_text(text, "completed")

    def _message(self, message: dict[str, Any], index: int) -> list[dict[str, Any]]:
        sender = message.get("sender")
        formatted = message.get("formatted")
        text = text_of(message.get("content"))
        if sender == self.agent and is_call(formatted):
            self._call = formatted
            return self._close_text(self._open["text"], "completed") if self._open else []
        if self._call is not None and isinstance(formatted, dict) and is_result(formatted):
            call, self._call = self._call, None
            request = self._request_of(call)
            if request is not None and self._decided.get(request) is False:
                return []  # denied: not run (OpenAI shows no call; the model read why)
            return self._tool_item(call, formatted, text, request)
        out: list[dict[str, Any]] = []
        if self._open is not None and self._open["index"] == index:
            out += self._close_text(self._open["text"] or text, "completed")
        elif text:
            if self._open is not None:
                out += self._close_text(self._open["text"], "completed")
            out += self._whole_text(index, text)
        calls = formatted.get("tool_calls") if isinstance(formatted, dict) else None
        for call in calls or []:
            out += self._function_call(call)
        return out

    def _function_call(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        arguments = call_arguments(call)
        item = function_call_item(self._item_id("fc"), call, "")
        at = len(self._r["output"])
        self._r["output"].append(item)
        out = [self._event("response.output_item.added", output_index=at, item=dict(item))]
        out.append(
            self._event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=at,
                delta=arguments,
            )
        )
        item["arguments"], item["status"] = arguments, "completed"
        out.append(
            self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=at,
                name=item["name"],
                arguments=arguments,
            )
        )
        out.append(self._event("response.output_item.done", output_index=at, item=dict(item)))
        return out

    def _request_of(self, call: dict[str, Any]) -> str | None:
        """The approval request a call that waited was (None: it did not wait)."""
        name = str((call.get("action") or {}).get("name") or "")
        for i, (request, waited) in enumerate(self._waited):
            if waited == name:
                del self._waited[i]
                return request
        return None

    def _tool_item(
        self, call: dict[str, Any], result: dict[str, Any], text: str, request: str | None = None
    ) -> list[dict[str, Any]]:
        action = call.get("action") or {}
        name = str(action.get("name") or "")
        params = action.get("parameters", action.get("arguments"))
        failed = bool(result.get("errmsg")) or result.get("state") not in (0, None)
        item: dict[str, Any]
        out: list[dict[str, Any]] = []
        if name.split(".")[0] in PYTHON_TOOLS:
            code = params.get("command") if isinstance(params, dict) else params
            if isinstance(params, dict) and code is None:
                code = next((v for v in params.values() if isinstance(v, str)), "")
            item = {
                "id": self._item_id("ci"),
                "type": "code_interpreter_call",
                "code": str(code or ""),
                "container_id": "sandbox",
                "outputs": [{"type": "logs", "logs": result.get("errmsg") or text}],
                "status": "failed" if failed else "completed",
            }
        else:
            label, _, tool = name.rpartition(".")
            out = self._list_tools(label)  # first: the item ids follow the output's order
            ran = result.get("args")
            if request is not None and isinstance(ran, dict) and ran:
                params = ran  # what it ran with (a person may have edited the arguments)
            item = {
                "id": self._item_id("mcp"),
                "type": "mcp_call",
                "server_label": label or "agentstation",
                "name": tool or name,
                "arguments": json.dumps(params or {}, ensure_ascii=False),
                "output": None if failed else text,
                "error": execution_error(result.get("errmsg") or text) if failed else None,
                "status": "failed" if failed else "completed",
            }
            if request is not None:
                item["approval_request_id"] = request
        at = len(self._r["output"])
        self._r["output"].append(item)
        return [
            *out,
            self._event("response.output_item.added", output_index=at, item=dict(item)),
            self._event("response.output_item.done", output_index=at, item=dict(item)),
        ]

    def _list_tools(self, label: str) -> list[dict[str, Any]]:
        """An ``mcp_list_tools`` item for the server ``label`` (once per response), if it is
        one of the agent's MCP servers."""
        listed = self._mcp.get(label)
        if listed is None or label in self._listed:
            return []
        self._listed.add(label)
        error = listed.get("error")
        item = {
            "id": self._item_id("mcpl"),
            "type": "mcp_list_tools",
            "server_label": label,
            "tools": [dict(tool) for tool in listed.get("tools") or []],
            "error": error,
        }
        at = len(self._r["output"])
        self._r["output"].append(item)
        ended = "response.mcp_list_tools.failed" if error else "response.mcp_list_tools.completed"
        return [
            self._event("response.output_item.added", output_index=at, item=dict(item)),
            self._event("response.mcp_list_tools.in_progress", item_id=item["id"], output_index=at),
            self._event(ended, item_id=item["id"], output_index=at),
            self._event("response.output_item.done", output_index=at, item=dict(item)),
        ]

    def _approval_items(self, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        self._waited = [(str(c.get("id")), str(c.get("name") or "")) for c in calls]
        for call in calls:
            label, _, tool = str(call.get("name") or "").rpartition(".")
            out += self._list_tools(label)
            item = {
                "id": str(call.get("id")),
                "type": "mcp_approval_request",
                "server_label": label or "agentstation",
                "name": tool,
                "arguments": json.dumps(call.get("arguments") or {}, ensure_ascii=False),
            }
            at = len(self._r["output"])
            self._r["output"].append(item)
            out.append(self._event("response.output_item.added", output_index=at, item=dict(item)))
            out.append(self._event("response.output_item.done", output_index=at, item=dict(item)))
        return out

    def _end(self, type_: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        run = data.get("run") or {}
        status = response_status(str(run.get("status", "failed")), run.get("stop_reason"))
        out: list[dict[str, Any]] = []
        if self._open is not None:
            out += self._close_text(
                self._open["text"], "incomplete" if status != "completed" else "completed"
            )
        if type_ == EventType.RUN_REQUIRES_ACTION:
            out += self._approval_items(data.get("tool_calls") or [])
            if self._at < self.segment:  # a pause before this response: its segment follows
                self._between, self.spent = True, tokens(run)
                return []
            self.paused = True
        self.ended = True
        if self.spent != (0, 0):  # the run's usage counts on: this segment's is the rest
            (prompt, completion), (before, before_out) = tokens(run), self.spent
            used = {"prompt_tokens": prompt - before, "completion_tokens": completion - before_out}
            run = {**run, "usage": used}
        finished = run.get("finished_at")
        at = timestamp(finished) if finished else None
        name = end_response(self._r, run, data.get("error"), at)
        return [*out, self._event(name, response=self._snapshot(final=True))]
