"""langroid's ``ChatDocument``: a message with who sent it as a responder (``metadata``).

A ``ChatDocument`` is an ``AgentMessage`` (so it goes wherever a message goes) with langroid's
fields: ``metadata`` (``sender``: the responder, an ``Entity`` value; ``sender_name``;
``recipient``; ``status``; ``usage``), ``tool_messages`` (the ``ToolMessage`` objects the
message holds), ``content_any``, ``function_call`` and ``oai_tool_calls``. A tool agent's
``llm_response`` / ``agent_response`` answer one, ``handle_message_fallback`` is given one, and
``Task.run``'s result (``TaskResult``) is one, as in langroid.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.schema import AgentMessage
from agents.task_types import Entity, StatusCode


class ChatDocMetaData(BaseModel):
    """langroid's ``ChatDocMetaData``: the responder that sent a message, and to whom."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    sender: str = Entity.USER  # an ``Entity`` value: "llm", "agent", "user", "system"
    sender_name: str = ""
    recipient: str = ""
    status: StatusCode | None = None
    usage: Any = None
    block: str | None = None
    agent_id: str = ""
    parent_id: str = ""
    tool_ids: list[str] = Field(default_factory=list)
    oai_tool_id: str | None = None
    cached: bool = False
    displayed: bool = False
    has_citation: bool = False


class ChatDocument(AgentMessage):
    """langroid's ``ChatDocument`` as an ``AgentMessage``."""

    metadata: ChatDocMetaData = Field(default_factory=ChatDocMetaData)
    tool_messages: list[Any] = Field(default_factory=list)
    content_any: Any = None
    function_call: Any = None
    oai_tool_calls: list[Any] | None = None
    reasoning: str = ""

    @staticmethod
    def from_str(msg: str) -> ChatDocument:
        """A message from the user (langroid's ``ChatDocument.from_str``)."""
        return ChatDocument(content=msg, metadata=ChatDocMetaData(sender=Entity.USER))

    def get_json_tools(self) -> list[str]:
        """The ``request`` of every top-level JSON object in the content."""
        from agents.langroid_tools import top_level_json

        text = self.content if isinstance(self.content, str) else ""
        return [str(found["request"]) for _, found in top_level_json(text) if "request" in found]

    def as_message(self) -> AgentMessage:
        """The plain ``AgentMessage`` (what memory stores and tasks pass on)."""
        return plain_message(self)


def plain_message(message: AgentMessage) -> AgentMessage:
    """``message`` without langroid's fields (itself when it is a plain ``AgentMessage``)."""
    if type(message) is AgentMessage:
        return message
    fields = {name: getattr(message, name) for name in AgentMessage.model_fields}
    if not fields.get("receiver") and isinstance(message, ChatDocument):
        fields["receiver"] = message.metadata.recipient or None
    return AgentMessage(**fields)


def chat_document(
    message: AgentMessage | str | None,
    sender: str,
    sender_name: str = "",
    agent: Any = None,
    **metadata: Any,
) -> ChatDocument:
    """``message`` as a ``ChatDocument`` sent by the responder ``sender`` (an ``Entity``),
    with the ``ToolMessage`` calls ``agent`` knows in ``tool_messages``."""
    if isinstance(message, ChatDocument):
        return message
    if message is None or isinstance(message, str):
        message = AgentMessage(sender=sender_name or sender, content=message or "")
    meta = ChatDocMetaData(
        sender=sender, sender_name=sender_name or message.sender,
        recipient=message.receiver or "", **metadata,
    )  # fmt: skip
    fields = {name: getattr(message, name) for name in AgentMessage.model_fields}
    return ChatDocument(
        **fields, metadata=meta, content_any=message.content,
        tool_messages=tool_messages_of(agent, message),
    )  # fmt: skip


def sender_entity(message: AgentMessage | str, agent_name: str) -> str:
    """The responder a message comes from: its ``metadata.sender`` (a ``ChatDocument``), the
    model for the agent's own replies, the user for anything else (a string included)."""
    if isinstance(message, ChatDocument):
        return message.metadata.sender
    if isinstance(message, AgentMessage) and message.sender == agent_name:
        return Entity.LLM
    return Entity.USER


def tool_messages_of(agent: Any, message: AgentMessage) -> list[Any]:
    """The ``ToolMessage`` objects of the call ``message`` holds, when ``agent`` knows the tool
    (langroid's ``tool_messages``; ``DoneTool`` left out, as in a task's result)."""
    tools = getattr(getattr(agent, "langroid_tools", None), "llm_tools_map", None)
    parsed = message.formatted
    if not tools or not isinstance(parsed, dict) or parsed.get("status") != 1:
        return []
    action = parsed.get("action")
    if isinstance(action, str):
        try:
            action = json.loads(action)
        except ValueError:
            return []
    if not isinstance(action, dict):
        return []
    name = action.get("request", action.get("name"))
    tool = tools.get(name) if isinstance(name, str) else None
    if tool is None or name == "done_tool":
        return []
    params = action.get("parameters", action)
    if not isinstance(params, dict):
        return []
    arguments = {k: v for k, v in params.items() if k != "request"}
    try:
        return [tool.model_validate(arguments)]
    except ValueError:
        return []


__all__ = [
    "ChatDocMetaData",
    "ChatDocument",
    "chat_document",
    "plain_message",
    "sender_entity",
    "tool_messages_of",
]
