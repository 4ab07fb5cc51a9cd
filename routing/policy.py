"""The routing policy: who may trigger Keel, what counts as a stop or a forced new task,
which repository a request is about, and which daemons own which events.

Built once by the composition root from plain configuration values, so routing never
imports the adapters' configuration.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, assert_never, get_args

from routing.config import STOP_WORDS, DaemonsConfig, RoutingConfig
from routing.daemons import DaemonDefinition, daemon_from_config
from routing.repos import (
    Chosen,
    Named,
    Reach,
    Refused,
    RepoChoice,
    Undecided,
    Unreadable,
    named_in,
)
from routing.signal import Actor, Signal
from runtime.threads import GitHubCommit, GitHubIssue, LocalThread, SlackThread, ThreadRef

Permission = Literal["read", "triage", "write", "maintain", "admin"]
PERMISSIONS: tuple[Permission, ...] = get_args(Permission)

_NO_REPOS: Mapping[str, str] = MappingProxyType({})
# ``agent=<name>`` as a word of its own anywhere in a request.
_AGENT_WORD = re.compile(r"(?<!\S)agent=(?P<name>[A-Za-z0-9][A-Za-z0-9_.\-/]*)(?!\S)")


@dataclass(frozen=True, slots=True)
class AgentChoice:
    agent: str
    message: str


@dataclass(frozen=True, slots=True)
class RoutingPolicy:
    """Empty Slack allow-lists mean "everyone"; GitHub needs at least ``github_min_permission``."""

    slack_allowed_channels: frozenset[str] = frozenset()
    slack_allowed_users: frozenset[str] = frozenset()
    github_min_permission: Permission = "write"
    allowed_bots: frozenset[str] = frozenset()
    join_thread_replies: bool = True
    new_task_prefix: str = "new:"
    stop_words: frozenset[str] = frozenset(STOP_WORDS)
    stop_reaction: str = "octagonal_sign"
    channel_repos: Mapping[str, str] = field(default_factory=lambda: _NO_REPOS)
    default_repo: str | None = None
    daemons: tuple[DaemonDefinition, ...] = ()
    default_agent: str = "default"
    channel_agents: Mapping[str, str] = field(default_factory=lambda: _NO_REPOS)
    repo_agents: Mapping[str, str] = field(default_factory=lambda: _NO_REPOS)
    # Who may name an agent with ``agent=<name>``, and the agents that may be named.
    agent_choosers: frozenset[str] = frozenset()
    agents: frozenset[str] = frozenset()
    # Our own identities beyond what the adapter marks as is_self: a CI run created by our
    # App, or an event whose sender is our login, was caused by us.
    self_logins: frozenset[str] = frozenset()
    self_app_ids: frozenset[int] = frozenset()
    max_ci_fixes: int = 3
    # The repositories Keel reaches, for ``repo=`` and links in a request and for the
    # question asked when nothing decides; None: requests choose nothing, nobody is asked.
    reach: Reach | None = None
    repo_question_s: float = 3600.0

    @classmethod
    def from_config(
        cls,
        routing: RoutingConfig,
        daemons: DaemonsConfig,
        *,
        slack_allowed_channels: Iterable[str] = (),
        slack_allowed_users: Iterable[str] = (),
        github_min_permission: str = "write",
        github_allowed_bots: Iterable[str] = (),
        github_bot_login: str | None = None,
        github_app_id: int | None = None,
        repo_daemons: Iterable[DaemonDefinition] = (),
        agents: Iterable[str] = (),
        reach: Reach | None = None,
    ) -> RoutingPolicy:
        known = frozenset(agents)
        return cls(
            slack_allowed_channels=frozenset(slack_allowed_channels),
            slack_allowed_users=frozenset(slack_allowed_users),
            github_min_permission=_permission(github_min_permission),
            allowed_bots=frozenset(name.lower() for name in github_allowed_bots),
            join_thread_replies=routing.join_thread_replies,
            new_task_prefix=routing.new_task_prefix,
            stop_words=frozenset(routing.stop_words),
            stop_reaction=routing.stop_reaction,
            channel_repos=MappingProxyType(dict(routing.channel_repos)),
            default_repo=routing.default_repo,
            daemons=_unique((*map(daemon_from_config, daemons.roles), *repo_daemons)),
            default_agent=routing.request_agent(known) or "default",
            channel_agents=MappingProxyType(dict(routing.channel_agents)),
            repo_agents=MappingProxyType(
                {repo.lower(): agent for repo, agent in routing.repo_agents.items()}
            ),
            agent_choosers=frozenset(name.lower() for name in routing.agent_choosers),
            agents=known,
            self_logins=_self_logins(github_bot_login),
            self_app_ids=frozenset({github_app_id} if github_app_id is not None else ()),
            max_ci_fixes=routing.max_ci_fixes,
            reach=reach,
            repo_question_s=routing.repo_question_s,
        )

    def is_authorised(self, signal: Signal) -> bool:
        """Allow-listed bots are trusted by name, so they skip the per-person checks."""
        actor = signal.actor
        if actor.is_bot and not self._bot_allowed(actor):
            return False
        match signal.provider:
            case "slack":
                return self._slack_channel_allows(signal) and (
                    actor.is_bot or self._slack_user_allows(actor)
                )
            case "github":
                return actor.is_bot or self._github_allows(actor)

    def caused_by_us(self, signal: Signal) -> bool:
        if signal.actor.is_self:
            return True
        # A GitHub actor's name is its login.
        by_login = signal.provider == "github" and signal.actor.name.lower() in self.self_logins
        by_app = signal.ci is not None and signal.ci.app_id in self.self_app_ids
        return by_login or by_app

    def is_stop(self, signal: Signal) -> bool:
        """Only the configured words and reaction stop: ``signal.command`` is the adapters'
        fixed vocabulary, so trusting it would let "cancel" stop after ``stop_words: [halt]``."""
        if signal.kind == "reaction":
            return signal.reaction == self.stop_reaction
        if signal.kind == "action":
            return signal.command == "stop"  # Keel's own Stop button
        word = signal.text.strip().lower().rstrip(".!?").strip()
        return word in self.stop_words or word in _reaction_as_text(self.stop_reaction)

    def forced_new(self, text: str) -> str | None:
        """The request without the ``new:`` prefix, if the text starts with it."""
        stripped = text.strip()
        prefix = self.new_task_prefix.lower()
        if not stripped.lower().startswith(prefix):
            return None
        return stripped[len(prefix) :].strip()

    def repo_for(self, thread: ThreadRef | None) -> str | None:
        """The repository a request is about, from its thread: channel map or GitHub repo.
        A local thread (the terminal) names none, and no provider's Signal comes from one."""
        match thread:
            case None | LocalThread():
                return self.default_repo
            case SlackThread(channel=channel):
                return self.channel_repos.get(channel, self.default_repo)
            case GitHubIssue(repo=repo) | GitHubCommit(repo=repo):
                return repo
            case _:
                assert_never(thread)

    def repo_choice(
        self, thread: ThreadRef | None, text: str, before: str | None = None
    ) -> RepoChoice | None:
        """The repository a new request works in, when more than its thread decides: what the
        request names (within reach, else refused), else ``before`` (the repository of the
        task it follows), else its thread's mapping; ``Undecided`` when none of them does and
        there are repositories to ask about. None: the thread decides (``repo_for``).

        On GitHub the thread's repository always decides: its asker's permission was
        checked there, and must not carry over to a repository named in a comment."""
        if self.reach is None or isinstance(thread, GitHubIssue | GitHubCommit):
            return None
        named = named_in(text)
        if isinstance(named, Unreadable):
            return Refused(named)
        if named is not None and named.repo is not None:
            return self._reached(named)
        branch = named.branch if named is not None else None
        mapped = before or self.repo_for(thread)
        if mapped is not None:
            return Chosen(mapped, branch) if branch or before else None
        # Only Slack can show the question's select.
        asks = isinstance(thread, SlackThread) and bool(self.reach.offered())
        return Undecided(branch) if asks else None

    def _reached(self, named: Named) -> Chosen | Refused:
        assert self.reach is not None and named.repo is not None
        if not self.reach.knows(named.repo):
            return Refused(named)
        return Chosen(named.repo, named.branch, named.pull)

    def agent_for(
        self, thread: ThreadRef | None, who: Iterable[str], text: str, repo: str | None = None
    ) -> AgentChoice:
        """The agent a new request runs as, and its text without an ``agent=<name>`` that
        was honoured. ``who`` are the author's id and name; ``repo`` the repository the
        request chose, if it did. Only a chooser may name an agent, and only a configured
        one; anyone else's ``agent=`` stays in the text as words."""
        named = _AGENT_WORD.search(text)
        if named is not None and self._may_choose(who) and named["name"] in self.agents:
            rest = f"{text[: named.start()].rstrip()} {text[named.end() :].lstrip()}"
            return AgentChoice(named["name"], rest.strip())
        return AgentChoice(self._configured_agent(thread, repo), text)

    def _configured_agent(self, thread: ThreadRef | None, chosen: str | None = None) -> str:
        if isinstance(thread, SlackThread) and thread.channel in self.channel_agents:
            return self.channel_agents[thread.channel]
        repo = chosen or self.repo_for(thread)
        if repo is None:
            return self.default_agent
        return self.repo_agents.get(repo.lower(), self.default_agent)

    def _may_choose(self, who: Iterable[str]) -> bool:
        return any(name.lower() in self.agent_choosers for name in who if name)

    def _bot_allowed(self, actor: Actor) -> bool:
        return actor.name.lower() in self.allowed_bots or actor.id.lower() in self.allowed_bots

    def _slack_channel_allows(self, signal: Signal) -> bool:
        thread = signal.thread_ref
        channel = thread.channel if isinstance(thread, SlackThread) else None
        return not self.slack_allowed_channels or channel in self.slack_allowed_channels

    def _slack_user_allows(self, actor: Actor) -> bool:
        return not self.slack_allowed_users or actor.id in self.slack_allowed_users

    def _github_allows(self, actor: Actor) -> bool:
        if actor.permission is None:
            # Anyone who can see the repository can read it; beyond that it must be proven.
            return self.github_min_permission == "read"
        return permits(actor.permission, self.github_min_permission)


