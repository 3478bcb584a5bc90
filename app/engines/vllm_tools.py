"""Tool calls on vLLM (moved to ``agents.llms.vllm_tools`` so agents on vLLM share it)."""

from agents.llms.vllm_tools import (
    ToolMode,
    ToolStream,
    call_delta,
    full_call,
    new_call_id,
    tool_mode,
)

__all__ = ["ToolMode", "ToolStream", "call_delta", "full_call", "new_call_id", "tool_mode"]
