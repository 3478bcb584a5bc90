"""LLM backends: one async streaming interface for vLLM, OpenAI-compatible servers and scripts.

``VllmModel`` / ``AsyncVllmModel`` are imported on first use, so importing this package
never imports vllm.
"""

from __future__ import annotations

import importlib
from typing import Any

from agents.llms.base import AsyncBaseLLM, BaseLLM, LLMDelta, Usage, usage_scope
from agents.llms.openai_client import APIConnectionError, APIError, OpenAIClient
from agents.llms.openai_compat import GPTAPI, AsyncGPTAPI
from agents.llms.scripted import ScriptedLLM, ScriptExhaustedError, SyncScriptedLLM
from agents.llms.templates import INTERNLM2_META, LLAMA3_META, render_meta_template

_LAZY = {"VllmModel": "agents.llms.vllm", "AsyncVllmModel": "agents.llms.vllm"}

__all__ = [
    "GPTAPI",
    "INTERNLM2_META",
    "LLAMA3_META",
    "APIConnectionError",
    "APIError",
    "AsyncBaseLLM",
    "AsyncGPTAPI",
    "AsyncVllmModel",
    "BaseLLM",
    "LLMDelta",
    "OpenAIClient",
    "ScriptExhaustedError",
    "ScriptedLLM",
    "SyncScriptedLLM",
    "Usage",
    "VllmModel",
    "render_meta_template",
    "usage_scope",
]


def __getattr__(name: str) -> Any:
    """Import the vLLM models on first access (vllm is an optional, heavy dependency)."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
