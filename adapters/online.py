"""``keel config check --online``: ask each enabled provider whether the credentials work.

GitHub App: the private key signs a JWT, GitHub answers who the App is (``GET /app``) and
exchanges the JWT for an installation token (the configured installation, or the first one
the App has). Token auth: ``GET /user``. Slack: ``auth.test`` with the bot token. Each line
says what was checked; a failure names the setting to fix and never prints a secret.

Models: each distinct model (the ``model`` section's and every agent's own) gets one tiny
request offering one tool, through the provider class the worker uses (no retries: a check
says what is true now). A model that answers without calling the tool fails: agents work only
through tool calls. For an OpenAI-compatible server that is Ollama, ``POST /api/show`` on the
base URL's host tells the context length it serves: its OpenAI endpoint cuts every request at
``num_ctx`` (a Modelfile parameter, else the server's default, often 2-8k tokens) whatever
``model.context_window`` says, silently, so a lower one is a warning.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from github import Auth, Github, GithubException, GithubIntegration
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from adapters.config import AppConfig, GitHubConfig, SlackConfig
from runtime.config import DEFAULT_BASE_URLS, ModelConfig, agent_model
from runtime.errors import KeelError
from runtime.models.base import ModelRequest, ToolSpec, UserText
from runtime.models.factory import build_provider


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    line: str


def online_checks(config: AppConfig, *, timeout_s: int = 15) -> list[Check]:
    checks: list[Check] = []
    if config.github.enabled:
        checks.append(_github(config.github, timeout_s))
    if config.slack.enabled and config.slack.bot_token is not None:
        checks.append(_slack(config.slack, timeout_s))
    checks.extend(model_checks(config, timeout_s))
    return checks


def _github(config: GitHubConfig, timeout_s: int) -> Check:
    try:
        if config.token is not None:
            github = Github(
                base_url=config.api_url.rstrip("/"),
                auth=Auth.Token(config.token.get_secret_value()),
                timeout=timeout_s,
                retry=None,
            )
            login = github.get_user().login
            return Check(True, f"github: token accepted, acting as {login}")
        app = config.app
        assert app.app_id is not None and app.private_key is not None
        integration = GithubIntegration(
            auth=Auth.AppAuth(app.app_id, app.private_key.get_secret_value()),
            base_url=config.api_url.rstrip("/"),
            timeout=timeout_s,
            retry=None,
        )
        identity = integration.get_app()
        installation = app.installation_id
        if installation is None:
            found: list[Any] = list(integration.get_installations()[:1])
            if not found:
                return Check(False, f"github: App {identity.slug} is not installed anywhere")
            installation = found[0].id
        integration.get_access_token(installation)
    except GithubException as e:
        what = "GITHUB_TOKEN" if config.token is not None else (
            "GITHUB_APP_ID / GITHUB_APP_PRIVATE_KEY / GITHUB_APP_INSTALLATION_ID"
        )
        return Check(False, f"github: refused ({e.status}); check {what}")
    except OSError as e:
        return Check(False, f"github: cannot reach {config.api_url}: {type(e).__name__}")
    return Check(
        True, f"github: App {identity.slug} (id {app.app_id}) issued a token for "
        f"installation {installation}"
    )


def _slack(config: SlackConfig, timeout_s: int) -> Check:
    assert config.bot_token is not None
    client = WebClient(
        token=config.bot_token.get_secret_value(), base_url=config.api_url, timeout=timeout_s
    )
    try:
        answer = client.auth_test()
    except SlackApiError as e:
        error = e.response.get("error")
        return Check(False, f"slack: auth.test refused ({error}); check SLACK_BOT_TOKEN")
    except OSError as e:
        return Check(False, f"slack: cannot reach {config.api_url}: {type(e).__name__}")
    return Check(True, f"slack: auth.test ok, team {answer.get('team')}, bot {answer.get('user')}")


PING = ToolSpec(
    "ping",
    "Confirms the connection. Call it once, with ok set to true.",
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
)
REQUEST = ModelRequest(
    task_id="config-check",
    turn=0,
    system="You are being checked for tool use. Call the ping tool; say nothing else.",
    items=(UserText("Call ping with ok: true."),),
    tools=(PING,),
    max_tokens=256,
)


def model_checks(config: AppConfig, timeout_s: float) -> list[Check]:
    return [
        check
        for label, model in _distinct_models(config)
        for check in asyncio.run(_check(label, model, timeout_s))
    ]


def _distinct_models(config: AppConfig) -> Iterator[tuple[str, ModelConfig]]:
    """Each model once, labelled by the settings that name it; scripted ones need no check."""
    seen: dict[tuple[str, str, str], list[str]] = {}
    models: dict[tuple[str, str, str], ModelConfig] = {}
    named = [("model", config.model)] + [
        (f"agents.{name}.model", agent_model(config.model, agent.model))
        for name, agent in config.agents.items()
        if agent.model is not None
    ]
    for label, model in named:
        if model.provider == "scripted":
            continue
        key: tuple[str, str, str] = (model.provider, model.base_url, model.model)
        seen.setdefault(key, []).append(label)
        models.setdefault(key, model)
    for key, labels in seen.items():
        yield ", ".join(labels), models[key]


async def _check(label: str, model: ModelConfig, timeout_s: float) -> list[Check]:
    what = f"{label}: {model.provider} {model.model}"
    key = model.api_key.get_secret_value() if model.api_key else None
    bound = {"max_tokens": 256} if model.provider == "anthropic" else {}
    try:
        provider = build_provider(
            model.provider,
            base_url=model.base_url,
            model=model.model,
            api_key=key,
            timeout_s=timeout_s,
            max_retries=0,
            **bound,
        )
        response = await provider.complete(REQUEST)
    except KeelError as e:
        return [Check(False, f"{what} did not answer: {e}")]
    if not any(call.name == PING.name for call in response.tool_calls):
        return [
            Check(
                False,
                f"{what} answered without calling the offered tool: agents need a model "
                "and server that make tool calls",
            )
        ]
    checks = [Check(True, f"{what} answers and makes tool calls")]
    if model.provider == "openai" and model.base_url != DEFAULT_BASE_URLS["openai"]:
        checks.extend(await _served_window(what, model, timeout_s))
    return checks


async def _served_window(what: str, model: ModelConfig, timeout_s: float) -> list[Check]:
    """What Ollama's ``/api/show`` says of the model's context length; nothing elsewhere."""
    parts = urlsplit(model.base_url)
    url = urlunsplit((parts.scheme, parts.netloc, "/api/show", "", ""))
    try:
        async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=False) as client:
            answer = await client.post(url, json={"model": model.model})
        payload = answer.json() if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return []  # not Ollama, or it does not say: nothing to report
    if not isinstance(payload, dict) or "model_info" not in payload:
        return []
    trained = _trained_length(payload.get("model_info"))
    num_ctx = _num_ctx(payload.get("parameters"))
    window = model.context_window
    own = f" (the model's own: {trained})" if trained else ""
    if num_ctx is None:
        return [
            Check(
                True,
                f"warning: {what}: Ollama sets no num_ctx for this model{own}, so its OpenAI "
                "endpoint cuts every request at the server's default context length "
                f"(OLLAMA_CONTEXT_LENGTH, often 2048-8192 tokens), not model.context_window "
                f"{window}; set num_ctx (a Modelfile PARAMETER) to at least {window}",
            )
        ]
    if num_ctx < window:
        return [
            Check(
                True,
                f"warning: {what}: Ollama serves it with num_ctx {num_ctx}{own}, below "
                f"model.context_window {window}: requests are cut at {num_ctx} tokens without "
                f"an error; lower context_window to {num_ctx} or raise num_ctx",
            )
        ]
    return [Check(True, f"{what}: Ollama serves it with num_ctx {num_ctx}{own}")]


def _trained_length(info: Any) -> int | None:
    if not isinstance(info, dict):
        return None
    found = [v for k, v in info.items() if k.endswith(".context_length") and isinstance(v, int)]
    return found[0] if found else None


def _num_ctx(parameters: Any) -> int | None:
    """``num_ctx`` from Ollama's parameters text (``"num_ctx 8192\\nstop ..."``)."""
    if not isinstance(parameters, str):
        return None
    for line in parameters.splitlines():
        name, _, value = line.strip().partition(" ")
        if name == "num_ctx" and value.strip().isdigit():
            return int(value.strip())
    return None
