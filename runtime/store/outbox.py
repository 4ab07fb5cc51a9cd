"""Outbox SQL: every post to a thread is a row, sent at most once (reconciled by its key)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, TypeVar, cast

from sqlalchemy import Table, bindparam, exists, func, null, or_, select, update
from sqlalchemy.orm import Session

from runtime.store.inserts import insert_ignoring, parameters
from runtime.store.models import OutboxRow, UtcDateTime
from runtime.store.prepared import Prepared
from runtime.surfaces import Action
from runtime.threads import (
    BadThreadRef,
    Landed,
    SlackChannel,
    SlackThread,
    ThreadRef,
    parse_landed,
    parse_thread,
)

# Why a post was queued: what readers (the task page, the demo, tests) pick posts by.
PostPurpose = Literal[
    "ack", "approval", "budget", "ci_cap", "completion", "escalation", "model_outage",
    "pr_line", "progress", "refusal", "update",
]
PostAction = Literal["post", "react"]
# pending → sending → landed; a landed post whose text changed is stale until edited;
# undelivered when origin and fallback both refused it.
PostState = Literal["pending", "sending", "landed", "stale", "undelivered"]
_Ref = TypeVar("_Ref", ThreadRef, Landed)


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A stored reference that names no thread (written by hand, or by an older Keel). Its
    post is reported undelivered with ``reason`` when it is due, rather than the read
    failing and with it every other post of the outbox; ``str()`` is the stored text."""

    text: str
    reason: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class OutboxPost:
    outbox_id: int
    task_id: str
    purpose: PostPurpose
    surface: str
    thread_ref: ThreadRef | Unreadable
    key: str
    action: PostAction
    body: str
    actions: tuple[Action, ...]  # buttons shown with the post
    state: PostState
    attempts: int
    landed_on: Landed | Unreadable | None
    landed_at: datetime | None
    last_error: str | None
    created_at: datetime

    def deliver_by(self, deliver_for_s: float) -> datetime:
        """When retrying stops: ``deliver_for_s`` after the post was queued, or, for an edit,
        after its previous text landed. Both are stored, so the time holds across restarts."""
        since = self.landed_at if self.state == "stale" and self.landed_at else self.created_at
        return since + timedelta(seconds=deliver_for_s)


def _to_post(row: OutboxRow) -> OutboxPost:
    return _post(
        row.outbox_id, row.task_id, row.purpose, row.surface, row.thread_ref,
        row.idempotency_key, row.action, row.body, row.actions, row.state, row.attempts,
        row.landed_on, row.landed_at, row.last_error, row.created_at,
    )


def _post(
    outbox_id: int,
    task_id: str,
    purpose: str,
    surface: str,
    thread_ref: str,
    key: str,
    action: str,
    body: str,
    actions: Sequence[Mapping[str, object]] | None,
    state: str,
    attempts: int,
    landed_on: str | None,
    landed_at: datetime | None,
    last_error: str | None,
    created_at: datetime,
) -> OutboxPost:
    """A row's columns, read back. They hold only what enqueue_post and the marks below
    wrote, so the casts hold; a reference that does not parse is kept as ``Unreadable``."""
    return OutboxPost(
        outbox_id,
        task_id,
        cast(PostPurpose, purpose),
        surface,
        _read(parse_thread, thread_ref),
        key,
        cast(PostAction, action),
        body,
        tuple(Action.from_json(a) for a in actions or ()),
        cast(PostState, state),
        attempts,
        _read(parse_landed, landed_on) if landed_on else None,
        landed_at,
        last_error,
        created_at,
    )


def _read(parse: Callable[[str], _Ref], text: str) -> _Ref | Unreadable:
    try:
        return parse(text)
    except BadThreadRef as e:
        return Unreadable(text, str(e))


_ENQUEUE = insert_ignoring(
    cast(Table, OutboxRow.__table__),
    [
        "task_id", "purpose", "surface", "thread_ref", "idempotency_key", "action", "body",
        "actions", "state", "attempts", "next_attempt_at", "created_at",
    ],
    ["idempotency_key"],
)


