"""GitHub webhook deliveries → Signals. Pure: no I/O, no clock, never raises.

Only the fields Keel reads are modelled; a payload whose fields do not fit is acknowledged and
dropped as `unsupported` with the reason. The actor's repository permission is left unknown
here: the adapter enriches it afterwards.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from routing.reviews import review_text
from routing.signal import (
    Actor,
    CiRun,
    Ignored,
    Signal,
    SignalKind,
    find_links,
    parse_command,
)
from runtime.config import AutoReview
from runtime.threads import GitHubCommit, GitHubIssue, ThreadRef

# Both go into thread refs, so they must have exactly the shape GitHub gives them.
FullName = Annotated[str, StringConstraints(pattern=r"^[\w.-]+/[\w.-]+$")]
Number = Annotated[int, Field(gt=0)]
CommitSha = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?$")]

_CI_EVENTS = frozenset({"check_run", "check_suite", "workflow_run"})


@dataclass(frozen=True, slots=True)
class GitHubIdentity:
    """Who "we" are on GitHub: the login we comment as and, for App auth, the App id."""

    bot_login: str
    app_id: int | None = None


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _User(_Payload):
    login: str
    id: int
    type: str = "User"


class _App(_Payload):
    id: int | None = None
    name: str | None = None


class _Label(_Payload):
    name: str


class _Repository(_Payload):
    full_name: FullName


class _Common(_Payload):
    action: str | None = None
    sender: _User
    repository: _Repository


class _Issue(_Payload):
    number: Number
    title: str
    body: str | None = None
    html_url: str | None = None
    labels: tuple[_Label, ...] = ()
    performed_via_github_app: _App | None = None
    pull_request: dict[str, Any] | None = None  # present when the issue is a pull request


class _Comment(_Payload):
    id: int
    body: str | None = None
    html_url: str | None = None
    performed_via_github_app: _App | None = None


class _Ref(_Payload):
    ref: str
    sha: CommitSha | None = None


class _PullRequest(_Payload):
    number: Number
    title: str
    body: str | None = None
    html_url: str | None = None
    labels: tuple[_Label, ...] = ()
    head: _Ref
    draft: bool = False
    author_association: str | None = None


class _PullRef(_Payload):
    number: Number


class _CheckSuiteRef(_Payload):
    head_branch: str | None = None


class _CheckOutput(_Payload):
    title: str | None = None
    summary: str | None = None
    text: str | None = None


class _CheckRun(_Payload):
    id: int | None = None
    name: str
    head_sha: CommitSha
    conclusion: str | None = None
    app: _App | None = None
    check_suite: _CheckSuiteRef | None = None
    output: _CheckOutput | None = None
    html_url: str | None = None


class _CheckSuite(_Payload):
    head_sha: CommitSha
    head_branch: str | None = None
    conclusion: str | None = None
    app: _App | None = None


class _WorkflowRun(_Payload):
    name: str | None = None
    head_sha: CommitSha
    head_branch: str | None = None
    conclusion: str | None = None


class _IssueCommentEvent(_Common):
    issue: _Issue
    comment: _Comment


class _IssuesEvent(_Common):
    issue: _Issue


class _ReviewCommentEvent(_Common):
    pull_request: _PullRef
    comment: _Comment


class _AssignedEvent(_Common):
    issue: _Issue
    assignee: _User | None = None


class _LabeledEvent(_Common):
    issue: _Issue
    label: _Label | None = None


class _Review(_Payload):
    id: int
    body: str | None = None
    html_url: str | None = None
    state: str | None = None  # "changes_requested", "approved", "commented" (lowercase)


class _ReviewEvent(_Common):
    pull_request: _PullRef
    review: _Review


class _PullRequestEvent(_Common):
    pull_request: _PullRequest


class _ReviewRequestedEvent(_PullRequestEvent):
    requested_reviewer: _User | None = None  # absent when a team was asked


class _CheckRunEvent(_Common):
    check_run: _CheckRun


class _CheckSuiteEvent(_Common):
    check_suite: _CheckSuite


class _WorkflowRunEvent(_Common):
    workflow_run: _WorkflowRun


_M = TypeVar("_M", bound=_Payload)


@dataclass(frozen=True, slots=True)
class _Delivery:
    event: str
    delivery_id: str
    identity: GitHubIdentity
    received_at: datetime
    trigger: re.Pattern[str]
    trigger_label: str | None = None
    auto_review: tuple[AutoReview, ...] = ()


@dataclass(frozen=True, slots=True)
class _Facts:
    """The provider facts a Signal carries for routing, beyond who said what where."""

    branch: str | None = None
    labels: tuple[str, ...] = ()
    ci: CiRun | None = None
    comment_id: int | None = None  # the comment the Signal is, inside its issue or pull
    url: str | None = None


@dataclass(frozen=True, slots=True)
class _CiFacts:
    common: _Common
    ci: CiRun
    head_sha: str
    branch: str | None
    report: str = ""  # the check's own title, summary and text, bounded


@dataclass(frozen=True, slots=True)
class _Said:
    """What a comment, issue or pull request says, once the trigger is accounted for."""

    text: str
    addressed: bool
    command_text: str


def signal_from_github(
    event: str,
    delivery_id: str,
    payload: Mapping[str, Any],
    identity: GitHubIdentity,
    *,
    received_at: datetime,
    trigger: str = "@keel",
    trigger_label: str | None = None,
    auto_review: tuple[AutoReview, ...] = (),
) -> Signal | Ignored:
    """Translate one webhook delivery (X-GitHub-Event, X-GitHub-Delivery, body) or say why
    not; ``auto_review`` names the repositories whose pull requests are reviewed unasked."""
    if not delivery_id:
        return Ignored("unsupported", "no delivery id")
    delivery = _Delivery(
        event,
        delivery_id,
        identity,
        received_at,
        _trigger_pattern(trigger),
        trigger_label,
        auto_review,
    )
    action = payload.get("action") if isinstance(payload, Mapping) else None
    match event, action:
        case "ping", _:
            return Ignored("unsupported", "ping")
        case "issue_comment" | "issues" | "pull_request" | "pull_request_review_comment", "edited":
            return Ignored("edited", f"{event}.edited")
        case "issue_comment", "created":
            return _issue_comment(payload, delivery)
        case "issues", "opened":
            return _issue_opened(payload, delivery)
        case "pull_request_review_comment", "created":
            return _review_comment(payload, delivery)
        case "pull_request", "opened":
            return _pr_opened(payload, delivery)
        case "pull_request", "ready_for_review" | "synchronize":
            return _pr_updated(payload, delivery)
        case "pull_request", "review_requested":
            return _review_requested(payload, delivery)
        case "issues", "assigned":
            return _issue_assigned(payload, delivery)
        case "issues", "labeled":
            return _issue_labeled(payload, delivery)
        case "pull_request_review", "submitted":
            return _review_submitted(payload, delivery)
        case ci, "completed" if ci in _CI_EVENTS:
            return _ci_result(payload, delivery)
        case _:
            return Ignored("unsupported", f"{event}.{action}" if action else event)


def _issue_comment(payload: Mapping[str, Any], delivery: _Delivery) -> Signal | Ignored:
    parsed = _parse(_IssueCommentEvent, payload)
    if isinstance(parsed, Ignored):
        return parsed
    issue, comment = parsed.issue, parsed.comment
    said = _said(comment.body or "", delivery.trigger)
    if issue.pull_request is not None:
        said = _as_review(said, issue.number)
    actor = _actor(parsed.sender, delivery.identity, comment.performed_via_github_app)
    return _signal(
        delivery,
        parsed,
        kind="issue_comment",
        thread_ref=GitHubIssue(parsed.repository.full_name, issue.number),
        actor=actor,
        said=said,
        dedupe_key=f"github:{comment.id}:{parsed.action}",
        facts=_Facts(labels=_names(issue.labels), comment_id=comment.id, url=comment.html_url),
    )


def _issue_opened(payload: Mapping[str, Any], delivery: _Delivery) -> Signal | Ignored:
    parsed = _parse(_IssuesEvent, payload)
    if isinstance(parsed, Ignored):
        return parsed
    issue = parsed.issue
    said = _said(_title_and_body(issue.title, issue.body), delivery.trigger)
    return _signal(
        delivery,
        parsed,
        kind="issue_opened",
        thread_ref=GitHubIssue(parsed.repository.full_name, issue.number),
        actor=_actor(parsed.sender, delivery.identity, issue.performed_via_github_app),
        said=said,
        dedupe_key=f"github:delivery:{delivery.delivery_id}",
        facts=_Facts(labels=_names(issue.labels), url=issue.html_url),
    )


def _issue_assigned(payload: Mapping[str, Any], delivery: _Delivery) -> Signal | Ignored:
    """Assigning an issue to the bot asks it to work on the issue."""
    parsed = _parse(_AssignedEvent, payload)
    if isinstance(parsed, Ignored):
        return parsed
    assignee = parsed.assignee
    if assignee is None or not _is_self(assignee, delivery.identity, ()):
        return Ignored("not_addressed", "issues.assigned to someone else")
    return _issue_request(parsed, parsed.issue, delivery, "assigned")


def _issue_labeled(payload: Mapping[str, Any], delivery: _Delivery) -> Signal | Ignored:
    """Labelling an issue with ``github.trigger_label`` asks the bot to work on the issue."""
    parsed = _parse(_LabeledEvent, payload)
    if isinstance(parsed, Ignored):
        return parsed
    wanted = delivery.trigger_label
    if not wanted or parsed.label is None or parsed.label.name.lower() != wanted.lower():
        return Ignored("not_addressed", "issues.labeled with another label")
    return _issue_request(parsed, parsed.issue, delivery, "labeled")


def _issue_request(
    common: _Common, issue: _Issue, delivery: _Delivery, how: str
) -> Signal:
    said = _said(_title_and_body(issue.title, issue.body), delivery.trigger)
    return _signal(
        delivery,
        common,
        kind="issue_opened",
        thread_ref=GitHubIssue(common.repository.full_name, issue.number),
        actor=_actor(common.sender, delivery.identity, None),
        said=_Said(said.text, True, said.command_text),
        # One request per delivery: a redelivery keeps its id, so it is the same fact.
        dedupe_key=f"github:{how}:{delivery.delivery_id}",
        facts=_Facts(labels=_names(issue.labels), url=issue.html_url),
    )


def _review_submitted(payload: Mapping[str, Any], delivery: _Delivery) -> Signal | Ignored:
    parsed = _parse(_ReviewEvent, payload)
    if isinstance(parsed, Ignored):
        return parsed
    review = parsed.review
    said = _said(review.body or "", delivery.trigger)
    # Changes requested pass without a mention: routing knows whether the pull request is a
    # task's (a follow-up of that task) or not (dropped there, with its reason recorded).
    changes = (review.state or "").lower() == "changes_requested"
    if not (said.addressed or changes):
        return Ignored("not_addressed", "pull_request_review.submitted without a mention")
    if changes and not said.text.strip():
        said = _Said("Changes requested in a review.", said.addressed, said.command_text)
    return _signal(
        delivery,
        parsed,
        kind="review_comment",
        thread_ref=GitHubIssue(parsed.repository.full_name, parsed.pull_request.number),
        actor=_actor(parsed.sender, delivery.identity, None),
        said=said,
        dedupe_key=f"github:review:{review.id}:{parsed.action}",
        # GitHub has no reactions on a review: its 👀 goes on the pull request.
        facts=_Facts(url=review.html_url),
    )


def _review_comment(payload: Mapping[str, Any], delivery: _Delivery) -> Signal | Ignored:
    parsed = _parse(_ReviewCommentEvent, payload)
    if isinstance(parsed, Ignored):
        return parsed
    comment = parsed.comment
    return _signal(
        delivery,
        parsed,
        kind="review_comment",
        thread_ref=GitHubIssue(parsed.repository.full_name, parsed.pull_request.number),
        actor=_actor(parsed.sender, delivery.identity, comment.performed_via_github_app),
        said=_said(comment.body or "", delivery.trigger),
        # Review comments and issue comments are numbered separately, so the kind is in the key.
        dedupe_key=f"github:review_comment:{comment.id}:{parsed.action}",
        facts=_Facts(comment_id=comment.id, url=comment.html_url),
    )


def _pr_opened(payload: Mapping[str, Any], delivery: _Delivery) -> Signal | Ignored:
    parsed = _parse(_PullRequestEvent, payload)
    if isinstance(parsed, Ignored):
        return parsed
    pull = parsed.pull_request
    said = _as_review(_said(_title_and_body(pull.title, pull.body), delivery.trigger), pull.number)
    if not said.addressed and _auto_reviewed(parsed, delivery):
        return _review_signal(parsed, delivery, "opened")
    return _signal(
        delivery,
        parsed,
        kind="pr_opened",
        thread_ref=GitHubIssue(parsed.repository.full_name, pull.number),
        actor=_actor(parsed.sender, delivery.identity, None),
        said=said,
        dedupe_key=f"github:delivery:{delivery.delivery_id}",
        facts=_Facts(branch=pull.head.ref, labels=_names(pull.labels), url=pull.html_url),
    )


def _pr_updated(payload: Mapping[str, Any], delivery: _Delivery) -> Signal | Ignored:
    """A new head (``synchronize``) or a draft made ready: reviewed when the repository's
    ``review.auto`` asks for it."""
    parsed = _parse(_PullRequestEvent, payload)
    if isinstance(parsed, Ignored):
        return parsed
    if not _auto_reviewed(parsed, delivery):
        return Ignored("not_addressed", f"pull_request.{parsed.action} without review.auto")
    how = "pushed to" if parsed.action == "synchronize" else "marked ready for review"
    return _review_signal(parsed, delivery, how)


def _review_requested(payload: Mapping[str, Any], delivery: _Delivery) -> Signal | Ignored:
    """A review requested from the bot's login asks for a review of the pull request."""
    parsed = _parse(_ReviewRequestedEvent, payload)
    if isinstance(parsed, Ignored):
        return parsed
    reviewer = parsed.requested_reviewer
    if reviewer is None or not _is_self(reviewer, delivery.identity, ()):
        return Ignored("not_addressed", "pull_request.review_requested of someone else")
    return _review_signal(parsed, delivery, "review requested")


