"""Tools: the agent's effects, each declaring how it may be recovered."""

from runtime.tools.base import (
    Completed,
    Effect,
    Pending,
    Started,
    Tool,
    ToolContext,
    Unknown,
)

__all__ = ["Completed", "Effect", "Pending", "Started", "Tool", "ToolContext", "Unknown"]