def enqueue_post(
    session: Session,
    *,
    task_id: str,
    purpose: PostPurpose,
    thread: ThreadRef,
    key: str,
    action: PostAction,
    body: str,
    now: datetime,
    actions: Sequence[Action] = (),
) -> None:
    """Queue one post; the same idempotency key never queues twice."""
    values = dict(
        task_id=task_id,
        purpose=purpose,
        surface=thread.surface,
        thread_ref=str(thread),
        idempotency_key=key,
        action=action,
        body=body,
        actions=[a.to_json() for a in actions] or None,
        state="pending",
        attempts=0,
        next_attempt_at=now,
        created_at=now,
    )
    _ENQUEUE.execute(session, parameters(values))


def set_body(
    session: Session, key: str, body: str, actions: Sequence[Action] | None = None
) -> None:
    """New text (and buttons, unless None: keep them) for an existing post: a landed one
    becomes stale (to be edited in place)."""
    row = session.scalars(select(OutboxRow).where(OutboxRow.idempotency_key == key)).first()
    if row is None:
        return
    stored = [a.to_json() for a in actions] if actions is not None else row.actions
    if row.body == body and (stored or None) == (row.actions or None):
        return
    row.body = body
    row.actions = stored or None
    if row.state == "landed":
        row.state = "stale"


_OUTBOX = cast(Table, OutboxRow.__table__)
_POST_COLUMNS = [
    _OUTBOX.c[name]
    for name in (
        "id", "task_id", "purpose", "surface", "thread_ref", "idempotency_key", "action",
        "body", "actions", "state", "attempts", "landed_on", "landed_at", "last_error",
        "created_at",
    )
]
# Posts of one task land in its thread in the order they were queued: a message waits while
# an earlier one of the same task and thread is unsent or has an edit to make, so a retried
# progress message (or its last edit) never lands after the completion reply. Reactions
# neither wait nor hold others up. An edit that a later message waits for is made at once,
# not when the edit interval allows, so the message is not held up by the rate limit.
_EARLIER = _OUTBOX.alias("earlier")
_LATER = _OUTBOX.alias("later")
_WAITS = exists().where(
    _EARLIER.c.task_id == _OUTBOX.c.task_id,
    _EARLIER.c.thread_ref == _OUTBOX.c.thread_ref,
    _EARLIER.c.id < _OUTBOX.c.id,
    _EARLIER.c.action == "post",
    or_(
        _EARLIER.c.state == "pending",
        _EARLIER.c.state == "sending",
        _EARLIER.c.state == "stale",
    ),
)
_AWAITED = exists().where(
    _LATER.c.task_id == _OUTBOX.c.task_id,
    _LATER.c.thread_ref == _OUTBOX.c.thread_ref,
    _LATER.c.id > _OUTBOX.c.id,
    _LATER.c.action == "post",
    _LATER.c.state == "pending",
)
# The outbox asks this every round (and after every commit that queued a post).
_DUE = Prepared(
    select(*_POST_COLUMNS)
    .where(
        or_(
            _OUTBOX.c.state == "pending",  # no IN: an expanding list is not compiled once
            _OUTBOX.c.state == "sending",
            (_OUTBOX.c.state == "stale")
            & (
                (_OUTBOX.c.landed_at <= bindparam("b_edit_before", type_=UtcDateTime))
                | _AWAITED
            ),
        ),
        _OUTBOX.c.next_attempt_at <= bindparam("b_now", type_=UtcDateTime),
        or_(_OUTBOX.c.action != "post", ~_WAITS),
    )
    .order_by(_OUTBOX.c.id)
    .limit(bindparam("b_limit"))
)


def due_posts(
    session: Session, now: datetime, edit_interval_s: float, limit: int
) -> list[OutboxPost]:
    session.flush()
    edit_before = now - timedelta(seconds=edit_interval_s)
    found = _DUE.rows(session, {"b_edit_before": edit_before, "b_now": now, "b_limit": limit})
    return [_post(*row) for row in found]


