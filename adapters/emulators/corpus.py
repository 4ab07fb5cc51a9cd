"""Where the corpora of real provider payloads live, and loading them by name.

The payloads ship with this package (``corpora/``: GitHub webhook examples and Slack Events
API bodies, copied from their upstream repositories; ``corpora/SOURCES.md`` names each
source and license). ``KEEL_CORPORA_DIR`` overrides that with another tree of the same
layout (``github/webhooks/<event>/<action>.json``, ``slack/events/<name>.json``).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

BUNDLED_ROOT = Path(__file__).resolve().parent / "corpora"


def corpora_root() -> Path:
    configured = os.environ.get("KEEL_CORPORA_DIR")
    return Path(configured) if configured else BUNDLED_ROOT


def load_github_example(name: str, **overrides: Any) -> dict[str, Any]:
    """A webhook body such as ``"issue_comment/created"``, with dotted-path overrides.

    ``load_github_example("issue_comment/created", **{"comment.body": "hi"})``
    """
    return _load(Path("github") / "webhooks" / f"{name}.json", overrides)


def load_slack_event(name: str, **overrides: Any) -> dict[str, Any]:
    """An Events API body such as ``"app_mention"``; ``event.text=...`` style overrides."""
    return _load(Path("slack") / "events" / f"{name}.json", overrides)


def _load(relative: Path, overrides: dict[str, Any]) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((corpora_root() / relative).read_text())
    return with_overrides(payload, overrides)


def with_overrides(payload: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``payload`` with each ``"a.b.c": value`` set (missing levels created)."""
    result = copy.deepcopy(payload)
    for dotted, value in overrides.items():
        *parents, leaf = dotted.split(".")
        node = result
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return result
