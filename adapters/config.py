"""The application configuration: the adapters' sections, ``AppConfig`` and ``load_config``.

``load_config`` reads app.yaml, substitutes ``${VAR}`` / ``${VAR:-default}`` from the
environment, validates the tree into frozen models and reports every problem as one
``ConfigError`` line naming the key by its dotted path. A value that comes out empty (an
unset variable, ``~``, ``""``) means "not set": the key takes its default, and a surface
whose secrets are not set is disabled rather than failing. ``describe`` says, without
printing any secret, what is enabled and why.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from adapters.checkouts import allowed, is_github_name
from routing.config import DaemonsConfig, RoutingConfig
from runtime.config import (
    Agents,
    ConfigSection,
    ContextConfig,
    DatabaseConfig,
    ModelConfig,
    Names,
    OptionalText,
    ReportingConfig,
    ReviewConfig,
    Secret,
    SourceOf,
    WorkerConfig,
    WorkspaceConfig,
    agent_model,
    default_agents,
    describe_agents,
    redact_url,
)
from runtime.errors import ConfigError
from runtime.threads import SlackChannel

Permission = Literal["read", "triage", "write", "maintain", "admin"]
_SLACK_USER = re.compile(r"^[UW][A-Z0-9]+$")
_GITHUB_HANDLE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")


class ServerConfig(ConfigSection):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    admin_token: Secret = None
    body_limit_bytes: int = Field(default=1024 * 1024, ge=1)
    # Where people reach Keel (replies link the task UI there); its host is, with loopback,
    # the only Host the API and UI answer to.
    public_url: OptionalText = None
    # /metrics without the admin token or a Host check, for a scraper that cannot send one.
    metrics_public: bool = False

    @field_validator("public_url")
    @classmethod
    def _absolute(cls, url: str | None) -> str | None:
        if url is not None and not _WEB_URL.match(url):
            raise ValueError("expected an absolute http(s) URL such as https://keel.example.com")
        return url

    @property
    def is_loopback(self) -> bool:
        """Bound to loopback only: with no admin token, the one case where the API and UI
        are open (a token, once set, is asked of everyone)."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def served_hosts(self) -> frozenset[str]:
        """The names (besides loopback) a browser may reach the API and UI by: the public
        URL's host, and the address Keel is bound to when it is one address. Any other Host
        is a page that rebound its own name to Keel's address (DNS rebinding)."""
        names = {urlsplit(self.public_url).hostname} if self.public_url else set()
        if self.host not in _EVERY_ADDRESS and not self.is_loopback:
            names.add(self.host.strip("[]").lower())
        return frozenset(name for name in names if name)

    def describe(self, source: SourceOf) -> str:
        where = f"server: {self.host}:{self.port}, body limit {self.body_limit_bytes} bytes"
        if self.metrics_public:
            where = f"{where}, /metrics public"
        hosts = ", ".join(sorted(self.served_hosts | {"loopback"}))
        if self.admin_token is not None:
            return f"{where}; API and UI require the admin token, Host {hosts}"
        if self.is_loopback:
            return f"{where}; API and UI open on loopback (no admin token), Host {hosts}"
        token = source("server.admin_token")
        return f"{where}; API and UI refuse every request ({token} not set, host is not loopback)"


_WEB_URL = re.compile(r"^https?://[^/?#\s]+", re.IGNORECASE)
# Bound to these, Keel has no one address of its own that a client would name.
_EVERY_ADDRESS = frozenset({"", "0.0.0.0", "::", "[::]"})


# What Keel asks a workspace for when it is installed through OAuth (see README).
SLACK_BOT_SCOPES = (
    "app_mentions:read",
    "channels:history",
    "groups:history",
    "im:history",
    "chat:write",
    "reactions:read",
    "reactions:write",
    "users:read",
    "channels:read",
    "groups:read",
    "im:read",
    "files:read",
)


