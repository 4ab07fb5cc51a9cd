"""Typed identifiers. Ids are strings on the wire and in the database."""

from __future__ import annotations

import os
from typing import NewType

TaskId = NewType("TaskId", str)
MessageId = NewType("MessageId", str)
CallId = NewType("CallId", str)
SignalId = NewType("SignalId", str)


def new_task_id() -> TaskId:
    return TaskId("t_" + os.urandom(10).hex())


def new_message_id() -> MessageId:
    return MessageId("m_" + os.urandom(10).hex())


def new_token() -> str:
    return os.urandom(16).hex()


def new_signal_id() -> SignalId:
    return SignalId("s_" + os.urandom(10).hex())
