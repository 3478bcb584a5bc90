"""AgentStation's agent library: lagent v1's programming model on one async streaming core."""

from agents.agent import Agent, AsyncAgent, BaseAgent
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
from agents.task import AsyncTask, Task, run_batch, run_batch_async
from agents.task_types import Budget, Entity, StatusCode, TaskResult
from agents.tool_agent import AsyncToolAgent, ToolAgent
from agents.tool_message import DoneTool, ToolMessage

__all__ = [
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
    "ConversableAgent",
    "DoneTool",
    "Entity",
    "Memory",
    "MemoryManager",
    "ModelStatusCode",
    "Sequential",
    "StatusCode",
    "Task",
    "TaskResult",
    "ToolAgent",
    "ToolMessage",
    "run_batch",
    "run_batch_async",
]
