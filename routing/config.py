"""Configuration sections owned by routing: the routing policy and the configured daemons.

Daemons defined in a repository's ``.agents/daemons/<id>/DAEMON.md`` are parsed by
``routing/daemons.py``; app.yaml configures only ``daemons.roles``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from runtime.config import (
    AgentLimits,
    ConfigSection,
    Key,
    Names,
    OptionalText,
    SourceOf,
    blank_to_none,
)

Conclusion = Literal[
    "success",
    "failure",
    "neutral",
    "cancelled",
    "skipped",
    "timed_out",
    "action_required",
    "stale",
    "startup_failure",
]


DEFAULT_IDLE_LIFETIME_S = 86400.0


# The words that stop a task unless the configuration names others (``routing.stop_words``);
# the adapters' fixed command vocabulary (``routing.signal.parse_command``) reads them too.
STOP_WORDS: tuple[str, ...] = ("stop", "cancel")


def _lowercase(words: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(word.lower() for word in words)


class RoutingConfig(ConfigSection):
    join_thread_replies: bool = True
    new_task_prefix: str = Field(default="new:", min_length=1)
    stop_words: Annotated[Names, AfterValidator(_lowercase)] = STOP_WORDS
    stop_reaction: str = "octagonal_sign"
    channel_repos: dict[str, Key] = Field(default_factory=dict)
    default_repo: Annotated[Key | None, BeforeValidator(blank_to_none)] = None
    # When neither the request, its channel nor default_repo names a repository, Keel asks
    # in the thread which one; unanswered for this long, the request ends unstarted.
    repo_question_s: float = Field(default=3600.0, gt=0)
    # Failed checks on a linked pull request's head that reach its task, per objective; past
    # it Keel says so on the pull request and stops trying (one per check and SHA besides).
    max_ci_fixes: int = Field(default=3, ge=0)
    # The agent a request runs as: by the Slack channel, else by the request's repository,
    # else ``agent`` (unset: the agent named ``default``, or the only agent configured).
    # People listed in ``agent_choosers`` (Slack user ids, GitHub logins) may name another
    # configured agent with ``agent=<name>`` in the request.
    agent: Annotated[Key | None, BeforeValidator(blank_to_none)] = None
    channel_agents: dict[str, Key] = Field(default_factory=dict)
    repo_agents: dict[Key, Key] = Field(default_factory=dict)
    agent_choosers: Names = ()

    def request_agent(self, agents: Collection[str]) -> str | None:
        """The agent a request runs as when no channel or repository names one; None when
        ``agent`` is unset and the configured agents leave it open."""
        if self.agent is not None:
            return self.agent
        if "default" in agents or not agents:
            return "default"
        only = list(agents)
        return only[0] if len(only) == 1 else None

    def describe_agents(self, agents: Collection[str]) -> str:
        """Which agent requests run as, and where configuration chooses another."""
        chosen = self.request_agent(agents)
        overrides = len(self.channel_agents) + len(self.repo_agents)
        choosers = len(self.agent_choosers)
        return (
            f"requests run as {chosen}, {overrides} channel/repository overrides, "
            f"{choosers} people may choose with agent=<name>"
        )

    def describe(self, source: SourceOf) -> str:
        joins = (
            "thread replies join the active task"
            if self.join_thread_replies
            else "thread replies need a mention"
        )
        repo = self.default_repo or "none"
        return (
            f"routing: {joins}, stop words {', '.join(self.stop_words)} and "
            f":{self.stop_reaction}:, {len(self.channel_repos)} channel→repo mappings, "
            f"default repo {repo}"
        )


class WatchRule(ConfigSection):
    """One class of event a daemon owns; every field that is set must match."""

    provider: Literal["slack", "github"]
    kind: OptionalText = None
    repo: OptionalText = None
    branch: OptionalText = None
    conclusion: Conclusion | None = None
    label: OptionalText = None
    pattern: OptionalText = None

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"invalid regular expression: {e.msg}") from e
        return pattern


def _not_empty(rules: tuple[WatchRule, ...]) -> tuple[WatchRule, ...]:
    # An AfterValidator rather than min_length: that would also complain when a rule is invalid.
    if not rules:
        raise ValueError("must list at least one rule")
    return rules


class DaemonConfig(ConfigSection):
    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]*$", max_length=64)]
    agent: str = "default"
    purpose: str = Field(min_length=1)
    watch: Annotated[tuple[WatchRule, ...], AfterValidator(_not_empty)]
    limits: AgentLimits | None = None
    deny: Names = ()
    # Seconds the role's task may wait without an event before it ends; None: the default.
    idle_lifetime_s: float | None = Field(default=None, gt=0)


class DaemonsConfig(ConfigSection):
    # A parked daemon task that sees no event for this long ends with a summary; the next
    # event starts its successor, linked to it.
    idle_lifetime_s: float = Field(default=DEFAULT_IDLE_LIFETIME_S, gt=0)
    roles: tuple[DaemonConfig, ...] = ()

    @model_validator(mode="after")
    def _unique_ids(self) -> DaemonsConfig:
        repeated = [name for name, count in Counter(d.id for d in self.roles).items() if count > 1]
        if repeated:
            raise ValueError(f"duplicate daemon id {', '.join(repeated)} in roles")
        return self

    def describe(self, source: SourceOf) -> str:
        names = ", ".join(d.id for d in self.roles) or "none configured"
        return f"daemons: {names}; idle lifetime {self.idle_lifetime_s:g}s"
