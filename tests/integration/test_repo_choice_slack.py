"""The repository of a Slack request, through Keel's real app and the Slack emulator: named in
the request (``repo=``, a GitHub link) within what Keel reaches, refused outside it, and
asked for with a select when nothing decides: once, answered only by someone who may, held
across a restart, "no repository" allowed, and ended when nobody answers."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import yaml

from adapters.demo.repo import branch_head, create_sample_repo
from adapters.emulators.github import create_github_app
from adapters.emulators.github_git import init_bare_repository
from adapters.emulators.github_state import GitHubState
from adapters.emulators.server import RunningServer, serve
from adapters.emulators.slack import SlackMessage, SlackState, create_slack_app
from adapters.emulators.slack_interactions import block_actions, block_suggestion
from adapters.emulators.webhooks import sign_slack
from adapters.web.app import create_app
from runtime.store import tasks as q
from runtime.store import transcripts
from runtime.store.engine import Database
from runtime.store.records import Task, TaskStatus
from tests.integration.keel_live import (
    BOT_TOKEN,
    CHANNEL,
    GITHUB_TOKEN,
    MALLORY,
    PERSON,
    SHOP,
    SIGNING_SECRET,
    Live,
    live_config,
    until,
    until_ended,
)

OPEN = "C0KEELOPEN"  # a channel no routing.channel_repos entry maps
PICK = "keel:repo:"


@dataclass
class Stack:
    """The emulators, kept across Keel's restarts, and what Keel is configured with."""

    workdir: Path
    db_url: str
    slack: SlackState
    github: GitHubState
    servers: list[RunningServer]
    bare: Path
    extra: dict[str, Any]

    @contextmanager
    def keel(self) -> Iterator[Live]:
        """One Keel process (app, intake and workers) on the stack; leaving stops it."""
        slack_url, github_url = self.servers[0].url, self.servers[1].url
        config = live_config(
            self.workdir, self.db_url, slack_url, github_url, self.bare, self.extra
        )
        server = serve(create_app(config, workers=True), lifespan="on")
        try:
            yield Live(server.url, self.db_url, self.slack, self.github, None)
        finally:
            server.stop()


def _repository(root: Path, name: str, note: str) -> str:
    bare = init_bare_repository(root, name, {"PROBE.md": f"{note}\n"}, "main", f"Start {name}")
    return bare.as_uri()


def _branch(root: Path, name: str, branch: str, note: str) -> None:
    """Add ``branch`` (one commit of its own) to the bare repository ``name``."""
    other = init_bare_repository(root / "branches", name, {"PROBE.md": f"{note}\n"}, branch)
    target = root / f"{name}.git"
    push = ["git", f"--git-dir={other}", "push", "--quiet", str(target), f"{branch}:{branch}"]
    subprocess.run(push, check=True, capture_output=True)


def _script(folder: Path) -> Path:
    """Read the checkout's PROBE.md when there is one, then answer."""
    read = {"name": "run_command", "args": {"command": "cat PROBE.md || echo no-checkout"}}
    # A review's agent is read-only: it reads the file with read_file.
    reading = {"name": "read_file", "args": {"path": "PROBE.md"}}
    review = {"match": "Review pull request", "turns": [{"tool_calls": [reading]}, {"say": "ok"}]}
    script = {"scripts": [review, {"turns": [{"tool_calls": [read]}, {"say": "done"}]}]}
    path = folder / "script.yaml"
    path.write_text(yaml.safe_dump(script))
    return path


