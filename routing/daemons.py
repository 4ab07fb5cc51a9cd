"""Daemons: configured persistent roles that own a class of events.

A daemon is defined in app.yaml (``daemons.roles``) or in a repository's
``.agents/daemons/<id>/DAEMON.md`` (YAML front matter, the body is the brief). This module
owns the routing-side definition, reading DAEMON.md files, and matching a Signal against
the watch rules. Each daemon owns one long-lived Task under the objective key
``daemon:{id}``; the apply step creates it on the first matched event and appends later ones.

A daemon's task runs as the agent ``daemon:{id}``: the role's base agent with its ``deny``
tools removed, its ``limits`` laid over the base limits and its purpose and brief added to
the instructions (``daemon_agents``). Such an agent is resident (``daemon_residency``): its
final answer parks the task until the next event rather than ending it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from routing.config import DaemonConfig, WatchRule
from routing.signal import Signal
from runtime.config import AgentConfig, AgentLimits
from runtime.daemon_role import DaemonRole
from runtime.errors import ConfigError
from runtime.workspace.paths import PathRefused, list_inside, read_inside

DAEMON_FILE = "DAEMON.md"
DAEMONS_FOLDER = ".agents/daemons"
MAX_DAEMON_FILE_BYTES = 256 * 1024
FRONT_MATTER_KEYS = ("id", "purpose", "watch", "routines", "deny", "schedule")
REQUIRED_KEYS = ("id", "purpose", "watch")
_ID = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


class DaemonFileError(ConfigError):
    """A DAEMON.md that cannot be used; the message names the file and the offending key."""


@dataclass(frozen=True, slots=True)
class Watch:
    """One class of event; every field that is set must match."""

    provider: str
    kind: str | None = None
    repo: str | None = None
    branch: str | None = None
    conclusion: str | None = None
    label: str | None = None
    pattern: str | None = None

    def matches(self, signal: Signal) -> bool:
        conclusion = signal.ci.conclusion if signal.ci else None
        return (
            self.provider == signal.provider
            and (self.kind is None or self.kind in (signal.kind, signal.event))
            and (self.repo is None or self.repo.lower() == (signal.repo or "").lower())
            and (self.branch is None or _branch_matches(self.branch, signal.branch))
            and (self.conclusion is None or self.conclusion == conclusion)
            and (self.label is None or self.label in signal.labels)
            and (self.pattern is None or re.search(self.pattern, signal.text) is not None)
        )


@dataclass(frozen=True, slots=True)
class DaemonDefinition:
    daemon_id: str
    purpose: str
    watch: tuple[Watch, ...]
    agent: str = "default"
    deny: tuple[str, ...] = ()
    routines: tuple[str, ...] = ()
    schedule: str | None = None
    brief: str = ""
    limits: AgentLimits | None = None
    source: str = "app.yaml"
    idle_lifetime_s: float | None = None  # None: the configured default

    @property
    def objective_key(self) -> str:
        return daemon_objective(self.daemon_id)

    @property
    def task_agent(self) -> str:
        """The agent name the role's tasks run as; ``daemon_agents`` defines it."""
        return daemon_objective(self.daemon_id)

    def agent_config(self, base: AgentConfig) -> AgentConfig:
        """The base agent narrowed to this role: fewer tools, its limits, its purpose."""
        limits = base.limits
        if self.limits is not None:
            explicit = {name: getattr(self.limits, name) for name in self.limits.model_fields_set}
            limits = base.limits.model_copy(update=explicit)
        return base.model_copy(
            update={
                "instructions": _role_instructions(self, base.instructions),
                "tools": tuple(name for name in base.tools if name not in self.deny),
                "limits": limits,
            }
        )

    def watches(self, signal: Signal) -> bool:
        return any(rule.matches(signal) for rule in self.watch)


def daemon_objective(daemon_id: str) -> str:
    return DaemonRole(daemon_id).key


