"""Tools (lagent's ``BaseAction`` and ``@tool_api``) with JSON-Schema signatures.

A tool is a class with one ``run`` method, or a toolkit with several ``@tool_api`` methods;
methods may be sync or async. Calling a tool never raises: bad arguments give an
``ActionReturn`` with ``ARGS_ERROR``, a failing method one with ``API_ERROR``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import Any, ClassVar, TypeVar, overload

from agents.actions.signature import ApiSpec, ArgumentError, JsonSchema, build_spec
from agents.schema import ActionReturn, ActionStatusCode

F = TypeVar("F", bound=Callable[..., Any])

#: The session a tool call belongs to; the executors set it around every call, so stateful
#: tools (one IPython kernel per session) know whose state to use.
current_session_id: ContextVar[str | int] = ContextVar("agents_current_session_id", default=0)

# lagent's JsonParser puts this in every API's description; InternLM prompts expect it.
PARAMETER_DESCRIPTION = "如果调用该工具，你必须使用Json格式 {key: value} 传参，其中key为参数名称"
# OpenAI function names allow only [a-zA-Z0-9_-]: toolkit APIs export as ``Tool__api``, and the
# executors accept both that and lagent's ``Tool.api``.
OPENAI_SEPARATOR = "__"
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n?```\s*$", re.S)


@overload
def tool_api(func: F) -> F: ...
@overload
def tool_api(func: None = None, **options: Any) -> Callable[[F], F]: ...
def tool_api(func: F | None = None, **options: Any) -> F | Callable[[F], F]:
    """Mark a method as a tool API; its hints and docstring become its JSON Schema.

    lagent's options (``explode_return``, ``returns_named_value``) are accepted so ported
    code runs; return values are not described in the schema.
    """

    def mark(fn: F) -> F:
        fn.api_spec = build_spec(fn)  # type: ignore[attr-defined]
        fn.api_description = fn.api_spec.lagent  # type: ignore[attr-defined]
        return fn

    return mark(func) if func is not None else mark


def _class_doc(cls: type) -> str:
    import docstring_parser

    doc = docstring_parser.parse(cls.__doc__ or "")
    return "\n\n".join(p for p in (doc.short_description, doc.long_description) if p)


class BaseAction:
    """A tool: override ``run``, or write several ``@tool_api`` methods (a toolkit)."""

    __tool_apis__: ClassVar[dict[str, ApiSpec]] = {}
    __tool_description__: ClassVar[dict[str, Any]] = {}
    _is_toolkit: ClassVar[bool] = False
    #: Sync tool methods run in a worker thread (False: on the event loop, for cheap ones).
    sync_in_thread: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        apis: dict[str, ApiSpec] = {}
        for klass in reversed(cls.__mro__):
            for key, value in vars(klass).items():
                if callable(value) and hasattr(value, "api_spec"):
                    apis[key] = value.api_spec
        run = getattr(cls, "run", None)
        if "run" in apis and len(apis) > 1:
            raise TypeError(f"{cls.__name__}: `run` and other tool APIs cannot be mixed")
        if not apis and callable(run):
            tool_api(run)
            apis["run"] = run.api_spec
        cls.__tool_apis__ = apis
        cls._is_toolkit = bool(apis) and "run" not in apis
        cls.__tool_description__ = cls._describe(apis)

    @classmethod
    def _describe(cls, apis: dict[str, ApiSpec]) -> dict[str, Any]:
        desc: dict[str, Any] = {"name": cls.__name__, "description": _class_doc(cls)}
        if cls._is_toolkit:
            desc["api_list"] = [
                {**spec.lagent, "parameter_description": PARAMETER_DESCRIPTION}
                for spec in apis.values()
            ]
            return desc
        run = apis.get("run")
        desc["parameters"] = run.lagent["parameters"] if run else []
        desc["required"] = run.lagent["required"] if run else []
        if run and run.description:
            desc["description"] = run.description
        desc["parameter_description"] = PARAMETER_DESCRIPTION
        return desc

    def __init__(self, description: dict[str, Any] | None = None, enable: bool = True) -> None:
        self._description = copy.deepcopy(description or self.__tool_description__)
        self._name: str = self._description["name"]
        self.enable = enable

    @property
    def name(self) -> str:
        """The tool's name (the class name unless the description says otherwise)."""
        return self._name

    @property
    def is_toolkit(self) -> bool:
        """True for a tool with several ``@tool_api`` methods (called as ``Tool.api``)."""
        return self._is_toolkit

    @property
    def description(self) -> dict[str, Any]:
        """lagent's description dict (``name``, ``description``, ``parameters`` / ``api_list``)."""
        return self._description

    def api_names(self) -> list[str]:
        """The callable API names: ``['run']`` or the toolkit's methods."""
        return list(self.__tool_apis__)

    def tool_schemas(self, separator: str = OPENAI_SEPARATOR) -> list[JsonSchema]:
        """OpenAI ``tools`` entries, one per API (toolkit APIs named ``Tool<sep>api``)."""
        if not self.is_toolkit:
            spec = self.__tool_apis__.get("run")
            if spec is None:
                return []
            return [spec.openai_tool(self.name, self._description.get("description", ""))]
        described = {api["name"]: api for api in self._description.get("api_list", [])}
        return [
            spec.openai_tool(
                f"{self.name}{separator}{api}", described.get(api, {}).get("description")
            )
            for api, spec in self.__tool_apis__.items()
        ]

    async def acall(self, inputs: str | dict[str, Any] | None, name: str = "run") -> ActionReturn:
        """Call API ``name`` with JSON (string or dict) arguments; never raises."""
        spec = self.__tool_apis__.get(name)
        fallback = {"inputs": inputs, "name": name}
        if spec is None:
            known = ", ".join(self.api_names()) or "none"
            msg = f"tool '{self.name}' has no API '{name}' (available: {known})"
            return self._error(fallback, msg, ActionStatusCode.ARGS_ERROR)
        label = f"{self.name}.{name}" if self.is_toolkit else self.name
        try:
            args = spec.validate(_parse_arguments(inputs, spec, label), label)
        except ArgumentError as exc:
            return self._error(fallback, str(exc), ActionStatusCode.ARGS_ERROR)
        method = getattr(self, name)
        try:
            if spec.is_async:
                outputs = await method(**args)
            else:
                outputs = await self._run_sync_method(method, args)
        except Exception as exc:  # the model reads the error and may correct itself
            return self._error(args, f"{type(exc).__name__}: {exc}", ActionStatusCode.API_ERROR)
        if isinstance(outputs, ActionReturn):
            outputs.args = outputs.args or args
            outputs.type = outputs.type or self.name
            return outputs
        return ActionReturn(args=args, type=self.name, result=format_outputs(outputs))

    async def _run_sync_method(self, method: Callable[..., Any], args: dict[str, Any]) -> Any:
        if not self.sync_in_thread:
            return method(**args)
        # A blocking tool must not stall the event loop (and every other session).
        return await asyncio.to_thread(method, **args)

    def __call__(self, inputs: str | dict[str, Any] | None, name: str = "run") -> ActionReturn:
        """lagent's sync call: ``tool('{"a": 1}', 'add')``."""
        from agents.utils import run_sync

        return run_sync(self.acall(inputs, name))

    def _error(self, args: dict[str, Any], msg: str, state: ActionStatusCode) -> ActionReturn:
        return ActionReturn(args=args, type=self.name, errmsg=msg, state=state)

    def __repr__(self) -> str:
        return f"{self.description}"

    __str__ = __repr__


