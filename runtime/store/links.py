"""Pull requests linked to the objective of the task that opened them (``pull_links``).

The link is written in the transaction that settles the ``open_pull_request`` call with the
pull request's evidence, so it exists exactly when that evidence does; each later push to the
pull request's branch by a task of the same objective moves its head. Routing reads it: a
review, a comment or a check on the current head of a linked pull request belongs to the
objective, not to a new conversation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.orm import Session

from runtime.evidence import EvidenceItem
from runtime.store.inserts import insert_ignoring, parameters
from runtime.store.models import PullLinkRow, TaskRow
from runtime.store.prepared import Prepared

_COLUMNS = (
    "repo",
    "number",
    "objective_key",
    "task_id",
    "head_ref",
    "head_sha",
    "created_at",
    "updated_at",
)
_LINK_ONCE = insert_ignoring(PullLinkRow.__table__, _COLUMNS, ("repo", "number"))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class PullLink:
    repo: str
    number: int
    objective_key: str
    task_id: str
    head_ref: str
    head_sha: str


def record_evidence(
    session: Session, task_id: str, root_id: str, item: EvidenceItem, now: datetime
) -> None:
    """Link a pull request the evidence names, or move its head on a push to its branch."""
    if item.kind not in ("pull_request", "commit"):
        return
    objective = _objective_of(session, task_id, root_id)
    if objective is None:
        return
    detail = item.detail
    if item.kind == "pull_request" and detail.get("repo") and detail.get("number"):
        link_pull(
            session,
            PullLink(
                repo=str(detail["repo"]),
                number=int(detail["number"]),
                objective_key=objective,
                task_id=task_id,
                head_ref=str(detail.get("head_ref") or ""),
                head_sha=str(detail.get("head_sha") or ""),
            ),
            now,
        )
    elif item.kind == "commit" and detail.get("pushed") and detail.get("branch"):
        move_head(session, objective, str(detail["branch"]), str(detail["sha"]), now)


def link_pull(session: Session, link: PullLink, now: datetime) -> None:
    """The first task to open or find a pull request owns its link; the head is kept current."""
    values = {
        "repo": link.repo,
        "number": link.number,
        "objective_key": link.objective_key,
        "task_id": link.task_id,
        "head_ref": link.head_ref,
        "head_sha": link.head_sha,
        "created_at": now,
        "updated_at": now,
    }
    _LINK_ONCE.execute(session, parameters(values))
    if link.head_sha:
        session.execute(
            update(PullLinkRow)
            .where(PullLinkRow.repo == link.repo, PullLinkRow.number == link.number)
            .where(PullLinkRow.head_sha != link.head_sha)
            .values(head_sha=link.head_sha, updated_at=now)
        )


def move_head(session: Session, objective_key: str, branch: str, sha: str, now: datetime) -> None:
    session.execute(
        update(PullLinkRow)
        .where(PullLinkRow.objective_key == objective_key, PullLinkRow.head_ref == branch)
        .values(head_sha=sha, updated_at=now)
    )


_LINKS = cast(Table, PullLinkRow.__table__)
# Routing asks this of every delivery on an issue or pull request: compiled once.
_PULL_LINK = Prepared(
    select(
        _LINKS.c.repo, _LINKS.c.number, _LINKS.c.objective_key, _LINKS.c.task_id,
        _LINKS.c.head_ref, _LINKS.c.head_sha,
    ).where(_LINKS.c.repo == bindparam("b_repo"), _LINKS.c.number == bindparam("b_number"))
)


def pull_link(session: Session, repo: str, number: int) -> PullLink | None:
    session.flush()
    row = _PULL_LINK.first(session, {"b_repo": repo, "b_number": number})
    return None if row is None else PullLink(*row)


def link_of_head(session: Session, repo: str, sha: str) -> PullLink | None:
    """The linked pull request whose current head is ``sha``; an older head links nothing."""
    query = select(PullLinkRow).where(PullLinkRow.repo == repo, PullLinkRow.head_sha == sha)
    row = session.scalars(query.limit(1)).first()
    return None if row is None else _to_link(row)


def _objective_of(session: Session, task_id: str, root_id: str) -> str | None:
    """A delegated child works for its root's objective."""
    for candidate in (task_id, root_id):
        row = session.get(TaskRow, candidate)
        if row is not None and row.objective_key:
            return row.objective_key
    return None


def _to_link(row: PullLinkRow) -> PullLink:
    return PullLink(
        row.repo, row.number, row.objective_key, row.task_id, row.head_ref, row.head_sha
    )
