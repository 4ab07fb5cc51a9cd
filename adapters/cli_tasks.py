"""``keel tasks …`` and ``keel signals replay``: operating a running deployment.

Tables are Rich's (columns sized to what they hold, clipped with an ellipsis rather than
wrapped); with ``--json`` each command prints what ``/api/tasks`` answers instead, through
the API's own models, so a script reads the same fields either way.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from adapters.config import AppConfig
from adapters.emulators.webhooks import sign_github, sign_slack
from adapters.spend import spend_text, with_spend
from adapters.terminal import printable, terminal_echo
from runtime.config import redact_url
from runtime.scheduler import Scheduler
from runtime.store import views
from runtime.store.engine import Database, missing_sqlite_file, resolve_url
from runtime.store.migrate import is_current
from runtime.store.records import TaskStatus

if TYPE_CHECKING:  # Rich is imported when a table is drawn, not by every keel command
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

tasks_app = typer.Typer(help="Inspect and stop tasks.")
JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print JSON (the fields of /api/tasks) for scripts.")
]
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


def _cell(text: str) -> Text:
    """Text others wrote, as a table cell: never read as Rich markup (``[link=…]``, ``[/x]``),
    and no terminal codes."""
    from rich.text import Text

    return Text(printable(text))


def _console() -> Console:
    from rich.console import Console

    # Not a terminal (a pipe, a test): no colour codes, and lines as long as the rows need
    # (Rich would otherwise fit them in 80 columns).
    wide = None if sys.stdout.isatty() else 10_000
    return Console(highlight=False, width=wide)


def _print(table: Table, console: Console | None = None) -> None:
    """Print ``table``; on a narrow terminal only its last column is cut (with an ellipsis),
    never an id or a status."""
    for column in table.columns[:-1]:
        column.min_width = max((len(str(cell)) for cell in column.cells), default=0)
    (console or _console()).print(table)


def _table(*columns: str) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in columns:
        table.add_column(column, no_wrap=True, overflow="ellipsis")
    return table


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False))


def list_tasks(config: AppConfig, status: str | None, limit: int, as_json: bool = False) -> None:
    try:
        wanted = TaskStatus(status) if status else None
    except ValueError:
        names = ", ".join(s.value for s in TaskStatus)
        raise typer.BadParameter(f"status must be one of {names}") from None
    db = _db(config)
    page = db.read_sync(lambda s: views.list_tasks(s, status=wanted, limit=limit))
    db.close()
    if as_json:
        from adapters.web.api import TaskPageOut

        _print_json(TaskPageOut.model_validate(page).model_dump(mode="json"))
        return
    if not page.tasks:
        typer.echo("(no tasks)")
        return
    table = _table("TASK", "STATUS", "CREATED", "MESSAGE")
    for task in page.tasks:
        first = task.message.splitlines()[0][:60] if task.message else ""
        table.add_row(task.task_id, task.status.value, _when(task.created_at), _cell(first))
    _print(table)


def show_task(config: AppConfig, task_id: str, as_json: bool = False) -> None:
    db = _db(config)
    found = db.read_sync(lambda s: with_spend(s, task_id))
    db.close()
    if found is None:
        typer.echo(f"no task {task_id}", err=True)
        raise typer.Exit(1)
    detail, spent = found
    if as_json:
        _print_json(_detail_json(detail, spent))
        return
    task = detail.task
    typer.echo(f"task {task.task_id}  {task.status.value}  agent {task.agent}")
    terminal_echo(f"  message: {task.message}")
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
    console = _console()
    sections: list[tuple[str, Table, int]] = []
    calls = _table("CALL", "TOOL", "OUTCOME", "LATE")
    for call in detail.tool_calls:
        late = str(call.late_reports) if call.late_reports else ""
        outcome = call.outcome or call.dispatch_state
        calls.add_row(f"t{call.turn}.{call.idx}", _cell(call.name), _cell(outcome), late)
    sections.append(("tool calls:", calls, len(detail.tool_calls)))
    mailbox = _table("#", "MESSAGE", "INCORPORATED")
    for message in detail.mailbox:
        seen = _when(message.incorporated_at) if message.incorporated_at else "not yet"
        mailbox.add_row(str(message.seq), _cell(repr(message.text[:60])), seen)
    sections.append(("mailbox:", mailbox, len(detail.mailbox)))
    evidence = _table("EVIDENCE", "REF", "STRENGTH")
    for item in detail.evidence:
        evidence.add_row(item.kind, _cell(item.ref), str(item.strength))
    sections.append(("evidence:", evidence, len(detail.evidence)))
    for title, table, rows in sections:
        typer.echo(title)
        if rows:
            _print(table, console)
    typer.echo("replies:")
    for post in detail.outbox:
        terminal_echo(f"  {_post_line(post)}")


def _detail_json(detail: views.TaskDetail, spent: Any) -> dict[str, Any]:
    """What ``GET /api/tasks/{id}`` answers for the task, built by the API's own models."""
    from adapters.web.api import ModelCallOut, TaskDetailOut, UsageOut

    out = TaskDetailOut.model_validate(detail).model_copy(
        update={
            "usage": UsageOut.model_validate(spent.task.to_json()),
            "tree_usage": UsageOut.model_validate(spent.tree.to_json()),
            "model_calls": [ModelCallOut.model_validate(c) for c in spent.calls],
        }
    )
    return out.model_dump(mode="json")


