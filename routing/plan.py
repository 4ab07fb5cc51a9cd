"""A Route as a stored plan: what a pending signal will do, exactly as ``decide`` said it.

The plan is written with the Signal when its effect cannot be carried out in the admitting
transaction, and read back by whoever carries it out later (the retry loop, or
``resume_pending`` after a crash), so nothing of the decision is re-derived or lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, assert_never

from routing.repos import Chosen, plan_ref
from routing.router import (
    Append,
    AskRepo,
    ChooseRepo,
    Daemon,
    Drop,
    NewTask,
    Route,
    Stop,
    TaskView,
)
from runtime.ids import SignalId, TaskId
from runtime.store.records import TaskStatus
from runtime.threads import BadThreadRef, text_of, thread_of

Plan = dict[str, Any]


class BadPlan(ValueError):
    """A stored plan this version cannot read (written by a newer Keel, or damaged)."""


def to_plan(route: Append | NewTask | AskRepo | ChooseRepo | Daemon | Stop) -> Plan:
    match route:
        case Append(task=task, key=key):
            return {"route": "append", "task": _view(task), "key": key}
        case NewTask(
            objective_key=objective, message=message, agent=agent, follows=follows, where=where
        ):
            return {
                "route": "new_task",
                "objective_key": objective,
                "message": message,
                "agent": agent,
                "follows": _view(follows) if follows else None,
                **(_where(where) if where is not None else {}),
            }
        case AskRepo(objective_key=objective, message=message, agent=agent, follows=follows):
            return {
                "route": "ask_repo",
                "objective_key": objective,
                "message": message,
                "agent": agent,
                "follows": _view(follows) if follows else None,
                "branch": route.branch,
            }
        case ChooseRepo(question=question, repo=repo):
            return {"route": "choose_repo", "question": question, "repo": repo}
        case Stop(task=task):
            return {"route": "stop", "task": _view(task)}
        case Daemon(name=name, agent=agent, objective_key=objective, task=task):
            return {
                "route": "daemon",
                "name": name,
                "agent": agent,
                "objective_key": objective,
                "task": _view(task) if task else None,
            }
        case _:
            assert_never(route)


def from_plan(plan: Mapping[str, Any]) -> Route:
    try:
        match plan["route"]:
            case "append":
                return Append(_task(plan["task"]), key=str(plan["key"]))
            case "new_task":
                follows = plan.get("follows")
                return NewTask(
                    objective_key=str(plan["objective_key"]),
                    message=str(plan["message"]),
                    agent=str(plan["agent"]),
                    follows=_task(follows) if follows else None,
                    where=_chosen(plan),
                )
            case "ask_repo":
                follows = plan.get("follows")
                branch, _ = plan_ref(plan)
                return AskRepo(
                    objective_key=str(plan["objective_key"]),
                    message=str(plan["message"]),
                    agent=str(plan["agent"]),
                    follows=_task(follows) if follows else None,
                    branch=branch,
                )
            case "choose_repo":
                repo = plan.get("repo")
                return ChooseRepo(
                    SignalId(str(plan["question"])), None if repo is None else str(repo)
                )
            case "stop":
                return Stop(_task(plan["task"]))
            case "daemon":
                task = plan.get("task")
                return Daemon(
                    name=str(plan["name"]),
                    agent=str(plan["agent"]),
                    objective_key=str(plan["objective_key"]),
                    task=_task(task) if task else None,
                )
            case other:
                raise BadPlan(f"unknown route {other!r}")
    except (KeyError, TypeError, ValueError, BadThreadRef) as e:
        raise BadPlan(f"unreadable plan: {e}") from e


def label(route: Route) -> str:
    """The short name a pending signal shows as its reason."""
    match route:
        case Append():
            return "append"
        case NewTask():
            return "new_task"
        case AskRepo():
            return "ask_repo"
        case ChooseRepo():
            return "choose_repo"
        case Stop():
            return "stop"
        case Daemon(name=name):
            return f"daemon {name}"
        case Drop(reason=reason):
            return reason
        case _:
            assert_never(route)


def _view(task: TaskView) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "status": task.status.value,
        "origin_thread_ref": text_of(task.origin_thread_ref),
        "objective_key": task.objective_key,
        "requested_by": task.requested_by,
        "repo": task.repo,
    }


def _where(chosen: Chosen) -> dict[str, Any]:
    """A chosen repository, and where its checkout starts (read by ``plan_ref``)."""
    return {"chosen": True, "repo": chosen.repo, "branch": chosen.branch, "pull": chosen.pull}


def _chosen(plan: Mapping[str, Any]) -> Chosen | None:
    """A plan written before requests chose repositories has none: its thread decides."""
    if not plan.get("chosen"):
        return None
    repo = plan.get("repo")
    branch, pull = plan_ref(plan)
    return Chosen(None if repo is None else str(repo), branch, pull)


def _task(value: Mapping[str, Any]) -> TaskView:
    return TaskView(
        task_id=TaskId(str(value["task_id"])),
        status=TaskStatus(value["status"]),
        origin_thread_ref=thread_of(value.get("origin_thread_ref")),
        objective_key=value.get("objective_key"),
        requested_by=value.get("requested_by"),
        repo=value.get("repo"),
    )
