"""What every devbox tool does the same way: argument parsing, finding the workspace, refusals.

Tools take their workspace from ``ctx.workspace``, which the executor fills from
``Workspaces.ensure``; a call without one is refused rather than guessed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from runtime.tools.base import Completed, Pending, ToolContext, Unknown

A = TypeVar("A", bound="ToolArgs")


class ToolArgs(BaseModel):
    """The model-facing arguments of a tool: unknown keys and wrong types are refused."""

    model_config = ConfigDict(extra="forbid", strict=True)


def schema(model: type[ToolArgs]) -> dict[str, Any]:
    parameters = model.model_json_schema()
    parameters.pop("title", None)
    return parameters


def parse_args(model: type[A], args: dict[str, Any]) -> A | Completed:
    try:
        return model.model_validate(args)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
            for err in e.errors()
        )
        return refused(f"invalid arguments: {problems}")


def workspace_of(ctx: ToolContext) -> Path | Completed:
    if ctx.workspace is None:
        return refused("this task has no workspace; no repository was attached to it")
    return ctx.workspace


def refused(message: str) -> Completed:
    return Completed(output=message, is_error=True)


class ImmediateTool:
    """Defaults for tools that settle in ``start``: nothing to poll, nothing to reconcile."""

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed:
        return refused(f"{handle!r}: this tool has no pending work to poll")

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        return Unknown("this tool cannot establish whether an earlier call took effect")


def prepare(model: type[A], args: dict[str, Any], ctx: ToolContext) -> tuple[A, Path] | Completed:
    """Parsed arguments and the workspace, or the refusal to hand back to the model."""
    ws = workspace_of(ctx)
    if isinstance(ws, Completed):
        return ws
    parsed = parse_args(model, args)
    if isinstance(parsed, Completed):
        return parsed
    return parsed, ws
