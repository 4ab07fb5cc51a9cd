"""GitHub REST response bodies, rendered from the examples in GitHub's API description.

``github_templates.json`` holds response examples copied from GitHub's REST description
(api.github.com.json of npm @octokit/openapi 23.0.2; origin and license in
corpora/SOURCES.md); each renderer fills a template with the emulator's records, so every
field the description requires is present and the URLs point back at the emulator
(PyGithub follows ``url`` fields for its later calls).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from adapters.emulators.github_state import (
    CheckRun,
    CommitStatus,
    GitHubUser,
    IssueComment,
    IssuedToken,
    PullFile,
    PullRequest,
    Reaction,
    Repo,
    Review,
    ReviewComment,
)
from adapters.emulators.github_state import Issue as IssueRecord

Json = dict[str, Any]
_EXAMPLE_SHA = "6dcb09b5b57875f334f61aebed695e2e4193db5e"
_EXAMPLE_REPO = "octocat/Hello-World"


@functools.cache
def _templates() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        (Path(__file__).with_name("github_templates.json")).read_text()
    )
    return loaded


def iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _replace(node: Any, pairs: tuple[tuple[str, str], ...]) -> Any:
    if isinstance(node, dict):
        return {key: _replace(value, pairs) for key, value in node.items()}
    if isinstance(node, list):
        return [_replace(value, pairs) for value in node]
    if isinstance(node, str):
        for old, new in pairs:
            node = node.replace(old, new)
    return node


@dataclass(frozen=True, slots=True)
class Hosts:
    """Where the emulator is reached; html links point at it too (it serves no pages)."""

    api: str

    def render(self, name: str, *replacements: tuple[str, str]) -> Json:
        pairs = (("@api@", self.api), ("@web@", self.api), *replacements)
        rendered: Json = _replace(copy.deepcopy(_templates()[name]), pairs)
        return rendered

    def repo_url(self, repo: Repo) -> str:
        return f"{self.api}/repos/{repo.full_name}"


def _in_repo(repo: Repo, number: int | None = None) -> tuple[tuple[str, str], ...]:
    pairs = ((_EXAMPLE_REPO, repo.full_name), ("github/hello-world", repo.full_name))
    return (*pairs, ("/1347", f"/{number}")) if number is not None else pairs


def user_json(hosts: Hosts, user: GitHubUser) -> Json:
    body = hosts.render("simple-user", ("@login@", user.login))
    return body | {"id": user.user_id, "node_id": f"U_{user.user_id}", "type": user.kind}


def repo_json(hosts: Hosts, repo: Repo, *, full: bool = False) -> Json:
    body = hosts.render(
        "full-repository" if full else "repository",
        ("@full_name@", repo.full_name),
        ("@name@", repo.name),
    )
    return body | {
        "id": repo.repo_id,
        "node_id": f"R_{repo.repo_id}",
        "name": repo.name,
        "full_name": repo.full_name,
        "owner": user_json(hosts, repo.owner),
        "private": repo.private,
        "visibility": "private" if repo.private else "public",
        "default_branch": repo.default_branch,
        "url": hosts.repo_url(repo),
        "html_url": f"{hosts.api}/{repo.full_name}",
    }


def label_json(hosts: Hosts, repo: Repo, name: str) -> Json:
    label_id = zlib.crc32(f"{repo.full_name}:{name}".encode())
    return {
        "id": label_id,
        "node_id": f"LA_{label_id}",
        "url": f"{hosts.repo_url(repo)}/labels/{name}",
        "name": name,
        "description": None,
        "color": "ededed",
        "default": False,
    }


def issue_json(hosts: Hosts, repo: Repo, issue: IssueRecord) -> Json:
    body = hosts.render("issue", *_in_repo(repo, issue.number))
    body.pop("pull_request", None)
    body |= {
        "id": issue.issue_id,
        "node_id": f"I_{issue.issue_id}",
        "number": issue.number,
        "title": issue.title,
        "body": issue.body,
        "user": user_json(hosts, issue.user),
        "state": issue.state,
        "state_reason": None,
        "locked": False,
        "active_lock_reason": None,
        "labels": [label_json(hosts, repo, name) for name in issue.labels],
        "comments": len(issue.comment_ids),
        "created_at": iso(issue.created_at),
        "updated_at": iso(issue.created_at),
        "author_association": "NONE",
    }
    if issue.is_pull:
        html = f"{hosts.api}/{repo.full_name}/pull/{issue.number}"
        body["pull_request"] = {
            "url": f"{hosts.repo_url(repo)}/pulls/{issue.number}",
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "merged_at": None,
        }
    return body


def comment_json(hosts: Hosts, repo: Repo, comment: IssueComment) -> Json:
    body = hosts.render(
        "issue-comment",
        *_in_repo(repo, comment.issue_number),
        ("comments/1", f"comments/{comment.comment_id}"),
        ("issuecomment-1", f"issuecomment-{comment.comment_id}"),
    )
    for unused in ("pin", "minimized"):
        body.pop(unused, None)
    return body | {
        "id": comment.comment_id,
        "node_id": f"IC_{comment.comment_id}",
        "body": comment.body,
        "user": user_json(hosts, comment.user),
        "created_at": iso(comment.created_at),
        "updated_at": iso(comment.updated_at),
        "author_association": "NONE",
    }


def reaction_json(hosts: Hosts, reaction: Reaction) -> Json:
    return hosts.render("reaction") | {
        "id": reaction.reaction_id,
        "node_id": f"REA_{reaction.reaction_id}",
        "user": user_json(hosts, reaction.user),
        "content": reaction.content,
        "created_at": iso(reaction.created_at),
    }


def _pull_side(hosts: Hosts, repo: Repo, owner: GitHubUser, ref: str, sha: str) -> Json:
    return {
        "label": f"{owner.login}:{ref}",
        "ref": ref,
        "sha": sha,
        "user": user_json(hosts, owner),
        "repo": repo_json(hosts, repo),
    }


def pull_json(hosts: Hosts, repo: Repo, pull: PullRequest, *, simple: bool = False) -> Json:
    body = hosts.render(
        "pull-request-simple" if simple else "pull-request",
        *_in_repo(repo, pull.number),
        (_EXAMPLE_SHA, pull.head_sha),
    )
    head_owner = GitHubUser(pull.head_owner, repo.owner.user_id, repo.owner.kind)
    body |= {
        "id": pull.pull_id,
        "node_id": f"PR_{pull.pull_id}",
        "number": pull.number,
        "state": pull.state,
        "locked": False,
        "active_lock_reason": None,
        "title": pull.title,
        "body": pull.body,
        "user": user_json(hosts, pull.user),
        "draft": pull.draft,
        "created_at": iso(pull.created_at),
        "updated_at": iso(pull.created_at),
        "closed_at": None,
        "merged_at": None,
        "merge_commit_sha": None,
        "author_association": "NONE",
        "head": _pull_side(hosts, repo, head_owner, pull.head_ref, pull.head_sha),
        "base": _pull_side(hosts, repo, repo.owner, pull.base_ref, pull.base_sha),
    }
    if not simple:
        body |= {"merged": pull.merged, "mergeable": True, "merged_by": None, "comments": 0}
    return body


def check_run_json(hosts: Hosts, repo: Repo, run: CheckRun) -> Json:
    body = hosts.render(
        "check-run",
        *_in_repo(repo),
        ("check-runs/4", f"check-runs/{run.check_id}"),
        ("runs/4", f"runs/{run.check_id}"),
    )
    return body | {
        "id": run.check_id,
        "node_id": f"CR_{run.check_id}",
        "name": run.name,
        "head_sha": run.head_sha,
        "status": run.status,
        "conclusion": run.conclusion,
        "started_at": iso(run.started_at),
        "completed_at": iso(run.started_at) if run.status == "completed" else None,
        "details_url": f"{hosts.repo_url(repo)}/check-runs/{run.check_id}",
        "app": app_json(hosts, GitHubUser("keel-ci", 1, "Organization"), 1, "keel-ci"),
    }


def combined_state(statuses: list[CommitStatus]) -> str:
    states = {status.state for status in statuses}
    if states & {"failure", "error"}:
        return "failure"
    return "success" if states == {"success"} else "pending"


def combined_status_json(hosts: Hosts, repo: Repo, sha: str, statuses: list[CommitStatus]) -> Json:
    body = hosts.render("combined-commit-status", *_in_repo(repo), (_EXAMPLE_SHA, sha))
    return body | {
        "state": combined_state(statuses),
        "sha": sha,
        "total_count": len(statuses),
        "statuses": [status_json(hosts, repo, sha, status) for status in statuses],
        "repository": repo_json(hosts, repo),
        "commit_url": f"{hosts.repo_url(repo)}/commits/{sha}",
        "url": f"{hosts.repo_url(repo)}/commits/{sha}/status",
    }


def status_json(hosts: Hosts, repo: Repo, sha: str, status: CommitStatus) -> Json:
    body = hosts.render("status", *_in_repo(repo), (_EXAMPLE_SHA, sha))
    body.pop("creator", None)
    return body | {
        "id": status.status_id,
        "node_id": f"ST_{status.status_id}",
        "state": status.state,
        "context": status.context,
        "description": None,
        "target_url": None,
        "created_at": iso(status.created_at),
        "updated_at": iso(status.created_at),
    }


def commit_json(hosts: Hosts, repo: Repo, sha: str) -> Json:
    body = hosts.render("commit", *_in_repo(repo), (_EXAMPLE_SHA, sha))
    return body | {"sha": sha, "node_id": f"C_{sha}", "parents": []}


def comparison_json(
    hosts: Hosts, repo: Repo, pull: PullRequest, base: str, head: str, files: list[PullFile]
) -> Json:
    """``GET /compare/{base}...{head}``: one commit ahead, with the files changed between."""
    body = hosts.render("commit-comparison", *_in_repo(repo))
    compare = f"{hosts.repo_url(repo)}/compare/{base}...{head}"
    return body | {
        "url": compare,
        "html_url": f"{hosts.api}/{repo.full_name}/compare/{base}...{head}",
        "permalink_url": f"{hosts.api}/{repo.full_name}/compare/{base}...{head}",
        "diff_url": f"{hosts.api}/{repo.full_name}/compare/{base}...{head}.diff",
        "patch_url": f"{hosts.api}/{repo.full_name}/compare/{base}...{head}.patch",
        "base_commit": commit_json(hosts, repo, base),
        "merge_base_commit": commit_json(hosts, repo, base),
        "status": "ahead",
        "ahead_by": 1,
        "behind_by": 0,
        "total_commits": 1,
        "commits": [commit_json(hosts, repo, head)],
        "files": [diff_entry_json(hosts, repo, pull, f) for f in files],
    }


def permission_json(hosts: Hosts, user: GitHubUser, permission: str) -> Json:
    # The legacy ``permission`` field folds maintain into write and triage into read.
    legacy = {"maintain": "write", "triage": "read"}.get(permission, permission)
    collaborator = user_json(hosts, user) | {
        "role_name": permission,
        "permissions": {
            "admin": permission == "admin",
            "maintain": permission in ("admin", "maintain"),
            "push": legacy in ("admin", "write"),
            "triage": legacy != "none",
            "pull": legacy != "none",
        },
    }
    return {"permission": legacy, "role_name": permission, "user": collaborator}


def token_json(hosts: Hosts, token: IssuedToken) -> Json:
    return hosts.render("installation-token") | {
        "token": token.token,
        "expires_at": iso(token.expires_at or 0),
        "permissions": {"issues": "write", "pull_requests": "write", "contents": "write"},
        "repository_selection": "all",
    }


def app_json(hosts: Hosts, owner: GitHubUser, app_id: int, slug: str) -> Json:
    return hosts.render("integration") | {
        "id": app_id,
        "slug": slug,
        "node_id": f"A_{app_id}",
        "name": slug,
        "owner": user_json(hosts, owner),
        "html_url": f"{hosts.api}/apps/{slug}",
    }


def authenticated_user_json(hosts: Hosts, user: GitHubUser) -> Json:
    body = hosts.render("private-user", ("@login@", user.login))
    return body | {"id": user.user_id, "node_id": f"U_{user.user_id}", "type": user.kind}


def diff_entry_json(hosts: Hosts, repo: Repo, pull: PullRequest, file: PullFile) -> Json:
    body = hosts.render("diff-entry", *_in_repo(repo), (_EXAMPLE_SHA, pull.head_sha))
    blob = f"{hosts.api}/{repo.full_name}/blob/{pull.head_sha}/{file.filename}"
    body |= {
        "sha": hashlib.sha1(f"{pull.head_sha}:{file.filename}".encode()).hexdigest(),
        "filename": file.filename,
        "status": file.status,
        "additions": file.additions,
        "deletions": file.deletions,
        "changes": file.additions + file.deletions,
        "blob_url": blob,
        "raw_url": blob.replace("/blob/", "/raw/"),
        "contents_url": f"{hosts.repo_url(repo)}/contents/{file.filename}?ref={pull.head_sha}",
    }
    if file.patch is None:
        body.pop("patch", None)  # GitHub leaves the patch out of very large diffs
    else:
        body["patch"] = file.patch
    return body


def review_comment_json(hosts: Hosts, repo: Repo, comment: ReviewComment) -> Json:
    pull_url = f"{hosts.repo_url(repo)}/pulls/{comment.pull_number}"
    pull_html = f"{hosts.api}/{repo.full_name}/pull/{comment.pull_number}"
    html = f"{pull_html}#discussion_r{comment.comment_id}"
    own = f"{hosts.repo_url(repo)}/pulls/comments/{comment.comment_id}"
    body = hosts.render("pull-request-review-comment", *_in_repo(repo))
    body |= {
        "url": own,
        "id": comment.comment_id,
        "node_id": f"PRRC_{comment.comment_id}",
        # A reply posted on its own is a review of its own on GitHub: its id stands in.
        "pull_request_review_id": comment.review_id or comment.comment_id,
        "diff_hunk": comment.diff_hunk,
        "path": comment.path,
        "commit_id": comment.commit_id,
        "original_commit_id": comment.commit_id,
        "user": user_json(hosts, comment.user),
        "body": comment.body,
        "created_at": iso(comment.created_at),
        "updated_at": iso(comment.created_at),
        "html_url": html,
        "pull_request_url": pull_url,
        "_links": {
            "self": {"href": own},
            "html": {"href": html},
            "pull_request": {"href": pull_url},
        },
        "line": comment.line,
        "original_line": comment.line,
        "start_line": None,
        "original_start_line": None,
        "side": comment.side,
    }
    if comment.in_reply_to is None:
        body.pop("in_reply_to_id", None)
    else:
        body["in_reply_to_id"] = comment.in_reply_to
    return body


def review_json(hosts: Hosts, repo: Repo, review: Review) -> Json:
    pull_url = f"{hosts.repo_url(repo)}/pulls/{review.pull_number}"
    pull_html = f"{hosts.api}/{repo.full_name}/pull/{review.pull_number}"
    html = f"{pull_html}#pullrequestreview-{review.review_id}"
    body = hosts.render("pull-request-review", *_in_repo(repo))
    if review.state == "PENDING":
        body.pop("submitted_at", None)  # not submitted yet
    else:
        body["submitted_at"] = iso(review.submitted_at)
    return body | {
        "id": review.review_id,
        "node_id": f"PRR_{review.review_id}",
        "user": user_json(hosts, review.user),
        "body": review.body,
        "state": review.state,
        "html_url": html,
        "pull_request_url": pull_url,
        "_links": {"html": {"href": html}, "pull_request": {"href": pull_url}},
        "commit_id": review.commit_id,
        "author_association": "NONE" if review.user.kind == "Bot" else "COLLABORATOR",
    }


def installation_json(
    hosts: Hosts, account: GitHubUser, installation_id: int, app_id: int, slug: str
) -> Json:
    return {
        "id": installation_id,
        "account": user_json(hosts, account),
        "repository_selection": "selected",
        "access_tokens_url": f"{hosts.api}/app/installations/{installation_id}/access_tokens",
        "repositories_url": f"{hosts.api}/installation/repositories",
        "html_url": f"{hosts.api}/settings/installations/{installation_id}",
        "app_id": app_id,
        "app_slug": slug,
        "target_id": account.user_id,
        "target_type": account.kind,
        "permissions": {"issues": "write", "pull_requests": "write", "contents": "write"},
        "events": ["issues", "issue_comment", "pull_request", "pull_request_review"],
        "created_at": "2024-01-01T00:00:00Z",
        "updated_at": "2024-01-01T00:00:00Z",
        "single_file_name": None,
        "suspended_at": None,
        "suspended_by": None,
    }
