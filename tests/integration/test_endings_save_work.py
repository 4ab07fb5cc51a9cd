"""Every ending saves and hands on: a stop, the deadline, max_turns and a failure commit the
task's uncommitted change and push it to the task's branch of a real bare repository, once,
and the reply names the branch and commit; a worker killed between that commit and its push
leaves one commit, pushed, after recovery; and a Slack follow-up after completion starts from
its predecessor's branch and updates its pull request (one pull request in all)."""

from __future__ import annotations

import json
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.config import GitHubConfig
from adapters.emulators.github import create_github_app
from adapters.emulators.github_state import GitHubState
from adapters.emulators.server import serve
from adapters.github.client import GitHubClient
from adapters.github.tools import OpenPullRequest, fixed_repo
from runtime.executor.wip import COMMITTED_POINT
from runtime.scheduler import Scheduler
from runtime.store import executions, transcripts
from runtime.store.engine import Database
from runtime.store.records import Task, TaskStatus
from runtime.tools.base import Completed, ToolContext
from tests.factories import make_spec
from tests.harness import Stack, until
from tests.integration.keel_live import CHANNEL, SHOP, live_keel, until_ended
from tests.integration.keel_live import until as live_until
from tests.recovery.endings_main import NOTES, REPO, endings_stack, origin, script
from tests.recovery.restarts import spawn, until_done


def played(*turns: list[dict[str, Any]] | str) -> dict[str, Any]:
    """A script of ``turns``: each the tool calls of a turn, or the final answer."""
    steps = [{"say": t} if isinstance(t, str) else {"tool_calls": t} for t in turns]
    return {"scripts": [{"turns": steps}]}


def sleep(seconds: float) -> dict[str, Any]:
    """A wait the stop or the deadline finds running (a sleep cannot be cut short)."""
    return {"name": "sleep", "args": {"seconds": seconds}}


