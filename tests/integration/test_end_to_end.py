"""End to end over real HTTP: Slack mention → task → PR and CI → one evidence-backed reply.

The emulators, Keel's real app (ingress, routing, executor, outbox) and the scripted model
run on loopback, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

from adapters.demo.repo import branch_head
from adapters.demo.scenario import CHANNEL, REPO, run_demo
from runtime.store import executions, ledger, transcripts
from runtime.store.engine import Database


async def test_slack_mention_ends_in_one_reply_citing_pr_commit_and_ci(
    db_url: str, tmp_path: Path
) -> None:
    result = await run_demo(tmp_path, db_url=db_url, echo=lambda line: None, timeout_s=120)
    assert result.problems == []
    assert result.ok and result.task_id is not None
    slack, github = result.slack, result.github
    assert slack is not None and github is not None

    root = slack.thread(CHANNEL, slack.messages[0].ts)[0]
    said = [m for m in slack.thread(CHANNEL, root.ts) if not m.bot_id]
    reactions = [m.reactions for m in said]
    # The 👀 sits on each message Keel took (the mention, the follow-up), not on the report.
    assert reactions == [{}, {"eyes": [slack.bot_user_id]}, {"eyes": [slack.bot_user_id]}]
    bot = [m for m in slack.thread(CHANNEL, root.ts) if m.bot_id]
    assert len(bot) == 2  # one progress message and one completion reply
    progress, completion = bot
    assert progress.edited and progress.text.startswith("⏳")
    updates = [r for r in slack.requests if r.path.endswith("chat.update")]
    assert len(updates) >= 1
    text = completion.text
    assert "PR #1" in text and "read back from GitHub" in text
    assert "Commit " in text and "CI: 2/2 checks passed" in text and "verified" in text
    assert "exit 0, 2 passed" in text
    assert github.pulls_created(REPO) == 1

    # The follow-up reached the transcript once, before the model call that needed it.
    db = Database.from_url(db_url)
    entries = await db.read(lambda s: transcripts.transcript(s, str(result.task_id)))
    evidence = await db.read(lambda s: ledger.evidence_of_tree(s, str(result.task_id)))
    run = await db.read(lambda s: executions.load_run(s, str(result.task_id)))
    db.close()
    assert run is not None and "Run the tests with" in (run.state.system or "")  # AGENTS.md
    tests_run = [e.item.detail for e in evidence if e.item.kind == "test_run"]
    assert [(t["exit_code"], t["passed"], t["failed"]) for t in tests_run] == [(1, 1, 1), (0, 2, 0)]
    [commit] = [e.item for e in evidence if e.item.kind == "commit"]
    pushed = branch_head(tmp_path / "origin" / "acme" / "shop.git", "keel/fix-add")
    assert commit.detail["sha"] == pushed
    keys = [e.item_key for e in entries]
    # The brief is the first item: the report posted before Keel was asked, by name.
    assert keys[0] == f"brief:{result.task_id}" and entries[0].kind == "brief"
    assert "dana: CI on main is red since this morning" in entries[0].payload["text"]
    mailbox = [i for i, k in enumerate(keys) if k.startswith("mbx:")]
    assert len(mailbox) == 1
    assert mailbox[0] < keys.index("model:2:0")
    rendered = entries[mailbox[0]].payload["text"]
    assert rendered.startswith("<mailbox_update>\nFrom dana (https://") and "public API" in rendered


async def test_same_job_runs_end_to_end_over_socket_mode(db_url: str, tmp_path: Path) -> None:
    """`keel demo --socket-mode`: every event reaches Keel as a Socket Mode envelope."""
    result = await run_demo(
        tmp_path, db_url=db_url, echo=lambda line: None, timeout_s=120, socket_mode=True
    )
    assert result.problems == []
    slack = result.slack
    assert result.ok and slack is not None
    opened = [r for r in slack.requests if r.path.endswith("/apps.connections.open")]
    assert len(opened) >= 1  # Keel dialled out with its app-level token
    completion = [m for m in slack.bot_posts(CHANNEL) if m.text.startswith("✅")]
    assert len(completion) == 1 and "read back from GitHub" in completion[0].text
