"""Images in a user item: OpenAI's content parts on the wire, and scripted expectations."""

from __future__ import annotations

import pytest

from runtime.models.base import AssistantText, ImagePart, ModelRequest, UserText
from runtime.models.openai import request_body
from runtime.models.scripted import ScriptedProvider, ScriptMismatch

SHOT = ImagePart("image/png", "iVBORw0KGgo=", "shot.png")


def test_user_item_with_an_image_is_sent_as_openai_content_parts() -> None:
    request = ModelRequest("t1", 0, "", (UserText("see the screenshot", (SHOT,)),))

    [message] = request_body("gpt-4o", request)["messages"]

    assert message == {
        "role": "user",
        "content": [
            {"type": "text", "text": "see the screenshot"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ],
    }


def test_user_item_without_images_stays_plain_text() -> None:
    request = ModelRequest("t1", 0, "", (UserText("hello"),))

    assert request_body("gpt-4o", request)["messages"] == [{"role": "user", "content": "hello"}]


def test_scripted_turn_fails_when_an_expected_image_is_not_in_the_request() -> None:
    script = {"scripts": [{"turns": [{"expect_images": ["shot.png"], "say": "seen"}]}]}
    provider = ScriptedProvider.from_dict(script)

    seen = provider.reply(ModelRequest("t1", 0, "", (UserText("x", (SHOT,)),)))
    with pytest.raises(ScriptMismatch, match="expected image parts"):
        provider.reply(ModelRequest("t1", 0, "", (UserText("x"),)))

    [answer] = seen.items[:1]
    assert isinstance(answer, AssistantText) and answer.text == "seen"