def git(bare: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=bare, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def saved_commits(bare: Path, branch: str) -> list[str]:
    """The bodies of the commits ``branch`` has over main."""
    log = git(bare, "log", "--format=%B%x00", f"main..{branch}")
    return [body.strip() for body in log.split("\0") if body.strip()]


async def schedule(stack: Stack, **overrides: Any) -> Task:
    spec = make_spec(repo=REPO, **overrides)
    return (await stack.scheduler.transact(stack.scheduler.schedule, spec)).task


async def wrote_notes(stack: Stack) -> bool:
    """Past the turn that wrote NOTES.md: the sleep that follows it has started."""
    return (stack.folder / "sleep-call_1_0").exists()


async def assert_saved_once(stack: Stack, task: Task, ending: str) -> None:
    """NOTES.md is on ``keel/<task>`` in one commit naming ``ending``; the reply says so."""
    bare = origin(stack.folder)
    branch = f"keel/{task.task_id}"
    assert git(bare, "show", f"{branch}:NOTES.md") == "half done"
    [body] = saved_commits(bare, branch)
    assert body.startswith("Work in progress:")
    assert f"Keel-Call: {ending}-{task.task_id}" in body
    sha = git(bare, "rev-parse", branch)
    final = await stack.scheduler.get(task.task_id)
    assert final is not None and final.result is not None
    assert final.result["saved"] == {"branch": branch, "commit": sha}
    [reply] = await stack.posts(task.task_id, "completion")
    assert f"`{branch}`" in reply.body and sha[:12] in reply.body
    # The account the agent's model gave, with no tools, of what was done.
    assert "What was done and what remains:\nSummary of the work so far" in reply.body


async def test_stop_saves_the_uncommitted_change_to_the_task_branch_once_when_requested(
    db_url: str, tmp_path: Path
) -> None:
    stack = endings_stack(db_url, tmp_path, played([NOTES], [sleep(2)], "done"))
    task = await schedule(stack)
    async with stack.working():
        await until(lambda: wrote_notes(stack))
        await stack.scheduler.transact(
            stack.scheduler.request_cancel, task.task_id, "stop from dana", None
        )
        final = await stack.ended(task.task_id)
    assert final.status is TaskStatus.canceled
    await assert_saved_once(stack, task, "stopped")


async def test_deadline_saves_the_uncommitted_change_and_the_reply_names_it_when_timed_out(
    db_url: str, tmp_path: Path
) -> None:
    stack = endings_stack(db_url, tmp_path, played([NOTES], [sleep(6)], "done"))
    task = await schedule(stack, deadline_at=stack.ctx.clock.now() + timedelta(seconds=3))
    async with stack.working():
        await until(lambda: wrote_notes(stack))
        final = await stack.ended(task.task_id)
    assert final.status is TaskStatus.timed_out
    await assert_saved_once(stack, task, "timed_out")


@pytest.mark.parametrize(
    ("model", "limits", "outcome", "ending"),
    [
        (script(10), {"max_turns": 3}, "limit:max_turns", "limit-max_turns"),
        # The script has no second turn: the model's next call fails for good.
        (played([NOTES]), {}, "error", "failed"),
    ],
    ids=["max_turns", "failure"],
)
async def test_limit_or_failure_saves_the_uncommitted_change_once_when_it_ends_the_task(
    db_url: str,
    tmp_path: Path,
    model: dict[str, Any],
    limits: dict[str, Any],
    outcome: str,
    ending: str,
) -> None:
    stack = endings_stack(db_url, tmp_path, model, **limits)
    task = await schedule(stack)
    final = await stack.run_until_terminal(task.task_id)
    assert final.status is TaskStatus.failed
    assert final.result is not None and final.result["outcome"] == outcome
    await assert_saved_once(stack, task, ending)


async def test_save_failure_is_told_in_the_reply_and_the_task_still_ends_when_push_is_refused(
    db_url: str, tmp_path: Path
) -> None:
    stack = endings_stack(db_url, tmp_path, script(10), max_turns=3)
    bare = origin(tmp_path)
    # The origin refuses every push: the save commits, cannot push, and says why.
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'pushes are closed today' >&2\nexit 1\n")
    hook.chmod(0o755)
    task = await schedule(stack)
    final = await stack.run_until_terminal(task.task_id)
    assert final.status is TaskStatus.failed and final.result is not None
    assert "saved" not in final.result
    assert "could not push it" in final.result["save_failed"]
    [reply] = await stack.posts(task.task_id, "completion")
    assert "could not push it" in reply.body and "pushes are closed today" in reply.body


@pytest.mark.parametrize("deleted", [False, True], ids=["kept", "deleted"])
async def test_successor_checks_out_the_saved_branch_or_main_when_the_branch_was_deleted(
    db_url: str, tmp_path: Path, deleted: bool
) -> None:
    stack = endings_stack(db_url, tmp_path, script(10), max_turns=3)
    first = await schedule(stack)
    await stack.run_until_terminal(first.task_id)
    if deleted:  # its pull request merged, and the branch went with it
        git(origin(tmp_path), "branch", "-D", f"keel/{first.task_id}")
    follow = await schedule(stack, message="and the docs", follows_task_id=first.task_id)
    ws = await stack.ctx.workspace_for(follow)
    assert ws is not None and (ws / "README.md").is_file()
    assert (ws / "NOTES.md").is_file() is not deleted


async def test_kill_between_the_wip_commit_and_its_push_leaves_one_commit_pushed_when_recovered(
    db_url: str, tmp_path: Path
) -> None:
    origin(tmp_path)
    db = Database.from_url(db_url)
    scheduler = Scheduler(db)
    spec = make_spec(repo=REPO, message="note it")
    task = (await scheduler.transact(scheduler.schedule, spec)).task
    killed = await until_done(
        db,
        task.task_id,
        lambda extra: spawn(
            "tests.recovery.endings_main", (db_url, str(tmp_path)), tmp_path, extra
        ),
        {"KEEL_FAULT": COMMITTED_POINT},
        folder=tmp_path,
    )
    final = await scheduler.get(task.task_id)
    db.close()
    assert killed, "the worker was never killed after the commit"
    assert final is not None and final.result is not None
    branch = f"keel/{task.task_id}"
    [body] = saved_commits(origin(tmp_path), branch)
    assert f"Keel-Call: limit-max_turns-{task.task_id}" in body
    assert final.result["saved"] == {
        "branch": branch, "commit": git(origin(tmp_path), "rev-parse", branch)
    }


# -- a follow-up after completion: the same branch and pull request -------------------------

BRANCH = "keel/notes"
PULL_ARGS: dict[str, Any] = {"branch": BRANCH, "base": "main", "title": "Notes"}
PULL = {"name": "open_pull_request", "args": PULL_ARGS}


def _turns(path: str, content: str) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"name": "write_file", "args": {"path": path, "content": content}}]},
        {"tool_calls": [{"name": "git_commit", "args": {"message": f"Add {path}"}}]},
        # Not forced: this lands only if the checkout began on the branch's last commit.
        {"tool_calls": [{"name": "git_push", "args": {"branch": BRANCH}}]},
        {"tool_calls": [PULL]},
        {"say": f"{path} is on {BRANCH}"},
    ]