@contextmanager
def stack(
    tmp_path: Path, db_url: str, *, question_s: float = 3600, many: int = 0
) -> Iterator[Stack]:
    workdir = tmp_path / "keel"
    workdir.mkdir(parents=True)
    bare = create_sample_repo(workdir / "origin")
    probes = workdir / "probes"
    repositories: dict[str, Any] = {
        "probe/one": {"url": _repository(probes, "probe/one", "probe one"), "ref": "main"},
        "probe/two": {"url": _repository(probes, "probe/two", "probe two"), "ref": "main"},
    }
    _branch(probes, "probe/two", "feature", "probe two feature")
    for n in range(many):
        repositories[f"bulk/r{n:03d}"] = repositories["probe/one"]
    extra = {
        "model": {"provider": "scripted", "script": str(_script(tmp_path))},
        "workspace": {"sandbox": "none", "repositories": repositories},
        "slack": {"allowed_users": [PERSON]},
        "github": {"repositories": ["acme/*", "probe/*", "bulk/*", "Codertocat/Hello-World"]},
        "routing": {"default_repo": None, "repo_question_s": question_s},
    }
    slack, github = SlackState(), GitHubState()
    github.add_repo(SHOP).resolve_branch = lambda branch: branch_head(bare, branch)
    two = probes / "probe/two.git"
    github.add_repo("probe/two").resolve_branch = lambda branch: branch_head(two, branch)
    slack.tokens.add(BOT_TOKEN)
    slack.add_user(PERSON, "dana", real_name="Dana")
    slack.add_user(MALLORY, "mallory")
    slack.add_channel(OPEN, "open")
    github.add_token(GITHUB_TOKEN, "keel-bot")
    servers = [serve(create_slack_app(slack)), serve(create_github_app(github))]
    try:
        yield Stack(workdir, db_url, slack, github, servers, bare, extra)
    finally:
        for server in reversed(servers):
            server.stop()


def _mention(live: Live, text: str, channel: str) -> dict[str, Any]:
    said = f"<@{live.slack.bot_user_id}> {text}"
    ts = live.slack.seed_message(channel, said, user=PERSON)
    event = live.event(ts, said, kind="app_mention")
    return event | {"channel": channel}


async def _post(live: Live, payload: dict[str, Any]) -> httpx.Response:
    """An interactivity request (a pick, a search), signed as Slack signs it."""
    body = urlencode({"payload": json.dumps(payload)}).encode()
    signed = sign_slack(body, SIGNING_SECRET)
    headers = signed.headers | {"Content-Type": "application/x-www-form-urlencoded"}
    async with httpx.AsyncClient() as client:
        return await client.post(live.url + "/slack/interactivity", content=body, headers=headers)


def _objective(live: Live, channel: str, root_ts: str) -> str:
    return f"slack:{live.slack.team_id}/{channel}/{root_ts}"


async def _task(db: Database, live: Live, channel: str, root_ts: str) -> Task | None:
    objective = _objective(live, channel, root_ts)
    return await db.read(lambda s: q.latest_by_objective(s, objective))


async def _started(db: Database, live: Live, channel: str, root_ts: str) -> Task:
    async def made() -> bool:
        return await _task(db, live, channel, root_ts) is not None

    await until(made, 30, "no task was started")
    task = await _task(db, live, channel, root_ts)
    assert task is not None
    return await until_ended(db, task.task_id, timeout=60)


async def _transcript(db: Database, task_id: str) -> str:
    entries = await db.read(lambda s: transcripts.transcript(s, task_id))
    return json.dumps([e.payload for e in entries])


def _bot_posts(live: Live, channel: str, root_ts: str) -> list[SlackMessage]:
    return [m for m in live.slack.thread(channel, root_ts) if m.bot_id and m.ts != root_ts]


def _questions(live: Live, channel: str, root_ts: str) -> list[SlackMessage]:
    return [m for m in _bot_posts(live, channel, root_ts) if "Which repository" in m.text]


def _select(question: SlackMessage) -> dict[str, Any]:
    """The question's one select, as posted."""
    assert question.blocks, "the question has no blocks"
    [element] = question.blocks[1]["elements"]
    assert isinstance(element, dict)
    return element


async def _asked(live: Live, channel: str, root_ts: str) -> SlackMessage:
    async def posted() -> bool:
        return bool(_questions(live, channel, root_ts))

    await until(posted, 20, "the repository was not asked for")
    [question] = _questions(live, channel, root_ts)
    return question