def mark_sending(session: Session, outbox_id: int, attempts: int) -> None:
    """Before a post is sent: after a crash, a ``sending`` post is looked for before it is
    posted again."""
    _mark(session, outbox_id, {"state": "sending", "attempts": attempts})


def mark_retry(
    session: Session, outbox_id: int, at: datetime, error: str, *, attempts: int | None = None
) -> None:
    """Try again at ``at``; ``attempts`` when this try was not counted before sending."""
    values: dict[str, object] = {"next_attempt_at": at, "last_error": error}
    if attempts is not None:
        values["attempts"] = attempts
    _mark(session, outbox_id, values)


def mark_undelivered(session: Session, outbox_id: int, reason: str) -> None:
    _mark(session, outbox_id, {"state": "undelivered", "last_error": reason})


def _mark(session: Session, outbox_id: int, values: dict[str, object]) -> None:
    """One Core UPDATE (no read of the row first): the outbox marks every post it sends."""
    session.flush()
    session.execute(update(_OUTBOX).where(_OUTBOX.c.id == outbox_id).values(**values))
    _forget(session, outbox_id)


_BODY_OF = Prepared(
    select(_OUTBOX.c.body, _OUTBOX.c.actions).where(_OUTBOX.c.id == bindparam("b_id"))
)
_SET_LANDED = Prepared(
    update(_OUTBOX)
    .where(_OUTBOX.c.id == bindparam("b_id"))
    .values(
        state=bindparam("b_state"), landed_on=bindparam("b_on"),
        landed_at=bindparam("b_at", type_=UtcDateTime), last_error=null(),
    )
)


def landed(
    session: Session,
    outbox_id: int,
    *,
    body: str,
    actions: Sequence[Action],
    where: Landed,
    now: datetime,
) -> None:
    """The post arrived at ``where``: landed, or stale if a newer body (or buttons) came in
    while it was being sent. Core statements: the outbox runs this for every post."""
    session.flush()
    row = _BODY_OF.first(session, {"b_id": outbox_id})
    if row is None:
        return
    sent = [a.to_json() for a in actions] or None
    newer = row[0] != body or (row[1] or None) != sent
    _SET_LANDED.execute(
        session,
        {"b_id": outbox_id, "b_state": "stale" if newer else "landed", "b_on": str(where),
         "b_at": now},
    )
    _forget(session, outbox_id)


def _forget(session: Session, outbox_id: int) -> None:
    """A row this transaction loaded through the ORM is read again after a Core update."""
    loaded = session.identity_map.get(session.identity_key(OutboxRow, outbox_id))
    if loaded is not None:
        session.expire(loaded)


def posts_of_task(session: Session, task_id: str) -> list[OutboxPost]:
    query = select(OutboxRow).where(OutboxRow.task_id == task_id).order_by(OutboxRow.outbox_id)
    return [_to_post(r) for r in session.scalars(query)]


def count_undelivered(session: Session) -> int:
    """Posts the outbox gave up on (origin and fallback both refused them)."""
    query = select(func.count()).select_from(_OUTBOX).where(_OUTBOX.c.state == "undelivered")
    return int(session.scalar(query) or 0)


def fallback_thread_in(session: Session, task_id: str, channel: SlackChannel) -> SlackThread | None:
    """The thread an earlier post of the task started in the fallback ``channel``, if any."""
    query = (
        select(_OUTBOX.c.landed_on)
        .where(_OUTBOX.c.task_id == task_id, _OUTBOX.c.landed_on.like("fallback:slack:%"))
        .order_by(_OUTBOX.c.id)
    )
    for landed_on in session.scalars(query):
        try:
            message = parse_landed(landed_on).message
        except BadThreadRef:
            continue
        if isinstance(message, SlackThread) and channel.holds(message):
            return message.root
    return None
