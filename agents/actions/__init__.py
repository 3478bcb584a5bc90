"""Tools for agents: ``BaseAction`` / ``@tool_api``, the executors, built-in tools.

The IPython tools live in ``agents.actions.ipython`` (sandboxed kernels); they are imported
on first use, so this package imports without jupyter_client or a sandbox.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from agents.actions.approval import (
    PAUSE,
    ApprovalRequired,
    Decision,
    PendingApproval,
    PendingCall,
    RequireApproval,
)
from agents.actions.base import (
    AsyncActionMixin,
    BaseAction,
    current_session_id,
    to_openai_tools,
    tool_api,
)
from agents.actions.builtins import (
    Calculator,
    Clock,
    FinishAction,
    InvalidAction,
    NoAction,
    WebBrowser,
)
from agents.actions.executor import ActionExecutor, AsyncActionExecutor
from agents.actions.prompts import get_plugin_prompt
from agents.actions.web import AsyncWebBrowser

_LAZY = {
    "IPythonInteractive": "agents.actions.ipython",
    "IPythonInterpreter": "agents.actions.ipython",
    "AsyncIPythonInteractive": "agents.actions.ipython",
    "AsyncIPythonInterpreter": "agents.actions.ipython",
}

__all__ = [
    "PAUSE",
    "ActionExecutor",
    "ApprovalRequired",
    "AsyncActionExecutor",
    "AsyncActionMixin",
    "AsyncWebBrowser",
    "BaseAction",
    "Calculator",
    "Clock",
    "Decision",
    "FinishAction",
    "InvalidAction",
    "NoAction",
    "PendingApproval",
    "PendingCall",
    "RequireApproval",
    "WebBrowser",
    "current_session_id",
    "get_plugin_prompt",
    "to_openai_tools",
    "tool_api",
]
# Star-imports list the IPython tools only where their module exists (the sandbox issue).
if importlib.util.find_spec("agents.actions.ipython") is not None:
    __all__ += list(_LAZY)


def __getattr__(name: str) -> Any:
    """Import the IPython tools on first access (they need jupyter_client)."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
