"""``keel tasks …`` and ``keel signals replay``: operating a running deployment."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any, NoReturn

import typer

from adapters.config import AppConfig
from adapters.emulators.webhooks import sign_github, sign_slack
from adapters.spend import spend_text, with_spend
from runtime.config import redact_url
from runtime.scheduler import Scheduler
from runtime.store import views
from runtime.store.engine import Database, missing_sqlite_file, resolve_url
from runtime.store.migrate import is_current
from runtime.store.records import TaskStatus

tasks_app = typer.Typer(help="Inspect and stop tasks.")
signals_app = typer.Typer(help="Inject saved provider payloads.")


# `keel tasks tail`: how the task ended, as the exit code (documented in its --help).
TAIL_EXIT_CODES = {
    TaskStatus.succeeded: 0,
    TaskStatus.failed: 1,
    TaskStatus.canceled: 3,
    TaskStatus.timed_out: 4,
}
TAIL_NO_SUCH_TASK = 5
DATABASE_UNUSABLE = 2  # like a configuration error: the URL or working directory is wrong
_HOW_TO_POINT = (
    "run keel from the data directory, pass --config app.yaml, or set KEEL_DATABASE_URL"
)


def _db(config: AppConfig) -> Database:
    """The deployment's existing database, or exit 2 naming it; never creates one."""
    url = resolve_url(config.database.url)
    missing = missing_sqlite_file(url)
    if missing is not None:
        _unusable(f"no database file at {missing.resolve()} ({redact_url(url)}); nothing created")
    db = Database.from_url(url, pool_size=1)
    try:
        current = is_current(db.engine)
    except Exception as e:  # the command's boundary: any failure here means unusable
        db.close()
        _unusable(f"cannot read the database {redact_url(url)} ({type(e).__name__})")
    if not current:
        db.close()
        schema = "has no current Keel schema (run keel db upgrade)"
        _unusable(f"the database {redact_url(url)} {schema}")
    return db


def _unusable(problem: str) -> NoReturn:
    typer.echo(f"error: {problem}; {_HOW_TO_POINT}", err=True)
    raise typer.Exit(DATABASE_UNUSABLE)


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def list_tasks(config: AppConfig, status: str | None, limit: int) -> None:
    try:
        wanted = TaskStatus(status) if status else None
    except ValueError:
        names = ", ".join(s.value for s in TaskStatus)
        raise typer.BadParameter(f"status must be one of {names}") from None
    db = _db(config)
    page = db.read_sync(lambda s: views.list_tasks(s, status=wanted, limit=limit))
    db.close()
    typer.echo(f"{'TASK':24} {'STATUS':10} {'CREATED':19}  MESSAGE")
    for task in page.tasks:
        first = task.message.splitlines()[0][:60] if task.message else ""
        typer.echo(f"{task.task_id:24} {task.status.value:10} {_when(task.created_at)}  {first}")
    if not page.tasks:
        typer.echo("(no tasks)")


def show_task(config: AppConfig, task_id: str) -> None:
    db = _db(config)
    found = db.read_sync(lambda s: with_spend(s, task_id))
    db.close()
    if found is None:
        typer.echo(f"no task {task_id}", err=True)
        raise typer.Exit(1)
    detail, spent = found
    task = detail.task
    typer.echo(f"task {task.task_id}  {task.status.value}  agent {task.agent}")
    typer.echo(f"  message: {task.message}")
    typer.echo(f"  model usage: {spend_text(spent.task)}")
    if len(detail.tree) > 1:
        typer.echo(f"  tree usage: {spend_text(spent.tree)}")
    if detail.execution:
        e = detail.execution
        typer.echo(f"  phase {e.phase}, turn {e.turn}, mailbox position {e.mailbox_position}")
    typer.echo("tree:")
    for node in detail.tree:
        typer.echo(f"  {'  ' * node.depth}{node.task_id} {node.status.value}")
    typer.echo("timeline:")
    for change in detail.timeline:
        typer.echo(f"  {_when(change.at)} {change.status.value}")
    typer.echo("tool calls:")
    for call in detail.tool_calls:
        late = f" ({call.late_reports} late)" if call.late_reports else ""
        typer.echo(
            f"  t{call.turn}.{call.idx} {call.name}: {call.outcome or call.dispatch_state}{late}"
        )
    typer.echo("mailbox:")
    for message in detail.mailbox:
        seen = _when(message.incorporated_at) if message.incorporated_at else "not yet"
        typer.echo(f"  #{message.seq} {message.text[:60]!r} incorporated {seen}")
    typer.echo("evidence:")
    for item in detail.evidence:
        typer.echo(f"  {item.kind} {item.ref} — {item.strength}")
    typer.echo("replies:")
    for post in detail.outbox:
        typer.echo(f"  {_post_line(post)}")