class SlackOAuthConfig(ConfigSection):
    """Multi-workspace install: bolt's OAuth flow, installations kept encrypted in Keel's
    database. Off unless client_id, client_secret and encryption_key are all set."""

    client_id: OptionalText = None
    client_secret: Secret = None
    # A Fernet key (32 url-safe base64-encoded bytes) that seals the stored tokens.
    encryption_key: Secret = None
    scopes: Names = SLACK_BOT_SCOPES
    authorize_url: str = "https://slack.com/oauth/v2/authorize"
    # Where Slack sends the person back; default: server.public_url + /slack/oauth_redirect.
    redirect_uri: OptionalText = None
    # A rotating token is refreshed when it expires within this many minutes.
    token_rotation_minutes: int = Field(default=120, ge=1)

    @field_validator("encryption_key")
    @classmethod
    def _fernet_key(cls, key: SecretStr | None) -> SecretStr | None:
        if key is not None and not _is_fernet_key(key.get_secret_value()):
            raise ValueError(
                "not a Fernet key (32 url-safe base64-encoded bytes); make one with "
                'python -c "from cryptography.fernet import Fernet; '
                'print(Fernet.generate_key().decode())"'
            )
        return key

    def unset(self) -> tuple[str, ...]:
        return tuple(
            name
            for name in ("client_id", "client_secret", "encryption_key")
            if getattr(self, name) is None
        )

    @property
    def enabled(self) -> bool:
        return not self.unset()


def _is_fernet_key(key: str) -> bool:
    try:
        return len(base64.urlsafe_b64decode(key.encode())) == 32
    except (ValueError, binascii.Error):
        return False


class SlackConfig(ConfigSection):
    bot_token: Secret = None
    signing_secret: Secret = None
    # An app-level token (xapp-…) switches to Socket Mode: no public HTTP endpoint needed.
    app_token: Secret = None
    oauth: SlackOAuthConfig = Field(default_factory=SlackOAuthConfig)
    api_url: str = "https://slack.com/api/"
    allowed_channels: Names = ()
    allowed_users: Names = ()
    # User ids (U…/W…) whom Keel's posts, and its tools', may ping; everyone else is shown
    # as text. Channel-wide pings and user groups never go through.
    allowed_mentions: Names = ()

    @field_validator("allowed_mentions")
    @classmethod
    def _user_ids(cls, ids: tuple[str, ...]) -> tuple[str, ...]:
        wrong = [user for user in ids if not _SLACK_USER.match(user)]
        if wrong:
            raise ValueError(f"not Slack user ids (U… or W…): {', '.join(wrong)}")
        return ids

    @field_validator("api_url")
    @classmethod
    def _trailing_slash(cls, api_url: str) -> str:
        # slack_sdk joins method names onto base_url, so the slash is not optional.
        return api_url if api_url.endswith("/") else f"{api_url}/"

    @property
    def socket_mode(self) -> bool:
        return self.app_token is not None

    @property
    def multi_workspace(self) -> bool:
        return self.oauth.enabled

    @property
    def enabled(self) -> bool:
        """A way to post (a bot token or installations) and a way to receive events."""
        posts = self.bot_token is not None or self.multi_workspace
        return posts and (self.signing_secret is not None or self.socket_mode)

    def describe(self, source: SourceOf) -> str:
        if not self.enabled:
            return f"slack: disabled ({self._why_disabled(source)})"
        channels = ", ".join(self.allowed_channels) or "all"
        users = ", ".join(self.allowed_users) or "all"
        transport = "Socket Mode" if self.socket_mode else "HTTP events"
        tokens = "OAuth installations" if self.multi_workspace else "one bot token"
        return (
            f"slack: enabled ({transport}, {tokens}, api {redact_url(self.api_url)}, "
            f"channels {channels}, users {users})"
        )

    def _why_disabled(self, source: SourceOf) -> str:
        """Names what is missing; a bot token or OAuth, and a signing secret or app token."""
        missing = []
        if self.bot_token is None and not self.multi_workspace:
            missing.append(source("slack.bot_token"))
        if self.signing_secret is None and not self.socket_mode:
            missing.append(source("slack.signing_secret"))
        text = f"{', '.join(missing)} not set"
        oauth_unset = self.oauth.unset()
        if 0 < len(oauth_unset) < 3:
            lacking = ", ".join(source(f"slack.oauth.{name}") for name in oauth_unset)
            text += f"; OAuth is off: {lacking} not set"
        return text


