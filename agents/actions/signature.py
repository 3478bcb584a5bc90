"""Tool signatures: a function's type hints and docstring as JSON Schema, plus argument checks.

A ``@tool_api`` method gets one :class:`ApiSpec`: the JSON Schema of its parameters (usable as
an OpenAI ``tools`` entry), lagent's description dict (what prompts show), and a pydantic model
that validates a model's arguments before the call, so a bad call becomes a readable message.
"""

from __future__ import annotations

import enum
import inspect
import json
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model

JsonSchema = dict[str, Any]

_SCALARS: dict[Any, JsonSchema] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    bytes: {"type": "string"},
    type(None): {"type": "null"},
}
_DOC_TYPES: dict[str, Any] = {
    "str": str, "string": str, "int": int, "integer": int, "float": float, "number": float,
    "bool": bool, "boolean": bool, "dict": dict, "object": dict, "list": list, "array": list,
}  # fmt: skip
# lagent's parameter type labels (what its prompts show), keyed by JSON Schema type.
_LAGENT_TYPES = {"array": "Array", "number": "FLOAT", "integer": "NUMBER", "boolean": "BOOLEAN"}


class ArgumentError(ValueError):
    """The arguments of a tool call do not match the tool's signature; ``fields`` names the
    arguments at fault (dotted paths), when known."""

    def __init__(self, message: str, fields: list[str] | None = None) -> None:
        super().__init__(message)
        self.fields = fields or []


def _is_optional(tp: Any) -> tuple[bool, Any]:
    """(True, X) for ``X | None`` / ``Optional[X]``."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) < len(get_args(tp)):
            return True, args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007
    return False, tp


def type_schema(tp: Any, defs: dict[str, JsonSchema]) -> JsonSchema:
    """The JSON Schema of a Python type; nested models' definitions go to ``defs``."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any or tp is inspect.Parameter.empty or tp is object:
        return {}
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    if origin is Annotated:
        base = type_schema(args[0], defs)
        notes = [a for a in args[1:] if isinstance(a, str)]
        return {**base, "description": notes[0]} if notes else base
    if origin is Literal:
        return _enum_schema(list(args))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_schema([m.value for m in tp])
    if origin in (Union, types.UnionType):
        return {"anyOf": [type_schema(a, defs) for a in args]}
    if tp in (list, set, frozenset, tuple) or origin in (list, set, frozenset):
        schema: JsonSchema = {"type": "array"}
        if args:
            schema["items"] = type_schema(args[0], defs)
        if tp in (set, frozenset) or origin in (set, frozenset):
            schema["uniqueItems"] = True
        return schema
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": type_schema(args[0], defs)}
        items = [type_schema(a, defs) for a in args]
        return {
            "type": "array",
            "prefixItems": items,
            "minItems": len(items),
            "maxItems": len(items),
        }
    if tp is dict or origin is dict:
        obj: JsonSchema = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            obj["additionalProperties"] = type_schema(args[1], defs)
        return obj
    return _pydantic_schema(tp, defs)


def _enum_schema(values: list[Any]) -> JsonSchema:
    kinds = {type(v) for v in values}
    schema: JsonSchema = {"enum": values}
    if len(kinds) == 1 and (kind := kinds.pop()) in _SCALARS:
        schema = {"type": _SCALARS[kind]["type"], "enum": values}
    return schema


def _pydantic_schema(tp: Any, defs: dict[str, JsonSchema]) -> JsonSchema:
    """Models, dataclasses and TypedDicts: pydantic's schema without titles, defs hoisted."""
    try:
        schema = TypeAdapter(tp).json_schema(ref_template="#/$defs/{model}")
    except Exception as exc:  # pydantic cannot describe it: say which type, at definition time
        raise TypeError(f"cannot build a JSON Schema for type {tp!r}: {exc}") from exc
    stripped: JsonSchema = _strip_titles(schema)
    defs.update(stripped.pop("$defs", {}))
    return stripped


