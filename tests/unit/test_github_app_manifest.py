"""deploy/github-app-manifest.json asks for what Keel uses, and README's list says the same.

The events are those ``signal_from_github`` turns into signals (read from its ``match``, so a
new case is a new event to subscribe to); the permissions are those the events, Keel's GitHub
tools and its git need, no more; README's "Connecting a GitHub App" lists both in words.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
from pathlib import Path
from typing import Any

from adapters.github import review, signals, tools
from adapters.github.toolbase import GitHubTool
from adapters.web.ingress import GITHUB_WEBHOOK_PATH

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "github-app-manifest.json"
README = ROOT / "README.md"

# The permission GitHub asks of an App before it may subscribe to each event.
EVENT_PERMISSIONS = {
    "check_run": "checks",
    "check_suite": "checks",
    "issue_comment": "issues",
    "issues": "issues",
    "pull_request": "pull_requests",
    "pull_request_review": "pull_requests",
    "pull_request_review_comment": "pull_requests",
    "workflow_run": "actions",
}
# What each of Keel's GitHub tools calls needs.
TOOL_PERMISSIONS = {
    "open_pull_request": {"pull_requests": "write"},
    "wait_for_ci": {"checks": "read", "statuses": "read"},
    "ci_job_log": {"actions": "read"},  # a workflow job's log
    "comment_on_issue": {"issues": "write"},
    "review_threads": {"pull_requests": "read"},
    "reply_to_review_threads": {"pull_requests": "write"},
    "submit_review": {"pull_requests": "write"},  # a review, its comments and replies
    "review_since": {"pull_requests": "read", "contents": "read"},  # reviews; compare
}
# Besides: clones and pushes, replies and reactions, and what every App has.
KEEL_PERMISSIONS = {"contents": "write", "issues": "write", "metadata": "read"}
# README's words for the permissions whose names are not its own.
README_PERMISSION_NAMES = {"Commit statuses": "statuses"}
_LEVEL = {"read": 1, "write": 2}


def manifest() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(MANIFEST.read_text())
    return loaded


def translated_events() -> set[str]:
    """The events of the cases of ``signal_from_github``'s match that do more than ignore."""
    source = textwrap.dedent(inspect.getsource(signals.signal_from_github))
    match = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Match))
    events: set[str] = set()
    for case in match.cases:
        if not _only_ignores(case.body):
            assert isinstance(case.pattern, ast.MatchSequence), ast.unparse(case.pattern)
            events |= _event_names(case.pattern.patterns[0], case.guard)
    return events


def _only_ignores(body: list[ast.stmt]) -> bool:
    match body:
        case [ast.Return(value=ast.Call(func=ast.Name(id="Ignored")))]:
            return True
    return False


def _event_names(pattern: ast.pattern, guard: ast.expr | None) -> set[str]:
    match pattern, guard:
        case ast.MatchValue(value=ast.Constant(value=str() as name)), _:
            return {name}
        case ast.MatchOr(patterns=alternatives), _:
            return set().union(*(_event_names(p, guard) for p in alternatives))
        case ast.MatchAs(pattern=None, name=str() as bound), ast.Compare(
            left=ast.Name(id=left), ops=[ast.In()], comparators=[ast.Name(id=names)]
        ) if left == bound:
            return set(getattr(signals, names))
    raise AssertionError(f"cannot read the event of case {ast.unparse(pattern)}")


def needed_permissions(events: set[str]) -> dict[str, str]:
    """The least each permission must be for these events, the tools and Keel's own calls."""
    needs = [
        KEEL_PERMISSIONS,
        *({EVENT_PERMISSIONS[event]: "read"} for event in events),
        *TOOL_PERMISSIONS.values(),
    ]
    found: dict[str, str] = {}
    for need in needs:
        for name, level in need.items():
            if _LEVEL[level] > _LEVEL.get(found.get(name, ""), 0):
                found[name] = level
    return found


def github_section() -> str:
    return README.read_text().split("### Connecting a GitHub App", 1)[1].split("\n#", 1)[0]


def readme_events() -> set[str]:
    text = " ".join(github_section().split())
    listed = text.split("Subscribe to events:", 1)[1].split(".", 1)[0]
    return {name.lower().replace(" ", "_") for name in re.findall(r"\*([^*]+)\*", listed)}


def readme_permissions() -> dict[str, str]:
    text = " ".join(github_section().split("Repository permissions:", 1)[1].split())
    text = text.split("Subscribe to events:", 1)[0]
    found = re.findall(r"\*\*([^*]+)\*\* (read & write|read)", text)
    return {
        README_PERMISSION_NAMES.get(name, name.lower().replace(" ", "_")): level.split()[-1]
        for name, level in found
    }


def github_tools() -> set[str]:
    return {
        obj.name
        for module in (tools, review)
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, GitHubTool) and "name" in vars(obj)
    }


def test_manifest_subscribes_to_the_events_keel_translates() -> None:
    events = translated_events()

    assert {"issue_comment", "pull_request_review", "check_run", "workflow_run"} <= events
    assert "ping" not in events
    assert sorted(manifest()["default_events"]) == sorted(events)


def test_manifest_asks_for_the_permissions_keels_events_tools_and_git_need_and_no_more() -> None:
    assert set(EVENT_PERMISSIONS) >= translated_events(), "say which permission a new event needs"
    assert set(TOOL_PERMISSIONS) == github_tools(), "say which permissions a GitHub tool needs"

    assert manifest()["default_permissions"] == needed_permissions(translated_events())
    assert manifest()["default_permissions"]["actions"] == "read"  # workflow_run, ci_job_log


def test_readme_lists_the_manifests_permissions_and_events() -> None:
    assert readme_permissions() == manifest()["default_permissions"]
    assert readme_events() == set(manifest()["default_events"])


def test_manifest_points_github_at_keels_webhook() -> None:
    app = manifest()
    hook = app["hook_attributes"]

    assert hook["url"].endswith(GITHUB_WEBHOOK_PATH) and hook["active"] is True
    assert app["public"] is False
    assert {"name", "url", "redirect_url"} <= set(app)


def test_needed_permissions_keep_the_highest_level_asked() -> None:
    needed = needed_permissions({"issue_comment", "check_run"})

    assert (needed["issues"], needed["checks"], needed["contents"]) == ("write", "read", "write")


def test_readme_permission_list_is_read_with_its_levels() -> None:
    permissions = readme_permissions()

    assert permissions["contents"] == "write" and permissions["statuses"] == "read"
    assert readme_events() >= {"pull_request_review_comment", "workflow_run"}
