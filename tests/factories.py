"""Factories for test values: one place that knows sensible defaults."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from adapters.emulators.github_state import GitHubState
from routing.signal import Actor, Signal
from runtime.store.records import TaskSpec, TextPart
from runtime.threads import SlackThread

THREAD = SlackThread("T1", "C1", "1700000000.000100")
ALICE = Actor(id="U1", name="alice", is_bot=False, is_self=False)
SIGNAL_TIME = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def make_spec(**overrides: Any) -> TaskSpec:
    values: dict[str, Any] = {
        "agent": "default",
        "message": "fix the failing test",
        "origin_thread_ref": THREAD,
        "objective_key": str(THREAD),
    }
    values.update(overrides)
    return TaskSpec(**values)


def make_signal(**overrides: Any) -> Signal:
    """A Slack thread reply from alice in THREAD, not addressed to the bot.

    The objective key follows the thread unless it is given too.
    """
    values: dict[str, Any] = {
        "provider": "slack",
        "delivery_id": "Ev1",
        "kind": "thread_reply",
        "thread_ref": THREAD,
        "actor": ALICE,
        "text": "it only happens in Safari",
        "addresses_bot": False,
        "command": None,
        "links": (),
        "received_at": SIGNAL_TIME,
        "dedupe_key": "slack:T1:C1:1700000000.000200",
        "event_action": "message",
    }
    values.update(overrides)
    values.setdefault("objective_key", str(values["thread_ref"]))
    return Signal(**values)


def text_part(text: str) -> TextPart:
    return TextPart(text)


def app_key_pair() -> tuple[str, str]:
    """A GitHub App's private key (PEM, PKCS8) and its public key, for the emulator."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    return private, public


def github_app_settings(
    private_key: str, *, pin_installation: bool = False
) -> dict[str, dict[str, Any]]:
    """The ``github`` section of a config that signs in as the emulator's App with this key
    (``pin_installation``: with the emulator's installation id, instead of looking it up)."""
    state = GitHubState()
    app: dict[str, object] = {"app_id": state.app_id, "private_key": private_key}
    if pin_installation:
        app["installation_id"] = state.installation_id
    return {"github": {"token": None, "bot_login": "keel[bot]", "app": app}}