class GitHubAppConfig(ConfigSection):
    app_id: int | None = None
    private_key: Secret = None
    installation_id: int | None = None

    @field_validator("private_key")
    @classmethod
    def _real_newlines(cls, key: SecretStr | None) -> SecretStr | None:
        # A PEM passed through an env var often arrives with literal "\n" sequences.
        if key is None:
            return key
        if "\n" not in key.get_secret_value():
            key = SecretStr(key.get_secret_value().replace("\\n", "\n"))
        _check_private_key(key.get_secret_value())
        return key

    def unset(self) -> tuple[str, ...]:
        # installation_id is optional: each webhook names its installation; when set, it
        # serves repositories no webhook has named yet.
        return tuple(name for name in ("app_id", "private_key") if getattr(self, name) is None)


def _check_private_key(pem: str) -> None:
    """Parse the App's key now, so a bad one fails ``keel config check``, not the first webhook."""
    # Imported here: a configuration without App auth never loads cryptography (idle RSS).
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        load_pem_private_key(pem.strip().encode(), password=None)
    except (ValueError, TypeError):
        # Never the key's text or the parser's message (it may quote it).
        raise ValueError(
            "not a valid unencrypted PEM private key (paste the .pem the App's settings page "
            "generated)"
        ) from None


class GitHubConfig(ConfigSection):
    token: Secret = None
    app: GitHubAppConfig = Field(default_factory=GitHubAppConfig)
    webhook_secret: Secret = None
    api_url: str = "https://api.github.com"
    bot_login: str = "keel-bot"
    trigger: str = Field(default="@keel", min_length=1)
    min_permission: Permission = "write"
    allowed_bots: Names = ()
    # Logins and org/team handles that what Keel and its tools write may @mention; every
    # other mention is defused (it reads the same and notifies nobody).
    allowed_mentions: Names = ()
    # Repositories Keel acts on, as owner/name patterns ("acme/*"); empty: every repository
    # the App (or token) reaches. Each is cloned on demand; workspace.repositories overrides.
    repositories: Names = ()
    # What someone below min_permission who asked gets: a short reply (once per person and
    # thread) or nothing.
    unauthorised: Literal["reply", "silent"] = "reply"
    # Labelling an issue with this label asks Keel to work on it (empty: labels do nothing).
    trigger_label: OptionalText = None
    # Ask GitHub to redeliver webhooks that failed while Keel was away (App auth only).
    catch_up: bool = True
    catch_up_interval_s: float = Field(default=300.0, gt=0)

    @field_validator("allowed_mentions")
    @classmethod
    def _handles(cls, handles: tuple[str, ...]) -> tuple[str, ...]:
        bare = tuple(handle.removeprefix("@") for handle in handles)
        wrong = [handle for handle in bare if not _GITHUB_HANDLE.match(handle)]
        if wrong:
            raise ValueError(f"not GitHub logins or org/team handles: {', '.join(wrong)}")
        return bare

    @model_validator(mode="after")
    def _one_auth(self) -> GitHubConfig:
        if self.token is not None and not self.app.unset():
            raise ValueError("both token and app are set; configure one way to authenticate")
        return self

    @property
    def auth(self) -> Literal["token", "app"] | None:
        if self.token is not None:
            return "token"
        return None if self.app.unset() else "app"

    @property
    def enabled(self) -> bool:
        return self.webhook_secret is not None and self.auth is not None

    def describe(self, source: SourceOf) -> str:
        if self.enabled:
            return (
                f"github: enabled ({self.auth} auth, api {redact_url(self.api_url)}, "
                f"bot {self.bot_login}, trigger {self.trigger!r}, "
                f"min permission {self.min_permission})"
            )
        return f"github: disabled ({'; '.join(self._why_disabled(source))})"

    def _why_disabled(self, source: SourceOf) -> list[str]:
        reasons = []
        if self.webhook_secret is None:
            reasons.append(f"{source('github.webhook_secret')} not set")
        if self.auth is None:
            app_unset = ", ".join(source(f"github.app.{name}") for name in self.app.unset())
            reasons.append(
                f"no credentials: {source('github.token')} not set, "
                f"and github.app lacks {app_unset}"
            )
        return reasons