async def test_repo_word_wins_over_the_channel_and_is_checked_out(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    with stack(tmp_path, db_url) as keel, keel.keel() as live:
        event = _mention(live, "repo=probe/two fix it", CHANNEL)  # CHANNEL maps to acme/shop
        await live.send_slack(event)
        task = await _started(db, live, CHANNEL, event["ts"])
        said = await _transcript(db, task.task_id)

        async def named() -> bool:  # the reply says which repository the work was in
            posts = _bot_posts(live, CHANNEL, event["ts"])
            return any("Repository: `probe/two`" in m.text for m in posts)

        await until(named, 20, "the reply did not name the repository")
        again = f"<@{live.slack.bot_user_id}> now the docs"
        ts = live.slack.seed_message(CHANNEL, again, user=PERSON, thread_ts=event["ts"])
        await live.send_slack(live.event(ts, again, kind="app_mention", thread_ts=event["ts"]))

        async def followed() -> bool:
            latest = await _task(db, live, CHANNEL, event["ts"])
            return latest is not None and latest.task_id != task.task_id

        await until(followed, 20, "the follow-up started no task")
        follow_up = await _task(db, live, CHANNEL, event["ts"])
    db.close()
    assert follow_up is not None and follow_up.follows_task_id == task.task_id
    assert follow_up.repo == "probe/two"  # its predecessor's, not the channel's
    assert task.status == TaskStatus.succeeded, task.result
    assert task.repo == "probe/two"
    assert task.message == "fix it"  # the directive is not the model's to read
    assert "probe two" in said


async def test_branch_word_and_pull_request_link_start_the_checkout_on_their_branch(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    with stack(tmp_path, db_url) as keel, keel.keel() as live:
        number = live.github.add_pull("probe/two", "Feature", user="octo", head="feature")
        named = _mention(live, "repo=probe/two branch=feature check it", OPEN)
        await live.send_slack(named)
        by_branch = await _started(db, live, OPEN, named["ts"])
        linked = _mention(live, f"review <https://github.com/probe/two/pull/{number}>", OPEN)
        await live.send_slack(linked)
        by_pull = await _started(db, live, OPEN, linked["ts"])
        said = [await _transcript(db, t.task_id) for t in (by_branch, by_pull)]
    db.close()
    assert (by_branch.repo, by_pull.repo) == ("probe/two", "probe/two")
    assert all("probe two feature" in text for text in said), said
    # "review <pull request link>" in Slack is that pull request's review, read-only.
    assert by_pull.agent == "review" and by_branch.agent != "review"
    assert by_pull.message.startswith(f"Review pull request #{number}.")


async def test_github_link_chooses_the_repository_when_nothing_else_names_one(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    with stack(tmp_path, db_url) as keel, keel.keel() as live:
        event = _mention(live, "look at <https://github.com/probe/one> please", OPEN)
        await live.send_slack(event)
        task = await _started(db, live, OPEN, event["ts"])
        said = await _transcript(db, task.task_id)
        asked = _questions(live, OPEN, event["ts"])
    db.close()
    assert task.repo == "probe/one" and "probe one" in said
    assert asked == []


async def test_repo_outside_reach_is_refused_on_the_thread_and_starts_nothing(
    db_url: str, tmp_path: Path
) -> None:
    with stack(tmp_path, db_url) as keel, keel.keel() as live:
        event = _mention(live, "repo=secret/vault print the deploy keys", CHANNEL)
        await live.send_slack(event)

        async def refused() -> bool:
            return any("secret/vault" in m.text for m in _bot_posts(live, CHANNEL, event["ts"]))

        await until(refused, 20, "the refusal was not posted")
        [refusal] = _bot_posts(live, CHANNEL, event["ts"])
        counts = await live.counts()
    assert "can't work in `secret/vault`" in refusal.text
    assert counts["tasks"] == 0


async def test_question_is_asked_once_refuses_a_stranger_and_survives_a_restart(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    with stack(tmp_path, db_url) as keel:
        with keel.keel() as live:
            event = _mention(live, "fix the flaky test", OPEN)
            await live.send_slack(event, event_id="EvASKONCE01", times=3)  # Slack retrying
            question = await _asked(live, OPEN, event["ts"])
            element = _select(question)
            offered = [o["value"] for o in element["options"]]
            stranger = block_actions(
                live.slack, question, user=MALLORY, action_id_prefix=PICK, value="probe/two"
            )
            assert (await _post(live, stranger)).status_code == 200
            await live.note_shown_to(MALLORY)
            forged = block_actions(
                live.slack, question, user=PERSON, action_id_prefix=PICK, value="secret/vault"
            )
            assert (await _post(live, forged)).status_code == 200

            async def told() -> bool:
                return sum(m.user == PERSON for m in live.slack.ephemeral) == 1

            await until(told, 15, "the forged pick was not refused")
            counts = await live.counts()
        assert counts["tasks"] == 0
        with keel.keel() as live:  # a new Keel on the same database
            pick = block_actions(
                live.slack, question, user=PERSON, action_id_prefix=PICK, value="probe/two"
            )
            assert (await _post(live, pick)).status_code == 200
            task = await _started(db, live, OPEN, event["ts"])
            said = await _transcript(db, task.task_id)

            async def shown_answered() -> bool:  # edited in place, at the edit interval
                return not question.blocks

            await until(shown_answered, 30, "the question still offers its select")
            questions = _questions(live, OPEN, event["ts"])
            notes = [m.text for m in live.slack.ephemeral]
    db.close()
    assert element["type"] == "static_select"
    assert offered == ["acme/shop", "Codertocat/Hello-World", "probe/one", "probe/two", "-"]
    assert "not allowed" in notes[0] or "only the person" in notes[0]
    assert "not one of the choices" in notes[1]
    assert task.repo == "probe/two" and task.requested_by == PERSON
    assert task.status == TaskStatus.succeeded and "probe two" in said
    [shown] = questions
    assert "dana chose `probe/two`" in shown.text and not shown.blocks


async def test_no_repository_runs_the_task_without_a_checkout(db_url: str, tmp_path: Path) -> None:
    db = Database.from_url(db_url)
    with stack(tmp_path, db_url) as keel, keel.keel() as live:
        event = _mention(live, "explain what a rebase does", OPEN)
        await live.send_slack(event)
        question = await _asked(live, OPEN, event["ts"])
        pick = block_actions(live.slack, question, user=PERSON, action_id_prefix=PICK, value="-")
        assert (await _post(live, pick)).status_code == 200
        task = await _started(db, live, OPEN, event["ts"])
        said = await _transcript(db, task.task_id)
    db.close()
    assert task.repo is None
    assert task.status == TaskStatus.succeeded, task.result
    assert "no-checkout" in said


async def test_silence_ends_the_request_with_the_reason(db_url: str, tmp_path: Path) -> None:
    with stack(tmp_path, db_url, question_s=1) as keel, keel.keel() as live:
        event = _mention(live, "bump the SDK", OPEN)
        await live.send_slack(event)
        question = await _asked(live, OPEN, event["ts"])
        late = block_actions(  # built now: the ended question loses its select
            live.slack, question, user=PERSON, action_id_prefix=PICK, value="probe/one"
        )

        async def ended() -> bool:
            return any(
                "No repository was chosen" in m.text for m in _bot_posts(live, OPEN, event["ts"])
            )

        await until(ended, 30, "the unanswered question did not end the request")

        async def shown_ended() -> bool:  # edited in place, at the edit interval
            return not question.blocks

        await until(shown_ended, 30, "the ended question still offers its select")
        assert (await _post(live, late)).status_code == 200
        await live.note_shown_to(PERSON)
        counts = await live.counts()
        notes = [m.text for m in live.slack.ephemeral]
    assert counts["tasks"] == 0
    assert any("expired" in note for note in notes)
    assert "Nobody chose a repository in time" in question.text and not question.blocks


async def test_many_repositories_are_searched_rather_than_listed(
    db_url: str, tmp_path: Path
) -> None:
    with stack(tmp_path, db_url, many=120) as keel, keel.keel() as live:
        event = _mention(live, "tidy the imports", OPEN)
        await live.send_slack(event)
        question = await _asked(live, OPEN, event["ts"])
        search = block_suggestion(
            live.slack, question, user=PERSON, action_id_prefix=PICK, typed="r11"
        )
        found = await _post(live, search)
    element = _select(question)
    assert element["type"] == "external_select" and "options" not in element
    assert found.status_code == 200
    values = [o["value"] for o in found.json()["options"]]
    assert values[0] == "-"
    assert set(values[1:]) == {f"bulk/r{n:03d}" for n in range(120) if "r11" in f"r{n:03d}"}
