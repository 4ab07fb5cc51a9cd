"""The composition root's parts: everything built from one AppConfig, and its lifecycle.

``adapters/web/app.py`` (``keel serve``) and ``adapters/cli.py`` (``keel worker``) both build a
``Keel`` from config; nothing here is built at import time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.briefing import build_briefing
from adapters.checkouts import Checkouts
from adapters.config import AppConfig
from adapters.github.catchup import CatchUp
from adapters.github.client import GitHubClient
from adapters.github.surface import GitHubSurface
from adapters.github.tools import github_tools
from adapters.logs import register_secrets
from adapters.review_rules import ReviewRules
from adapters.slack.connection import SlackConnection
from adapters.slack.surface import SlackSurface
from adapters.web.metrics import Metrics
from routing.daemons import daemon_agents, daemon_residency
from routing.held import HeldDeliveries
from routing.intake import Router
from routing.permissions import CachedPermissions
from routing.policy import RoutingPolicy
from routing.sink import RoutedSink
from runtime.brief.port import Briefing
from runtime.clock import Clock, SystemClock
from runtime.config import (
    REVIEW_AGENT,
    AgentConfig,
    ModelConfig,
    WorkspaceConfig,
    agent_model,
    review_agent,
)
from runtime.errors import Permanent
from runtime.executor.accounting import Accounting
from runtime.executor.context import ExecutorContext, ModelSetup
from runtime.executor.faults import FaultPlan
from runtime.executor.fitting import Window
from runtime.executor.runner import Runner
from runtime.models.base import ModelProvider, ModelRequest, ModelResponse
from runtime.models.factory import build_provider
from runtime.notifier import Notifier
from runtime.outbox import OutboxDispatcher
from runtime.reporting import ReportingPolicy, ThreadReporter
from runtime.scheduler import Scheduler
from runtime.store import owners
from runtime.store.engine import SQLITE_SUFFIXES, Database, resolve_url, sqlite_file
from runtime.store.migrate import upgrade
from runtime.store.records import Task
from runtime.surfaces import Surface
from runtime.tools.base import Tool
from runtime.tools.builtin import Delegate, PostUpdate, WaitForTask
from runtime.tools.devbox import devbox_tools
from runtime.worker import Worker, machine_identity
from runtime.workspace import Workspaces
from runtime.workspace.egress import Egress
from runtime.workspace.envcache import EnvCache
from runtime.workspace.paths import PathRefused, read_inside_text
from runtime.workspace.setup import Setups

if TYPE_CHECKING:
    from adapters.github.webhook import GitHubWebhook
    from runtime.store.listen import PgListener

log = logging.getLogger(__name__)


class RepoGuidance:
    """``AGENTS.md`` at the repository root, if present, becomes part of the task context."""

    def __init__(self, checkouts: Checkouts) -> None:
        self.checkouts = checkouts

    async def sections(self, task: Task) -> list[str]:
        workspace = await self.checkouts.workspace_for(task)
        if workspace is None:
            return []
        try:  # no-follow: a link to a host file (/proc/self/environ) is refused, not read
            guide = read_inside_text(workspace, "AGENTS.md", 20000)
        except (PathRefused, OSError):
            return []
        return ["Repository guidance (AGENTS.md):\n" + guide]


class NoModel:
    """No model configured: Keel still serves, and each task fails saying why."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise Permanent(
            "no model is configured: set model.script (KEEL_MODEL_SCRIPT) for the scripted "
            "provider, or model.provider: openai with OPENAI_BASE_URL and OPENAI_API_KEY"
        )


