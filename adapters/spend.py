"""What a task's model calls spent, as the task page and ``keel tasks show`` print it (no web
framework here: the CLI imports it too)."""

from __future__ import annotations

from runtime.store import views
from runtime.store.engine import Transaction
from runtime.store.usage import Spent, UsageTotals, spent_of


def with_spend(session: Transaction, task_id: str) -> tuple[views.TaskDetail, Spent] | None:
    detail = views.task_detail(session, task_id)
    if detail is None:
        return None
    return detail, spent_of(session, detail.task.task_id, detail.task.root_id)


def spend_text(totals: UsageTotals) -> str:
    """"12.4k tokens (10.1k in, 2.3k out) · $0.03 · 7 model calls"."""
    if not totals.calls:
        return "no model calls yet"
    calls = f"{totals.calls} model call{'' if totals.calls == 1 else 's'}"
    cached = f", {totals.cached_tokens:,} cached" if totals.cached_tokens else ""
    return (
        f"{totals.total_tokens:,} tokens ({totals.prompt_tokens:,} in{cached}, "
        f"{totals.completion_tokens:,} out) · ${totals.cost_usd:.4f} · {calls}"
    )