# The glyph a reaction name stands for, so typing the stop emoji stops like reacting with it.
_GLYPHS: Mapping[str, str] = MappingProxyType({"octagonal_sign": "🛑"})


def _reaction_as_text(reaction: str) -> frozenset[str]:
    glyph = _GLYPHS.get(reaction)
    return frozenset({f":{reaction}:", *((glyph,) if glyph else ())})


def rank(permission: str) -> int:
    return PERMISSIONS.index(_permission(permission))


def permits(permission: str | None, needed: str) -> bool:
    """Who may ask on GitHub: a permission at least ``needed``. A custom role, none, or a
    threshold that is not a permission never passes."""
    if permission not in PERMISSIONS or needed not in PERMISSIONS:
        return False
    return rank(permission) >= rank(needed)


def _permission(value: str) -> Permission:
    for permission in PERMISSIONS:
        if permission == value:
            return permission
    raise ValueError(f"unknown permission {value!r} (one of {', '.join(PERMISSIONS)})")


def _self_logins(login: str | None) -> frozenset[str]:
    if not login:
        return frozenset()
    bare = login.lower().removesuffix("[bot]")
    return frozenset({bare, f"{bare}[bot]"})


def _unique(daemons: tuple[DaemonDefinition, ...]) -> tuple[DaemonDefinition, ...]:
    seen: dict[str, DaemonDefinition] = {}
    for daemon in daemons:
        if daemon.daemon_id in seen:
            first = seen[daemon.daemon_id].source
            raise ValueError(
                f"daemon {daemon.daemon_id!r} is defined twice ({first} and {daemon.source})"
            )
        seen[daemon.daemon_id] = daemon
    return daemons