@dataclass
class Keel:
    """Everything ``keel serve`` and ``keel worker`` run, built from one AppConfig.

    Building does no I/O: ``migrate`` brings the schema up to date, ``connect`` asks the
    providers who we are, ``start``/``stop`` run and end the loops.
    """

    config: AppConfig
    clock: Clock = field(default_factory=SystemClock)
    provider: ModelProvider | None = None
    db: Database = field(init=False)
    scheduler: Scheduler = field(init=False)
    router: Router = field(init=False)
    surfaces: dict[str, Surface] = field(init=False, default_factory=dict)
    github: GitHubClient | None = field(init=False, default=None)
    github_webhook: GitHubWebhook | None = field(init=False, default=None)
    held: HeldDeliveries | None = field(init=False, default=None)
    github_catchup: CatchUp | None = field(init=False, default=None)
    slack: SlackConnection | None = field(init=False, default=None)
    workspaces: Workspaces = field(init=False)
    checkouts: Checkouts = field(init=False)
    worker: Worker = field(init=False)
    dispatcher: OutboxDispatcher = field(init=False)
    reporting: ReportingPolicy = field(init=False)
    sink: RoutedSink = field(init=False)
    briefing: Briefing = field(init=False)
    _tasks: list[asyncio.Task[Any]] = field(init=False, default_factory=list)
    _listener: PgListener | None = field(init=False, default=None)
    _stopping: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    metrics: Metrics = field(init=False, default_factory=Metrics)
    # One crash plan for the process, shared by intake and the executor, so the environment
    # is read once here rather than by each object that can be killed.
    faults: FaultPlan = field(init=False, default_factory=FaultPlan.from_env)
    machine: str = field(init=False)

    def __post_init__(self) -> None:
        cfg = self.config
        register_secrets(_secret_values(cfg))
        url = resolve_url(cfg.database.url)
        self.db = Database.from_url(
            url, pool_size=cfg.database.pool_size, echo=cfg.database.echo
        )
        notifier = Notifier()
        self.machine = cfg.worker.machine or machine_identity(cfg.workspace.root)
        self.scheduler = Scheduler(
            self.db, clock=self.clock, notifier=notifier, lease_seconds=cfg.worker.lease_seconds
        )
        self.workspaces = Workspaces(
            cfg.workspace.root,
            cfg.workspace.sandbox,
            readonly_paths=cfg.workspace.readonly_paths,
            hidden=[
                *_keel_files(cfg, url),
                cfg.workspace.cache_root.absolute(),
                cfg.workspace.snapshot_store.absolute(),
            ],
            snapshots=cfg.workspace.snapshot_store,
            latest_snapshot=self._latest_snapshot,
        )
        self.env_cache = env_cache(cfg.workspace)
        self.checkouts = Checkouts(
            self.workspaces,
            cfg.workspace.repositories,
            self.scheduler,
            allow=cfg.github.repositories,
            setups=Setups(self.workspaces.sandbox, self.env_cache),
        )
        self.reporting = ReportingPolicy(
            ack=cfg.reporting.ack,
            ack_emoji=cfg.reporting.ack_emoji,
            progress=cfg.reporting.progress,
            public_url=cfg.server.public_url,
        )
        self.router = Router(
            self.scheduler,
            self.db,
            self._policy(),
            self.clock,
            reporting=self.reporting,
            faults=self.faults,
        )
        self.sink = RoutedSink(self.router, self.metrics)
        if self.db.is_postgres:
            from runtime.store.listen import PgListener  # psycopg: PostgreSQL only

            self._listener = PgListener(url, notifier)

    def migrate(self) -> None:
        """Bring the schema up to date (``keel serve``/``keel worker`` start-up)."""
        upgrade(self.db.engine)

    def _policy(self) -> RoutingPolicy:
        cfg = self.config
        return RoutingPolicy.from_config(
            cfg.routing,
            cfg.daemons,
            slack_allowed_channels=cfg.slack.allowed_channels,
            slack_allowed_users=cfg.slack.allowed_users,
            github_min_permission=cfg.github.min_permission,
            github_allowed_bots=cfg.github.allowed_bots,
            github_bot_login=cfg.github.bot_login,
            github_app_id=cfg.github.app.app_id,
            agents=cfg.agents,
            reach=self.checkouts,
        )

    # -- surfaces, tools and the executor ------------------------------------------------

    async def connect(self) -> None:
        """Talk to the providers once at start: who we are on Slack; GitHub clients."""
        cfg = self.config
        if cfg.slack.enabled:
            self.slack = await SlackConnection.connect(
                cfg.slack, self.db, self.clock, self.sink, public_url=cfg.server.public_url
            )
            self.surfaces["slack"] = SlackSurface(
                self.slack.workspaces, allowed_mentions=cfg.slack.allowed_mentions
            )
        if cfg.github.enabled:
            self._connect_github()
        self.briefing = build_briefing(cfg, self.slack)
        self._build_executor()

    def _connect_github(self) -> None:
        """The GitHub client, surface and webhook; the permission lookup happens in
        routing's held stage, off the request path; the catch-up job asks for missed
        deliveries."""
        cfg = self.config.github
        self.github = github = GitHubClient.from_config(cfg)
        surface = GitHubSurface(github, allowed_mentions=cfg.allowed_mentions)
        self.surfaces["github"] = surface
        self.checkouts.host = github
        # The webhook's request/response types are Starlette's: a worker never imports them.
        from adapters.github.webhook import GitHubWebhook

        webhook = GitHubWebhook.from_config(
            cfg,
            self.sink,
            self.clock,
            installations=github.installations,
            auto_review=self.config.review.auto,
        )
        self.held = webhook.held = HeldDeliveries(
            self.db,
            self.sink,
            CachedPermissions(github),
            self.clock,
            webhook,
            surface=surface,
            min_permission=cfg.min_permission,
            unauthorised=cfg.unauthorised,
        )
        self.github_webhook = webhook
        if cfg.catch_up and github.installations is not None:
            self.github_catchup = CatchUp(
                self.db,
                github.installations,
                self.clock,
                interval_s=cfg.catch_up_interval_s,
                on_request=self.metrics.count_redelivery,
            )

    def _build_executor(self) -> None:
        cfg = self.config
        provider = self.provider or _provider_of(cfg.model)
        daemons = self.router.policy.daemons
        # Delegate reads this mapping at each call, so the daemons' agents join it once the
        # tool names they may deny are known.
        agents: dict[str, AgentConfig] = dict(cfg.agents)
        # Review requests run as this agent (routing/reviews.py): configured or derived.
        agents[REVIEW_AGENT] = review_agent(cfg.agents)
        tools, _ = self._agent_tools({})
        agents.update(daemon_agents(daemons, cfg.agents, tools))
        tools, agent_tools = self._agent_tools(agents)
        ctx = ExecutorContext(
            db=self.db,
            scheduler=self.scheduler,
            provider=provider,
            tools=tools,
            agent_tools=agent_tools,
            agents=agents,
            resident=daemon_residency(daemons, cfg.daemons.idle_lifetime_s),
            clock=self.clock,
            reporter=ThreadReporter(self.clock, self.reporting),
            context_sources=(RepoGuidance(self.checkouts), ReviewRules(self.checkouts)),
            briefing=self.briefing,
            workspace_for=self.checkouts.workspace_for,
            prepare_workspace=self.checkouts.prepare,
            observe_phase=self.metrics.observe_phase,
            window=_window_of(cfg.model),
            accounting=Accounting(cfg.model.model, cfg.model.prices),
            agent_models=self._agent_models(agents),
            observe_model_call=self.metrics.observe_model_call,
            outage_give_up_s=cfg.model.outage_give_up_s,
            faults=self.faults,
            machine=self.machine,
            snapshots=self.workspaces.snapshots,
            discard_workspace=self.checkouts.discard,
            secrets_of=self._secrets_of,
        )
        self.worker = Worker(
            self.scheduler,
            Runner(ctx),
            concurrency=cfg.worker.concurrency,
            poll_interval_s=cfg.worker.poll_interval_s,
            machine=self.machine,
        )
        fallback = cfg.reporting.fallback
        self.dispatcher = OutboxDispatcher(
            self.db,
            self.surfaces,
            self.clock,
            edit_interval_s=cfg.reporting.progress_min_interval_s,
            deliver_for_s=cfg.reporting.deliver_for_s,
            fallback=fallback.target if fallback else None,
            notifier=self.scheduler.notifier,
            on_failure=self.metrics.count_outbox_failure,
        )

    async def _secrets_of(self, task_id: str) -> list[str]:
        """Keel's own secrets and the task's repository's: none leaves in a snapshot."""
        own = [v for v in _secret_values(self.config) if v]
        return [*own, *await self.checkouts.secret_values(task_id)]

    async def _latest_snapshot(self, root_id: str) -> str | None:
        """The tree's latest snapshot, as its owner recorded it (``runtime.store.owners``)."""
        owner = await self.db.read(lambda s: owners.owner_of(s, root_id))
        return owner.snapshot.sha if owner is not None and owner.snapshot is not None else None

    def _agent_models(self, agents: Mapping[str, AgentConfig]) -> dict[str, ModelSetup]:
        """Each agent with a model of its own: its provider, window and prices."""
        found: dict[str, ModelSetup] = {}
        for name, agent in agents.items():
            if agent.model is not None:
                model = agent_model(self.config.model, agent.model)
                found[name] = ModelSetup(
                    _provider_of(model), _window_of(model), Accounting(model.model, model.prices)
                )
        return found

    def _agent_tools(
        self, agents: Mapping[str, AgentConfig]
    ) -> tuple[dict[str, Tool], dict[str, dict[str, Tool]]]:
        """Tools without any agent's grants, and each agent's own: network for its commands
        and pushes to protected branches only where that agent's settings allow them."""
        common: list[Tool] = [
            Delegate(self.scheduler, agents),
            WaitForTask(self.scheduler),
            PostUpdate(self.db, self.scheduler),
        ]
        if self.github is not None:
            common.extend(
                github_tools(
                    self.github,
                    self.checkouts.repo_full_name,
                    allowed_mentions=self.config.github.allowed_mentions,
                    allow_approve=self.config.review.allow_approve,
                    bot_login=self.config.github.bot_login,
                )
            )

        def built(agent: AgentConfig | None) -> dict[str, Tool]:
            sandbox = replace(
                self.workspaces.sandbox, egress=agent.egress() if agent else Egress("off")
            )
            devbox = devbox_tools(
                sandbox,
                allow_protected=agent.allow_protected_push if agent else False,
                credentials=self.checkouts,
                secrets=self.checkouts.agent_secrets,
                masked=self.checkouts.secret_values,
            )
            return {tool.name: tool for tool in (*devbox, *common)}

        by_agent = {name: built(agent) for name, agent in agents.items()}
        return built(None), by_agent

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self, *, workers: bool = True, intake: bool = True) -> None:
        """Run the loops; ``intake`` (``keel serve``, not ``keel worker``) adds the work that
        finishes what the webhooks received: the held deliveries' permission lookups (in the
        router's retry loop) and GitHub's catch-up."""
        self._stopping.clear()
        if self._listener is not None:
            self._listener.start()
        self._tasks.append(asyncio.create_task(self.dispatcher.run(self._stopping)))
        held = self.held if intake else None
        self._tasks.append(asyncio.create_task(self.router.run(self._stopping, held=held)))
        if intake and self.github_catchup is not None:
            self._tasks.append(asyncio.create_task(self.github_catchup.run(self._stopping)))
        if workers:
            if not intake and self.worker.concurrency == 1:
                self.db.run_on_loop()  # keel worker, one task at a time: see run_on_loop
            self._tasks.append(asyncio.create_task(self.worker.run()))

    async def stop(self) -> None:
        """Stop claiming, let each loop finish or hand on its phase, then close."""
        self._stopping.set()
        self.worker.stop()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._listener is not None:
            self._listener.stop()
        if self.slack is not None:
            await self.slack.close()
        if self.github is not None:
            await self.github.close()
        self.db.close()


