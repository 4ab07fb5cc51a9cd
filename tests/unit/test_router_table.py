"""Routing as a table: every route and every drop reason, decided by the pure `decide`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, get_args

import pytest

from routing.config import DaemonConfig, DaemonsConfig, RoutingConfig, WatchRule
from routing.daemons import Watch, daemon_from_config
from routing.policy import RoutingPolicy
from routing.repos import Chosen
from routing.router import (
    Append,
    AskRepo,
    ChooseRepo,
    Daemon,
    Drop,
    NewTask,
    Route,
    RoutingView,
    Stop,
    TaskView,
    decide,
)
from routing.signal import Actor, CiRun, DropReason, Signal
from runtime.ids import SignalId, TaskId
from runtime.store.records import TaskStatus
from runtime.threads import GitHubCommit, GitHubIssue, LocalThread, SlackThread, ThreadRef
from tests.factories import THREAD, make_signal

ISSUE = GitHubIssue("acme/api", 7)
CI_THREAD = GitHubCommit("acme/api", "a" * 40)

MALLORY = Actor(id="U666", name="mallory", is_bot=False, is_self=False)
US_SLACK = Actor(id="W111", name="keel", is_bot=True, is_self=True)
OCTO = Actor(id="101", name="octo", is_bot=False, is_self=False, permission="write")
IN_C9 = SlackThread("T1", "C9", "1700000000.000100")


def mention(**overrides: Any) -> Signal:
    return make_signal(**{"kind": "mention", "addresses_bot": True, **overrides})


def github_comment(**overrides: Any) -> Signal:
    values: dict[str, Any] = {
        "provider": "github",
        "delivery_id": "d-1",
        "kind": "issue_comment",
        "thread_ref": ISSUE,
        "actor": OCTO,
        "text": "please keep the public API unchanged",
        "dedupe_key": "github:9001:created",
        "event_action": "created",
        "event": "issue_comment",
    }
    values.update(overrides)
    return make_signal(**values)


def ci_result(**overrides: Any) -> Signal:
    values: dict[str, Any] = {
        "kind": "ci_result",
        "thread_ref": CI_THREAD,
        "actor": Actor(id="101", name="octo", is_bot=False, is_self=False),
        "text": f"lint: failure on {'a' * 40}",
        "dedupe_key": "github:delivery:d-ci",
        "event": "check_run",
        "branch": "main",
        "ci": CiRun("lint", "failure", app_id=15368),
    }
    values.update(overrides)
    return github_comment(**values)


def reaction(name: str, **overrides: Any) -> Signal:
    stop = name == "octagonal_sign"
    values: dict[str, Any] = {
        "kind": "reaction",
        "text": f":{name}:",
        "addresses_bot": stop,
        "command": "stop" if stop else None,
        "dedupe_key": f"slack:T1:C1:1700000000.000100:reaction:{name}:U1:1700000001.0",
        "reaction": name,
    }
    values.update(overrides)
    return make_signal(**values)


def task(task_id: str, status: TaskStatus, thread: ThreadRef = THREAD) -> TaskView:
    return TaskView(TaskId(task_id), status, thread, str(thread), "U1")


ACTIVE = task("t_active", TaskStatus.running)
DONE = task("t_done", TaskStatus.succeeded)
ISSUE_TASK = task("t_issue", TaskStatus.running, ISSUE)
DAEMON_TASK = TaskView(TaskId("t_daemon"), TaskStatus.waiting, CI_THREAD, "daemon:ci-doctor")

BUSY = RoutingView(active_task=ACTIVE)
FINISHED = RoutingView(latest_task=DONE)
EMPTY = RoutingView()

CI_DOCTOR = daemon_from_config(
    DaemonConfig(
        id="ci-doctor",
        agent="fixer",
        purpose="Diagnose failed CI on main",
        watch=(
            WatchRule(provider="github", kind="check_run", branch="main", conclusion="failure"),
        ),
    )
)
TRIAGE = replace(
    CI_DOCTOR,
    daemon_id="triage",
    agent="default",
    watch=(Watch(provider="github", kind="issue_opened", label="bug", repo="acme/api"),),
)
POLICY = RoutingPolicy.from_config(
    RoutingConfig(),
    DaemonsConfig(),
    slack_allowed_users=("U1",),
    slack_allowed_channels=("C1",),
    github_allowed_bots=("renovate[bot]",),
    github_bot_login="keel-bot",
    github_app_id=4242,
)
DAEMONS = replace(POLICY, daemons=(CI_DOCTOR, TRIAGE))
NO_JOIN = replace(POLICY, join_thread_replies=False)
READ_OK = replace(POLICY, github_min_permission="read")
MAINTAIN = replace(POLICY, github_min_permission="maintain")
CUSTOM_STOP = replace(POLICY, stop_words=frozenset({"halt"}), stop_reaction="no_entry_sign")


@dataclass(frozen=True)
class Known:
    """The repositories Keel reaches, as the composition root's Checkouts would say."""

    names: tuple[str, ...]

    def knows(self, repo: str) -> bool:
        return repo in self.names

    def offered(self) -> Sequence[str]:
        return self.names


