"""Configured models: handles built from ``MODELS`` (scripted, openai, vllm)."""