def _follow_up_config(tmp_path: Path) -> dict[str, Any]:
    script = {"scripts": [
        {"match": "ALSO-DOCS", "turns": _turns("DOCS.md", "docs\n")},
        {"turns": _turns("NOTES.md", "notes\n")},
    ]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    return {
        "model": {"provider": "scripted", "script": str(tmp_path / "script.yaml")},
        "workspace": {"sandbox": "none"},
    }


async def test_follow_up_starts_from_the_branch_and_updates_its_pull_request_when_done_first(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    extra = _follow_up_config(tmp_path)
    with live_keel(tmp_path / "keel", db_url, workers=True, extra=extra) as live:
        root = await live.start_thread("write the notes")
        first = await live.thread_task(db, root)
        assert first is not None
        done = await until_ended(db, first.task_id, 60)
        assert done.status is TaskStatus.succeeded, done.result
        mention = f"<@{live.slack.bot_user_id}> ALSO-DOCS please"
        await live.send_slack(live.reply(root, mention))

        async def followed() -> bool:
            task = await live.thread_task(db, root)
            return task is not None and task.task_id != first.task_id

        await live_until(followed, 30, "the reply started no follow-up")
        second = await live.thread_task(db, root)
        assert second is not None and second.follows_task_id == first.task_id
        ended = await until_ended(db, second.task_id, 60)
        run = await db.read(lambda s: executions.load_run(s, second.task_id))
        entries = await db.read(lambda s: transcripts.transcript(s, second.task_id))
        pulls = list(live.github.repos[SHOP].pulls.values())
        posts = [m for m in live.slack.thread(CHANNEL, root) if m.bot_id]
    db.close()
    assert ended.status is TaskStatus.succeeded, ended.result
    assert run is not None and run.state.system is not None and BRANCH in run.state.system
    bare = tmp_path / "keel" / "origin" / f"{SHOP}.git"
    # Both files on the branch, one commit each, and one pull request whose head is the last.
    assert git(bare, "show", f"{BRANCH}:NOTES.md") == "notes"
    assert git(bare, "show", f"{BRANCH}:DOCS.md") == "docs"
    assert len(saved_commits(bare, BRANCH)) == 2
    [pull] = pulls
    assert pull.head_ref == BRANCH
    assert '"found_existing": true' in str([e.payload for e in entries])
    assert posts


async def test_open_pull_request_returns_the_open_one_when_a_closed_one_shares_its_branch() -> None:
    """A successor pushing to the handed-on branch and asking for its pull request gets the
    open one, not a newer closed one of the same head."""
    state = GitHubState()
    state.add_token("ghp_endings", "keel-bot")
    state.add_repo(SHOP)
    state.set_branch(SHOP, BRANCH, "1" * 40)
    with serve(create_github_app(state)) as server:
        client = GitHubClient.from_config(
            GitHubConfig(token="ghp_endings", api_url=server.url), timeout_s=5
        )
        tool = OpenPullRequest(client, fixed_repo(SHOP))
        args = dict(PULL_ARGS)
        numbers = []
        for call in ("first", "second"):
            opened = await tool.start(args, ToolContext("t-1", "t-1", call))
            assert isinstance(opened, Completed) and not opened.is_error, opened
            numbers.append(int(json.loads(opened.output)["number"]))
            state.repos[SHOP].pulls[numbers[-1]].state = "closed"
        older = min(numbers)
        state.repos[SHOP].pulls[older].state = "open"  # reopened: the newer stays closed
        found = await tool.start(args, ToolContext("t-2", "t-2", "third"))
    assert isinstance(found, Completed) and not found.is_error, found
    said = json.loads(found.output)
    assert (said["number"], said["found_existing"]) == (older, True)
    assert state.pulls_created(SHOP) == 2
