"""The task brief at task start: gathered once, rendered within the size bound, and stored as
one transcript item ``brief:<task_id>`` (kind ``brief``), which is never rebuilt once stored.

``load_context`` calls ``brief_item`` in the worker, never on the webhook path. A fetch that
fails is named in the brief by the adapters; a failure of the whole gathering leaves a brief
with what the stored Signal says. Either way the task starts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from runtime.brief import files
from runtime.brief.model import Download, Gathered, Origin, Section, Sender
from runtime.brief.port import Briefing
from runtime.brief.render import FileNote, render
from runtime.errors import KeelError
from runtime.executor import transcript as tx
from runtime.executor.context import ExecutorContext
from runtime.models.base import ImagePart
from runtime.store import signals, transcripts
from runtime.store.engine import Transaction
from runtime.store.records import MailboxMessage, Task
from runtime.threads import LocalThread
from runtime.workspace.setup import SetupReport

log = logging.getLogger(__name__)

KIND = "brief"
_LABELS = (
    "Requested by", "Came from", "Link", "Thread", "Repository", "Setup", "Issue",
    "Pull request", "Delegated by", "Task",
)
_ORDER = {label: index for index, label in enumerate(_LABELS)}
_CREATION_KEY = "signal:"


async def brief_item(
    task: Task, ctx: ExecutorContext, setup: SetupReport | None = None
) -> transcripts.NewItem | None:
    """The brief's transcript item, or None when it is stored already. ``setup`` is how the
    workspace was set up, named in the brief (with its output's tail when it failed)."""
    key = tx.brief_key(task.task_id)
    if await ctx.db.read(lambda s: _stored(s, task.task_id, key)):
        return None
    origin = await ctx.db.read(lambda s: origin_of(s, task))
    gathered = await gather(ctx.briefing, origin)
    ctx.faults.hit("brief:gathered")
    notes, shown = await _files(task, ctx, gathered.downloads)
    brief = with_setup(with_origin(gathered, origin, task), setup)
    payload: dict[str, Any] = {
        "type": "user_text",
        "text": render(brief, notes, ctx.briefing.settings.max_chars),
        "missing": list(brief.missing),
    }
    if shown:
        payload["images"] = [
            {"media_type": i.media_type, "data": i.data, "name": i.name} for i in shown.values()
        ]
    return transcripts.NewItem(key, "user", KIND, payload)


async def _files(
    task: Task, ctx: ExecutorContext, downloads: Sequence[Download]
) -> tuple[dict[str, FileNote], dict[str, ImagePart]]:
    """Downloaded files saved in the workspace; the images a model that reads images sees."""
    if not downloads:
        return {}, {}
    workspace = await _workspace(task, ctx)
    notes = await asyncio.to_thread(files.save, workspace, downloads)
    settings = ctx.briefing.settings
    shown = (
        files.images(downloads, max_images=settings.max_images, max_bytes=settings.max_image_bytes)
        if ctx.briefing.vision
        else {}
    )
    for file_id in shown:
        notes[file_id] = replace(notes.get(file_id, FileNote()), shown=True)
    return notes, shown


async def gather(briefing: Briefing, origin: Origin) -> Gathered:
    if briefing.source is None or origin.provider is None:
        return Gathered()
    limit = briefing.settings.gather_timeout_s
    try:
        async with asyncio.timeout(limit):
            return await briefing.source.gather(origin)
    except TimeoutError:
        return Gathered(missing=(f"the {origin.provider} context: took longer than {limit:g}s",))
    except Exception as e:  # boundary: gathering context never fails the task
        log.exception("gathering the brief of task %s failed", origin.task_id)
        return Gathered(missing=(f"the {origin.provider} context: {type(e).__name__}: {e}",))


def with_origin(gathered: Gathered, origin: Origin, task: Task) -> Gathered:
    """The adapters' facts over what the stored Signal says; the task's message as the
    request unless the adapters rendered it better."""
    facts = dict(_signal_facts(origin, task))
    facts.update(gathered.facts)
    if "Link" in facts:
        facts.pop("Thread", None)  # the link says where, in a form people can open
    ordered = sorted(facts.items(), key=lambda fact: _ORDER.get(fact[0], len(_ORDER)))
    return replace(gathered, facts=tuple(ordered), request=gathered.request or origin.text)


def with_setup(gathered: Gathered, setup: SetupReport | None) -> Gathered:
    if setup is None or setup.status == "none":
        return gathered
    line = setup.summary()
    if setup.refused:
        line += f"; network refused {', '.join(setup.refused)}"
    if setup.failed:
        line += " — FAILED: the environment may be incomplete; you may fix it"
    facts = sorted(
        (*gathered.facts, ("Setup", line)), key=lambda fact: _ORDER.get(fact[0], len(_ORDER))
    )
    sections = gathered.sections
    if setup.failed and setup.tail:
        sections = (*sections, Section("Setup output (its last lines)", setup.tail))
    return replace(gathered, facts=tuple(facts), sections=sections)


def _signal_facts(origin: Origin, task: Task) -> list[tuple[str, str]]:
    facts = []
    if origin.actor_name or origin.actor_id:
        facts.append(("Requested by", str(origin.actor_name or origin.actor_id)))
    if origin.provider is not None:
        kind = (origin.kind or "message").replace("_", " ")
        facts.append(("Came from", f"{origin.provider.capitalize()} {kind}"))
    elif isinstance(origin.thread, LocalThread):
        facts.append(("Came from", "the terminal (keel run)"))
    if origin.thread is not None:
        facts.append(("Thread", str(origin.thread)))
    if origin.repo is not None:
        facts.append(("Repository", origin.repo))
    if task.parent_id is not None:
        facts.append(("Delegated by", f"task {task.parent_id}"))
    facts.append(("Task", task.task_id))
    return facts


def origin_of(session: Transaction, task: Task) -> Origin:
    """The Signal that started ``task`` (its creation key names it), if one did; else the
    task's own local thread (the terminal), which no Signal comes from."""
    record = None
    key = task.child_key or ""
    if task.parent_id is None and key.startswith(_CREATION_KEY):
        record = signals.get_signal(session, key.removeprefix(_CREATION_KEY))
    if record is None:
        local = task.origin_thread_ref
        if not isinstance(local, LocalThread):
            return Origin(task.task_id, task.message, repo=task.repo)
        return Origin(
            task.task_id, task.message, thread=local, repo=task.repo, actor_name=task.requested_by
        )
    actor = record.actor
    return Origin(
        task_id=task.task_id,
        text=task.message,
        provider=record.provider,
        kind=record.kind,
        thread=record.thread_ref,
        message=record.message_ref,
        url=record.url,
        repo=task.repo,
        actor_id=actor.id if actor else None,
        actor_name=actor.name if actor else None,
    )


def _stored(session: Transaction, task_id: str, key: str) -> bool:
    return any(entry.item_key == key for entry in transcripts.transcript(session, task_id))


async def _workspace(task: Task, ctx: ExecutorContext) -> Path | None:
    try:
        return await ctx.workspace_for(task)
    except KeelError as e:
        log.warning("no workspace for the files of task %s: %s", task.task_id, e)
        return None


# -- follow-ups -----------------------------------------------------------------------------


async def senders(ctx: ExecutorContext, messages: Sequence[MailboxMessage]) -> dict[str, Sender]:
    """Each follow-up's author by display name, and its link where it has one."""
    return {m.message_id: await _sender(ctx, m) for m in messages}


async def _sender(ctx: ExecutorContext, message: MailboxMessage) -> Sender:
    part = message.sender
    if part is None:
        return Sender(message.author or "someone")
    known = Sender(part.name or message.author or "someone", part.url or None)
    source = ctx.briefing.source
    if source is None:
        return known
    try:
        async with asyncio.timeout(ctx.briefing.settings.request_timeout_s * 2):
            return await source.sender(part)
    except Exception:  # boundary: a name lookup never holds up the follow-up itself
        log.warning("could not resolve the sender of message %s", message.message_id)
        return known


async def follow_up_items(
    ctx: ExecutorContext, task: Task, messages: Sequence[MailboxMessage]
) -> list[transcripts.NewItem]:
    """Mailbox messages as the transcript's user items, rendered with the agent's template."""
    template = ctx.agent(task.agent).mailbox_template
    who = await senders(ctx, messages)
    return [
        transcripts.NewItem(
            tx.mailbox_key(message.message_id),
            "user",
            "mailbox",
            {
                "type": "user_text",
                "text": tx.render_mailbox(template, message, who[message.message_id]),
                "message_id": message.message_id,
                "seq": message.seq,
            },
        )
        for message in messages
    ]