class AsyncActionMixin:
    """lagent's async tool mixin: ``await tool(inputs, name)``."""

    async def __call__(
        self, inputs: str | dict[str, Any] | None, name: str = "run"
    ) -> ActionReturn:
        assert isinstance(self, BaseAction), "AsyncActionMixin goes before BaseAction"
        return await self.acall(inputs, name)


def _parse_arguments(
    inputs: str | dict[str, Any] | None, spec: ApiSpec, label: str
) -> dict[str, Any]:
    """A dict of arguments from a dict, a JSON string (code fences allowed) or a bare value."""
    if inputs is None:
        return {}
    if isinstance(inputs, dict):
        return inputs
    props = list(spec.parameters["properties"])
    text = str(inputs)
    if match := _FENCE.match(text):
        text = match.group(1)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        if len(props) == 1:  # lagent's plain parser: the raw text is the only argument
            return {props[0]: inputs}
        raise ArgumentError(f"invalid JSON arguments for {label}: {exc}") from None
    if isinstance(value, dict):
        return value
    if len(props) == 1:
        return {props[0]: value}
    raise ArgumentError(f"arguments for {label} must be a JSON object, got {text[:100]!r}")


def format_outputs(outputs: Any) -> list[dict[str, Any]]:
    """A tool's return value as ActionReturn result items, text kept as UTF-8."""
    if (
        isinstance(outputs, list)
        and outputs
        and all(isinstance(o, dict) and {"type", "content"} <= o.keys() for o in outputs)
    ):
        return outputs
    if isinstance(outputs, bytes):
        text = outputs.decode("utf-8", errors="replace")
    elif isinstance(outputs, str):
        text = outputs
    elif isinstance(outputs, dict | list | tuple):
        text = json.dumps(outputs, ensure_ascii=False, default=str)
    else:
        text = str(outputs)
    return [{"type": "text", "content": text}]


def to_openai_tools(
    actions: BaseAction | Iterable[BaseAction], separator: str = OPENAI_SEPARATOR
) -> list[JsonSchema]:
    """OpenAI ``tools`` entries; toolkit APIs are named ``Tool__api`` (OpenAI forbids dots)."""
    items = [actions] if isinstance(actions, BaseAction) else list(actions)
    return [schema for action in items for schema in action.tool_schemas(separator)]
