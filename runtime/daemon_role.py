"""A daemon's identity as the rest of Keel sees it: the role ``id`` whose tasks carry
``daemon:{id}`` as their objective key (and run as the agent of that name).

The text form is written and parsed here only; routing defines daemons, reporting and the UI
recognise their tasks, and none of them handles the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

_PREFIX = "daemon:"


@dataclass(frozen=True, slots=True)
class DaemonRole:
    daemon_id: str

    @property
    def key(self) -> str:
        """The objective key of the role's tasks, which is also their agent's name."""
        return f"{_PREFIX}{self.daemon_id}"

    @classmethod
    def of(cls, objective_key: str | None) -> DaemonRole | None:
        """The role a task's objective key names, or None for any other objective."""
        if objective_key is None or not objective_key.startswith(_PREFIX):
            return None
        return cls(objective_key.removeprefix(_PREFIX))
