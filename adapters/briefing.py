"""The sources of a task brief, composed: a Slack thread (with the GitHub issues and pull
requests it links to), or a GitHub issue or pull request; nothing for a local thread (the
terminal), which no provider has. Implements the runtime's
``BriefSource`` port; the composition root builds it from config.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, assert_never
from urllib.parse import urlsplit

from adapters.config import AppConfig
from adapters.github.client import GitHubClient
from adapters.github.context import GitHubContext
from adapters.slack.context import SlackReaders
from runtime.brief.model import Gathered, Origin, Sender
from runtime.brief.port import Briefing
from runtime.store.records import SenderPart
from runtime.threads import GitHubCommit, GitHubIssue, LocalThread, SlackThread, parse_thread

if TYPE_CHECKING:
    from adapters.slack.connection import SlackConnection

_LINK = re.compile(
    r"https?://(?P<host>[^/\s]+)/(?P<repo>[\w.-]+/[\w.-]+)/(?:issues|pull)/(?P<number>\d+)"
)


def github_web_hosts(api_url: str) -> frozenset[str]:
    """Hosts whose issue and pull request links are GitHub's: github.com, or a GitHub
    Enterprise (or emulator) host the API is reached at."""
    host = urlsplit(api_url).netloc
    return frozenset({"github.com"} | ({host} if host != "api.github.com" else set()))


def github_links(texts: Iterable[str], hosts: frozenset[str]) -> list[tuple[str, int]]:
    found = (
        (match["repo"], int(match["number"]))
        for text in texts
        for match in _LINK.finditer(text)
        if match["host"] in hosts
    )
    return list(dict.fromkeys(found))


class ThreadContext:
    def __init__(
        self,
        slack: SlackReaders | None,
        github: GitHubContext | None,
        *,
        github_hosts: frozenset[str] = frozenset({"github.com"}),
        refs: Mapping[str, str] | None = None,
    ) -> None:
        self.slack = slack
        self.github = github
        self.github_hosts = github_hosts
        self.refs = dict(refs or {})  # repository key -> configured ref, when GitHub is off

    async def gather(self, origin: Origin) -> Gathered:
        match origin.thread:
            case SlackThread() as thread:
                return await self._slack(origin, thread)
            case GitHubIssue() as issue:
                if self.github is None:
                    return Gathered(missing=("the GitHub context: GitHub is not connected",))
                return await self.github.gather(origin, issue)
            case GitHubCommit(repo=repo, sha=sha):
                # A CI result: the event text says what there is to say.
                return Gathered(facts=(("Came from", f"GitHub, checks on {repo}@{sha[:12]}"),))
            case None | LocalThread():
                return Gathered()  # nothing to fetch: the stored task says what there is
            case _:
                assert_never(origin.thread)

    async def sender(self, part: SenderPart) -> Sender:
        message = parse_thread(part.message) if part.message else None
        if part.provider == "slack" and isinstance(message, SlackThread) and self.slack:
            reader = await self.slack.for_team(message.team)
            if reader is not None:
                return await reader.sender(part)
        if self.github is not None:
            return await self.github.sender(part)
        return Sender(part.name or part.sender_id or "someone")

    async def _slack(self, origin: Origin, thread: SlackThread) -> Gathered:
        reader = await self.slack.for_team(thread.team) if self.slack is not None else None
        if reader is None:
            return Gathered(missing=("the Slack thread: Slack is not connected here",))
        found = await reader.gather(origin, thread)
        missing = list(found.missing)
        facts = list(found.facts)
        if origin.repo:
            facts.append(("Repository", await self._repository(origin.repo, missing)))
        sections = list(found.sections)
        texts = [found.request, *(p.text for s in found.sections for p in s.posts)]
        links = github_links(texts, self.github_hosts)
        if links and self.github is not None:
            linked, gaps = await self.github.summaries(links)
            sections += [linked] if linked else []
            missing += gaps
        return replace(
            found, facts=tuple(facts), sections=tuple(sections), missing=tuple(missing)
        )

    async def _repository(self, repo: str, missing: list[str]) -> str:
        if self.github is not None and "/" in repo:
            return await self.github.repository(repo, missing)
        ref = self.refs.get(repo)
        return f"{repo} (checked out at {ref})" if ref else repo


def build_briefing(config: AppConfig, slack: SlackConnection | None) -> Briefing:
    """What the worker fetches for a task's brief, on clients of its own (shorter timeouts
    than the posting clients, so a slow thread cannot hold a worker long)."""
    settings = config.context
    timeout = max(1, round(settings.request_timeout_s))
    readers = None
    if slack is not None:
        readers = SlackReaders(slack.workspaces, slack.sessions, config.slack.api_url, settings)
    github = None
    if config.github.enabled:
        reader = GitHubClient.from_config(config.github, timeout_s=timeout)
        github = GitHubContext(reader, settings)
    source = ThreadContext(
        readers,
        github,
        github_hosts=github_web_hosts(config.github.api_url),
        refs={key: repo.ref for key, repo in config.workspace.repositories.items()},
    )
    return Briefing(source=source, settings=settings, vision=config.model.vision)
