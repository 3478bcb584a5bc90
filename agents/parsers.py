"""Output parsers (lagent's ``StrParser``, ``JSONParser``, ``ToolParser``, ``MixedToolParser``).

``parse_response`` never raises on model output: a malformed reply is reported in the result
(``status`` -1) so the agent can show the model its mistake.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticUndefined


class OutputParseError(ValueError):
    """The model's reply did not parse in the agent's output format, even after the error was
    shown to it once (``BaseAgent.forward``)."""

    def __init__(self, agent: str, error: str, reply: str) -> None:
        super().__init__(
            f"{agent}: the model's reply could not be parsed, also after the error was shown "
            f"to it once: {error}"
        )
        self.agent = agent
        self.error = error
        self.reply = reply


def parse_error(parsed: Any) -> str | None:
    """What is wrong with a parsed reply of a non-tool format (``{'status': -1, 'message'}``,
    JSONParser's convention), else None. Tool-call results (``tool_type``) are not checked:
    a tool agent shows the model a bad call as the call's result."""
    if not isinstance(parsed, dict) or "tool_type" in parsed or parsed.get("status") != -1:
        return None
    return str(parsed.get("message") or "the reply is not in the required format")


def feedback(error: str) -> str:
    """The message that shows the model its parse error (langroid feeds the error back)."""
    return (
        f"Your reply could not be parsed: {error}\n"
        "Please write your reply again, correcting the errors, in the required format."
    )


class ToolStatusCode(IntEnum):
    """``status`` of a ``ToolParser`` result."""

    NO_TOOL = 0
    VALID_TOOL = 1
    PARSING_ERROR = -1


class StrParser:
    """Formats an instruction from ``template`` and ``format_field``; parses text as is."""

    def __init__(self, template: str = "", **format_field: Any) -> None:
        fields = {f[1] for f in string.Formatter().parse(template) if f[1] is not None}
        missing = fields - format_field.keys()
        if missing:
            raise ValueError(
                f'not all required fields of "template" are provided, missing {missing}. '
                "Please pass them as keyword arguments."
            )
        self.template = template
        self.format_field = format_field

    def format_instruction(self) -> Any:
        """The template filled with the format fields (a system instruction)."""
        data = {key: self.format_to_string(value) for key, value in self.format_field.items()}
        return self.template.format(**data)

    def format_to_string(self, format_model: Any) -> str:
        """How one format field is written into the template."""
        return str(format_model)

    def format_response(self, parsed: Any) -> str:
        """Render a parsed reply back to model text (plain text: as is)."""
        return str(parsed)

    def parse_response(self, data: str) -> Any:
        """Parse a model reply."""
        return data


_FENCE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\n(.*?)(?:\n[ \t]*```|$)", re.DOTALL)


def strip_code_fences(text: str) -> str:
    """The body of the first fenced code block in ``text``, or ``text`` stripped."""
    match = _FENCE.search(text)
    return (match.group(1) if match else text).strip()


def _type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is not None:
        args = ", ".join(_type_name(a) for a in get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(annotation, "__name__", str(annotation))


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


class JSONParser(StrParser):
    """Parses a JSON reply (code fences and ``//`` comment lines allowed).

    Format fields may be pydantic models: the instruction shows their fields, and a reply is
    validated against the first model it fits. ``parse_response`` returns
    ``{'status': 1, 'data': ..., 'message': None}`` or ``{'status': -1, 'data': None,
    'message': <what is wrong>}``.
    """

    def format_to_string(self, format_model: Any) -> str:
        if isinstance(format_model, type) and issubclass(format_model, BaseModel):
            return "{\n" + ",\n".join(self._field_lines(format_model, 1)) + "\n}"
        return str(format_model)

    def _field_lines(self, model: type[BaseModel], indent: int) -> list[str]:
        pad = "    " * indent
        lines = []
        for name, field in model.model_fields.items():
            comment = f"{pad}// {field.description}\n" if field.description else ""
            nested = _nested_model(field.annotation)
            if nested is not None:
                body = ",\n".join(self._field_lines(nested, indent + 1))
                lines.append(f'{comment}{pad}"{name}": {{\n{body}\n{pad}}}')
                continue
            default = field.default
            note = "required" if default is PydanticUndefined else f"default: {default}"
            lines.append(f'{comment}{pad}"{name}": "{_type_name(field.annotation)}"  // {note}')
        return lines

    def _models(self) -> list[type[BaseModel]]:
        return [
            v
            for v in self.format_field.values()
            if isinstance(v, type) and issubclass(v, BaseModel)
        ]

    def parse(self, data: str) -> Any:
        """lagent's ``parse``: the validated model (or plain JSON); raises ``ValueError``."""
        text = "\n".join(
            line
            for line in strip_code_fences(data).split("\n")
            if not line.strip().startswith("//")
        )
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"Input string is not a valid JSON: {exc}") from exc
        models = self._models()
        if not models:
            return value
        errors = []
        for model in models:
            try:
                return model.model_validate(value)
            except ValidationError as exc:
                errors.append(f"{model.__name__}: {exc}")
        raise ValueError("JSON does not match the expected format; " + "; ".join(errors))

    def parse_response(self, data: str) -> dict[str, Any]:
        try:
            value = self.parse(data)
        except ValueError as exc:
            return {"status": -1, "data": None, "message": str(exc)}
        if isinstance(value, BaseModel):
            value = value.model_dump()
        return {"status": 1, "data": value, "message": None}


def default_plugin_validate(plugin: str) -> Any:
    """Validate a plugin call: a JSON object, possibly in a code fence."""
    text = strip_code_fences(plugin)
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError("the tool call must be a JSON object")
    return json.loads(text)


def _parsed(tool_type: str | None, thought: str, action: Any, status: int) -> dict[str, Any]:
    return {"tool_type": tool_type, "thought": thought, "action": action, "status": status}


#: Named validators (so a spec can say ``"validate": "json"`` without naming an import path).
VALIDATORS: dict[str, Callable[[str], Any]] = {"json": default_plugin_validate}
Validator = Callable[[str], Any] | str | None


class ToolParser(StrParser):
    """Finds a tool call between ``begin`` and ``end`` markers in a reply.

    ``parse_response`` returns ``{'tool_type', 'thought', 'action', 'status'}``; ``status`` is
    1 for a valid call, 0 for no call, -1 when ``validate`` rejected the action.
    """

    def __init__(
        self,
        tool_type: str,
        template: str = "",
        begin: str = "<tool>\n",
        end: str = "</tool>\n",
        validate: Validator = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(template, begin=begin, end=end, **kwargs)
        self.tool_type = tool_type
        if isinstance(validate, str):
            if validate not in VALIDATORS:
                raise ValueError(f"unknown validator {validate!r}; known: {sorted(VALIDATORS)}")
            validate = VALIDATORS[validate]
        self.validate = validate

    @property
    def begin(self) -> str:
        return str(self.format_field["begin"])

    @property
    def end(self) -> str:
        return str(self.format_field["end"])

    def parse_response(self, data: str) -> dict[str, Any]:
        if self.begin not in data:
            return _parsed(None, data, None, ToolStatusCode.NO_TOOL)
        thought, action, *_ = data.split(self.begin)
        action = action.split(self.end)[0]
        status = ToolStatusCode.VALID_TOOL
        parsed_action: Any = action
        if self.validate is not None:
            try:
                parsed_action = self.validate(action)
            except Exception:  # any validator failure is a parse error
                status = ToolStatusCode.PARSING_ERROR
        return _parsed(self.tool_type, thought, parsed_action, status)

    def format_response(self, parsed: dict[str, Any]) -> str:
        if parsed.get("action") is None:
            return str(parsed.get("thought") or "")
        action = parsed["action"]
        text = json.dumps(action, ensure_ascii=False) if isinstance(action, dict) else str(action)
        return str(parsed.get("thought") or "") + self.begin + text + self.end

    def explain_error(self, parsed: dict[str, Any]) -> str:
        """Why ``parsed`` (a status -1 result) was rejected, in words a model can act on."""
        reason = "it was rejected"
        if self.validate is not None:
            try:
                self.validate(str(parsed.get("action")))
            except Exception as exc:  # reported, not raised
                reason = f"{type(exc).__name__}: {exc}"
        return f"Could not parse the {self.tool_type} call ({reason}). Please fix the format."


class InterpreterParser(ToolParser):
    """InternLM's code-interpreter markers."""

    def __init__(self, tool_type: str = "interpreter", template: str = "", **kwargs: Any) -> None:
        kwargs.setdefault("begin", "<|action_start|><|interpreter|>\n")
        kwargs.setdefault("end", "<|action_end|>\n")
        super().__init__(tool_type, template, **kwargs)


class PluginParser(ToolParser):
    """InternLM's plugin markers; the call must be a JSON object."""

    def __init__(self, tool_type: str = "plugin", template: str = "", **kwargs: Any) -> None:
        kwargs.setdefault("begin", "<|action_start|><|plugin|>\n")
        kwargs.setdefault("end", "<|action_end|>\n")
        kwargs.setdefault("validate", default_plugin_validate)
        super().__init__(tool_type, template, **kwargs)


class MixedToolParser(StrParser):
    """Several tool parsers at once; the call whose ``begin`` marker comes first wins."""

    def __init__(
        self,
        tool_type: str | None = None,
        template: str = "",
        parsers: Sequence[ToolParser] | None = None,
        **format_field: Any,
    ) -> None:
        self.tool_type = tool_type
        self.parsers: dict[str, ToolParser] = {p.tool_type: p for p in parsers or []}
        super().__init__(template, **format_field)

    def format_instruction(self) -> list[dict[str, Any]]:
        inst: list[dict[str, Any]] = []
        content = super().format_instruction()
        if content.strip():
            msg: dict[str, Any] = {"role": "system", "content": content}
            if self.tool_type:
                msg["name"] = self.tool_type
            inst.append(msg)
        for name, parser in self.parsers.items():
            content = parser.format_instruction()
            if content.strip():
                inst.append({"role": "system", "content": content, "name": name})
        return inst

    def parse_response(self, data: str) -> dict[str, Any]:
        found = [(data.find(p.begin), p) for p in self.parsers.values() if p.begin in data]
        if not found:
            return _parsed(None, data, None, ToolStatusCode.NO_TOOL)
        return min(found, key=lambda item: item[0])[1].parse_response(data)

    def format_response(self, parsed: dict[str, Any]) -> str:
        parser = self.parsers.get(parsed.get("tool_type") or "")
        if parsed.get("action") is None or parser is None:
            return str(parsed.get("thought") or "")
        return parser.format_response(parsed)

    def explain_error(self, parsed: dict[str, Any]) -> str:
        """Why ``parsed`` was rejected, by the parser that produced it."""
        parser = self.parsers.get(parsed.get("tool_type") or "")
        if parser is None:
            return "Could not parse the tool call. Please fix the format."
        return parser.explain_error(parsed)
