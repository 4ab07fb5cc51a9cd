"""The Surface port: where replies go. Implemented by the Slack and GitHub adapters.

A thread is named by a ``ThreadRef``; a post is named by the reference to the message
itself (a Slack thread with its ``message_ts``, a GitHub issue with its ``comment_id``).
"""

from __future__ import annotations

from typing import Protocol

from runtime.threads import ThreadRef


class Surface(Protocol):
    name: str

    async def post(self, thread: ThreadRef, text: str, *, key: str) -> ThreadRef:
        """Post once into the thread; the answer names the message that landed. ``key`` is
        carried in hidden metadata for reconcile."""
        ...

    async def find_post(self, thread: ThreadRef, *, key: str) -> ThreadRef | None:
        """Reconcile: the message carrying ``key``, if one landed."""
        ...

    async def update(self, posted: ThreadRef, text: str) -> None:
        """New text for a message ``post`` or ``find_post`` named."""
        ...

    async def react(self, target: ThreadRef, emoji: str) -> None:
        """React to the message ``target`` names, or to the thread's root message."""
        ...