def _review_signal(parsed: _PullRequestEvent, delivery: _Delivery, why: str) -> Signal:
    """One review request per (pull request, head): a review requested on a head that a push
    already asked to review is the same fact, so one review task, not two. The text names
    no login: the sender is the Signal's actor, and its words are not the asker's."""
    pull, repo = parsed.pull_request, parsed.repository.full_name
    head = pull.head.sha or f"delivery:{delivery.delivery_id}"
    text = review_text(pull.number, f"({why}; head {head})")
    return _signal(
        delivery,
        parsed,
        kind="pr_opened",
        thread_ref=GitHubIssue(repo, pull.number),
        actor=_actor(parsed.sender, delivery.identity, None),
        said=_Said(text, True, ""),
        dedupe_key=f"github:review:{repo}#{pull.number}@{head}",
        facts=_Facts(branch=pull.head.ref, labels=_names(pull.labels), url=pull.html_url),
    )


# Whose pull requests are reviewed unasked: people of the repository. An outsider's would be
# refused by routing's permission check on every push, each refusal a reply on the pull
# request; a maintainer asks for their review with "@keel review" instead.
_INSIDERS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})


def _auto_reviewed(parsed: _PullRequestEvent, delivery: _Delivery) -> bool:
    repo, pull = parsed.repository.full_name.lower(), parsed.pull_request
    if (pull.author_association or "").upper() not in _INSIDERS:
        return False
    return any(
        fnmatchcase(repo, rule.repo.lower())
        and parsed.action in rule.on
        and (rule.drafts or not pull.draft)
        for rule in delivery.auto_review
    )