REACHING = replace(POLICY, reach=Known(("probe/one", "probe/two")))
MAPPED = replace(REACHING, channel_repos=MappingProxyType({"C1": "probe/one"}))
DONE_IN_TWO = replace(DONE, repo="probe/two")
PICK = "repo s_0123abcd probe/two"

KEY = "slack:T1:C1:1700000000.000200"
KEEL_BOT = Actor(id="102", name="keel-bot", is_bot=False, is_self=False)
MESSAGE = "it only happens in Safari"


def new_task(objective: ThreadRef | str = THREAD, message: str = MESSAGE, **kw: Any) -> NewTask:
    return NewTask(objective_key=str(objective), message=message, **kw)


CASES: list[tuple[str, Signal, RoutingView, RoutingPolicy, Route]] = [
    # -- append: later input for a live owner
    ("follow-up in active thread", make_signal(), BUSY, POLICY, Append(ACTIVE, KEY)),
    ("mention in active thread", mention(), BUSY, POLICY, Append(ACTIVE, KEY)),
    ("mention appends when replies need one", mention(), BUSY, NO_JOIN, Append(ACTIVE, KEY)),
    (
        "issue comment in the active issue",
        github_comment(),
        RoutingView(active_task=ISSUE_TASK),
        POLICY,
        Append(ISSUE_TASK, "github:9001:created"),
    ),
    (
        "'stop using the cache' is a request, not a stop",
        mention(text="stop using the cache"),
        BUSY,
        POLICY,
        Append(ACTIVE, KEY),
    ),
    # -- new task
    ("mention with no task", mention(), EMPTY, POLICY, new_task()),
    (
        "follow-up after completion links to the old task",
        mention(),
        FINISHED,
        POLICY,
        new_task(follows=DONE),
    ),
    (
        "new: prefix in a busy thread",
        mention(text="new: bump the SDK"),
        BUSY,
        POLICY,
        new_task(f"{THREAD}+{KEY}", "bump the SDK"),
    ),
    (
        "new: prefix as a joining reply in a busy thread",
        make_signal(text="NEW: bump the SDK"),
        BUSY,
        POLICY,
        new_task(f"{THREAD}+{KEY}", "bump the SDK"),
    ),
    (
        "new: prefix in a quiet thread keeps the thread key",
        mention(text="new: bump the SDK"),
        EMPTY,
        POLICY,
        new_task(THREAD, "bump the SDK"),
    ),
    (
        "new: prefix on a busy issue gets a suffixed objective",
        github_comment(text="new: also fix the docs", addresses_bot=True),
        RoutingView(active_task=ISSUE_TASK),
        POLICY,
        new_task(f"{ISSUE}+github:9001:created", "also fix the docs"),
    ),
    (
        "direct message",
        make_signal(kind="message", addresses_bot=True),
        EMPTY,
        POLICY,
        new_task(),
    ),
    (
        "github admin mention",
        github_comment(
            addresses_bot=True,
            actor=Actor("101", "octo", is_bot=False, is_self=False, permission="admin"),
        ),
        EMPTY,
        POLICY,
        new_task(ISSUE, "please keep the public API unchanged"),
    ),
    (
        "unknown permission is enough when the minimum is read",
        github_comment(addresses_bot=True, actor=Actor("101", "octo", False, False)),
        EMPTY,
        READ_OK,
        new_task(ISSUE, "please keep the public API unchanged"),
    ),
    (
        "allow-listed bot needs no collaborator permission",
        github_comment(addresses_bot=True, actor=Actor("29139614", "renovate[bot]", True, False)),
        EMPTY,
        POLICY,
        new_task(ISSUE, "please keep the public API unchanged"),
    ),
    # -- stop: lifecycle authority
    ("stop from the requester", mention(text="stop", command="stop"), BUSY, POLICY, Stop(ACTIVE)),
    (
        "cancel without a mention in the thread",
        make_signal(text="Cancel!"),
        BUSY,
        POLICY,
        Stop(ACTIVE),
    ),
    ("stop reaction", reaction("octagonal_sign"), BUSY, POLICY, Stop(ACTIVE)),
    ("configured stop word", make_signal(text="halt"), BUSY, CUSTOM_STOP, Stop(ACTIVE)),
    ("configured stop reaction", reaction("no_entry_sign"), BUSY, CUSTOM_STOP, Stop(ACTIVE)),
    (
        "'cancel' is only a follow-up when stop_words is [halt]",
        mention(text="cancel", command="stop"),
        BUSY,
        CUSTOM_STOP,
        Append(ACTIVE, KEY),
    ),
    (
        "the default stop octagon no longer stops when the stop reaction is another",
        reaction("octagonal_sign"),
        BUSY,
        CUSTOM_STOP,
        Drop("not_addressed"),
    ),
    ("typed stop glyph", mention(text="🛑", command="stop"), BUSY, POLICY, Stop(ACTIVE)),
    ("typed stop shortcode", mention(text=":octagonal_sign:"), BUSY, POLICY, Stop(ACTIVE)),
    (
        "stop from an unauthorised user",
        mention(text="stop", command="stop", actor=MALLORY),
        BUSY,
        POLICY,
        Drop("unauthorised"),
    ),
    (
        "stop reaction from an unauthorised user",
        reaction("octagonal_sign", actor=MALLORY),
        BUSY,
        POLICY,
        Drop("unauthorised"),
    ),
    (
        "stop with nothing running",
        mention(text="stop", command="stop"),
        FINISHED,
        POLICY,
        Drop("not_addressed"),
    ),
    # -- answers to an approval question (the waiting task reads them as replies)
    (
        "approve reaction",
        reaction("white_check_mark"),
        BUSY,
        POLICY,
        Append(ACTIVE, "slack:T1:C1:1700000000.000100:reaction:white_check_mark:U1:1700000001.0"),
    ),
    (
        "approve reaction from an unauthorised user",
        reaction("white_check_mark", actor=MALLORY),
        BUSY,
        POLICY,
        Drop("unauthorised"),
    ),
    (
        "approve reaction with nothing running",
        reaction("white_check_mark"),
        FINISHED,
        POLICY,
        Drop("not_addressed"),
    ),
    (
        "approve click",
        make_signal(kind="action", text="approve call=c1", addresses_bot=True),
        BUSY,
        POLICY,
        Append(ACTIVE, KEY),
    ),
    (
        "reject click from an unauthorised user",
        make_signal(kind="action", text="reject call=c1", addresses_bot=True, actor=MALLORY),
        BUSY,
        POLICY,
        Drop("unauthorised"),
    ),
    ("another reaction is no answer", reaction("tada"), BUSY, POLICY, Drop("not_addressed")),
    # -- a pull request a task opened (intake marked the signal linked)
    (
        "review comment on a linked pull request needs no mention",
        github_comment(kind="review_comment", linked=ISSUE),
        BUSY,
        POLICY,
        Append(ACTIVE, "github:9001:created"),
    ),
    (
        "review comment on an unlinked pull request needs a mention",
        github_comment(kind="review_comment"),
        BUSY,
        POLICY,
        Drop("not_addressed"),
    ),
    (
        "review comment on a linked pull request after its task ended",
        github_comment(kind="review_comment", linked=ISSUE, objective_key=str(THREAD)),
        FINISHED,
        POLICY,
        NewTask(str(THREAD), "please keep the public API unchanged", follows=DONE),
    ),
    (
        "failed check on a linked head",
        ci_result(linked=ISSUE, actor=KEEL_BOT),
        BUSY,
        POLICY,
        Append(ACTIVE, "github:delivery:d-ci"),
    ),
    (
        "passing check on a linked head",
        ci_result(linked=ISSUE, ci=CiRun("lint", "success")),
        BUSY,
        POLICY,
        Drop("not_addressed"),
    ),
    (
        "the same check failing again on a linked head",
        ci_result(linked=ISSUE),
        RoutingView(active_task=ACTIVE, is_duplicate=True),
        POLICY,
        Drop("duplicate"),
    ),
    (
        "a failed check on a linked head past the cap",
        ci_result(linked=ISSUE),
        RoutingView(active_task=ACTIVE, ci_followups=3),
        POLICY,
        Drop("capped"),
    ),
    (
        "a linked check run by our own app",
        ci_result(linked=ISSUE, ci=CiRun("k", "failure", 4242)),
        BUSY,
        POLICY,
        Drop("self_generated"),
    ),
    # -- daemons
    (
        "daemon claims a failed check run",
        ci_result(),
        EMPTY,
        DAEMONS,
        Daemon("ci-doctor", "fixer", "daemon:ci-doctor"),
    ),
    (
        "daemon event joins its live activation",
        ci_result(),
        RoutingView(daemon_tasks={"ci-doctor": DAEMON_TASK}),
        DAEMONS,
        Daemon("ci-doctor", "fixer", "daemon:ci-doctor", DAEMON_TASK),
    ),
    (
        "daemon ignores its own push",
        ci_result(actor=Actor(id="102", name="keel-bot", is_bot=False, is_self=False)),
        EMPTY,
        DAEMONS,
        Drop("self_generated"),
    ),
    (
        "daemon ignores a run created by our app",
        ci_result(ci=CiRun("lint", "failure", app_id=4242)),
        EMPTY,
        DAEMONS,
        Drop("self_generated"),
    ),
    (
        "passing check is not watched",
        ci_result(ci=CiRun("lint", "success")),
        EMPTY,
        DAEMONS,
        Drop("not_addressed"),
    ),
    (
        "other branch is not watched",
        ci_result(branch="feature"),
        EMPTY,
        DAEMONS,
        Drop("not_addressed"),
    ),
    (
        "a run without a branch is not watched",
        ci_result(branch=None),
        EMPTY,
        DAEMONS,
        Drop("not_addressed"),
    ),
    (
        "another event named like the rule's kind is not watched",
        ci_result(event="workflow_run"),
        EMPTY,
        DAEMONS,
        Drop("not_addressed"),
    ),
    (
        "label rule claims a bug report",
        github_comment(kind="issue_opened", labels=("bug",)),
        EMPTY,
        DAEMONS,
        Daemon("triage", "default", "daemon:triage"),
    ),
    (
        "label rule is scoped to its repository",
        github_comment(kind="issue_opened", thread_ref=GitHubIssue("acme/web", 7), labels=("bug",)),
        EMPTY,
        DAEMONS,
        Drop("not_addressed"),
    ),
    # -- drops
    ("our own slack post", mention(actor=US_SLACK), BUSY, POLICY, Drop("self_generated")),
    (
        "a GitHub comment by our own app",
        github_comment(
            addresses_bot=True,
            actor=Actor("41898282", "keel-bot[bot]", is_bot=True, is_self=True),
        ),
        RoutingView(active_task=ISSUE_TASK),
        POLICY,
        Drop("self_generated"),
    ),
    (
        "our login even when the adapter missed it",
        github_comment(addresses_bot=True, actor=Actor("103", "Keel-Bot", False, False, "write")),
        EMPTY,
        POLICY,
        Drop("self_generated"),
    ),
    (
        "duplicate fact",
        mention(),
        RoutingView(active_task=ACTIVE, is_duplicate=True),
        POLICY,
        Drop("duplicate"),
    ),
    (
        "self wins over duplicate",
        mention(actor=US_SLACK),
        RoutingView(is_duplicate=True),
        POLICY,
        Drop("self_generated"),
    ),
    ("edit", mention(kind="edit"), BUSY, POLICY, Drop("edited")),
    ("unsupported kind", mention(kind="other"), EMPTY, POLICY, Drop("unsupported")),
    ("plain reaction is never appended", reaction("eyes"), BUSY, POLICY, Drop("not_addressed")),
    ("reply in a quiet thread", make_signal(), EMPTY, POLICY, Drop("not_addressed")),
    (
        "reply after completion without a mention",
        make_signal(),
        FINISHED,
        POLICY,
        Drop("not_addressed"),
    ),
    ("reply when replies need a mention", make_signal(), BUSY, NO_JOIN, Drop("not_addressed")),
    (
        "new: without a mention in a quiet thread",
        make_signal(text="new: x"),
        EMPTY,
        POLICY,
        Drop("not_addressed"),
    ),
    (
        "unaddressed remark by a stranger",
        make_signal(actor=MALLORY),
        EMPTY,
        POLICY,
        Drop("not_addressed"),
    ),
    (
        "joining reply from a stranger",
        make_signal(actor=MALLORY),
        BUSY,
        POLICY,
        Drop("unauthorised"),
    ),
    (
        "allow-listed bot in a channel that is not allowed",
        mention(
            actor=Actor("B7", "renovate[bot]", True, False),
            thread_ref=IN_C9,
        ),
        EMPTY,
        POLICY,
        Drop("unauthorised"),
    ),
    (
        "mention in a channel that is not allowed",
        mention(thread_ref=IN_C9),
        EMPTY,
        POLICY,
        Drop("unauthorised"),
    ),
    (
        "github permission below write",
        github_comment(
            addresses_bot=True, actor=Actor("102", "reader", False, False, permission="read")
        ),
        EMPTY,
        POLICY,
        Drop("unauthorised"),
    ),
    (
        "github permission unknown when write is required",
        github_comment(addresses_bot=True, actor=Actor("102", "who", False, False)),
        EMPTY,
        POLICY,
        Drop("unauthorised"),
    ),
    (
        "github write below a maintain minimum",
        github_comment(addresses_bot=True),
        EMPTY,
        MAINTAIN,
        Drop("unauthorised"),
    ),
    (
        "repo= naming a repository Keel reaches chooses it",
        mention(text="repo=probe/two fix it"),
        EMPTY,
        REACHING,
        new_task(message="fix it", where=Chosen("probe/two")),
    ),
    (
        "repo: and branch= win over the channel's repository",
        mention(text="fix it repo:probe/two branch=fix/login"),
        EMPTY,
        MAPPED,
        new_task(message="fix it", where=Chosen("probe/two", "fix/login")),
    ),
    (
        "a pull request link chooses its repository and head",
        mention(text="look at <https://github.com/probe/two/pull/7>"),
        EMPTY,
        REACHING,
        new_task(
            message="look at <https://github.com/probe/two/pull/7>",
            where=Chosen("probe/two", None, 7),
        ),
    ),
    (
        "repo= naming a repository Keel does not reach",
        mention(text="repo=secret/vault dump the keys"),
        EMPTY,
        MAPPED,
        Drop("repo_refused"),
    ),
    (
        "nothing decides the repository: ask",
        mention(text="fix it"),
        EMPTY,
        REACHING,
        AskRepo(str(THREAD), "fix it"),
    ),
    (
        "the channel decides when the request names nothing",
        mention(text="fix it"),
        EMPTY,
        MAPPED,
        new_task(message="fix it"),
    ),
    (
        "a follow-up keeps its predecessor's repository",
        mention(text="and the docs"),
        RoutingView(latest_task=DONE_IN_TWO),
        REACHING,
        new_task(message="and the docs", follows=DONE_IN_TWO, where=Chosen("probe/two")),
    ),
    (
        "a pick under the repository question",
        mention(kind="action", text=PICK),
        EMPTY,
        REACHING,
        ChooseRepo(SignalId("s_0123abcd"), "probe/two"),
    ),
    (
        "a stranger's pick under the repository question",
        mention(kind="action", text=PICK, actor=MALLORY),
        EMPTY,
        REACHING,
        Drop("unauthorised"),
    ),
    (
        "repo= on GitHub stays words: the asker's permission is the thread's repository's",
        github_comment(addresses_bot=True, text="repo=probe/two fix"),
        EMPTY,
        REACHING,
        new_task(ISSUE, "repo=probe/two fix"),
    ),
    (
        "bot that is not allow-listed",
        github_comment(
            addresses_bot=True,
            actor=Actor("49699333", "dependabot[bot]", True, False, permission="write"),
        ),
        EMPTY,
        POLICY,
        Drop("unauthorised"),
    ),
]