def matching_daemons(
    signal: Signal, daemons: Iterable[DaemonDefinition]
) -> tuple[DaemonDefinition, ...]:
    """The daemons whose watch rules claim this signal, in definition order."""
    return tuple(d for d in daemons if d.watches(signal))


def daemon_from_config(config: DaemonConfig) -> DaemonDefinition:
    return DaemonDefinition(
        daemon_id=config.id,
        purpose=config.purpose,
        watch=tuple(_watch(rule) for rule in config.watch),
        agent=config.agent,
        deny=config.deny,
        limits=config.limits,
        idle_lifetime_s=config.idle_lifetime_s,
    )


def daemon_agents(
    daemons: Iterable[DaemonDefinition],
    agents: Mapping[str, AgentConfig],
    known_tools: Iterable[str],
) -> dict[str, AgentConfig]:
    """The agent each daemon's tasks run as, by ``task_agent``.

    A ``deny`` naming a tool neither registered nor listed by the base agent is refused: a
    misspelt name would silently leave the tool it meant to take away in the role's hands.
    """
    registered = frozenset(known_tools)
    found = {}
    for daemon in daemons:
        base = agents.get(daemon.agent)
        if base is None:
            raise ConfigError(
                f"daemon {daemon.daemon_id} ({daemon.source}): unknown agent {daemon.agent!r} "
                f"(agents: {', '.join(agents) or 'none'})"
            )
        known = registered | set(base.tools)
        unknown = [name for name in daemon.deny if name not in known]
        if unknown:
            raise ConfigError(
                f"daemon {daemon.daemon_id} ({daemon.source}): deny names unknown tool "
                f"{', '.join(unknown)} (tools: {', '.join(sorted(known))})"
            )
        found[daemon.task_agent] = daemon.agent_config(base)
    return found


def daemon_residency(
    daemons: Iterable[DaemonDefinition], default_idle_lifetime_s: float
) -> dict[str, float]:
    """Idle lifetime in seconds of each daemon's resident agent, by ``task_agent``."""
    return {
        daemon.task_agent: daemon.idle_lifetime_s or default_idle_lifetime_s
        for daemon in daemons
    }


def _role_instructions(daemon: DaemonDefinition, base: str) -> str:
    role = (
        f"You are the daemon {daemon.daemon_id!r}, a long-lived role. Purpose: "
        f"{daemon.purpose}\nEach event you own arrives as a message; handle it, give a "
        "final answer, and you will wait for the next one."
    )
    return "\n\n".join(part for part in (base, role, daemon.brief) if part)


def parse_daemon_file(
    text: str, *, source: str, repo: str | None = None, agent: str = "default"
) -> DaemonDefinition:
    """A DAEMON.md: front matter with exactly the known keys, then the brief.

    A watch rule without a ``repo`` is scoped to the repository the file came from, so a
    daemon defined in one repository never claims another repository's events.
    """
    front, brief = _split_front_matter(text, source)
    _check_keys(front, source)
    daemon_id = _daemon_id(front["id"], source)
    rules = _watch_rules(front["watch"], source)
    return DaemonDefinition(
        daemon_id=daemon_id,
        purpose=_text(front["purpose"], "purpose", source),
        watch=tuple(replace(r, repo=r.repo or repo) for r in rules),
        agent=agent,
        deny=_names(front.get("deny"), "deny", source),
        routines=_names(front.get("routines"), "routines", source),
        schedule=_optional_text(front.get("schedule"), "schedule", source),
        brief=brief.strip(),
        source=source,
    )