def _as_review(said: _Said, number: int) -> _Said:
    """``@keel review …`` on a pull request, in the one text form review requests have."""
    words = said.text.split(maxsplit=1)
    if not said.addressed or not words or words[0].lower().rstrip(".,:!") != "review":
        return said
    return _Said(review_text(number, words[1] if len(words) > 1 else ""), True, said.command_text)


def _ci_result(payload: Mapping[str, Any], delivery: _Delivery) -> Signal | Ignored:
    found = _ci_facts(payload, delivery.event)
    if isinstance(found, Ignored):
        return found
    ci = found.ci
    text = f"{ci.name}: {ci.conclusion} on {found.head_sha}"
    said = _Said(f"{text}\n{found.report}" if found.report else text, False, "")
    return _signal(
        delivery,
        found.common,
        kind="ci_result",
        thread_ref=GitHubCommit(found.common.repository.full_name, found.head_sha),
        actor=_actor(found.common.sender, delivery.identity, None),
        said=said,
        dedupe_key=f"github:delivery:{delivery.delivery_id}",
        facts=_Facts(branch=found.branch, ci=ci),
    )


def _ci_facts(payload: Mapping[str, Any], event: str) -> _CiFacts | Ignored:
    """The common CI facts of a check run, check suite or workflow run, named alike."""
    match event:
        case "check_run":
            run = _parse(_CheckRunEvent, payload)
            if isinstance(run, Ignored):
                return run
            check = run.check_run
            branch = check.check_suite.head_branch if check.check_suite else None
            ci = CiRun(check.name, check.conclusion, _app_id(check.app))
            return _CiFacts(run, ci, check.head_sha, branch, _check_report(check))
        case "check_suite":
            suite = _parse(_CheckSuiteEvent, payload)
            if isinstance(suite, Ignored):
                return suite
            found = suite.check_suite
            name = (found.app.name if found.app else None) or "check_suite"
            ci = CiRun(name, found.conclusion, _app_id(found.app))
            return _CiFacts(suite, ci, found.head_sha, found.head_branch)
        case _:
            flow = _parse(_WorkflowRunEvent, payload)
            if isinstance(flow, Ignored):
                return flow
            found_run = flow.workflow_run
            ci = CiRun(found_run.name or "workflow_run", found_run.conclusion)
            return _CiFacts(flow, ci, found_run.head_sha, found_run.head_branch)


