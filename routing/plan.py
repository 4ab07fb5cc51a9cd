"""A Route as a stored plan: what a pending signal will do, exactly as ``decide`` said it.

The plan is written with the Signal when its effect cannot be carried out in the admitting
transaction, and read back by whoever carries it out later (the retry loop, or
``resume_pending`` after a crash), so nothing of the decision is re-derived or lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, assert_never

from routing.router import Append, Daemon, Drop, NewTask, Route, Stop, TaskView
from runtime.ids import TaskId
from runtime.store.records import TaskStatus
from runtime.threads import BadThreadRef, text_of, thread_of

Plan = dict[str, Any]


class BadPlan(ValueError):
    """A stored plan this version cannot read (written by a newer Keel, or damaged)."""


def to_plan(route: Append | NewTask | Daemon | Stop) -> Plan:
    match route:
        case Append(task=task, key=key):
            return {"route": "append", "task": _view(task), "key": key}
        case NewTask(objective_key=objective, message=message, agent=agent, follows=follows):
            return {
                "route": "new_task",
                "objective_key": objective,
                "message": message,
                "agent": agent,
                "follows": _view(follows) if follows else None,
            }
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
    }


def _task(value: Mapping[str, Any]) -> TaskView:
    return TaskView(
        task_id=TaskId(str(value["task_id"])),
        status=TaskStatus(value["status"]),
        origin_thread_ref=thread_of(value.get("origin_thread_ref")),
        objective_key=value.get("objective_key"),
        requested_by=value.get("requested_by"),
    )