def _provider_of(model: ModelConfig) -> ModelProvider:
    if model.provider == "scripted":
        if model.script is None:
            return NoModel()
        return build_provider("scripted", path=model.script)
    key = model.api_key.get_secret_value() if model.api_key else None
    # The Messages API requires a reply bound; chat completions get it per request.
    bound = {"max_tokens": model.max_output_tokens} if model.provider == "anthropic" else {}
    return build_provider(
        model.provider,
        base_url=model.base_url,
        model=model.model,
        api_key=key,
        timeout_s=model.timeout_s,
        **bound,
    )


def _window_of(model: ModelConfig) -> Window:
    return Window(
        context_window=model.context_window,
        reply_tokens=model.max_output_tokens,
        fit_ratio=model.fit_ratio,
    )


def _secret_values(cfg: AppConfig) -> list[str | None]:
    secrets = [
        cfg.slack.bot_token,
        cfg.slack.signing_secret,
        cfg.slack.app_token,
        cfg.slack.oauth.client_secret,
        cfg.slack.oauth.encryption_key,
        cfg.github.token,
        cfg.github.webhook_secret,
        cfg.github.app.private_key,
        cfg.model.api_key,
        *(agent.model.api_key for agent in cfg.agents.values() if agent.model is not None),
        cfg.server.admin_token,
        *(repo.token for repo in cfg.workspace.repositories.values()),
        *(
            secret.value
            for repo in cfg.workspace.repositories.values()
            for secret in repo.secrets.values()
        ),
    ]
    return [s.get_secret_value() if s is not None else None for s in secrets]


def env_cache(workspace: WorkspaceConfig) -> EnvCache | None:
    """The cached environments, or None when the cache is off."""
    cache = workspace.cache
    if not cache.enabled:
        return None
    return EnvCache(
        workspace.cache_root,
        max_bytes=cache.max_bytes,
        max_age_s=cache.max_age_s,
        restore=cache.restore,
    )


def _keel_files(cfg: AppConfig, database_url: str) -> list[Path]:
    """What repository code must never see: the configuration and the SQLite database."""
    files = [cfg.path] if cfg.path else []
    database = sqlite_file(database_url)
    if database is not None:
        files += [database.with_name(database.name + suffix) for suffix in SQLITE_SUFFIXES]
    return [f.absolute() for f in files]