REPORT_LIMIT = 4000


def _check_report(check: _CheckRun) -> str:
    """What the check said about itself: title, summary, and the tail of its text."""
    output = check.output or _CheckOutput()
    parts = [p.strip() for p in (output.title, output.summary) if p and p.strip()]
    if output.text and output.text.strip():
        text = output.text.strip()
        tail = text[-REPORT_LIMIT:]
        parts.append(tail if len(tail) == len(text) else f"…{tail}")
    if check.html_url:
        parts.append(check.html_url)
    if check.id is not None:
        parts.append(f"check run {check.id} (ci_job_log reads its log)")
    report = "\n".join(parts)
    return report[: REPORT_LIMIT * 2]


def _app_id(app: _App | None) -> int | None:
    return app.id if app else None


def _signal(
    delivery: _Delivery,
    common: _Common,
    *,
    kind: SignalKind,
    thread_ref: ThreadRef,
    actor: Actor,
    said: _Said,
    dedupe_key: str,
    facts: _Facts,
) -> Signal:
    return Signal(
        provider="github",
        delivery_id=delivery.delivery_id,
        kind=kind,
        thread_ref=thread_ref,
        objective_key=str(thread_ref),
        actor=actor,
        text=said.text,
        addresses_bot=said.addressed,
        command=parse_command(said.command_text),
        links=find_links(said.text),
        received_at=delivery.received_at,
        dedupe_key=dedupe_key,
        event_action=common.action,
        event=delivery.event,
        branch=facts.branch,
        labels=facts.labels,
        ci=facts.ci,
        message=_message(thread_ref, facts.comment_id),
        url=facts.url,
    )


