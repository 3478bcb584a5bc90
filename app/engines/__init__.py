"""Model handles: what the gateway serves (vLLM in process, OpenAI-compatible servers, scripts)."""