def _strip_titles(node: Any, in_properties: bool = False) -> Any:
    if isinstance(node, list):
        return [_strip_titles(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: _strip_titles(
            value, in_properties=key in ("properties", "$defs") and not in_properties
        )
        for key, value in node.items()
        if in_properties or key != "title"
    }


def _doc_type(type_name: str | None) -> Any:
    """A Python type for a docstring's ``(int)`` / ``list[str]`` annotation (best effort)."""
    if not type_name:
        return Any
    name = type_name.replace("optional", "").strip(" ,").lower()
    if name.startswith(("list[", "array[")) and name.endswith("]"):
        return list[_DOC_TYPES.get(name[name.index("[") + 1 : -1].strip(), Any)]  # type: ignore[misc]
    return _DOC_TYPES.get(name.split("[")[0], Any)


@dataclass(frozen=True)
class ApiSpec:
    """Everything known about one tool API: schema, lagent description, argument validator."""

    name: str
    description: str
    parameters: JsonSchema
    lagent: dict[str, Any]
    validator: type[BaseModel]
    is_async: bool
    var_kwargs: bool

    def validate(self, arguments: dict[str, Any], label: str | None = None) -> dict[str, Any]:
        """Checked (and lax-converted) arguments; raises ArgumentError naming each problem."""
        try:
            model = self.validator.model_validate(arguments)
        except ValidationError as exc:
            bad = [".".join(str(p) for p in e["loc"]) for e in exc.errors(include_url=False)]
            raise ArgumentError(_explain(label or self.name, exc), bad) from None
        fields = type(model).model_fields
        checked = {fields[key].alias or key: getattr(model, key) for key in model.model_fields_set}
        extra = model.model_extra or {}
        return {**checked, **extra}

    def openai_tool(self, name: str | None = None, description: str | None = None) -> JsonSchema:
        """This API as an OpenAI ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": name or self.name,
                "description": self.description if description is None else description,
                "parameters": self.parameters,
            },
        }


def _explain(api: str, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        if err["type"] == "missing":
            problems.append(f"missing required argument '{where}'")
        elif err["type"] == "extra_forbidden":
            problems.append(f"unknown argument '{where}'")
        else:
            got = json.dumps(err.get("input"), ensure_ascii=False, default=repr)[:100]
            problems.append(f"argument '{where}': {err['msg']} (got {got})")
    return f"invalid arguments for {api}: " + "; ".join(problems)


def build_spec(func: Callable[..., Any]) -> ApiSpec:
    """Read ``func``'s signature, type hints and (Google/numpy/reST) docstring."""
    doc = docstring_parser.parse(inspect.getdoc(func) or "")
    description = "\n\n".join(p for p in (doc.short_description, doc.long_description) if p)
    param_docs = {p.arg_name: p for p in doc.params}
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except NameError as exc:  # e.g. a type defined inside a function, under PEP 563
        raise TypeError(f"cannot resolve the type hints of {func.__qualname__}: {exc}") from exc
    properties: dict[str, JsonSchema] = {}
    defs: dict[str, JsonSchema] = {}
    required: list[str] = []
    fields: dict[str, Any] = {}
    lagent_params: list[dict[str, Any]] = []
    var_kwargs = False
    for index, (pname, param) in enumerate(inspect.signature(func).parameters.items()):
        if index == 0 and pname in ("self", "cls"):
            continue
        if param.kind is param.VAR_KEYWORD:
            var_kwargs = True
            continue
        if param.kind is param.VAR_POSITIONAL:
            continue
        pdoc = param_docs.get(pname)
        tp = hints.get(pname, _doc_type(pdoc.type_name if pdoc else None))
        has_default = param.default is not param.empty
        optional, inner = _is_optional(tp)
        # ``x: int | None = None``: omitting x means None, so the schema just says integer.
        shown = inner if optional and has_default and param.default is None else tp
        schema = type_schema(shown, defs)
        if pdoc and pdoc.description and "description" not in schema:
            schema["description"] = " ".join(pdoc.description.split())
        if not has_default:
            required.append(pname)
        elif param.default is not None:
            try:
                schema["default"] = json.loads(json.dumps(param.default))
            except (TypeError, ValueError):
                pass  # a default JSON cannot carry is simply not shown
        properties[pname] = schema
        # Internal field names, the real names as aliases: a parameter called ``json`` or
        # ``model_x`` must not collide with pydantic's own attributes.
        default = param.default if has_default else ...
        fields[f"p{len(fields)}"] = (tp, Field(default, alias=pname))
        lagent_params.append(
            {
                "name": pname,
                "type": _LAGENT_TYPES.get(str(schema.get("type")), "STRING"),
                "description": schema.get("description", ""),
            }
        )
    parameters: JsonSchema = {"type": "object", "properties": properties, "required": required}
    if defs:
        parameters["$defs"] = defs
    config = ConfigDict(extra="allow" if var_kwargs else "forbid", arbitrary_types_allowed=True)
    validator = create_model(f"{func.__name__}_arguments", __config__=config, **fields)
    lagent = {
        "name": func.__name__,
        "description": description,
        "parameters": lagent_params,
        "required": list(required),
    }
    return ApiSpec(
        name=func.__name__,
        description=description,
        parameters=parameters,
        lagent=lagent,
        validator=validator,
        is_async=inspect.iscoroutinefunction(func),
        var_kwargs=var_kwargs,
    )
