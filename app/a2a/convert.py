"""Runs and run events as A2A tasks and task updates (a2a-sdk's protobuf types)."""

from __future__ import annotations

import json
from typing import Any

from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from app.runtime.events import Event
from app.schemas.vocab import EventType, RunStatus, ends_stream

STATES: dict[str, TaskState] = {
    RunStatus.QUEUED: TaskState.TASK_STATE_SUBMITTED,
    RunStatus.RUNNING: TaskState.TASK_STATE_WORKING,
    # Waiting for a person to approve tool calls (POST /v1/runs/{id}/resume).
    RunStatus.REQUIRES_ACTION: TaskState.TASK_STATE_INPUT_REQUIRED,
    RunStatus.COMPLETED: TaskState.TASK_STATE_COMPLETED,
    RunStatus.FAILED: TaskState.TASK_STATE_FAILED,
    RunStatus.CANCELLED: TaskState.TASK_STATE_CANCELED,
    RunStatus.INTERRUPTED: TaskState.TASK_STATE_CANCELED,
}
# The run's text deltas (model output); other stream states are tool phases.
_TEXT_STATES = (1, 0)


def message_text(message: Message) -> str:
    """The text of an A2A message: its text parts, and data parts as JSON, one per line."""
    pieces: list[str] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            pieces.append(part.text)
        elif kind == "data":
            from google.protobuf.json_format import MessageToDict

            pieces.append(json.dumps(MessageToDict(part.data)))
    return "\n".join(pieces)


def content_text(content: Any) -> str:
    """An agent message's content as text."""
    if content is None:
        return ""
    return content if isinstance(content, str) else json.dumps(content)


def agent_message(text: str, context_id: str, task_id: str, message_id: str) -> Message:
    """An A2A message from the agent."""
    return Message(
        message_id=message_id,
        context_id=context_id,
        task_id=task_id,
        role=Role.ROLE_AGENT,
        parts=[Part(text=text)],
    )


def output_artifact(run: dict[str, Any]) -> Artifact:
    """The run's final message as the task's one artifact."""
    content = (run.get("output") or {}).get("content")
    return Artifact(
        artifact_id=f"{run['id']}-answer", name="answer", parts=[Part(text=content_text(content))]
    )


def status_of(run: dict[str, Any]) -> TaskStatus:
    """The task status of a run (a failed run's error message goes with it)."""
    status = TaskStatus(state=STATES[run["status"]])
    error = run.get("error")
    if error:
        text = str(error.get("message") or error.get("code") or "failed")
        status.message.CopyFrom(
            agent_message(text, run["session_id"], run["id"], f"{run['id']}-status")
        )
    return status


def task_of(run: dict[str, Any]) -> Task:
    """A run (the API's JSON shape) as an A2A task."""
    task = Task(id=run["id"], context_id=run["session_id"], status=status_of(run))
    if run["status"] == RunStatus.COMPLETED:
        task.artifacts.append(output_artifact(run))
    return task


def updates(event: Event, run_id: str, context_id: str) -> list[Any]:
    """What one run event is on the A2A stream (nothing for events it has no form for)."""
    data = event.data
    if event.type == EventType.MESSAGE_DELTA:
        delta = data.get("delta")
        if data.get("stream_state") in _TEXT_STATES and isinstance(delta, str) and delta:
            working = TaskStatus(
                state=TaskState.TASK_STATE_WORKING,
                message=agent_message(delta, context_id, run_id, f"{run_id}-{event.seq}"),
            )
            return [TaskStatusUpdateEvent(task_id=run_id, context_id=context_id, status=working)]
        return []
    run = data.get("run")
    if event.type != EventType.ERROR and ends_stream(event.type) and run:
        out: list[Any] = []
        if run["status"] == RunStatus.COMPLETED:
            out.append(
                TaskArtifactUpdateEvent(
                    task_id=run_id,
                    context_id=context_id,
                    artifact=output_artifact(run),
                    last_chunk=True,
                )
            )
        status = TaskStatusUpdateEvent(task_id=run_id, context_id=context_id, status=status_of(run))
        return [*out, status]
    if event.type == EventType.ERROR:
        failed = TaskStatus(state=TaskState.TASK_STATE_FAILED)
        return [TaskStatusUpdateEvent(task_id=run_id, context_id=context_id, status=failed)]
    return []


# The states a task never leaves.
FINAL_STATES = frozenset(
    {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED}
)


def is_final(update: Any) -> bool:
    """A status update that ends the task."""
    return isinstance(update, TaskStatusUpdateEvent) and update.status.state in FINAL_STATES
