"""Thread references are taken apart only by the type that owns them (runtime/threads.py).

An AST scan over runtime, routing and adapters: a string method that cuts or tests text at a
separator containing ":" (``partition(":")``, ``split(":comment")``, ``startswith("github:")``,
``removeprefix(f"{surface}:")``...) called on something named like a thread reference, or a
regular expression for the ``slack:``/``github:`` forms, is a hand-written parser and fails
this test. Migrations are left out: one reads a form that no longer exists.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OWNER = ROOT / "runtime" / "threads.py"
PACKAGES = ("runtime", "routing", "adapters")
CUTTERS = frozenset(
    {"partition", "rpartition", "split", "rsplit", "removeprefix", "removesuffix", "startswith",
     "endswith", "index", "find", "rfind"}
)
REGEX_CALLS = frozenset({"compile", "match", "fullmatch", "search", "findall", "finditer"})
# Words that name a thread reference, or where a post landed.
REF_WORDS = frozenset({"thread", "threads", "ref", "refs", "landed"})


def _names_a_ref(node: ast.expr) -> bool:
    words = re.findall(r"[a-z]+", ast.unparse(node).lower())
    return any(word in REF_WORDS for word in words)


def _literal_has(node: ast.expr, *needles: str) -> bool:
    match node:
        case ast.Constant(value=str(text)):
            return any(needle in text for needle in needles)
        case ast.JoinedStr(values=parts):
            return any(_literal_has(part, *needles) for part in parts)
        case _:
            return False


def _is_hand_parser(call: ast.Call) -> bool:
    if not isinstance(call.func, ast.Attribute) or not call.args:
        return False
    method, receiver, first = call.func.attr, call.func.value, call.args[0]
    if method in CUTTERS:
        return _names_a_ref(receiver) and _literal_has(first, ":")
    is_re = isinstance(receiver, ast.Name) and receiver.id == "re"
    return is_re and method in REGEX_CALLS and _literal_has(first, "slack:", "github:")


def hand_parsers(source: str, filename: str = "<source>") -> list[str]:
    """``file:line: call`` for every hand-written parse of a thread reference."""
    return [
        f"{filename}:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source, filename=filename))
        if isinstance(node, ast.Call) and _is_hand_parser(node)
    ]


def _sources() -> list[Path]:
    return [
        path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != OWNER and "migrations" not in path.parts
    ]


def test_no_thread_reference_is_cut_at_a_colon_outside_its_owner_when_scanned() -> None:
    sources = _sources()
    assert len(sources) > 50, "the scan must see the packages"
    offenders = [
        hit
        for path in sources
        for hit in hand_parsers(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "snippet",
    [
        # The seven parsers this test replaced, as they were written.
        'surface = thread_ref.split(":", 1)[0]',
        'surface, _, ref = post.landed_on.partition(":")',
        'body = thread_ref.partition(":")[2]',
        'root = thread_ref.split(":comment", 1)[0]',
        'channel, _, ts = posted.ref.partition(":")',
        'ref = post.thread_ref.removeprefix(f"{post.surface}:")',
        'fell_back = landed_on.startswith("fallback:")',
        'if record.thread_ref.startswith("github:"): pass',
        'team = thread.rsplit(":", 2)',
        'PATTERN = re.compile(r"^slack:(?P<team>[^/]+)/(?P<channel>[^/]+)/(?P<ts>[\\d.]+)$")',
        'found = re.match(rf"^github:{REPO}#(\\d+)$", text)',
    ],
)
def test_scan_flags_a_hand_written_parser_when_one_is_present(snippet: str) -> None:
    assert hand_parsers(snippet) != []


@pytest.mark.parametrize(
    "snippet",
    [
        'scheme, _, credentials = header.partition(" ")',  # not a colon
        'prefix, _, call_id = entry.item_key.partition(":")',  # not a thread reference
        'head = branch if ":" in branch else f"{owner}:{branch}"',
        'key, _, value = line.partition("=")',
        "parts = thread_ref.split(sep)",  # no literal separator: nothing to judge
        'preferred = prefix.split(":")',  # "prefix" contains "ref" but is not one
        'MENTION = re.compile(r"<@U123>")',
        'dedupe_key = f"slack:{team}:{channel}:{ts}"',  # written, not parsed
    ],
)
def test_scan_leaves_other_text_alone_when_it_is_not_a_thread_reference(snippet: str) -> None:
    assert hand_parsers(snippet) == []
