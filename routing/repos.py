"""Which repository a request is about, when the request itself says: ``repo=owner/name``
(or ``repo:owner/name``) and ``branch=<name>`` as words of their own, or a link to a GitHub
repository or pull request. And the question Keel asks when nothing decides.

Request text is hostile: every name read here is checked against a narrow pattern before it
goes anywhere, and only a repository Keel reaches (``Reach.knows``, the ``github.repositories``
allow-list and ``workspace.repositories``) is ever chosen. The ``repo=``/``branch=`` words are
directives, so they are taken out of the text the model sees (as ``agent=`` is); links stay,
since they are also what the person wants looked at.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from routing.signal import find_links
from runtime.ids import SignalId

# A repository key: a GitHub owner/name, or a workspace.repositories name; never a path
# that climbs, a URL or an option.
_KEY_ONLY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}(?:/(?!\.\.?$)[A-Za-z0-9._-]{1,100})?$")
_REPO_WORD = re.compile(r"(?<!\S)repo[=:](?P<repo>\S*)(?!\S)", re.IGNORECASE)
_BRANCH_WORD = re.compile(r"(?<!\S)branch=(?P<branch>\S*)(?!\S)", re.IGNORECASE)
# A branch name git accepts and no shell or URL can misread: no "..", no leading "-" or "/".
_BRANCH = re.compile(r"^(?!.*\.\.)(?!.*//)[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}$")
_GITHUB_URL = re.compile(
    r"^https://(?:www\.)?github\.com/(?P<owner>[A-Za-z0-9](?:[A-Za-z0-9-]{0,38}))/"
    r"(?P<name>[A-Za-z0-9._-]{1,100}?)(?:\.git)?"
    r"(?:/pull/(?P<pull>[0-9]{1,9})(?:[/?#].*)?|[/?#].*)?$"
)
# Path owners that are GitHub pages, not accounts.
_NOT_OWNERS = frozenset({"orgs", "settings", "marketplace", "apps", "features", "topics"})

# The select under a question: its action is named ``repo:<question signal id>``, and an
# option's value is the repository, or NO_REPO for "no repository".
CHOICE: Final = "repo"
NO_REPO: Final = "-"
# Slack's limits for one static select; beyond them the options come from a search.
MAX_OPTIONS = 100
MAX_VALUE = 150


class Reach(Protocol):
    """The repositories Keel may work in (adapters' ``Checkouts``)."""

    def knows(self, repo: str) -> bool: ...

    def offered(self) -> Sequence[str]:
        """The repositories a person may pick from, by name (exact names only: an allow-list
        pattern such as ``acme/*`` lists none)."""
        ...


@dataclass(frozen=True, slots=True)
class Named:
    """What a request says about its repository; ``repo`` None when it names a branch only."""

    repo: str | None
    branch: str | None = None
    pull: int | None = None
    # What the request said, quoted back in a refusal.
    said: str = ""


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A ``repo=`` or ``branch=`` that is no name, or two that disagree."""

    why: str


def named_in(text: str) -> Named | Unreadable | None:
    """The repository (and branch) the request names, if it names one."""
    words = [m["repo"] for m in _REPO_WORD.finditer(text)]
    branches = list(dict.fromkeys(m["branch"] for m in _BRANCH_WORD.finditer(text)))
    if len(branches) > 1:
        return Unreadable("it names more than one branch")
    branch = branches[0] if branches else None
    if branch is not None and not _BRANCH.match(branch):
        return Unreadable(f"`{_quoted(branch)}` is not a branch name")
    if words:
        return _from_words(words, branch)
    linked = _linked(text)
    if linked is not None:
        return Named(linked.repo, branch or linked.branch, linked.pull, linked.said)
    return Named(None, branch, said=f"branch={branch}") if branch else None


def _from_words(words: Sequence[str], branch: str | None) -> Named | Unreadable:
    repos = list(dict.fromkeys(_as_key(word) for word in words))
    if None in repos:
        bad = next(word for word in words if _as_key(word) is None)
        return Unreadable(f"`{_quoted(bad)}` is not a repository name (write repo=owner/name)")
    if len(repos) > 1:
        return Unreadable("it names more than one repository")
    repo = repos[0]
    assert repo is not None
    return Named(repo, branch, said=f"repo={repo}")


def _as_key(word: str) -> str | None:
    """``owner/name``, also as Slack shows a link (``<https://github.com/o/n|o/n>``)."""
    if word.startswith("<") and word.endswith(">"):
        word = word[1:-1].split("|", 1)[0]
    if word.startswith("https://"):
        linked = _repository_of(word)
        return linked.repo if linked is not None else None
    return word if _KEY_ONLY.match(word) else None


def _linked(text: str) -> Named | None:
    """The one GitHub repository the request links to; several different ones decide
    nothing (a request may well link another project's issue)."""
    found = [named for url in find_links(text) if (named := _repository_of(url)) is not None]
    repos = {named.repo for named in found}
    if len(repos) != 1:
        return None
    pulls = [named for named in found if named.pull is not None]
    return pulls[0] if len({p.pull for p in pulls}) == 1 else found[0]


def _repository_of(url: str) -> Named | None:
    matched = _GITHUB_URL.match(url)
    if matched is None or matched["owner"].lower() in _NOT_OWNERS:
        return None
    repo = f"{matched['owner']}/{matched['name']}"
    pull = int(matched["pull"]) if matched["pull"] else None
    return Named(repo, pull=pull, said=url[:200])


def without_directives(text: str) -> str:
    """The request as the model reads it: without its ``repo=`` and ``branch=`` words."""
    for word in (_REPO_WORD, _BRANCH_WORD):
        text = word.sub(" ", text)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def _quoted(word: str) -> str:
    """Hostile text shown back: short, and without what would end the code span."""
    return word.replace("`", "'")[:80]


@dataclass(frozen=True, slots=True)
class Chosen:
    """The repository a new task works in, decided before it exists; ``branch`` or the head
    of pull request ``pull`` is where its checkout starts."""

    repo: str | None
    branch: str | None = None
    pull: int | None = None


@dataclass(frozen=True, slots=True)
class Refused:
    """The request names a repository Keel may not work in (or names it unreadably)."""

    named: Named | Unreadable


@dataclass(frozen=True, slots=True)
class Undecided:
    """Nothing decides and Keel reaches repositories: ask. ``branch`` is the request's."""

    branch: str | None = None


RepoChoice = Chosen | Refused | Undecided


# -- the question -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Picked:
    """A person's answer to a repository question: the question's signal and the value."""

    question: SignalId
    repo: str | None


def choice_name(question: str) -> str:
    """The name of the select under the question asked by signal ``question``."""
    return f"{CHOICE}:{question}"


def answer_text(name: str, value: str) -> str | None:
    """A select's pick as the click Signal's text (``repo <question> <value>``), or None if
    ``name`` is not a repository question's."""
    question = name.removeprefix(f"{CHOICE}:")
    if question == name or not re.fullmatch(r"s_[0-9a-f]{1,64}", question):
        return None
    return f"{CHOICE} {question} {value}"


def picked_of(text: str) -> Picked | None:
    """The answer a click Signal's text carries, if it is one."""
    parts = text.split(" ")
    if len(parts) != 3 or parts[0] != CHOICE:
        return None
    # Any other value is refused where it is compared with what was offered.
    return Picked(SignalId(parts[1]), None if parts[2] == NO_REPO else parts[2])


def question_text(requester: str, seconds: float) -> str:
    hours = seconds / 3600
    wait = f"{hours:g}h" if hours >= 1 else f"{seconds / 60:g} minutes"
    return (
        f"Which repository should I work in for this, {requester}? Pick one below (or "
        "*No repository*), or mention me again with `repo=owner/name`. Without an answer "
        f"within {wait} I will not start on it."
    )


def answered_text(question: str, who: str, repo: str | None) -> str:
    chosen = f"`{repo}`" if repo is not None else "no repository"
    return f"{question}\n\n✅ {who} chose {chosen}."


def unanswered_text(question: str) -> str:
    return f"{question}\n\n⌛ Nobody chose a repository in time."


def expired_text(seconds: float) -> str:
    return (
        f"No repository was chosen within {seconds:g}s, so I did not start on this request. "
        "Mention me again with `repo=owner/name` to start it."
    )


def repo_refused_text(named: Named | Unreadable) -> str:
    """The reply to a request that names a repository Keel may not work in."""
    if isinstance(named, Unreadable):
        return f"I did not start on this: {named.why}."
    return (
        f"I can't work in `{_quoted(named.repo or named.said)}`: it is not one of the "
        "repositories this Keel may reach (github.repositories and workspace.repositories "
        "in its configuration). Ask whoever runs Keel to add it, or name another with "
        "`repo=owner/name`."
    )


def plan_ref(plan: Mapping[str, Any] | None) -> tuple[str | None, int | None]:
    """The branch and pull request number a stored plan asked for (``routing/plan.py``)."""
    if plan is None:
        return None, None
    branch, pull = plan.get("branch"), plan.get("pull")
    good_branch = branch if isinstance(branch, str) and _BRANCH.match(branch) else None
    good_pull = pull if isinstance(pull, int) and not isinstance(pull, bool) and pull > 0 else None
    return good_branch, good_pull
