"""Turn an OpenAI chat request into a vLLM prompt and ``SamplingParams``.

Validation is vLLM's own (``ChatCompletionRequest``): the same options and the same errors as
vLLM's server. Sampling defaults come from the model's ``generation_config`` like there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.llms.vllm_tools import ToolMode, tool_mode
from app.engines.base import EngineError

if TYPE_CHECKING:
    from app.engines.vllm_chat import VllmChatBackend


async def build_plan_parts(
    backend: VllmChatBackend, request: dict[str, Any]
) -> tuple[Any, Any, Any, ToolMode, str]:
    """(engine prompt, sampling params, vLLM request, tool mode, forced function name)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams
    from vllm.tool_parsers.utils import get_json_schema_from_tools

    body = {k: v for k, v in request.items() if k not in ("stream", "stream_options")}
    req = ChatCompletionRequest.model_validate(body)
    mode = tool_mode(request, has_parser=bool(backend.tool_call_parser))
    function_name = ""
    if mode in ("named", "required"):
        schema = get_json_schema_from_tools(req.tool_choice, req.tools, req.parallel_tool_calls)
        # Compact JSON, as OpenAI's arguments are; also keeps small models from padding forever.
        req.structured_outputs = StructuredOutputsParams(json=schema, disable_any_whitespace=True)
        req.response_format = None
        if mode == "named":
            function_name = request["tool_choice"]["function"]["name"]

    llm = backend.engine._live()
    tools = None
    if request.get("tools") and request.get("tool_choice") != "none":
        tools = [t for t in request["tools"] if t.get("type", "function") == "function"]
    prompt = await backend.engine.render(
        request["messages"],
        chat_template=backend.chat_template,
        tools=tools,
        template_kwargs=request.get("chat_template_kwargs"),
    )

    max_len = int(llm.model_config.max_model_len)
    room = max_len - len(prompt["prompt_token_ids"])
    wanted = req.max_completion_tokens or req.max_tokens
    if room <= 0 or (wanted is not None and wanted > room):
        raise EngineError(
            f"This model's maximum context length is {max_len} tokens; the messages use "
            f"{len(prompt['prompt_token_ids'])} and {wanted or 0} more were requested.",
            status=400,
            code="context_length_exceeded",
            param="messages",
        )
    defaults = backend.sampling_defaults(llm)
    sampling = req.to_sampling_params(wanted or room, defaults)
    sampling.output_kind = RequestOutputKind.DELTA  # a whole answer is the collected stream
    return prompt, sampling, req, mode, function_name
