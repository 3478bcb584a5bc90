"""Pydantic tool messages in langroid's style, served through the ordinary tool machinery.

A ``ToolMessage`` subclass names its tool (``request``), says what it is for (``purpose``),
declares typed fields and handles a call (``handle`` or ``handle_async``)::

    class SquareTool(ToolMessage):
        request: str = "square"
        purpose: str = "To find the square of <number>"
        number: int

        def handle(self) -> str:
            return str(self.number**2)

``SquareTool.as_action()`` (or passing the class where tools are expected: an executor, a
``ToolAgent``'s ``executor`` list, ``agent.enable_message``) makes it a ``BaseAction``: its JSON
Schema is the fields' (without ``request`` / ``purpose``), and a call with bad arguments comes
back to the model as an ``ARGS_ERROR`` naming each problem, like every other tool's. A model may
write the call in the tool format the agent parses (``{"name": "square", "parameters": {...}}``)
or in langroid's flat form (``{"request": "square", "number": 3}``).

``DoneTool`` ends a ``Task``: its handler returns ``finish(content)``, a FINISH result.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from contextvars import ContextVar
from random import choice
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, create_model
from pydantic_core import PydanticUndefined

from agents.actions.base import PARAMETER_DESCRIPTION, BaseAction
from agents.actions.signature import _LAGENT_TYPES, ApiSpec, _strip_titles
from agents.schema import ActionReturn, ActionStatusCode, ActionValidCode

_META_FIELDS = ("request", "purpose")
_REQUEST_REMINDER = """
IMPORTANT: When using this or any other tool/function, you MUST include a
`request` field and set it equal to the FUNCTION/TOOL NAME you intend to use.
"""
_GROUP_FORMAT = """
=== ALL AVAILABLE TOOLS and THEIR FORMAT INSTRUCTIONS ===
You have access to the following TOOLS to accomplish your task:

{format_instructions}

