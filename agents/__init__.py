"""AgentStation's agent library: lagent v1's programming model on one async streaming core."""

from agents.agent import Agent, AsyncAgent, BaseAgent
from agents.chat_document import ChatDocMetaData, ChatDocument
from agents.compose import AgentDict, AgentList, AsyncSequential, Sequential
from agents.conversable import AgentDirectory, ConversableAgent
from agents.memory import Memory, MemoryManager
from agents.schema import (
    ActionReturn,
    ActionStatusCode,
    ActionValidCode,
    AgentMessage,
    AgentStatusCode,
    ModelStatusCode,
)
from agents.task import (
    AsyncTask,
    Task,
    run_batch,
    run_batch_async,
    run_batch_tasks,
    run_batch_tasks_async,
)
from agents.task_result import TaskResult
from agents.task_types import (
    AT,
    DONE,
    NO_ANSWER,
    PASS,
    PASS_TO,
    SEND_TO,
    Budget,
    Entity,
    StatusCode,
    TaskConfig,
)
from agents.tool_agent import AsyncToolAgent, ToolAgent
from agents.tool_message import DoneTool, RecipientTool, ResultTool, ToolMessage

__all__ = [
    "AT",
    "DONE",
    "NO_ANSWER",
    "PASS",
    "PASS_TO",
    "SEND_TO",
    "ActionReturn",
    "ActionStatusCode",
    "ActionValidCode",
    "Agent",
    "AgentDict",
    "AgentDirectory",
    "AgentList",
    "AgentMessage",
    "AgentStatusCode",
    "AsyncAgent",
    "AsyncSequential",
    "AsyncTask",
    "AsyncToolAgent",
    "BaseAgent",
    "Budget",
    "ChatDocMetaData",
    "ChatDocument",
    "ConversableAgent",
    "DoneTool",
    "Entity",
    "Memory",
    "MemoryManager",
    "ModelStatusCode",
    "RecipientTool",
    "ResultTool",
    "Sequential",
    "StatusCode",
    "Task",
    "TaskConfig",
    "TaskResult",
    "ToolAgent",
    "ToolMessage",
    "run_batch",
    "run_batch_async",
    "run_batch_tasks",
    "run_batch_tasks_async",
]
