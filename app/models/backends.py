"""Model backends by name, registered like agent kinds and tools.

A backend is a factory ``(config: dict) -> ModelHandle`` that builds (does not start) the handle
of one ``MODELS`` entry whose ``backend`` names it; ``config`` is the whole entry. The built-in
ones (``scripted``, ``openai``, ``vllm``) are listed below as import paths, so that vLLM is
imported only when a model uses it; installed packages add more through the
``agentstation.models`` entry-point group (docs/architecture.md, "Add a model backend")::

    [project.entry-points."agentstation.models"]
    mybackend = "mypkg.backend:create_handle"

An entry point with a built-in's name replaces the built-in.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.engines.base import ModelHandle

GROUP = "agentstation.models"
BackendFactory = Callable[[dict[str, Any]], "ModelHandle"]

BUILTIN: dict[str, str] = {
    "scripted": "app.models.scripted:create_scripted_handle",
    "openai": "app.models.openai_backend:create_openai_handle",
    "vllm": "app.engines.vllm:create_handle",
}


def _points() -> dict[str, EntryPoint]:
    points = {name: EntryPoint(name, value, GROUP) for name, value in BUILTIN.items()}
    points.update({ep.name: ep for ep in entry_points(group=GROUP)})
    return points


def backend_names() -> list[str]:
    """Every backend a ``MODELS`` entry may name (built in, then installed)."""
    return sorted(_points())


def backend_factory(name: str) -> BackendFactory:
    """The factory of backend ``name`` (imported now); ``ValueError`` for an unknown name."""
    point = _points().get(name)
    if point is None:
        raise ValueError(f"unknown model backend {name!r}; known: {backend_names()}")
    factory = point.load()
    if not callable(factory):
        raise TypeError(f"model backend {name!r} ({point.value}) is not callable")
    return factory  # type: ignore[no-any-return]