When one of the above TOOLs is applicable, you must express your
request as "TOOL:" followed by the request in the above format.
"""


def finish(content: Any) -> ActionReturn:
    """A tool result that ends the task running the tool, with ``content`` as its result."""
    text = content if isinstance(content, str) else json.dumps(content, default=str)
    return ActionReturn(
        result=[{"type": "text", "content": text}],
        state=ActionStatusCode.SUCCESS,
        valid=ActionValidCode.FINISH,
    )


class ToolMessage(BaseModel):
    """A tool the model calls with typed fields; subclasses set ``request`` and ``purpose``."""

    model_config = ConfigDict(extra="forbid")

    request: str = ""
    purpose: str = ""
    #: Sync ``handle`` methods run in a worker thread (False: on the event loop).
    handle_in_thread: ClassVar[bool] = True

    @classmethod
    def default_request(cls) -> str:
        """The tool's name: the ``request`` field's default."""
        value = cls.model_fields["request"].default
        if not isinstance(value, str) or not value:
            raise TypeError(f"{cls.__name__} must set a default for `request`")
        return value

    @classmethod
    def examples(cls) -> list[ToolMessage | tuple[str, ToolMessage]]:
        """Example calls (optionally with the thought that leads to them) shown to the model."""
        return []

    @classmethod
    def parameters(cls) -> dict[str, Any]:
        """The JSON Schema of the call's arguments (the fields but ``request`` / ``purpose``)."""
        schema: dict[str, Any] = _strip_titles(cls.model_json_schema())
        for name in _META_FIELDS:
            schema.get("properties", {}).pop(name, None)
        schema["required"] = [r for r in schema.get("required", []) if r not in _META_FIELDS]
        schema.pop("description", None)
        schema.pop("additionalProperties", None)
        return schema

    def arguments(self) -> dict[str, Any]:
        """This call's arguments as JSON values."""
        return self.model_dump(mode="json", exclude=set(_META_FIELDS))

    # -- langroid's prompt pieces (the system message names each usable tool this way) -------
    @classmethod
    def name(cls) -> str:
        """The tool's name (langroid's ``name()``): ``request``'s default."""
        return cls.default_request()

    @classmethod
    def default_value(cls, f: str) -> Any:
        """The default of field ``f`` (None when it has none or there is no such field)."""
        field = cls.model_fields.get(f)
        if field is None or field.default is PydanticUndefined:
            return None
        return field.default

    @classmethod
    def instructions(cls) -> str:
        """Guidance on using the tool, beyond its purpose (langroid's hook; default none)."""
        return ""

    @classmethod
    def langroid_tools_instructions(cls) -> str:
        """What every prompt-based tool call must carry (langroid's text)."""
        return _REQUEST_REMINDER

    @classmethod
    def usage_examples(cls, random: bool = False) -> str:
        """The examples as langroid shows them: ``EXAMPLE i: (THOUGHT: ...) => {json}``."""
        examples = cls.examples()
        if not examples:
            return ""
        if random:
            examples = [choice(examples)]
        return "\n\n".join(
            f"EXAMPLE {i}: (THOUGHT: {ex[0]}) => \n{ex[1].format_example()}"
            if isinstance(ex, tuple)
            else f"EXAMPLE {i}:\n {ex.format_example()}"
            for i, ex in enumerate(examples, 1)
        )

    def format_example(self) -> str:
        """This call as the JSON the model writes (``request`` first, no ``purpose``)."""
        return self.to_json()

    def to_json(self) -> str:
        """``{"request": ..., <fields>}`` indented, as langroid writes a tool call."""
        return json.dumps({"request": self.request or self.name(), **self.arguments()}, indent=4)

    @classmethod
    def llm_function_schema(cls, request: bool = False, defaults: bool = True) -> dict[str, Any]:
        """``{"name", "description", "parameters"}``: the function spec (with ``request`` among
        the parameters when ``request``, as prompt-based tool calls carry it)."""
        parameters = cls.parameters()
        props = parameters.setdefault("properties", {})
        if not defaults:
            parameters["properties"] = props = {
                k: v for k, v in props.items() if v.get("default") is None
            }
            parameters["required"] = [r for r in parameters["required"] if r in props]
        if request:
            parameters["properties"] = {
                "request": {"default": cls.name(), "type": "string"},
                **props,
            }
            parameters["required"] = [*sorted(parameters["required"]), "request"]
        return {
            "name": cls.name(),
            "description": cls.default_value("purpose") or f"Tool for {cls.name()}",
            "parameters": parameters,
        }

    @classmethod
    def format_instructions(cls, tool: bool = False) -> str:
        """``TOOL: / PURPOSE: / JSON FORMAT: / EXAMPLES:``, langroid's description of a tool."""
        schema = json.dumps(cls.llm_function_schema(request=True)["parameters"], indent=4)
        examples = "EXAMPLES:\n" + cls.usage_examples() if cls.examples() else ""
        return (
            f"TOOL: {cls.name()}\nPURPOSE: {cls.default_value('purpose')} \n"
            f"JSON FORMAT: {schema}\n{examples}\n"
        )

    @staticmethod
    def group_format_instructions() -> str:
        """The frame of the tools' format instructions (``{format_instructions}`` inside)."""
        return _GROUP_FORMAT

    @classmethod
    def require_recipient(cls) -> type[ToolMessage]:
        """This tool with a required ``recipient`` field (langroid's ``require_recipient``)."""
        return create_model(f"{cls.__name__}WithRecipient", __base__=cls, recipient=(str, ...))

    @classmethod
    def as_action(cls) -> ToolMessageAction:
        """This tool as a ``BaseAction`` for an executor."""
        return ToolMessageAction(cls)

    def handle(self) -> Any:
        """Handle the call: a string for the model, or ``finish(result)`` to end the task."""
        raise NotImplementedError(f"{type(self).__name__} has no handler")

    async def handle_async(self) -> Any:
        """Async handler; by default runs ``handle`` (in a worker thread)."""
        if self.handle_in_thread:
            return await asyncio.to_thread(self.handle)
        return self.handle()


class DoneTool(ToolMessage):
    """langroid's done tool: the model ends the task, with its final result."""

    request: str = "done_tool"
    purpose: str = "To say the task is done, with its final result in <content>"
    content: str
    handle_in_thread: ClassVar[bool] = False

    def handle(self) -> ActionReturn:
        return finish(self.content)


class ResultTool(ToolMessage):
    """langroid's ``ResultTool``: a handler returns it (with any fields) to end the task; the
    task's result carries it in ``tool_messages`` (the object itself, its fields as they
    were). Not a tool the model calls."""

    model_config = ConfigDict(extra="allow")

    request: str = "result_tool"
    purpose: str = "Ignored; Wrapper for a structured message"

    def finish_text(self) -> str:
        """The task's result content: this tool as JSON."""
        return json.dumps({"request": self.request, **self.arguments()}, default=str)


#: The ``ResultTool``s handed to ``finish`` during a ``Task.run`` (set by the run), with the
#: text each ended its task with: the run's result finds its own among them.
RESULT_TOOLS: ContextVar[list[tuple[str, ResultTool]] | None] = ContextVar(
    "result_tools", default=None
)


