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
import json
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from agents.actions.base import PARAMETER_DESCRIPTION, BaseAction
from agents.actions.signature import _LAGENT_TYPES, ApiSpec, _strip_titles
from agents.schema import ActionReturn, ActionStatusCode, ActionValidCode

_META_FIELDS = ("request", "purpose")


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

    @classmethod
    def instructions(cls) -> str:
        """The purpose, then the examples as calls in the agent's JSON tool format."""
        lines = [str(cls.model_fields["purpose"].default or "")]
        for example in cls.examples():
            thought, call = example if isinstance(example, tuple) else ("", example)
            as_json = json.dumps({"name": cls.default_request(), "parameters": call.arguments()})
            lines.append(f"Example: {thought + ' -> ' if thought else ''}{as_json}")
        return "\n".join(line for line in lines if line)

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


class ToolMessageAction(BaseAction):
    """A ``ToolMessage`` class as a tool: validates with the model, calls its handler."""

    sync_in_thread = False

    def __init__(self, tool: type[ToolMessage]) -> None:
        self.tool = tool
        parameters = tool.parameters()
        lagent_params = [
            {
                "name": name,
                "type": _LAGENT_TYPES.get(str(prop.get("type")), "STRING"),
                "description": prop.get("description", ""),
            }
            for name, prop in parameters.get("properties", {}).items()
        ]
        description = tool.instructions()
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
        outputs = await message.handle_async()
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


__all__ = ["DoneTool", "ToolMessage", "ToolMessageAction", "as_actions", "finish"]
