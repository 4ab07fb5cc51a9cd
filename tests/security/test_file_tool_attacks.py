"""Rule 6 of the design for issue #37: the files Keel opens itself in a workspace are opened
without following links out of it.

The devbox file tools (read_file, list_files, write_file, apply_patch), the repository
guidance Keel puts in the model's context (``AGENTS.md``) and the attachments it saves under
``.keel/files`` all open paths a command or the repository may have made links: to the host
canary, to a host folder, to Keel's state beside the workspace, to a host process's
environment. None may read or write through them, not even when a command swaps a folder
for a link while Keel is opening it.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any, cast

import pytest

from adapters.assembly import RepoGuidance
from runtime.brief.files import save
from runtime.brief.model import Download, FileRef
from runtime.store.records import Task
from runtime.tools.base import Completed, ToolContext
from runtime.tools.devbox import ApplyPatch, ListFiles, ReadFile, RunCommand, WriteFile
from tests.security.kit import (
    CANARY,
    Host,
    assert_clean,
    context,
    make_origin,
    new_workspace,
    relink_sh,
    run,
    settle,
    state_of,
    wait_for,
)


def _links(ws: Path, host: Host, sentinel_pid: int) -> dict[str, str]:
    return {
        "out.txt": f"{host.vault}/canary.txt",
        "outdir": str(host.vault),
        "keel.db": f"{host.vault}/keel.db",
        "state": f"../.keel-state/{ws.name}",
        "environ": f"/proc/{sentinel_pid}/environ",
        "self-environ": "/proc/self/environ",
        "root": "/",
    }


def _patch(path: str) -> str:
    return f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+patched\n"


async def _use_every_tool(ws: Path) -> list[str]:
    """Every file tool on every link, reading and writing; what each said."""
    ctx = context(ws)
    calls: list[tuple[Any, dict[str, Any]]] = [
        (ReadFile(), {"path": "out.txt"}),
        (ReadFile(), {"path": "outdir/canary.txt"}),
        (ReadFile(), {"path": "keel.db"}),
        (ReadFile(), {"path": "state/workspace.json"}),
        (ReadFile(), {"path": "environ"}),
        (ReadFile(), {"path": "self-environ"}),
        (ReadFile(), {"path": "root/etc/shadow"}),
        (ListFiles(), {"path": "outdir"}),
        (ListFiles(), {"path": "state"}),
        (ListFiles(), {"path": "root/var/tmp"}),
        (WriteFile(), {"path": "outdir/new.txt", "content": "written\n"}),
        (WriteFile(), {"path": "out.txt", "content": "overwritten\n"}),
        (WriteFile(), {"path": "state/workspace.json", "content": "{}"}),
        (WriteFile(), {"path": "state/exec/forged/exit", "content": "0\n"}),
        (ApplyPatch(), {"unified_diff": _patch("outdir/patched.txt")}),
        (ApplyPatch(), {"unified_diff": _patch("state/patched.txt")}),
        (ApplyPatch(), {"unified_diff": "--- a/out.txt\n+++ b/out.txt\n@@ -1 +1 @@\n-x\n+y\n"}),
    ]
    outputs = []
    for tool, args in calls:
        result = await settle(tool, args, ctx)
        outputs.append(result.output)
    return outputs


def _record(ws: Path) -> bytes:
    path = state_of(ws) / "workspace.json"
    return path.read_bytes() if path.exists() else b""


def _assert_nothing_through_links(ws: Path, host: Host, outputs: list[str], record: bytes) -> None:
    host.assert_untouched()
    assert (host.vault / "canary.txt").read_text() == f"{CANARY}\n"
    assert_clean(outputs, where="a file tool's output")
    assert not [o for o in outputs if "push_url" in o or "root:" in o], outputs
    assert _record(ws) == record, "Keel's record of the workspace was rewritten"
    assert not (state_of(ws) / "exec" / "forged").exists()


@pytest.mark.parametrize("how", ["shipped", "command"])
async def test_file_tools_never_read_or_write_through_links_out_of_the_workspace(
    tmp_path: Path, host: Host, sentinel: subprocess.Popen[bytes], how: str
) -> None:
    ws_path = tmp_path / "ws" / "root-1"
    links = _links(ws_path, host, sentinel.pid)
    shipped = links if how == "shipped" else {}
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"}, symlinks=shipped)
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    assert ws == ws_path
    if how == "command":
        made = await run(
            workspaces.sandbox,
            ws,
            " && ".join(f"ln -sfn {target} {name}" for name, target in links.items()) + " && ls",
        )
        assert "exit code 0" in made.output, made.output
    record = _record(ws)

    outputs = await _use_every_tool(ws)

    _assert_nothing_through_links(ws, host, outputs, record)


async def test_file_tools_never_follow_a_folder_swapped_for_a_link_mid_call(
    tmp_path: Path, host: Host
) -> None:
    """A command swaps ``flip`` between a real folder and a link to the host vault as fast as
    it can while the tools open ``flip/...``: checking a path and then opening it would
    eventually open the vault."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    flipper = (
        "end=$((SECONDS+3)); while [ $SECONDS -lt $end ]; do "
        "rm -rf flip; mkdir flip; echo benign > flip/canary.txt; echo benign > flip/new.txt; "
        f"rm -rf flip; ln -s {host.vault} flip; done; rm -rf flip; echo flipped"
    )
    tool = RunCommand(workspaces.sandbox)
    ctx = ToolContext("task-1", ws.name, "call-flipper", workspace=ws)
    started = await tool.start({"command": flipper, "timeout_s": 30}, ctx)
    assert not isinstance(started, Completed), started
    outputs: list[str] = []
    deadline = time.monotonic() + 2.0
    tries = 0
    while time.monotonic() < deadline:
        here = context(ws)
        for tool_call, args in (
            (ReadFile(), {"path": "flip/canary.txt"}),
            (WriteFile(), {"path": "flip/new.txt", "content": f"written {tries}\n"}),
            (ListFiles(), {"path": "flip"}),
        ):
            result = await settle(tool_call, args, here)
            outputs.append(result.output)
        tries += 1
    async with asyncio.timeout(30):
        while not isinstance(done := await tool.poll(started.handle, ctx), Completed):
            await asyncio.sleep(0.05)
    assert "flipped" in done.output, done.output
    assert tries > 20
    host.assert_untouched()
    assert_clean(outputs, where="a file tool's output")