class RecipientTool(ToolMessage):
    """langroid's ``RecipientTool``: the model sends ``content`` to ``intended_recipient`` (a
    sub-task's name, or the task's caller). A ``Task`` delivers it; ``create(recipients)``
    restricts the names."""

    request: str = "recipient_message"
    purpose: str = "To send message <content> to a specific <intended_recipient>."
    intended_recipient: str
    content: str
    allowed_recipients: ClassVar[list[str]] = []
    default_recipient: ClassVar[str] = ""
    handle_in_thread: ClassVar[bool] = False

    @classmethod
    def create(cls, recipients: list[str], default: str = "") -> type[RecipientTool]:
        """A ``RecipientTool`` that names only ``recipients``."""

        class RecipientToolRestricted(cls):  # type: ignore[valid-type,misc]
            allowed_recipients: ClassVar[list[str]] = list(recipients)
            default_recipient: ClassVar[str] = default

        return RecipientToolRestricted

    @classmethod
    def instructions(cls) -> str:
        recipients = ", ".join(cls.allowed_recipients)
        target = (
            f"to one of the following:\n{recipients},"
            if recipients
            else "to the name of the recipient,"
        )
        return (
            "Since you will be talking to multiple recipients, you must clarify who your "
            f"intended recipient is, using the `{cls.default_request()}` tool/function-call, "
            f"by setting the 'intended_recipient' field {target} and setting the 'content' "
            "field to your message."
        )

    def handle(self) -> str:
        """Outside a task there is nobody to route to: the content is the result."""
        return self.content


class ToolMessageAction(BaseAction):
    """A ``ToolMessage`` class as a tool: validates with the model, calls its handler."""

    sync_in_thread = False

    def __init__(self, tool: type[ToolMessage], handler: Any = None) -> None:
        self.tool = tool
        #: langroid's agent-method handler (``def square(self, msg: SquareTool)``), if any.
        self.handler = handler
        parameters = tool.parameters()
        lagent_params = [
            {
                "name": name,
                "type": _LAGENT_TYPES.get(str(prop.get("type")), "STRING"),
                "description": prop.get("description", ""),
            }
            for name, prop in parameters.get("properties", {}).items()
        ]
        purpose = str(tool.default_value("purpose") or "")
        description = "\n".join(x for x in (purpose, tool.instructions()) if x)
        self.__tool_apis__ = {  # type: ignore[misc]  # this instance's one API, described by the model's fields
            "run": ApiSpec(
                name="run",
                description=description,
                parameters=parameters,
                lagent={"name": "run", "description": description,
                        "parameters": lagent_params, "required": parameters["required"]},
                validator=_ArgumentsOf.make(tool),
                is_async=True,
                var_kwargs=True,
            )
        }  # fmt: skip
        super().__init__(
            description={
                "name": tool.default_request(),
                "description": description,
                "parameters": lagent_params,
                "required": parameters["required"],
                "parameter_description": PARAMETER_DESCRIPTION,
            }
        )

    async def run(self, **arguments: Any) -> Any:
        """Build the message from validated arguments and hand it to its handler."""
        message = self.tool.model_validate(arguments)
        if self.handler is not None:
            outputs = self.handler(message)
            if inspect.isawaitable(outputs):
                outputs = await outputs
        else:
            outputs = await message.handle_async()
        if isinstance(outputs, DoneTool):  # langroid: a handler answering DoneTool ends the task
            return finish(outputs.content)
        if isinstance(outputs, ResultTool):  # ends the task; the result carries the object
            text = outputs.finish_text()
            found = RESULT_TOOLS.get()
            if found is not None:
                found.append((text, outputs))
            return finish(text)
        if isinstance(outputs, ToolMessage):  # a handler may answer with another tool call
            return json.dumps({"request": outputs.request, **outputs.arguments()})
        return outputs


class _ArgumentsOf:
    """The validator ``ApiSpec`` wants: the tool's model without ``request`` / ``purpose``."""

    @staticmethod
    def make(tool: type[ToolMessage]) -> type[BaseModel]:
        class Arguments(tool):  # type: ignore[valid-type,misc]
            model_config = ConfigDict(extra="forbid")

            def model_post_init(self, context: Any) -> None:
                super().model_post_init(context)
                # ``request`` / ``purpose`` are not arguments: never report them as set.
                self.__pydantic_fields_set__.difference_update(_META_FIELDS)

        Arguments.__name__ = f"{tool.__name__}Arguments"
        return Arguments


def as_actions(tools: list[Any]) -> list[Any]:
    """Tools with every ``ToolMessage`` class replaced by its action."""
    return [
        t.as_action() if isinstance(t, type) and issubclass(t, ToolMessage) else t for t in tools
    ]


__all__ = [
    "RESULT_TOOLS",
    "DoneTool",
    "RecipientTool",
    "ResultTool",
    "ToolMessage",
    "ToolMessageAction",
    "as_actions",
    "finish",
]
