"""Composing agents (lagent's ``Sequential``, ``AgentList``, ``AgentDict``).

Containers register their members under their index or key, so ``state_dict`` keys read
``workers.0.memory`` / ``team.critic.memory`` and ``reset(keypath=...)`` reaches them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from agents.agent import Agent, AsyncAgent, BaseAgent
from agents.memory import SessionId
from agents.schema import AgentMessage


def _check(name: str, agent: Any) -> BaseAgent:
    if not isinstance(agent, BaseAgent):
        raise TypeError(f"{type(agent).__name__} is not an agent")
    if "." in name:
        raise KeyError(f'agent name can\'t contain ".", got {name}')
    return agent


class _Container(BaseAgent):
    """Holds named sub-agents; has no memory of its own."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(memory=None, name=name)

    def _set_members(self, members: Iterable[tuple[str, Any]]) -> None:
        checked = [(str(k), _check(str(k), a)) for k, a in members]
        registry: dict[str, BaseAgent] = self.__dict__["_registries"]["agent"]
        registry.clear()
        registry.update(checked)


class AgentList(_Container):
    """A list of agents, registered as ``0``, ``1``, ..."""

    def __init__(self, agents: Iterable[BaseAgent] | None = None) -> None:
        super().__init__()
        self._items: list[BaseAgent] = []
        self.extend(agents or [])

    def _sync(self) -> None:
        self._set_members((str(i), a) for i, a in enumerate(self._items))

    def append(self, agent: BaseAgent) -> None:
        """Add an agent at the end."""
        self.extend([agent])

    def extend(self, agents: Iterable[BaseAgent]) -> None:
        """Add agents at the end."""
        self._items.extend(_check("item", a) for a in agents)
        self._sync()

    def insert(self, index: int, agent: BaseAgent) -> None:
        """Insert an agent before ``index``."""
        self._items.insert(index, _check("item", agent))
        self._sync()

    def pop(self, index: int = -1) -> BaseAgent:
        """Remove and return an agent."""
        agent = self._items.pop(index)
        self._sync()
        return agent

    def __getitem__(self, index: int) -> BaseAgent:
        return self._items[index]

    def __setitem__(self, index: int, agent: BaseAgent) -> None:
        self._items[index] = _check("item", agent)
        self._sync()

    def __delitem__(self, index: int) -> None:
        del self._items[index]
        self._sync()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[BaseAgent]:
        return iter(self._items)


class AgentDict(_Container):
    """A mapping of names to agents, registered under their names."""

    def __init__(self, agents: Mapping[str, BaseAgent] | None = None) -> None:
        super().__init__()
        self._items: dict[str, BaseAgent] = {}
        self.update(agents or {})

    def update(self, agents: Mapping[str, BaseAgent]) -> None:
        """Add or replace agents."""
        for key, agent in agents.items():
            self._items[str(key)] = _check(str(key), agent)
        self._set_members(self._items.items())

    def __getitem__(self, key: str) -> BaseAgent:
        return self._items[key]

    def __setitem__(self, key: str, agent: BaseAgent) -> None:
        self.update({key: agent})

    def __delitem__(self, key: str) -> None:
        del self._items[key]
        self._set_members(self._items.items())

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def keys(self) -> list[str]:
        """The agents' names."""
        return list(self._items)

    def items(self) -> list[tuple[str, BaseAgent]]:
        """(name, agent) pairs."""
        return list(self._items.items())


class _SequentialCore(BaseAgent):
    """Passes the message through its agents in order, streaming each stage."""

    def __init__(self, *agents: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        members: Any = agents
        if len(agents) == 1 and not isinstance(agents[0], BaseAgent):
            members = agents[0]
        pairs = members.items() if isinstance(members, Mapping) else enumerate(members)
        self._stages: dict[str, BaseAgent] = {}
        for key, agent in pairs:
            if isinstance(agent, tuple):
                key, agent = agent
            self.add_agent(str(key), agent)
        if not self._stages:
            raise ValueError("At least one agent should be provided")

    def add_agent(self, name: str, agent: BaseAgent) -> None:
        """Append a stage."""
        self._stages[name] = _check(name, agent)
        self.__dict__["_registries"]["agent"][name] = agent

    async def forward(
        self,
        *message: AgentMessage,
        session_id: SessionId = 0,
        exit_at: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run the stages in order (cycling) and stop after stage ``exit_at`` (default: last)."""
        if exit_at is not None and exit_at < 0:
            raise ValueError("exit_at should be greater than or equal to 0")
        stages = list(self._stages.values())
        last = len(stages) - 1 if exit_at is None else exit_at
        inputs: tuple[Any, ...] = message
        for step in range(last + 1):
            reply: AgentMessage | None = None
            async for chunk in stages[step % len(stages)]._stream(
                *inputs, session_id=session_id, **kwargs
            ):
                reply = chunk
                yield chunk
            inputs = (reply,)

    def __getitem__(self, key: int | str) -> BaseAgent:
        if isinstance(key, int) and key < 0:
            key = len(self) + key
        return self._stages[str(key)]

    def __len__(self) -> int:
        return len(self._stages)


class Sequential(_SequentialCore, Agent):
    """Sync pipeline: ``Sequential(a, b, c)(msg)``."""


class AsyncSequential(_SequentialCore, AsyncAgent):
    """Async pipeline: ``await AsyncSequential(a, b, c)(msg)``."""


__all__ = ["AgentDict", "AgentList", "AsyncSequential", "Sequential"]
