"""langroid's top-level names, for ``import langroid as lr`` -> ``import agents.langroid as lr``.

``lr.ChatAgent(lr.ChatAgentConfig(name=..., system_message=..., llm=..., use_tools=...,
use_functions_api=..., handle_llm_no_tool=...))`` builds a tool agent as langroid's does; the
one difference is ``llm``: a model object of this library (``agents.llms.GPTAPI(...)``, a vLLM
model, a ``ScriptedLLM``), where langroid takes a model config. ``use_functions_api=True``
without ``use_tools`` (langroid's default) gives the model its tools as native ``tools``
(``NativeToolFormat``); ``use_tools=True`` describes them in the system message, as langroid
does. ``lr.Task`` names its agent after itself, as langroid's; ``lr.ToolMessage``,
``lr.ChatDocument``, ``lr.Entity``, ``lr.StatusCode``, ``lr.TaskConfig`` and the routing
strings are this library's (see docs/multi-agent.md).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pydantic import BaseModel, ConfigDict

from agents.agent import BaseAgent
from agents.chat_document import ChatDocMetaData, ChatDocument
from agents.native import NativeToolFormat
from agents.task import Task as _Task
from agents.task import run_batch_tasks
from agents.task_result import TaskResult
from agents.task_types import (
    AT,
    DONE,
    NO_ANSWER,
    PASS,
    PASS_TO,
    SEND_TO,
    Entity,
    StatusCode,
    TaskConfig,
)
from agents.tool_agent import AsyncToolAgent
from agents.tool_message import DoneTool, RecipientTool, ResultTool, ToolMessage


class ChatAgentConfig(BaseModel):
    """langroid's ``ChatAgentConfig``: the fields below act; others (``vecdb``,
    ``show_stats``, ...) are accepted and unused."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    name: str = "LLM-Agent"
    system_message: str = "You are a helpful assistant."
    user_message: str | None = None
    llm: Any = None  # a model object of this library (langroid: an LLM config)
    use_tools: bool = False
    use_functions_api: bool = True
    handle_llm_no_tool: Any = None


class ChatAgent(AsyncToolAgent):
    """langroid's ``ChatAgent``: a tool agent built from a ``ChatAgentConfig``."""

    def __init__(self, config: ChatAgentConfig | None = None, **kwargs: Any) -> None:
        config = config if config is not None else ChatAgentConfig()
        native = config.use_functions_api and not config.use_tools
        super().__init__(
            config.llm,
            config.system_message,
            name=config.name,
            output_format=NativeToolFormat() if native else None,
            handle_llm_no_tool=config.handle_llm_no_tool,
            **kwargs,
        )
        self.config = config


class Task(_Task):
    """``agents.Task`` with langroid's naming: a task's ``name`` is its agent's name too (so
    the agent's messages carry it)."""

    def __init__(self, agent: BaseAgent, *more_agents: BaseAgent, **kwargs: Any) -> None:
        name = kwargs.get("name")
        if name and isinstance(agent, BaseAgent):
            agent.name = name
        super().__init__(agent, *more_agents, **kwargs)


#: ``lr.agent.ToolMessage``, ``lr.agent.ChatAgent``, ... (langroid's ``langroid.agent``).
agent = SimpleNamespace(
    ChatAgent=ChatAgent,
    ChatAgentConfig=ChatAgentConfig,
    ChatDocument=ChatDocument,
    Task=Task,
    ToolMessage=ToolMessage,
)

__all__ = [
    "AT",
    "DONE",
    "NO_ANSWER",
    "PASS",
    "PASS_TO",
    "SEND_TO",
    "ChatAgent",
    "ChatAgentConfig",
    "ChatDocMetaData",
    "ChatDocument",
    "DoneTool",
    "Entity",
    "RecipientTool",
    "ResultTool",
    "StatusCode",
    "Task",
    "TaskConfig",
    "TaskResult",
    "ToolMessage",
    "run_batch_tasks",
]