class _Checkouts:
    def __init__(self, ws: Path) -> None:
        self.ws = ws

    async def workspace_for(self, task: Task) -> Path | None:
        return self.ws


@pytest.mark.parametrize("target", ["canary", "environ", "self-environ"])
async def test_repository_guidance_never_follows_a_link_out(
    tmp_path: Path, host: Host, sentinel: subprocess.Popen[bytes], target: str
) -> None:
    """A repository whose ``AGENTS.md`` is a link: to the host canary, to a host process's
    environment, to Keel's own. Its guidance goes into the model's context (and the
    transcript), so it must be read without following the link."""
    link = {
        "canary": f"{host.vault}/canary.txt",
        "environ": f"/proc/{sentinel.pid}/environ",
        "self-environ": "/proc/self/environ",
    }[target]
    origin = make_origin(
        tmp_path / "origin.git", {"README.md": "hello\n"}, symlinks={"AGENTS.md": link}
    )
    _, ws = await new_workspace(tmp_path / "ws", str(origin))
    guidance = RepoGuidance(cast(Any, _Checkouts(ws)))
    sections = await guidance.sections(cast(Task, None))
    assert_clean(sections, where="the task's context")
    assert not [s for s in sections if "PATH=" in s], sections


@pytest.mark.parametrize("link", [".keel", ".keel/files"])
@pytest.mark.parametrize("how", ["shipped", "command"])
async def test_attachments_never_saved_through_links(
    tmp_path: Path, host: Host, link: str, how: str
) -> None:
    origin_links = {link: str(host.vault)} if how == "shipped" else {}
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"}, symlinks=origin_links)
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    if how == "command":
        made = await run(
            workspaces.sandbox, ws, relink_sh(link, str(host.vault)) + "; echo > .planted"
        )
        assert wait_for(lambda: (ws / ".planted").exists()), made.output
    download = Download(FileRef("F0ATTACK", "notes.txt", "text/plain", 5), b"hello")

    notes = save(ws, [download])

    host.assert_untouched()
    assert_clean([str(notes)])