class AppConfig(ConfigSection):
    """Every section of app.yaml. Built by ``load_config``; ``AppConfig()`` is all defaults."""

    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    slack: SlackConfig = Field(default_factory=SlackConfig)
    github: GitHubConfig = Field(default_factory=GitHubConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    agents: Agents = Field(default_factory=default_agents)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    daemons: DaemonsConfig = Field(default_factory=DaemonsConfig)
    review: ReviewConfig = Field(default_factory=ReviewConfig)
    workspace: WorkspaceConfig = Field(default_factory=WorkspaceConfig)
    reporting: ReportingConfig = Field(default_factory=ReportingConfig)
    worker: WorkerConfig = Field(default_factory=WorkerConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    # Which env var each dotted path was read from, so describe() can name it.
    _sources: dict[str, str] = PrivateAttr(default_factory=dict)
    _path: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _references_resolve(self) -> AppConfig:
        problems = [
            *_unknown_agents(self), *_unknown_repositories(self), *_channel_of_no_workspace(self),
            *_unenforceable_egress(self), *_unhonourable_models(self),
        ]
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def source_of(self, path: str) -> str:
        return self._sources.get(path, path)

    @property
    def path(self) -> Path | None:
        """The file this configuration was loaded from (None for built-in defaults)."""
        return self._path


def _unhonourable_models(config: AppConfig) -> list[str]:
    """An agent's own model that could not be called: the reason, per agent."""
    problems = []
    for name, agent in config.agents.items():
        try:
            agent_model(config.model, agent.model)
        except ValidationError as e:
            for detail in e.errors():
                where = "".join(f".{part}" for part in detail["loc"])
                reason = detail["msg"].removeprefix("Value error, ")
                problems.append(f"agents.{name}.model{where}: {reason}")
        except ValueError as e:
            problems.append(f"agents.{name}.model: {e}")
    return problems


def _unknown_agents(config: AppConfig) -> list[str]:
    """Every agent a request or a daemon can be routed to must be configured: otherwise it
    would run with settings nobody wrote."""
    known = ", ".join(config.agents)
    routing = config.routing
    request_agent = routing.request_agent(config.agents)
    if request_agent is None:
        return [
            f"routing.agent: not set, and no agent is named 'default' among {known}: "
            "name the agent requests run as"
        ]
    named = {
        "routing.agent": request_agent,
        **{f"routing.channel_agents.{ch}": agent for ch, agent in routing.channel_agents.items()},
        **{f"routing.repo_agents.{repo}": agent for repo, agent in routing.repo_agents.items()},
        **{
            f"daemons.roles[{index}].agent": daemon.agent
            for index, daemon in enumerate(config.daemons.roles)
        },
    }
    return [
        f"{path}: unknown agent {agent!r} (agents: {known})"
        for path, agent in named.items()
        if agent not in config.agents
    ]


def _unenforceable_egress(config: AppConfig) -> list[str]:
    """Without a sandbox a command has the host's network whatever the setting says: a
    narrower one written in the configuration would be a promise Keel does not keep (the
    defaults are covered by the warning every check prints for ``sandbox: none``)."""
    if config.workspace.sandbox != "none":
        return []
    written = [
        *((f"agents.{name}", a, a.egress().mode) for name, a in config.agents.items()),
        *(
            (f"workspace.repositories.{key}", repo, repo.network)
            for key, repo in config.workspace.repositories.items()
        ),
    ]
    narrowed = [
        f"{path}.network"
        for path, section, mode in written
        if mode != "on" and {"network", "allow"} & section.model_fields_set
    ]
    if not narrowed:
        return []
    return [
        f"workspace.sandbox is none, so commands have the host's network: {', '.join(narrowed)} "
        "cannot be enforced. Use the sandbox (auto or bwrap), or set network: on there"
    ]


def _channel_of_no_workspace(config: AppConfig) -> list[str]:
    """With OAuth installations there is no one workspace a bare fallback channel is in."""
    fallback = config.reporting.fallback
    target = fallback.target if fallback else None
    if not (isinstance(target, SlackChannel) and target.team is None):
        return []
    if not config.slack.multi_workspace:
        return []
    return [
        f"reporting.fallback.thread_ref: {target} is in no one workspace with Slack OAuth "
        f"installations; name it as slack:<team id>/{target.channel}"
    ]


def _unknown_repositories(config: AppConfig) -> list[str]:
    """A repository requests are routed to must be one Keel can check out: an entry of
    ``workspace.repositories``, or a GitHub ``owner/name`` that ``github.repositories`` admits,
    cloned on demand once GitHub is enabled (as ``Checkouts`` does)."""
    routing = config.routing
    named = {f"routing.channel_repos.{ch}": repo for ch, repo in routing.channel_repos.items()}
    if routing.default_repo is not None:
        named["routing.default_repo"] = routing.default_repo
    return [
        f"{path}: {why}" for path, repo in named.items() if (why := _why_unreachable(config, repo))
    ]


def _why_unreachable(config: AppConfig, repo: str) -> str | None:
    repos, github = config.workspace.repositories, config.github
    if repo in repos:
        return None
    unknown = f"unknown repository {repo!r} (workspace.repositories: {', '.join(repos) or 'none'})"
    if not is_github_name(repo):
        return f"{unknown}; name an entry there, or a GitHub owner/name"
    if not allowed(repo, github.repositories):
        return f"{unknown}, and github.repositories ({', '.join(github.repositories)}) excludes it"
    if not github.enabled:
        return f"{unknown}, and GitHub is disabled, so Keel cannot clone it"
    return None


def describe(config: AppConfig) -> list[str]:
    """One line per section saying what is enabled and why; never a secret value."""
    source = config.source_of
    return [
        config.database.describe(source),
        config.server.describe(source),
        config.slack.describe(source),
        config.github.describe(source),
        config.model.describe(source),
        f"{describe_agents(config.agents)}; {config.routing.describe_agents(config.agents)}",
        config.routing.describe(source),
        config.daemons.describe(source),
        config.workspace.describe(source),
        config.reporting.describe(source),
        config.worker.describe(source),
        config.context.describe(source),
    ]


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> AppConfig:
    """Read, substitute and validate app.yaml; every problem is a line of one ConfigError."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from e
    config = build_config(_parse_yaml(text, str(path)), env)
    config._path = Path(path).absolute()
    return config


def build_config(tree: object, env: Mapping[str, str] | None = None) -> AppConfig:
    """Validate an already-parsed configuration tree (what ``load_config`` does after YAML)."""
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):
        raise ConfigError("top level: expected a mapping of sections")
    resolution = _Resolution(os.environ if env is None else env)
    resolved = resolution.resolve(tree, ())
    assert isinstance(resolved, dict)
    _override_database_url(resolved, resolution)
    problems = _unknown_unset_keys(tree, resolution)
    try:
        config = AppConfig.model_validate(resolved)
    except ValidationError as e:
        # Not chained: a ValidationError's text quotes input values, and those may be secrets.
        found = [_problem(d, resolution.unset, resolution.sources) for d in _details(e)]
        problems = [*found, *(line for line in problems if line not in found)]
    if problems:
        raise ConfigError("\n".join(problems)) from None
    config._sources = resolution.sources
    return config


def _unknown_unset_keys(tree: dict[Any, Any], resolution: _Resolution) -> list[str]:
    """The unknown keys among those whose value came out empty.

    Such a key is left out of the tree that is validated (it takes its default), so a
    misspelt one, ``slack.signing_secert: ${SLACK_SIGNING_SECRET}`` with the variable unset,
    would pass unseen until the variable is set at deploy time. The tree is validated once
    more with every such key kept (as null), and only its unknown keys are reported: what
    the null does to a known key is no problem, since that key is left out for real.
    """
    if not resolution.emptied:
        return []
    kept = _Resolution(resolution.env, keep_empty=True).resolve(tree, ())
    assert isinstance(kept, dict)
    try:
        AppConfig.model_validate(kept)
    except ValidationError as e:
        return [
            _problem(d, resolution.unset, resolution.sources)
            for d in _details(e)
            if d["type"] == "extra_forbidden"
        ]
    return []


def _override_database_url(tree: dict[Any, Any], resolution: _Resolution) -> None:
    url = resolution.env.get("KEEL_DATABASE_URL")
    if not url:
        return
    database = tree.setdefault("database", {})
    if isinstance(database, dict):
        database["url"] = url
        resolution.sources["database.url"] = "KEEL_DATABASE_URL"


# --- ${VAR} substitution ---------------------------------------------------------------

_REFERENCE = re.compile(r"(\$?)\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_ABSENT = object()


@dataclass
class _Resolution:
    """One pass of substitution over the parsed tree, remembering which path read which var."""

    env: Mapping[str, str]
    # Keep a key whose value comes out empty, as None, instead of leaving it out.
    keep_empty: bool = False
    sources: dict[str, str] = field(default_factory=dict)
    unset: dict[str, str] = field(default_factory=dict)
    # How many keys were left out because their value came out empty.
    emptied: int = 0

    def resolve(self, node: object, loc: tuple[str | int, ...]) -> object:
        if isinstance(node, dict):
            items = ((key, self.resolve(value, (*loc, key))) for key, value in node.items())
            return dict(self._kept(items))
        if isinstance(node, list):
            values = (self.resolve(value, (*loc, i)) for i, value in enumerate(node))
            return [value for value in values if value is not _ABSENT]
        if node is None:
            return _ABSENT
        return self._substitute(node, dotted(loc)) if isinstance(node, str) else node

    def _kept(self, items: Iterable[tuple[Any, object]]) -> Iterator[tuple[Any, object]]:
        for key, value in items:
            if value is not _ABSENT:
                yield key, value
            elif self.keep_empty:
                yield key, None
            else:
                self.emptied += 1

    def _substitute(self, text: str, path: str) -> object:
        names = [m.group(2) for m in _REFERENCE.finditer(text) if not m.group(1)]
        value = _REFERENCE.sub(self._lookup, text)
        if names:
            self.sources.setdefault(path, names[0])
        if names and not value.strip():
            self.unset[path] = names[0]
            return _ABSENT
        return value

    def _lookup(self, match: re.Match[str]) -> str:
        escaped, name, default = match.groups()
        if escaped:  # "$${VAR}" is the literal text "${VAR}"
            return match.group(0)[1:]
        return self.env.get(name) or (default or "")


def dotted(loc: Sequence[str | int]) -> str:
    """``("daemons", "roles", 0, "id")`` → ``daemons.roles[0].id``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


# --- YAML and error text -------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a key repeated in one mapping instead of keeping the last."""


def _construct_unique_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node)
        if not isinstance(key, Hashable):
            continue  # construct_mapping below reports unhashable keys itself
        if key in seen:
            raise yaml.MarkedYAMLError(
                problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def _parse_yaml(text: str, origin: str) -> object:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        # Only the position and the problem: the parser's snippet would quote the file.
        mark = e.problem_mark
        where = f"{origin}:{mark.line + 1}:{mark.column + 1}" if mark else origin
        raise ConfigError(f"{where}: invalid YAML: {e.problem}") from None
    except yaml.YAMLError:
        raise ConfigError(f"{origin}: invalid YAML") from None


def _details(error: ValidationError) -> list[ErrorDetails]:
    return error.errors(include_url=False, include_context=False, include_input=False)


def _problem(
    detail: ErrorDetails, unset: Mapping[str, str], sources: Mapping[str, str] | None = None
) -> str:
    loc = detail["loc"]
    is_key = bool(loc) and loc[-1] == "[key]"
    path = dotted(loc[:-1] if is_key else loc)
    match detail["type"]:
        case "extra_forbidden":
            message = "unknown key"
        case "model_type" | "dict_type":
            message = "expected a mapping of keys"
        case "missing":
            message = f"required; {unset[path]} is not set" if path in unset else "required"
        case _:
            message = detail["msg"].removeprefix("Value error, ")
    if is_key:
        message = f"invalid name: {message}"
    if sources and path in sources and detail["type"] != "missing":
        message = f"{message} (from {sources[path]})"
    return f"{path}: {message}" if path else message