def _post_line(post: views.OutboxView) -> str:
    tries = f" after {post.attempts} attempts" if post.attempts > 1 else ""
    if post.state == "undelivered":
        return f"{post.purpose}: UNDELIVERED to {post.thread_ref}{tries}: {post.last_error}"
    where = post.landed_on or post.thread_ref
    retrying = f" (retrying: {post.last_error})" if post.last_error else ""
    return f"{post.purpose}: {post.state} {where}{tries}{retrying}"


def cancel_task(config: AppConfig, task_id: str) -> None:
    db = _db(config)
    scheduler = Scheduler(db)
    cancel = scheduler.request_cancel
    done = asyncio.run(scheduler.transact(cancel, task_id, "canceled from the CLI", "cli"))
    db.close()
    if not done:
        typer.echo(f"{task_id} is missing or already finished", err=True)
        raise typer.Exit(1)
    typer.echo(f"stop recorded for {task_id}; it stops at its next checkpoint")


def tail_task(config: AppConfig, task_id: str, interval_s: float = 1.0) -> None:
    """Follow until the task is terminal (and its reporting done), then exit with its code."""
    db = _db(config)
    last = ""
    try:
        while True:
            detail = db.read_sync(lambda s: views.task_detail(s, task_id))
            if detail is None:
                typer.echo(f"no task {task_id}", err=True)
                raise typer.Exit(TAIL_NO_SUCH_TASK)
            phase = detail.execution.phase if detail.execution else "-"
            settled = sum(1 for c in detail.tool_calls if c.outcome)
            total = len(detail.tool_calls)
            line = f"{detail.task.status.value} · phase {phase} · {settled}/{total} tools settled"
            if line != last:
                typer.echo(f"{time.strftime('%H:%M:%S')} {line}")
                last = line
            # A task ended by the scheduler alone (never claimed) has no phase to finish.
            if detail.task.status.is_terminal and phase in ("done", "-"):
                raise typer.Exit(TAIL_EXIT_CODES.get(detail.task.status, 1))
            time.sleep(interval_s)
    finally:
        db.close()


def replay(config: AppConfig, path: Path, url: str) -> None:
    """POST a saved payload to a running Keel, signed with the configured secret."""
    saved = json.loads(path.read_text())
    provider = saved.get("provider", "slack")
    payload = saved.get("payload", saved)
    if provider == "github":
        secret = config.github.webhook_secret
        if secret is None:
            raise typer.BadParameter("github.webhook_secret is not configured")
        event = str(saved.get("event", "issue_comment"))
        request = sign_github(
            event,
            payload,
            secret.get_secret_value(),
            delivery_id=saved.get("delivery_id") or str(uuid.uuid4()),
        )
        target = url.rstrip("/") + "/github/webhook"
    else:
        secret = config.slack.signing_secret
        if secret is None:
            raise typer.BadParameter("slack.signing_secret is not configured")
        request = sign_slack(payload, secret.get_secret_value())
        target = url.rstrip("/") + "/slack/events"
    import httpx

    response = httpx.post(target, content=request.body, headers=request.headers, timeout=10)
    typer.echo(f"{response.status_code} {response.text[:200]}")
    if response.status_code >= 400:
        raise typer.Exit(1)


__all__ = [
    "cancel_task",
    "list_tasks",
    "replay",
    "show_task",
    "signals_app",
    "tail_task",
    "tasks_app",
]