def _post_line(post: views.OutboxView) -> str:
    tries = f" after {post.attempts} attempts" if post.attempts > 1 else ""
    if post.state == "undelivered":
        return f"{post.purpose}: UNDELIVERED to {post.thread_ref}{tries}: {post.last_error}"
    where = post.landed_on or post.thread_ref
    retrying = f" (retrying: {post.last_error})" if post.last_error else ""
    return f"{post.purpose}: {post.state} {where}{tries}{retrying}"


def cancel_task(config: AppConfig, task_id: str, as_json: bool = False) -> None:
    db = _db(config)
    scheduler = Scheduler(db)
    cancel = scheduler.request_cancel
    done = asyncio.run(scheduler.transact(cancel, task_id, "canceled from the CLI", "cli"))
    task = asyncio.run(scheduler.get(task_id)) if as_json else None
    db.close()
    if as_json:
        _print_json(
            {
                "task_id": task_id,
                "stop_recorded": bool(done),
                "status": task.status.value if task else None,
            }
        )
    if not done:
        typer.echo(f"{task_id} is missing or already finished", err=True)
        raise typer.Exit(1)
    if not as_json:
        typer.echo(f"stop recorded for {task_id}; it stops at its next checkpoint")


def tail_task(
    config: AppConfig, task_id: str, interval_s: float = 1.0, as_json: bool = False
) -> None:
    """Follow until the task is terminal (and its reporting done), then exit with its code.

    Prints the task's status line whenever it changes and each transcript item as it is
    stored (the brief, the model's words, each tool call and its result, follow-ups); with
    ``as_json``, one JSON object per line instead: ``{"event": "status", …}``,
    ``{"event": "transcript", …}`` and, last, ``{"event": "end", "status", "exit_code"}``.
    """
    db = _db(config)
    last = ""
    shown = -1  # the highest transcript seq printed
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
                if as_json:
                    status = {"status": detail.task.status.value, "phase": phase}
                    _json_line({"event": "status", **status, "settled": settled, "calls": total})
                else:
                    typer.echo(f"{time.strftime('%H:%M:%S')} {line}")
                last = line
            for entry in detail.transcript:
                if entry.seq > shown:
                    shown = entry.seq
                    _show_entry(entry, as_json)
            # A task ended by the scheduler alone (never claimed) has no phase to finish.
            if detail.task.status.is_terminal and phase in ("done", "-"):
                code = TAIL_EXIT_CODES.get(detail.task.status, 1)
                if as_json:
                    _json_line(
                        {"event": "end", "status": detail.task.status.value, "exit_code": code}
                    )
                raise typer.Exit(code)
            time.sleep(interval_s)
    finally:
        db.close()


def _json_line(value: dict[str, Any]) -> None:
    typer.echo(json.dumps(value, ensure_ascii=False, default=str))


# How much of a transcript item `keel tasks tail` shows: its first lines, each clipped.
TAIL_LINES = 6
TAIL_WIDTH = 160


def _show_entry(entry: Any, as_json: bool) -> None:
    if as_json:
        _json_line(
            {
                "event": "transcript",
                "seq": entry.seq,
                "item_key": entry.item_key,
                "role": entry.role,
                "kind": entry.kind,
                "payload": entry.payload,
                "created_at": entry.created_at.isoformat(),
            }
        )
        return
    payload = entry.payload
    if entry.kind == "tool_call":
        args = json.dumps(payload.get("arguments", {}), ensure_ascii=False, default=str)
        head, text = f"→ {payload.get('name', '?')}", args
    elif entry.kind == "tool_result":
        head, text = f"← {payload.get('outcome') or 'result'}", str(payload.get("output", ""))
    elif entry.role == "assistant":
        head, text = "keel", str(payload.get("text", ""))
    else:
        head, text = f"[{entry.kind}]", str(payload.get("text", payload.get("output", "")))
    lines = text.strip().splitlines() or [""]
    clipped = [line[:TAIL_WIDTH] + ("…" if len(line) > TAIL_WIDTH else "") for line in lines]
    more = len(lines) - TAIL_LINES
    body = clipped[:TAIL_LINES] + ([f"… {more} more lines"] if more > 0 else [])
    terminal_echo(f"{_when(entry.created_at)[11:]} {head}: {body[0]}")
    for line in body[1:]:
        terminal_echo(f"    {line}")


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
    "JsonFlag",
    "cancel_task",
    "list_tasks",
    "replay",
    "show_task",
    "signals_app",
    "tail_task",
    "tasks_app",
]
