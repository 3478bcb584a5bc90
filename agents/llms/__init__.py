"""LLM backends: one async streaming interface for vLLM, OpenAI-compatible servers and scripts."""

from agents.llms.base import AsyncBaseLLM, BaseLLM, LLMDelta, Usage, usage_scope

__all__ = ["AsyncBaseLLM", "BaseLLM", "LLMDelta", "Usage", "usage_scope"]