def _message(thread_ref: ThreadRef, comment_id: int | None) -> ThreadRef | None:
    if comment_id is None or not isinstance(thread_ref, GitHubIssue):
        return None
    return thread_ref.comment(comment_id)


def _actor(sender: _User, identity: GitHubIdentity, via_app: _App | None) -> Actor:
    is_self = _is_self(sender, identity, (via_app.id,) if via_app else ())
    return Actor(
        id=str(sender.id),
        name=sender.login,
        is_bot=sender.type == "Bot",
        is_self=is_self,
    )


def _is_self(sender: _User, identity: GitHubIdentity, via_app_ids: Iterable[int | None]) -> bool:
    login, ours = sender.login.lower(), identity.bot_login.lower()
    if login == ours:
        return True
    # An App acts as "<slug>[bot]"; configuration may name it with or without the suffix.
    if sender.type == "Bot" and login in (ours, f"{ours}[bot]", ours.removesuffix("[bot]")):
        return True
    return identity.app_id is not None and identity.app_id in via_app_ids


def _said(text: str, trigger: re.Pattern[str]) -> _Said:
    addressed = trigger.search(text) is not None
    stripped = text.strip()
    leading = trigger.match(stripped)
    cleaned = stripped[leading.end() :].strip() if leading else stripped
    return _Said(cleaned, addressed, trigger.sub(" ", text))


def _trigger_pattern(trigger: str) -> re.Pattern[str]:
    # "@keel" must not match "@keeler" or "foo@keel.dev"; logins are case-insensitive.
    return re.compile(rf"(?<![\w.-]){re.escape(trigger)}(?![\w-])", re.IGNORECASE)


def _title_and_body(title: str, body: str | None) -> str:
    return f"{title}\n\n{body}" if body else title


def _names(labels: tuple[_Label, ...]) -> tuple[str, ...]:
    return tuple(label.name for label in labels)


def _parse(model: type[_M], payload: Mapping[str, Any]) -> _M | Ignored:
    try:
        return model.model_validate(payload)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or model.__name__
        return Ignored("unsupported", f"{where}: {first['msg']}")
