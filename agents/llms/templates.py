"""lagent's meta templates: prompt rendering for models without a chat template, API roles.

A meta template is a list of role configs ``{'role', 'begin', 'end', 'generate',
'fallback_role', 'api_role'}``; ``begin`` is a string or ``{'with_name', 'without_name',
'name': {name: replacement}}``. Rendering follows lagent's ``LMTemplateParser``: after the
last message (unless it is the assistant's, or a ``generate`` role), the assistant's begin is
appended so the model continues as the assistant.
"""

from __future__ import annotations

from typing import Any

Messages = list[dict[str, Any]]
MetaTemplate = list[dict[str, Any]]

INTERNLM2_META: MetaTemplate = [
    {
        "role": "system",
        "begin": {
            "with_name": "<|im_start|>system name={name}\n",
            "without_name": "<|im_start|>system\n",
            "name": {"interpreter": "<|interpreter|>", "plugin": "<|plugin|>"},
        },
        "end": "<|im_end|>\n",
    },
    {
        "role": "user",
        "begin": {
            "with_name": "<|im_start|>user name={name}\n",
            "without_name": "<|im_start|>user\n",
        },
        "end": "<|im_end|>\n",
    },
    {
        "role": "assistant",
        "begin": {
            "with_name": "<|im_start|>assistant name={name}\n",
            "without_name": "<|im_start|>assistant\n",
            "name": {"interpreter": "<|interpreter|>", "plugin": "<|plugin|>"},
        },
        "end": "<|im_end|>\n",
    },
    {
        "role": "environment",
        "begin": {
            "with_name": "<|im_start|>environment name={name}\n",
            "without_name": "<|im_start|>environment\n",
            "name": {"interpreter": "<|interpreter|>", "plugin": "<|plugin|>"},
        },
        "end": "<|im_end|>\n",
    },
]

LLAMA3_META: MetaTemplate = [
    {"role": role, "begin": f"<|start_header_id|>{role}<|end_header_id|>\n\n", "end": "<|eot_id|>"}
    for role in ("system", "user", "assistant")
]

# lagent's GPTAPI default: tool results ('environment') go to the API as system messages.
OPENAI_META: MetaTemplate = [
    {"role": "system", "api_role": "system"},
    {"role": "user", "api_role": "user"},
    {"role": "assistant", "api_role": "assistant"},
    {"role": "environment", "api_role": "system"},
]


def _roles(meta_template: MetaTemplate) -> dict[str, dict[str, Any]]:
    roles: dict[str, dict[str, Any]] = {}
    for item in meta_template:
        if item["role"] in roles:
            raise ValueError(f"role {item['role']!r} appears twice in the meta template")
        roles[item["role"]] = item
    return roles


def _role_config(roles: dict[str, dict[str, Any]], role: str) -> dict[str, Any]:
    config = roles.get(role)
    if config is None:
        raise ValueError(f"role {role!r} is not in the meta template (roles: {list(roles)})")
    if config.get("fallback_role"):
        return _role_config(roles, config["fallback_role"])
    return config


def format_begin(config: dict[str, Any], message: dict[str, Any]) -> str:
    """The begin string of a role for this message (its ``name`` picks ``with_name``)."""
    begin = config.get("begin", "")
    if isinstance(begin, str):
        return begin
    name = message.get("name")
    if name is None:
        return str(begin.get("without_name", ""))
    return str(begin.get("with_name", "")).format(name=begin.get("name", {}).get(name, name))


def render_meta_template(messages: Messages | str, meta_template: MetaTemplate | None) -> str:
    """The prompt string for ``messages`` (lagent's ``LMTemplateParser.__call__``)."""
    if isinstance(messages, str):
        return messages
    if not meta_template:
        return "\n".join(str(m.get("content", "")) for m in messages if m.get("content"))
    roles = _roles(meta_template)
    prompt = ""
    for index, message in enumerate(messages):
        last = index == len(messages) - 1
        config = _role_config(roles, message["role"])
        prompt += format_begin(config, message) + str(message.get("content", ""))
        if last and config.get("generate", False):
            break
        prompt += config.get("end", "")
        if last and config["role"] != "assistant":
            prompt += format_begin(_role_config(roles, "assistant"), {})
    return prompt


def to_api_messages(messages: Messages, meta_template: MetaTemplate | None = None) -> Messages:
    """Messages for a chat API: roles mapped by ``api_role`` (lagent's ``APITemplateParser``).

    Roles the template does not know (e.g. OpenAI's ``tool``) pass through unchanged.
    """
    roles = _roles(meta_template or OPENAI_META)
    out: Messages = []
    for message in messages:
        if message.get("role") not in roles:
            out.append(dict(message))
            continue
        config = _role_config(roles, message["role"])
        begin, end = format_begin(config, message), config.get("end", "")
        content = message.get("content")
        if isinstance(content, str) or content is None or begin or end:
            content = begin + str(content or "") + end  # else: content parts pass as they are
        out.append({"role": config.get("api_role", config["role"]), "content": content})
        for key in ("tool_calls", "tool_call_id"):  # native tool calls and their results
            if key in message:
                out[-1][key] = message[key]
    return out
