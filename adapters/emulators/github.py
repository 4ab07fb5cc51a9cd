"""An in-memory emulator of the part of GitHub's REST API that Keel uses through PyGithub.

Routes sit at the root (PyGithub's ``base_url`` is the emulator URL, no ``/api/v3``); each
route is named by its operation id in GitHub's description, which is also what
``state.inject("pulls/create", ...)`` matches. Tokens are checked on every call (401 "Bad
credentials"); ``/app`` routes take the app's JWT instead.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import jwt
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from adapters.emulators import github_shapes as shapes
from adapters.emulators.faults import FaultRaised, RecordingMiddleware, gate_of
from adapters.emulators.github_git import GIT_ROUTE, git_smart_http
from adapters.emulators.github_state import (
    CheckRun,
    GitHubState,
    GitHubUser,
    Issue,
    IssueComment,
    PullRequest,
    Reaction,
    Repo,
    Review,
    ReviewComment,
    ReviewState,
    Side,
    diff_lines,
)

Json = dict[str, Any]
_DOCS = "https://docs.github.com/rest"
_REACTIONS = frozenset({"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"})
_APP_ROUTES = frozenset(
    {
        "apps/create-installation-access-token",
        "apps/get-authenticated",
        "apps/get-repo-installation",
        "apps/list-webhook-deliveries",
        "apps/list-installations",
        "apps/redeliver-webhook-delivery",
    }
)


class GitHubError(Exception):
    """An error answer: status code, GitHub's message and optional validation errors."""

    def __init__(
        self, status: int, message: str, errors: list[Json] | list[str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors


def _state(request: Request) -> GitHubState:
    state: GitHubState = request.app.state.github
    return state


def _hosts(request: Request) -> shapes.Hosts:
    return shapes.Hosts(str(request.base_url).rstrip("/"))


def _credential(request: Request) -> str:
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() not in ("token", "bearer") or not credential:
        raise GitHubError(401, "Requires authentication")
    return credential


def _check_app_jwt(state: GitHubState, credential: str) -> None:
    try:
        if state.app_public_key is None:
            claims = jwt.decode(credential, options={"verify_signature": False})
        else:
            claims = jwt.decode(credential, state.app_public_key, algorithms=["RS256"])
    except jwt.PyJWTError as e:
        raise GitHubError(401, "A JSON web token could not be decoded") from e
    if str(claims.get("iss")) != str(state.app_id):
        raise GitHubError(401, "Integration not found")


def _caller(request: Request) -> GitHubUser:
    user: GitHubUser = request.state.caller
    return user


async def _guard(request: Request) -> None:
    """Authenticate, then apply any fault armed for this route."""
    state, route_name = _state(request), request.scope["route"].name
    credential = _credential(request)
    if route_name in _APP_ROUTES:
        _check_app_jwt(state, credential)
        request.state.caller = state.add_user(state.bot_login, "Bot")
    else:
        issued = state.tokens.get(credential)
        if issued is None or not issued.valid(time.time()):
            raise GitHubError(401, "Bad credentials")
        request.state.caller = state.users[issued.login]
        request.state.token = issued
    await gate_of(request.scope).enter(route_name)


def _repo(request: Request, owner: str, repo: str) -> Repo:
    state, full_name = _state(request), f"{owner}/{repo}"
    found = state.repos.get(full_name)
    if found is None:
        raise GitHubError(404, "Not Found")
    # An installation token sees only its own installation's repositories.
    issued = getattr(request.state, "token", None)
    if issued is not None and not state.token_reaches(issued, full_name):
        raise GitHubError(404, "Not Found")
    return found


def _issue(repo: Repo, number: int) -> Issue:
    if number not in repo.issues:
        raise GitHubError(404, "Not Found")
    return repo.issues[number]


def _comment(repo: Repo, comment_id: int) -> IssueComment:
    if comment_id not in repo.comments:
        raise GitHubError(404, "Not Found")
    return repo.comments[comment_id]


async def _body(request: Request) -> Json:
    try:
        body = await request.json()
    except ValueError as e:
        raise GitHubError(400, "Problems parsing JSON") from e
    if not isinstance(body, dict):
        raise GitHubError(400, "Problems parsing JSON")
    return body


def _required_text(body: Json, name: str, resource: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        missing = {"resource": resource, "code": "missing_field", "field": name}
        raise GitHubError(422, "Validation Failed", [missing])
    return value


def _paged(request: Request, items: list[Json]) -> JSONResponse:
    """One page of ``items`` with GitHub's ``Link`` header when more pages follow."""
    per_page = min(int(request.query_params.get("per_page", 30)), 100)
    page = max(int(request.query_params.get("page", 1)), 1)
    last = max((len(items) + per_page - 1) // per_page, 1)
    headers = {}
    if page < last:
        next_url = request.url.include_query_params(page=page + 1, per_page=per_page)
        last_url = request.url.include_query_params(page=last, per_page=per_page)
        headers["Link"] = f'<{next_url}>; rel="next", <{last_url}>; rel="last"'
    return JSONResponse(items[(page - 1) * per_page : page * per_page], headers=headers)


async def get_repo(request: Request, owner: str, repo: str) -> Json:
    return shapes.repo_json(_hosts(request), _repo(request, owner, repo), full=True)


async def get_issue(request: Request, owner: str, repo: str, issue_number: int) -> Json:
    found = _repo(request, owner, repo)
    return shapes.issue_json(_hosts(request), found, _issue(found, issue_number))


async def list_comments(request: Request, owner: str, repo: str, issue_number: int) -> Response:
    found = _repo(request, owner, repo)
    issue, hosts = _issue(found, issue_number), _hosts(request)
    comments = [shapes.comment_json(hosts, found, found.comments[i]) for i in issue.comment_ids]
    return _paged(request, comments)


async def create_comment(request: Request, owner: str, repo: str, issue_number: int) -> Response:
    found = _repo(request, owner, repo)
    issue = _issue(found, issue_number)
    text = _required_text(await _body(request), "body", "IssueComment")
    now = time.time()
    comment = IssueComment(
        _state(request).next_id(), issue.number, text, _caller(request), now, now
    )
    found.comments[comment.comment_id] = comment
    issue.comment_ids.append(comment.comment_id)
    found.created_comments += 1
    body = shapes.comment_json(_hosts(request), found, comment)
    return JSONResponse(body, status_code=201, headers={"Location": body["url"]})


async def update_comment(request: Request, owner: str, repo: str, comment_id: int) -> Json:
    found = _repo(request, owner, repo)
    comment = _comment(found, comment_id)
    comment.body = _required_text(await _body(request), "body", "IssueComment")
    comment.updated_at = time.time()
    return shapes.comment_json(_hosts(request), found, comment)


async def _react(request: Request, repo: Repo, subject: tuple[Any, int]) -> Response:
    content = _required_text(await _body(request), "content", "Reaction")
    if content not in _REACTIONS:
        raise GitHubError(422, "Validation Failed", [{"resource": "Reaction", "code": "invalid"}])
    caller = _caller(request)
    for reaction in repo.reactions:
        if (reaction.subject, reaction.content, reaction.user) == (subject, content, caller):
            return JSONResponse(shapes.reaction_json(_hosts(request), reaction))
    reaction = Reaction(_state(request).next_id(), content, caller, subject, time.time())
    repo.reactions.append(reaction)
    return JSONResponse(shapes.reaction_json(_hosts(request), reaction), status_code=201)


async def react_issue(request: Request, owner: str, repo: str, issue_number: int) -> Response:
    found = _repo(request, owner, repo)
    return await _react(request, found, ("issue", _issue(found, issue_number).number))


async def react_comment(request: Request, owner: str, repo: str, comment_id: int) -> Response:
    found = _repo(request, owner, repo)
    return await _react(request, found, ("comment", _comment(found, comment_id).comment_id))


async def react_review_comment(
    request: Request, owner: str, repo: str, comment_id: int
) -> Response:
    found = _repo(request, owner, repo)
    if comment_id not in found.review_comments:
        raise GitHubError(404, "Not Found")
    return await _react(request, found, ("review_comment", comment_id))


def _split_head(repo: Repo, head: str) -> tuple[str, str]:
    owner, _, branch = head.rpartition(":")
    return owner or repo.owner.login, branch


def _open_pull_for(repo: Repo, head_owner: str, head_ref: str, base: str) -> bool:
    return any(
        (p.head_owner, p.head_ref, p.base_ref, p.state) == (head_owner, head_ref, base, "open")
        for p in repo.pulls.values()
    )


async def create_pull(request: Request, owner: str, repo: str) -> Response:
    found, body = _repo(request, owner, repo), await _body(request)
    title = _required_text(body, "title", "PullRequest")
    head_owner, head_ref = _split_head(found, _required_text(body, "head", "PullRequest"))
    base = _required_text(body, "base", "PullRequest")
    if _open_pull_for(found, head_owner, head_ref, base):
        exists = f"A pull request already exists for {head_owner}:{head_ref}."
        raise GitHubError(
            422,
            "Validation Failed",
            [{"resource": "PullRequest", "code": "custom", "message": exists}],
        )
    state, caller, number = _state(request), _caller(request), found.next_number()
    pull = PullRequest(
        number,
        state.next_id(),
        title,
        body.get("body"),
        caller,
        head_owner,
        head_ref,
        found.branch_sha(head_ref),
        base,
        found.branch_sha(base),
        time.time(),
        draft=bool(body.get("draft", False)),
    )
    found.pulls[number] = pull
    found.issues[number] = Issue(
        number, pull.pull_id, title, pull.body, caller, pull.created_at, is_pull=True
    )
    found.created_pulls += 1
    rendered = shapes.pull_json(_hosts(request), found, pull)
    return JSONResponse(rendered, status_code=201, headers={"Location": rendered["url"]})


def _pull_matches(pull: PullRequest, repo: Repo, params: Any) -> bool:
    wanted_state = params.get("state", "open")
    if wanted_state != "all" and pull.state != wanted_state:
        return False
    if "head" in params and _split_head(repo, params["head"]) != (pull.head_owner, pull.head_ref):
        return False
    return "base" not in params or params["base"] == pull.base_ref


async def list_pulls(request: Request, owner: str, repo: str) -> Response:
    found, hosts = _repo(request, owner, repo), _hosts(request)
    newest_first = sorted(found.pulls.values(), key=lambda p: p.number, reverse=True)
    if request.query_params.get("direction") == "asc":
        newest_first.reverse()
    pulls = [
        shapes.pull_json(hosts, found, pull, simple=True)
        for pull in newest_first
        if _pull_matches(pull, found, request.query_params)
    ]
    return _paged(request, pulls)


async def get_pull(request: Request, owner: str, repo: str, pull_number: int) -> Json:
    found = _repo(request, owner, repo)
    if pull_number not in found.pulls:
        raise GitHubError(404, "Not Found")
    return shapes.pull_json(_hosts(request), found, found.pulls[pull_number])


def _pull(repo: Repo, number: int) -> PullRequest:
    if number not in repo.pulls:
        raise GitHubError(404, "Not Found")
    return repo.pulls[number]


async def list_pull_files(request: Request, owner: str, repo: str, pull_number: int) -> Response:
    found, hosts = _repo(request, owner, repo), _hosts(request)
    pull = _pull(found, pull_number)
    return _paged(request, [shapes.diff_entry_json(hosts, found, pull, f) for f in pull.files])


async def get_review_comment(request: Request, owner: str, repo: str, comment_id: int) -> Json:
    found = _repo(request, owner, repo)
    if comment_id not in found.review_comments:
        raise GitHubError(404, "Not Found")
    return shapes.review_comment_json(_hosts(request), found, found.review_comments[comment_id])


async def list_review_comments(
    request: Request, owner: str, repo: str, pull_number: int
) -> Response:
    found, hosts = _repo(request, owner, repo), _hosts(request)
    _pull(found, pull_number)
    comments = [
        shapes.review_comment_json(hosts, found, c)
        for c in sorted(found.review_comments.values(), key=lambda c: c.comment_id)
        if c.pull_number == pull_number
    ]
    return _paged(request, comments)


async def create_review_reply(
    request: Request, owner: str, repo: str, pull_number: int, comment_id: int
) -> Response:
    """A reply in the review thread ``comment_id`` belongs to (replies name its first one)."""
    found = _repo(request, owner, repo)
    pull = _pull(found, pull_number)
    first = found.review_comments.get(comment_id)
    if first is None or first.pull_number != pull_number:
        raise GitHubError(404, "Not Found")
    text = _required_text(await _body(request), "body", "PullRequestReviewComment")
    reply = ReviewComment(
        _state(request).next_id(),
        pull_number,
        first.path,
        first.line,
        first.diff_hunk,
        text,
        _caller(request),
        pull.head_sha,
        time.time(),
        first.in_reply_to or first.comment_id,
    )
    found.review_comments[reply.comment_id] = reply
    body = shapes.review_comment_json(_hosts(request), found, reply)
    return JSONResponse(body, status_code=201, headers={"Location": body["url"]})


_REVIEW_STATES: dict[str, ReviewState] = {
    "APPROVE": "APPROVED",
    "REQUEST_CHANGES": "CHANGES_REQUESTED",
    "COMMENT": "COMMENTED",
}
# GitHub's answer when an inline comment is not on the pull request's diff (all or nothing:
# the review is not created).
_NOT_ON_DIFF = "Pull request review thread line must be part of the diff"


async def create_review(request: Request, owner: str, repo: str, pull_number: int) -> Response:
    """A review with its inline comments, created whole or refused whole (422)."""
    found, state = _repo(request, owner, repo), _state(request)
    pull, body = _pull(found, pull_number), await _body(request)
    event = body.get("event")
    if event is not None and event not in _REVIEW_STATES:
        raise GitHubError(422, "Unprocessable Entity", [f"Event {event!r} is not valid"])
    caller = _caller(request)
    if event == "APPROVE" and caller.login == pull.user.login:
        raise GitHubError(422, "Unprocessable Entity", ["Can not approve your own pull request"])
    text = body.get("body") or ""
    if event == "REQUEST_CHANGES" and not text:
        raise GitHubError(422, "Unprocessable Entity", ["Body can't be blank"])
    drafts = [_review_comment_draft(pull, c) for c in body.get("comments") or []]
    review = Review(
        state.next_id(),
        pull_number,
        str(text),
        _REVIEW_STATES.get(str(event), "PENDING"),
        caller,
        str(body.get("commit_id") or pull.head_sha),
        time.time(),
    )
    found.reviews[review.review_id] = review
    for path, line, side, hunk, said in drafts:
        comment = ReviewComment(
            state.next_id(),
            pull_number,
            path,
            line,
            hunk,
            said,
            caller,
            review.commit_id,
            review.submitted_at,
            review_id=review.review_id,
            side=side,
        )
        found.review_comments[comment.comment_id] = comment
    return JSONResponse(shapes.review_json(_hosts(request), found, review))


def _review_comment_draft(pull: PullRequest, draft: Any) -> tuple[str, int, Side, str, str]:
    """An inline comment of a new review, checked against the pull request's diff."""
    if not isinstance(draft, dict) or not isinstance(draft.get("body"), str):
        raise GitHubError(422, "Unprocessable Entity", ["Comment body can't be blank"])
    path, line, side = draft.get("path"), draft.get("line"), draft.get("side") or "RIGHT"
    file = next((f for f in pull.files if f.filename == path), None)
    if file is None or not isinstance(path, str):
        raise GitHubError(422, "Unprocessable Entity", ["Path could not be resolved"])
    sides: dict[Any, Side] = {"LEFT": "LEFT", "RIGHT": "RIGHT"}
    on = sides.get(side)
    if on is None or not isinstance(line, int) or (on, line) not in diff_lines(file.patch):
        raise GitHubError(422, "Unprocessable Entity", [_NOT_ON_DIFF])
    return path, line, on, file.patch or "", str(draft["body"])


async def list_reviews(request: Request, owner: str, repo: str, pull_number: int) -> Response:
    found, hosts = _repo(request, owner, repo), _hosts(request)
    _pull(found, pull_number)
    reviews = sorted(
        (r for r in found.reviews.values() if r.pull_number == pull_number),
        key=lambda r: r.review_id,
    )
    return _paged(request, [shapes.review_json(hosts, found, r) for r in reviews])


async def list_review_comments_of_review(
    request: Request, owner: str, repo: str, pull_number: int, review_id: int
) -> Response:
    found, hosts = _repo(request, owner, repo), _hosts(request)
    _pull(found, pull_number)
    review = found.reviews.get(review_id)
    if review is None or review.pull_number != pull_number:
        raise GitHubError(404, "Not Found")
    comments = [
        shapes.review_comment_json(hosts, found, c)
        for c in sorted(found.review_comments.values(), key=lambda c: c.comment_id)
        if c.review_id == review_id
    ]
    return _paged(request, comments)


def _job_of(found: Repo, job_id: int) -> CheckRun:
    run = next((r for runs in found.checks.values() for r in runs if r.check_id == job_id), None)
    if run is None:
        raise GitHubError(404, "Not Found")
    return run


async def get_job(request: Request, owner: str, repo: str, job_id: int) -> Json:
    """An Actions job, as much of it as a client reads to find its log."""
    found = _repo(request, owner, repo)
    run = _job_of(found, job_id)
    base = _hosts(request).repo_url(found)
    return {
        "id": run.check_id,
        "run_id": run.check_id,
        "url": f"{base}/actions/jobs/{run.check_id}",
        "html_url": f"{base}/actions/runs/{run.check_id}/job/{run.check_id}",
        "check_run_url": f"{base}/check-runs/{run.check_id}",
        "name": run.name,
        "head_sha": run.head_sha,
        "status": run.status,
        "conclusion": run.conclusion,
    }


async def job_logs(request: Request, owner: str, repo: str, job_id: int) -> Response:
    """A redirect to the log's short-lived download URL, as GitHub answers."""
    found = _repo(request, owner, repo)
    _job_of(found, job_id)
    if job_id not in found.job_logs:
        raise GitHubError(404, "Not Found")
    blob = f"{_hosts(request).api}/_blobs/job-logs/{owner}/{repo}/{job_id}"
    return Response(status_code=302, headers={"Location": blob})


async def job_log_blob(request: Request, owner: str, repo: str, job_id: int) -> Response:
    """The log itself, served without a token like GitHub's signed blob URLs."""
    found = _repo(request, owner, repo)
    if job_id not in found.job_logs:
        raise GitHubError(404, "Not Found")
    return PlainTextResponse(found.job_logs[job_id])


async def get_permission(request: Request, owner: str, repo: str, username: str) -> Json:
    found = _repo(request, owner, repo)
    user = _state(request).users.get(username)
    if user is None:
        raise GitHubError(404, "Not Found")
    permission = "admin" if user == found.owner else found.permissions.get(username, "none")
    return shapes.permission_json(_hosts(request), user, permission)


def _sha(repo: Repo, ref: str) -> str:
    return repo.branches.get(ref, ref)


async def get_commit(request: Request, owner: str, repo: str, ref: str) -> Json:
    found = _repo(request, owner, repo)
    return shapes.commit_json(_hosts(request), found, _sha(found, ref))


async def compare_commits(request: Request, owner: str, repo: str, basehead: str) -> Json:
    """Two heads of one pull request compared, as seeded by ``push_to_pull``."""
    found = _repo(request, owner, repo)
    base, _, head = basehead.partition("...")
    files = found.comparisons.get((base, head))
    pull = next((p for p in found.pulls.values() if p.head_sha == head), None)
    if files is None or pull is None:
        raise GitHubError(404, "Not Found")
    return shapes.comparison_json(_hosts(request), found, pull, base, head, files)


async def list_check_runs(request: Request, owner: str, repo: str, ref: str) -> Json:
    found, hosts = _repo(request, owner, repo), _hosts(request)
    runs = found.checks.get(_sha(found, ref), [])
    if "check_name" in request.query_params:
        runs = [run for run in runs if run.name == request.query_params["check_name"]]
    check_runs = [shapes.check_run_json(hosts, found, run) for run in runs]
    return {"total_count": len(check_runs), "check_runs": check_runs}


async def combined_status(request: Request, owner: str, repo: str, ref: str) -> Json:
    found = _repo(request, owner, repo)
    sha = _sha(found, ref)
    return shapes.combined_status_json(_hosts(request), found, sha, found.statuses.get(sha, []))


async def create_installation_token(request: Request, installation_id: int) -> Response:
    state = _state(request)
    if installation_id != state.installation_id and installation_id not in state.installations:
        raise GitHubError(404, "Not Found")
    token = state.issue_installation_token(installation_id)
    return JSONResponse(shapes.token_json(_hosts(request), token), status_code=201)


async def get_repo_installation(request: Request, owner: str, repo: str) -> Json:
    state, full_name = _state(request), f"{owner}/{repo}"
    if full_name not in state.repos:
        raise GitHubError(404, "Not Found")
    installation_id = state.installation_of(full_name)
    account = state.installations.get(installation_id, owner)
    return shapes.installation_json(
        _hosts(request), state.add_user(account), installation_id, state.app_id, state.app_slug
    )


async def list_hook_deliveries(request: Request) -> Response:
    """Newest first; ``cursor`` is where the next page starts (GitHub's is opaque too)."""
    found = _state(request).hooks.newest_first()
    per_page = min(int(request.query_params.get("per_page", 30)), 100)
    start = int(request.query_params.get("cursor") or 0)
    page = found[start : start + per_page]
    headers = {}
    if start + per_page < len(found):
        next_url = request.url.include_query_params(cursor=start + per_page, per_page=per_page)
        headers["Link"] = f'<{next_url}>; rel="next"'
    return JSONResponse([d.json() for d in page], headers=headers)


async def redeliver_hook_delivery(request: Request, delivery_id: int) -> Response:
    hooks = _state(request).hooks
    found = hooks.find(delivery_id)
    if found is None:
        raise GitHubError(404, "Not Found")
    hooks.redeliver_later(found)
    return JSONResponse({}, status_code=202)


async def list_installations(request: Request) -> Response:
    state, hosts = _state(request), _hosts(request)
    known = {state.installation_id: "keel-org", **state.installations}
    found = [
        shapes.installation_json(hosts, state.add_user(account), iid, state.app_id, state.app_slug)
        for iid, account in sorted(known.items())
    ]
    return _paged(request, found)


async def get_app(request: Request) -> Json:
    state = _state(request)
    owner = state.add_user("keel-org", "Organization")
    return shapes.app_json(_hosts(request), owner, state.app_id, state.app_slug)


async def get_authenticated_user(request: Request) -> Json:
    return shapes.authenticated_user_json(_hosts(request), _caller(request))


Handler = Callable[..., Awaitable[Any]]
_REPO = "/repos/{owner}/{repo}"
_ISSUE = _REPO + "/issues/{issue_number}"
_COMMENT = _REPO + "/issues/comments/{comment_id}"
_PULL = _REPO + "/pulls/{pull_number}"
_REVIEW_COMMENT = _REPO + "/pulls/comments/{comment_id}"
_JOB = _REPO + "/actions/jobs/{job_id}"
_COMMIT = _REPO + "/commits/{ref:path}"
# One route a line (method, path, GitHub's operation id, handler); the paths share prefixes.
ROUTES: tuple[tuple[str, str, str, Handler], ...] = (
    ("GET", _REPO, "repos/get", get_repo),
    ("GET", _ISSUE, "issues/get", get_issue),
    ("GET", _ISSUE + "/comments", "issues/list-comments", list_comments),
    ("POST", _ISSUE + "/comments", "issues/create-comment", create_comment),
    ("PATCH", _COMMENT, "issues/update-comment", update_comment),
    ("POST", _ISSUE + "/reactions", "reactions/create-for-issue", react_issue),
    ("POST", _COMMENT + "/reactions", "reactions/create-for-issue-comment", react_comment),
    ("POST", _REVIEW_COMMENT + "/reactions",
     "reactions/create-for-pull-request-review-comment", react_review_comment),
    ("POST", _REPO + "/pulls", "pulls/create", create_pull),
    ("GET", _REPO + "/pulls", "pulls/list", list_pulls),
    ("GET", _PULL, "pulls/get", get_pull),
    ("GET", _PULL + "/files", "pulls/list-files", list_pull_files),
    ("GET", _PULL + "/comments", "pulls/list-review-comments", list_review_comments),
    ("GET", _REVIEW_COMMENT, "pulls/get-review-comment", get_review_comment),
    ("POST", _PULL + "/reviews", "pulls/create-review", create_review),
    ("GET", _PULL + "/reviews", "pulls/list-reviews", list_reviews),
    ("GET", _PULL + "/reviews/{review_id}/comments",
     "pulls/list-comments-for-review", list_review_comments_of_review),
    ("GET", _JOB, "actions/get-job-for-workflow-run", get_job),
    ("GET", _JOB + "/logs", "actions/download-job-logs-for-workflow-run", job_logs),
    ("POST", _PULL + "/comments/{comment_id}/replies",
     "pulls/create-reply-for-review-comment", create_review_reply),
    ("GET", _REPO + "/collaborators/{username}/permission",
     "repos/get-collaborator-permission-level", get_permission),
    # Refs may contain slashes; the more specific routes must come before get-commit.
    ("GET", _COMMIT + "/check-runs", "checks/list-for-ref", list_check_runs),
    ("GET", _COMMIT + "/status", "repos/get-combined-status-for-ref", combined_status),
    ("GET", _COMMIT, "repos/get-commit", get_commit),
    ("GET", _REPO + "/compare/{basehead}", "repos/compare-commits", compare_commits),
    ("POST", "/app/installations/{installation_id}/access_tokens",
     "apps/create-installation-access-token", create_installation_token),
    ("GET", _REPO + "/installation", "apps/get-repo-installation", get_repo_installation),
    ("GET", "/app", "apps/get-authenticated", get_app),
    ("GET", "/app/installations", "apps/list-installations", list_installations),
    ("GET", "/app/hook/deliveries", "apps/list-webhook-deliveries", list_hook_deliveries),
    ("POST", "/app/hook/deliveries/{delivery_id}/attempts",
     "apps/redeliver-webhook-delivery", redeliver_hook_delivery),
    ("GET", "/user", "users/get-authenticated", get_authenticated_user),
)


def _error_response(status: int, message: str, **extra: Any) -> JSONResponse:
    body = {"message": message, "documentation_url": _DOCS, "status": str(status)} | extra
    return JSONResponse(body, status_code=status)


async def _on_github_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, GitHubError)
    extra = {"errors": error.errors} if error.errors else {}
    return _error_response(error.status, error.message, **extra)


async def _on_fault(request: Request, raised: Exception) -> Response:
    assert isinstance(raised, FaultRaised)
    if raised.fault.kind != "429":
        return _error_response(500, "Server Error")
    response = _error_response(429, "You have exceeded a secondary rate limit.")
    response.headers["Retry-After"] = str(raised.fault.retry_after)
    response.headers["X-RateLimit-Remaining"] = "0"
    return response


def create_github_app(state: GitHubState) -> FastAPI:
    """The emulator app; serve it with ``adapters.emulators.server.serve``."""
    app = FastAPI(title="GitHub REST API emulator")
    app.state.github = state
    router = APIRouter(dependencies=[Depends(_guard)])
    for method, path, operation_id, handler in ROUTES:
        router.add_api_route(path, handler, methods=[method], name=operation_id)
    app.include_router(router)
    app.add_api_route("/_blobs/job-logs/{owner}/{repo}/{job_id}", job_log_blob, methods=["GET"])
    # The git remote authenticates itself (Basic credentials, as git sends them).
    app.add_route(GIT_ROUTE, git_smart_http, methods=["GET", "POST"], name="git/smart-http")
    app.add_exception_handler(GitHubError, _on_github_error)
    app.add_exception_handler(FaultRaised, _on_fault)
    app.add_middleware(RecordingMiddleware, state=state)
    return app
