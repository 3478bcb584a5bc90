"""langroid's tool bookkeeping for tool agents: which ``ToolMessage`` tools the agent knows,
which its model may use (they are described to it) and which it handles (they run).

``enable_message(Tool, use=True, handle=True)`` fills it. The model is told about the usable
tools as langroid tells it: for prompt-based calls the system message gets langroid's
``=== GUIDELINES ON SOME TOOLS/FUNCTIONS USAGE ===`` and ``=== ALL AVAILABLE TOOLS and THEIR
FORMAT INSTRUCTIONS ===`` sections (each tool's name, purpose, JSON Schema and examples); for
native tool calls the tools go in the call's ``tools`` and the system message only carries
the tools' own guidance and examples. A call may be written as langroid's bare JSON
(``{"request": "square", "number": 12}``, fenced or not, ``TOOL:`` before it or not).
"""

from __future__ import annotations

import json
from typing import Any

from agents.tool_message import ToolMessage


class LangroidTools:
    """langroid's ``llm_tools_map`` / ``llm_tools_usable`` / ``llm_tools_handled``."""

    def __init__(self) -> None:
        self.llm_tools_map: dict[str, type[ToolMessage]] = {}
        self.llm_tools_usable: set[str] = set()
        self.llm_tools_handled: set[str] = set()
        self.force: str | None = None  # a tool the model must call (native tool_choice)
        self.no_defaults: set[str] = set()  # include_defaults=False tools

    def add(
        self,
        tool: type[ToolMessage],
        use: bool = True,
        handle: bool = True,
        force: bool = False,
        include_defaults: bool = True,
    ) -> None:
        """Know ``tool``; the model may use it (``use``); the agent runs it (``handle``)."""
        name = tool.name()
        self.llm_tools_map[name] = tool
        for flag, group in ((use, self.llm_tools_usable), (handle, self.llm_tools_handled)):
            if flag:
                group.add(name)
            else:
                group.discard(name)
        if force:
            self.force = name
        elif self.force == name:
            self.force = None
        if include_defaults:
            self.no_defaults.discard(name)
        else:
            self.no_defaults.add(name)

    def usable(self) -> list[type[ToolMessage]]:
        """The tools the model is told about, in the order they were enabled."""
        return [t for n, t in self.llm_tools_map.items() if n in self.llm_tools_usable]

    # -- what the model is told ----------------------------------------------------------------
    def tool_instructions(self, use_tools: bool = True) -> str:
        """langroid's ``tool_instructions()``: each usable tool's guidance (and, for native tool
        calls, its examples)."""
        parts = []
        for tool in self.usable():
            guidance = tool.instructions()
            if use_tools:
                guidance += tool.langroid_tools_instructions()
            example = "" if use_tools else tool.usage_examples()
            example = "EXAMPLES:\n" + example if example else ""
            guidance = "GUIDANCE: " + guidance if guidance else ""
            if guidance or example:
                parts.append(f"TOOL: {tool.name()}:\n{guidance}\n{example}\n")
        if not parts:
            return ""
        joined = "\n\n".join(parts)
        return f"=== GUIDELINES ON SOME TOOLS/FUNCTIONS USAGE ===\n{joined}\n"

    def tool_format_rules(self) -> str:
        """langroid's ``tool_format_rules()``: name, purpose, JSON Schema and examples of each
        usable tool, and how to write a call (``TOOL:`` then the JSON)."""
        usable = self.usable()
        if not usable:
            return ""
        text = "\n\n".join(t.format_instructions(tool=True) for t in usable)
        return usable[0].group_format_instructions().format(format_instructions=text)

    def system_message(self, native: bool) -> str:
        """What goes after the agent's own system message (empty: nothing to add)."""
        if native:
            return self.tool_instructions(use_tools=False).strip()
        parts = [self.tool_instructions(use_tools=True), self.tool_format_rules()]
        return "\n\n".join(p.strip() for p in parts if p.strip())

    def native_tools(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``tools`` (the executor's) without the tools the model may not use, plus the usable
        tools the agent does not handle (another agent will)."""
        names = {t.get("function", {}).get("name") for t in tools}
        kept = [
            t
            for t in tools
            if t.get("function", {}).get("name") not in self.llm_tools_map
            or t["function"]["name"] in self.llm_tools_usable
        ]
        for tool in self.usable():
            if tool.name() not in names:
                spec = tool.llm_function_schema(defaults=tool.name() not in self.no_defaults)
                kept.append({"type": "function", "function": spec})
        return kept

    # -- what the model writes -----------------------------------------------------------------
    def recognize(self, text: str) -> tuple[str, dict[str, Any]] | None:
        """The first known tool call written as langroid's JSON in ``text``, as (the text
        before it, the call as a dict with ``request``); None when there is none."""
        for start, candidate in top_level_json(text):
            if isinstance(candidate.get("properties"), dict):  # a weak model's schema-shaped call
                candidate = candidate["properties"]
            request = candidate.get("request")
            if request is None:
                request = self._inferred(candidate)
            if isinstance(request, str) and request in self.llm_tools_map:
                before = text[:start].rstrip()
                if before.endswith("TOOL:"):
                    before = before[: -len("TOOL:")].rstrip()
                return before, {**candidate, "request": request}
        return None

    def _inferred(self, candidate: dict[str, Any]) -> str | None:
        """langroid's inference of a forgotten ``request``: the one handled tool whose own
        fields the call uses (and no others)."""
        keys = set(candidate)
        base = set(ToolMessage.model_fields)
        fits = []
        for name in self.llm_tools_handled:
            tool = self.llm_tools_map[name]
            fields = set(tool.model_fields)
            if keys <= fields and keys & (fields - base):
                try:
                    tool.model_validate(candidate)
                except ValueError:
                    continue
                fits.append(name)
        return fits[0] if len(fits) == 1 else None


def user_method(obj: Any, name: str) -> Any:
    """``obj``'s method ``name`` when a class of the program defines it (not one of the
    library's own: langroid's overridable responders and tool handlers), else None."""
    for klass in type(obj).__mro__:
        if klass.__module__.startswith("agents.") or klass is object:
            continue
        if callable(vars(klass).get(name)):
            return getattr(obj, name)
    return None


def top_level_json(text: str) -> list[tuple[int, dict[str, Any]]]:
    """Every top-level JSON object in ``text`` (fenced or bare), with where it starts."""
    found: list[tuple[int, dict[str, Any]]] = []
    decoder = json.JSONDecoder()
    i = text.find("{")
    while i != -1:
        try:
            value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        if isinstance(value, dict):
            found.append((i, value))
        i = text.find("{", end)
    return found


__all__ = ["LangroidTools", "top_level_json", "user_method"]
