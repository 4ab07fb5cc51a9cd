"""The terminal as a Surface: ``keel run`` prints a task's posts, edits and reactions.

Posts are Markdown (Keel's reply model) and a terminal shows Markdown as it is, so bodies are
printed unchanged. Each post prints once per key: a retried or reconciled post finds the one
printed before. An edit prints only when the text changed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from itertools import count

import typer

from runtime.surfaces import Action
from runtime.threads import LocalThread, ThreadRef

Echo = Callable[[str], None]


def terminal_thread(started_at: float) -> LocalThread:
    """keel run's conversation: a local thread, one session per run, that only the terminal
    shows. The outbox delivers it through the surface named "local": this one."""
    return LocalThread(f"{started_at:.6f}")


class TerminalSurface:
    name = "local"

    def __init__(self, echo: Echo) -> None:
        self.echo = echo
        self._posted: dict[str, ThreadRef] = {}
        self._texts: dict[str, str] = {}
        self._numbers = count(1)

    async def post(
        self, thread: ThreadRef, text: str, *, key: str, actions: Sequence[Action] = ()
    ) -> ThreadRef:
        found = self._posted.get(key)
        if found is not None:
            return found
        assert isinstance(thread, LocalThread), f"not a terminal thread: {thread}"
        message = LocalThread(thread.session, str(next(self._numbers)))
        self._posted[key] = message
        self._texts[str(message)] = text
        self.echo(_block("keel", text))
        return message

    async def find_post(self, thread: ThreadRef, *, key: str) -> ThreadRef | None:
        return self._posted.get(key)

    async def update(
        self, posted: ThreadRef, text: str, *, actions: Sequence[Action] = ()
    ) -> None:
        if self._texts.get(str(posted)) == text:
            return
        self._texts[str(posted)] = text
        self.echo(_block("keel (edited)", text))

    async def react(self, target: ThreadRef, emoji: str) -> None:
        self.echo(f"keel reacted :{emoji}:")


def _block(who: str, text: str) -> str:
    lines = text.splitlines() or [""]
    return "\n".join([f"{who}: {lines[0]}", *(f"  {line}" for line in lines[1:])])


# C0 and C1 control characters but newline and tab: an escape sequence in a command's output
# or a model's reply could set the window title, write the clipboard (OSC 52) or redraw lines.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` as a terminal may show it: control characters become ``�``."""
    return _CONTROL.sub("\ufffd", text)


def terminal_echo(text: str) -> None:
    """``typer.echo`` for text others wrote (tasks, replies, command output)."""
    typer.echo(printable(text))
