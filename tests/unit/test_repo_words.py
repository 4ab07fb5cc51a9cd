"""Reading the repository a request names, as a table: ``repo=``/``repo:``, ``branch=``,
GitHub repository and pull request links, and hostile text that must choose nothing."""

from __future__ import annotations

import pytest

from routing.repos import (
    Named,
    Unreadable,
    answer_text,
    named_in,
    picked_of,
    plan_ref,
    without_directives,
)

CASES: list[tuple[str, str, Named | Unreadable | None]] = [
    ("repo= word", "repo=acme/api fix it", Named("acme/api", said="repo=acme/api")),
    ("repo: word", "fix it repo:acme/api", Named("acme/api", said="repo=acme/api")),
    ("configured name", "repo=demo fix it", Named("demo", said="repo=demo")),
    (
        "with a branch",
        "repo=acme/api branch=fix/login go",
        Named("acme/api", "fix/login", said="repo=acme/api"),
    ),
    ("branch alone", "branch=hotfix go", Named(None, "hotfix", said="branch=hotfix")),
    (
        "repository link",
        "see <https://github.com/acme/api>",
        Named("acme/api", said="https://github.com/acme/api"),
    ),
    (
        "pull request link",
        "review https://github.com/acme/api/pull/12/files please",
        Named("acme/api", pull=12, said="https://github.com/acme/api/pull/12/files"),
    ),
    (
        "issue link names the repository",
        "https://github.com/acme/api/issues/3",
        Named("acme/api", said="https://github.com/acme/api/issues/3"),
    ),
    (
        "two linked repositories decide nothing",
        "https://github.com/a/b vs https://github.com/c/d",
        None,
    ),
    ("a look-alike host", "https://github.com.evil.test/acme/api", None),
    ("a GitHub page, not a repository", "https://github.com/orgs/acme", None),
    ("plain text", "please fix the build", None),
    ("a word that only contains repo=", "myrepo=acme/api", None),
    (
        "a climbing name",
        "repo=../../etc/passwd",
        Unreadable("`../../etc/passwd` is not a repository name (write repo=owner/name)"),
    ),
    (
        "a name that is a parent directory",
        "repo=acme/..",
        Unreadable("`acme/..` is not a repository name (write repo=owner/name)"),
    ),
    (
        "an option",
        "repo=-x/y",
        Unreadable("`-x/y` is not a repository name (write repo=owner/name)"),
    ),
    (
        "an empty name",
        "repo= fix",
        Unreadable("`` is not a repository name (write repo=owner/name)"),
    ),
    ("two repositories", "repo=a/b repo=c/d", Unreadable("it names more than one repository")),
    (
        "a hostile branch",
        "repo=a/b branch=--upload-pack=x",
        Unreadable("`--upload-pack=x` is not a branch name"),
    ),
    ("a climbing branch", "repo=a/b branch=a/../b", Unreadable("`a/../b` is not a branch name")),
    ("two branches", "branch=a branch=b", Unreadable("it names more than one branch")),
]


@pytest.mark.parametrize(("text", "expected"), [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_named_in_reads_the_request_when_table_case(
    text: str, expected: Named | Unreadable | None
) -> None:
    assert named_in(text) == expected


def test_named_in_stays_fast_when_the_text_is_huge() -> None:
    text = " ".join(f"https://github.com/o{n}/r{n}" for n in range(5000))
    assert named_in(text) is None
    assert named_in("repo=" + "a" * 100_000) == Unreadable(
        f"`{'a' * 80}` is not a repository name (write repo=owner/name)"
    )


def test_directives_leave_the_text_when_the_model_reads_it() -> None:
    said = "repo=acme/api please fix <https://github.com/acme/api/pull/3> branch=x now"
    assert without_directives(said) == "please fix <https://github.com/acme/api/pull/3> now"


def test_a_pick_reads_back_when_it_names_its_question() -> None:
    text = answer_text("repo:s_0a1b", "acme/api")
    assert text == "repo s_0a1b acme/api"
    picked = picked_of(text)
    assert picked is not None and (picked.question, picked.repo) == ("s_0a1b", "acme/api")
    none = picked_of("repo s_0a1b -")
    assert none is not None and none.repo is None


@pytest.mark.parametrize("name", ["repo:", "repo:x y", "repo:s_ZZ", "stop", "repo:s_1/../2"])
def test_a_pick_is_refused_when_its_question_is_no_signal_id(name: str) -> None:
    assert answer_text(name, "acme/api") is None


def test_plan_ref_drops_what_a_plan_should_not_hold_when_damaged() -> None:
    assert plan_ref({"branch": "fix/a", "pull": 3}) == ("fix/a", 3)
    assert plan_ref({"branch": "-rf", "pull": True}) == (None, None)
    assert plan_ref(None) == (None, None)