def load_repo_daemons(
    root: Path, *, repo: str | None = None, agent: str = "default"
) -> tuple[DaemonDefinition, ...]:
    """Every ``.agents/daemons/<id>/DAEMON.md`` under a checkout; the folder names the id.

    The checkout is repository content: its files are read without following a link out of
    it (``runtime.workspace.paths``), so a DAEMON.md linked to a host file is refused.
    """
    try:
        entries = list_inside(root, DAEMONS_FOLDER, 10_000)
    except (PathRefused, OSError):
        return ()
    found = []
    for source in entries:
        folder, _, name = source.removeprefix(f"{DAEMONS_FOLDER}/").partition("/")
        if name != DAEMON_FILE:
            continue
        daemon = parse_daemon_file(_read(root, source), source=source, repo=repo, agent=agent)
        if daemon.daemon_id != folder:
            raise DaemonFileError(
                f"{source}: id {daemon.daemon_id!r} does not match its folder {folder!r}"
            )
        found.append(daemon)
    return tuple(found)


# -- DAEMON.md parsing ----------------------------------------------------------------------


def _read(root: Path, source: str) -> str:
    try:
        data, size = read_inside(root, source, MAX_DAEMON_FILE_BYTES)
        if size > MAX_DAEMON_FILE_BYTES:
            raise DaemonFileError(f"{source}: larger than {MAX_DAEMON_FILE_BYTES} bytes")
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError, PathRefused) as e:
        raise DaemonFileError(f"{source}: cannot read ({e})") from e


def _split_front_matter(text: str, source: str) -> tuple[Mapping[str, Any], str]:
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise DaemonFileError(f"{source}: must start with a '---' front-matter line")
    end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == "---"), None)
    if end is None:
        raise DaemonFileError(f"{source}: front matter has no closing '---' line")
    try:
        front = yaml.safe_load("".join(lines[1:end]))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        raise DaemonFileError(f"{source}: invalid YAML front matter{where}") from None
    if not isinstance(front, dict):
        raise DaemonFileError(f"{source}: front matter must be a mapping of keys")
    return front, "".join(lines[end + 1 :])


def _check_keys(front: Mapping[str, Any], source: str) -> None:
    allowed = ", ".join(FRONT_MATTER_KEYS)
    unknown = [str(key) for key in front if key not in FRONT_MATTER_KEYS]
    if unknown:
        names = ", ".join(repr(key) for key in unknown)
        raise DaemonFileError(
            f"{source}: unknown front-matter key {names} (allowed keys: {allowed})"
        )
    missing = [key for key in REQUIRED_KEYS if front.get(key) is None]
    if missing:
        raise DaemonFileError(f"{source}: missing front-matter key {', '.join(missing)}")


def _daemon_id(value: object, source: str) -> str:
    if not isinstance(value, str) or not _ID.match(value) or len(value) > 64:
        raise DaemonFileError(
            f"{source}: id: must be lowercase letters, digits, '-' or '_' (at most 64)"
        )
    return value


def _watch_rules(value: object, source: str) -> tuple[Watch, ...]:
    if not isinstance(value, list) or not value:
        raise DaemonFileError(f"{source}: watch: must list at least one rule")
    rules = []
    for index, item in enumerate(value):
        try:
            rules.append(_watch(WatchRule.model_validate(item)))
        except ValidationError as e:
            first = e.errors(include_url=False, include_input=False)[0]
            where = ".".join(str(part) for part in first["loc"])
            key = f"watch[{index}].{where}" if where else f"watch[{index}]"
            message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
            raise DaemonFileError(f"{source}: {key}: {message}") from None
    return tuple(rules)


def _watch(rule: WatchRule) -> Watch:
    return Watch(
        provider=rule.provider,
        kind=rule.kind,
        repo=rule.repo,
        branch=rule.branch,
        conclusion=rule.conclusion,
        label=rule.label,
        pattern=rule.pattern,
    )


def _text(value: object, key: str, source: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DaemonFileError(f"{source}: {key}: must be non-empty text")
    return value.strip()


def _optional_text(value: object, key: str, source: str) -> str | None:
    return None if value is None else _text(value, key, source)


def _names(value: object, key: str, source: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise DaemonFileError(f"{source}: {key}: must be a list of names")
    return tuple(value)


# -- matching -------------------------------------------------------------------------------


def _branch_matches(pattern: str, branch: str | None) -> bool:
    return branch is not None and fnmatchcase(branch, pattern)