@pytest.mark.parametrize(
    ("signal", "view", "policy", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_decide_routes_signal_when_table_case(
    signal: Signal, view: RoutingView, policy: RoutingPolicy, expected: Route
) -> None:
    assert decide(signal, view, policy) == expected


def test_table_covers_every_route_and_drop_reason_when_counted() -> None:
    routes = {type(case[4]).__name__ for case in CASES}
    reasons = {case[4].reason for case in CASES if isinstance(case[4], Drop)}
    assert len(CASES) >= 30
    assert routes == {"Append", "NewTask", "AskRepo", "ChooseRepo", "Drop", "Daemon", "Stop"}
    assert reasons == set(get_args(DropReason))


def test_decide_is_repeatable_when_called_twice_on_one_snapshot() -> None:
    signal, view = mention(text="new: bump the SDK"), BUSY
    assert decide(signal, view, POLICY) == decide(signal, view, POLICY)


def test_policy_rejects_unknown_permission_when_built_from_config() -> None:
    with pytest.raises(ValueError, match="unknown permission 'owner'"):
        RoutingPolicy.from_config(RoutingConfig(), DaemonsConfig(), github_min_permission="owner")


def test_policy_maps_thread_to_repository_when_channel_is_mapped() -> None:
    policy = RoutingPolicy.from_config(
        RoutingConfig(channel_repos={"C1": "acme/api"}, default_repo="acme/web"), DaemonsConfig()
    )
    assert policy.repo_for(THREAD) == "acme/api"
    assert policy.repo_for(SlackThread("T1", "C2", "1.2")) == "acme/web"
    assert policy.repo_for(GitHubIssue("acme/cli", 4)) == "acme/cli"
    assert policy.repo_for(CI_THREAD) == "acme/api"
    assert policy.repo_for(None) == "acme/web"
    assert policy.repo_for(LocalThread("1700000000.000100")) == "acme/web"  # names no repo


def test_stop_words_come_from_config_only_when_configured_as_halt() -> None:
    policy = RoutingPolicy.from_config(RoutingConfig(stop_words=("Halt",)), DaemonsConfig())
    assert policy.is_stop(mention(text="halt!"))
    assert not policy.is_stop(mention(text="cancel", command="stop"))
    assert not policy.is_stop(mention(text="stop", command="stop"))
