"""A follow-up's author when no provider can say more than the stored sender part."""

from __future__ import annotations

import pytest

from adapters.briefing import ThreadContext
from runtime.brief.model import Sender
from runtime.store.records import SenderPart
from tests.factories import THREAD


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        (SenderPart("slack", "U1", "Ada", None, str(THREAD)), Sender("Ada")),
        (SenderPart("github", "octo", None), Sender("octo")),
        (SenderPart(), Sender("someone")),
    ],
)
async def test_sender_is_the_stored_name_when_no_provider_is_connected(
    part: SenderPart, expected: Sender
) -> None:
    assert await ThreadContext(None, None).sender(part) == expected
