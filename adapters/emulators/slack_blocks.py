"""Block Kit as Slack checks it: the part Keel posts (section, actions; button,
static_select, external_select), with the limits of Slack's Block Kit reference
(https://api.slack.com/reference/block-kit). A post whose blocks break one is refused as
Slack refuses it: ``invalid_blocks`` with an ``errors`` list, each naming the offending
place by a JSON pointer (``InvalidBlocks``, answered by ``slack.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# Block Kit's limits (Slack's Block Kit reference).
MAX_BLOCKS = 50
MAX_ELEMENTS = 25
MAX_OPTIONS = 100
MAX_SECTION_TEXT = 3000
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_OPTION_TEXT = 75
MAX_OPTION_VALUE = 150
MAX_PLACEHOLDER = 150
MAX_ID = 255
_ELEMENTS = frozenset({"button", "static_select", "external_select"})
_BLOCKS = frozenset({"section", "actions", "divider", "context", "header"})


class InvalidBlocks(Exception):
    """Slack's ``invalid_blocks``, with its ``errors``."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("invalid_blocks")
        self.errors = errors


def check_blocks(blocks: Any) -> Any:
    """``blocks`` as given, or ``InvalidBlocks`` with what Slack would say of them."""
    if blocks is None:
        return None
    errors = list(_block_errors(blocks))
    if errors:
        raise InvalidBlocks(errors)
    return blocks


def _block_errors(blocks: Any) -> Iterator[str]:
    if not isinstance(blocks, list):
        yield "must be an array [json-pointer:/blocks]"
        return
    if len(blocks) > MAX_BLOCKS:
        yield f"must be less than {MAX_BLOCKS + 1} items [json-pointer:/blocks]"
    action_ids: set[str] = set()
    for n, block in enumerate(blocks):
        where = f"/blocks/{n}"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in _BLOCKS:
            yield f"unsupported type: {kind} [json-pointer:{where}/type]"
            continue
        if kind == "section":
            yield from _text_errors(block.get("text"), MAX_SECTION_TEXT, f"{where}/text")
        if kind == "actions":
            yield from _actions_errors(block.get("elements"), where, action_ids)


def _actions_errors(elements: Any, where: str, action_ids: set[str]) -> Iterator[str]:
    if not isinstance(elements, list) or not elements:
        yield f"must provide at least 1 element [json-pointer:{where}/elements]"
        return
    if len(elements) > MAX_ELEMENTS:
        yield f"must be less than {MAX_ELEMENTS + 1} items [json-pointer:{where}/elements]"
    for n, element in enumerate(elements):
        at = f"{where}/elements/{n}"
        kind = element.get("type") if isinstance(element, dict) else None
        if kind not in _ELEMENTS:
            yield f"unsupported type: {kind} [json-pointer:{at}/type]"
            continue
        action_id = element.get("action_id")
        if isinstance(action_id, str):
            if len(action_id) > MAX_ID:
                yield f"must be less than {MAX_ID + 1} characters [json-pointer:{at}/action_id]"
            if action_id in action_ids:
                yield f"action_id already exists [json-pointer:{at}/action_id]"
            action_ids.add(action_id)
        yield from _element_errors(kind, element, at)


def _element_errors(kind: str, element: dict[str, Any], at: str) -> Iterator[str]:
    if kind == "button":
        yield from _text_errors(element.get("text"), MAX_BUTTON_TEXT, f"{at}/text", plain=True)
        if len(str(element.get("value", ""))) > MAX_BUTTON_VALUE:
            yield f"must be less than {MAX_BUTTON_VALUE + 1} characters [json-pointer:{at}/value]"
        return
    if "placeholder" in element:
        yield from _text_errors(
            element["placeholder"], MAX_PLACEHOLDER, f"{at}/placeholder", plain=True
        )
    if kind == "external_select":
        if "options" in element:
            yield f"unsupported field: options [json-pointer:{at}/options]"
        return
    yield from _options_errors(element.get("options"), f"{at}/options")


def _options_errors(options: Any, at: str) -> Iterator[str]:
    if not isinstance(options, list) or not options:
        yield f"must provide at least 1 item [json-pointer:{at}]"
        return
    if len(options) > MAX_OPTIONS:
        yield f"must be less than {MAX_OPTIONS + 1} items [json-pointer:{at}]"
    for n, option in enumerate(options):
        here = f"{at}/{n}"
        if not isinstance(option, dict):
            yield f"must be an object [json-pointer:{here}]"
            continue
        yield from _text_errors(option.get("text"), MAX_OPTION_TEXT, f"{here}/text", plain=True)
        value = option.get("value")
        if not isinstance(value, str) or not value:
            yield f"must be a non-empty string [json-pointer:{here}/value]"
        elif len(value) > MAX_OPTION_VALUE:
            yield f"must be less than {MAX_OPTION_VALUE + 1} characters [json-pointer:{here}/value]"


def _text_errors(text: Any, limit: int, at: str, *, plain: bool = False) -> Iterator[str]:
    kinds = ("plain_text",) if plain else ("plain_text", "mrkdwn")
    if not isinstance(text, dict) or text.get("type") not in kinds:
        yield f"must be a {' or '.join(kinds)} text object [json-pointer:{at}]"
        return
    body = text.get("text")
    if not isinstance(body, str) or not body:
        yield f"must be a non-empty string [json-pointer:{at}/text]"
    elif len(body) > limit:
        yield f"must be less than {limit + 1} characters [json-pointer:{at}/text]"
