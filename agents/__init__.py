"""AgentStation's agent library: lagent v1's programming model on one async streaming core."""

from agents.agent import Agent, AsyncAgent, BaseAgent
from agents.compose import AgentDict, AgentList, AsyncSequential, Sequential
from agents.memory import Memory, MemoryManager
from agents.schema import (
    ActionReturn,
    ActionStatusCode,
    ActionValidCode,
    AgentMessage,
    AgentStatusCode,
    ModelStatusCode,
)
from agents.task import AsyncTask, Task
from agents.tool_agent import AsyncToolAgent, ToolAgent

__all__ = [
    "ActionReturn",
    "ActionStatusCode",
    "ActionValidCode",
    "Agent",
    "AgentDict",
    "AgentList",
    "AgentMessage",
    "AgentStatusCode",
    "AsyncAgent",
    "AsyncSequential",
    "AsyncTask",
    "AsyncToolAgent",
    "BaseAgent",
    "Memory",
    "MemoryManager",
    "ModelStatusCode",
    "Sequential",
    "Task",
    "ToolAgent",
]
