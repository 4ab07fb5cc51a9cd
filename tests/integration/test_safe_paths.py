"""Keel's own file access in a workspace that a sandboxed command may be changing meanwhile.

The host folder next to the workspace stands for everything outside it (Keel's files, /proc,
other workspaces): no tool may read its marker, list it, or write into it, whether the link
leading there was in place before the call or is swapped in while the call runs.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from runtime.brief.files import save
from runtime.brief.model import Download, FileRef
from runtime.tools.base import Completed, ToolContext
from runtime.tools.devbox import ListFiles, ReadFile, WriteFile
from runtime.workspace.paths import (
    PathRefused,
    open_inside,
    read_inside,
    read_inside_text,
    write_inside_atomic,
)

MARKER = "HOST-SECRET-7f3a9c"
HOST_ONLY = "host-only.txt"


@pytest.fixture
def host(tmp_path: Path) -> Path:
    folder = tmp_path / "host"
    folder.mkdir()
    (folder / "secret.txt").write_text(MARKER)
    (folder / HOST_ONLY).write_text(MARKER)
    return folder


@pytest.fixture
def ws(tmp_path: Path, host: Path) -> Path:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "src").mkdir()
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "README.md").write_text("hello\n")
    (root / "src" / "app.py").write_text("print('hi')\n")
    return root


def ctx(ws: Path) -> ToolContext:
    return ToolContext(task_id="t", root_task_id="r", call_id="c", workspace=ws)


def host_untouched(host: Path) -> bool:
    return sorted(p.name for p in host.iterdir()) == [HOST_ONLY, "secret.txt"] and all(
        p.read_text() == MARKER for p in host.iterdir()
    )


async def read(ws: Path, path: str) -> Completed:
    result = await ReadFile().start({"path": path}, ctx(ws))
    assert isinstance(result, Completed)
    return result


async def listing(ws: Path, path: str) -> Completed:
    result = await ListFiles().start({"path": path}, ctx(ws))
    assert isinstance(result, Completed)
    return result


async def write(ws: Path, path: str, content: str = "pwned") -> Completed:
    result = await WriteFile().start({"path": path, "content": content}, ctx(ws))
    assert isinstance(result, Completed)
    return result


def link_out(ws: Path, host: Path) -> dict[str, str]:
    """Symlinks that lead out of the workspace, and the path through each that names the
    marker file."""
    (ws / "to_root").symlink_to("/")
    (ws / "to_host").symlink_to(host)
    (ws / "up_host").symlink_to("../host")
    (ws / "secret_link").symlink_to("../host/secret.txt")
    (ws / "docs" / "deep").symlink_to("../../host")
    return {
        "to_root": f"to_root{host}/secret.txt",
        "to_host": "to_host/secret.txt",
        "up_host": "up_host/secret.txt",
        "secret_link": "secret_link",
        "docs/deep": "docs/deep/secret.txt",
    }


async def test_links_out_refused_when_read_listed_or_written(ws: Path, host: Path) -> None:
    for link, through in link_out(ws, host).items():
        for result in (
            await read(ws, through),
            await listing(ws, link),
            await write(ws, through),
            await write(ws, f"{link}/new.txt"),
        ):
            assert result.is_error, (link, result.output)
            assert "outside the workspace" in result.output or "absolute" in result.output
            assert MARKER not in result.output
    assert host_untouched(host)


async def test_intermediate_link_out_refused_when_followed_by_dotdot(
    ws: Path, host: Path
) -> None:
    (ws / "docs" / "deep").symlink_to("../../host")
    for path in ("docs/deep/../secret.txt", "docs/deep/../host/secret.txt", "docs/./deep/x"):
        assert (await read(ws, path)).is_error
        assert (await write(ws, path)).is_error
    assert host_untouched(host)


async def test_links_inside_followed_when_reading_writing_listing(ws: Path) -> None:
    (ws / "docs" / "link").symlink_to("../README.md")
    (ws / "srclink").symlink_to("src")
    (ws / "docs" / "nested").symlink_to("../srclink/../docs")
    assert (await read(ws, "docs/link")).output == "hello\n"
    assert (await read(ws, "srclink/app.py")).output == "print('hi')\n"
    assert (await read(ws, "docs/nested/link")).output == "hello\n"
    assert (await listing(ws, "srclink")).output == "src/app.py"
    assert not (await write(ws, "docs/link", "changed\n")).is_error
    assert (ws / "README.md").read_text() == "changed\n"
    assert (ws / "docs" / "link").is_symlink()


async def test_links_listed_but_never_entered_when_listing(ws: Path, host: Path) -> None:
    link_out(ws, host)
    entries = (await listing(ws, ".")).output.splitlines()
    assert "to_host" in entries and "docs/deep" in entries
    assert not any(HOST_ONLY in e or e.startswith(("to_root/", "to_host/")) for e in entries)
    assert not any(e.startswith(".git") for e in entries)


async def test_fifo_refused_when_read_without_hanging(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    (ws / "pipe_link").symlink_to("pipe")
    outcome: list[Completed] = []

    def run() -> None:
        for path in ("pipe", "pipe_link"):
            outcome.append(asyncio.run(read(ws, path)))

    reader = threading.Thread(target=run, daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():
        os.close(os.open(ws / "pipe", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("read_file blocked on a FIFO")
    assert [r.is_error for r in outcome] == [True, True]
    assert all("not a file" in r.output for r in outcome)
    assert (await listing(ws, "pipe")).is_error


@pytest.mark.parametrize(
    "path", [".git/config", ".git/hooks/pre-commit", "docs/../.git/config", "gitlink/config"]
)
async def test_write_refused_when_path_is_inside_git(ws: Path, path: str) -> None:
    (ws / "gitlink").symlink_to(".git")
    result = await write(ws, path)
    assert result.is_error and "may not edit" in result.output
    assert (ws / ".git" / "config").read_text() == "[core]\n"
    assert not (ws / ".git" / "hooks").exists()


async def test_write_creates_folders_and_keeps_mode_when_replacing(ws: Path) -> None:
    script = ws / "run.sh"
    script.write_text("old\n")
    script.chmod(0o755)
    assert not (await write(ws, "run.sh", "new\n")).is_error
    assert script.read_text() == "new\n" and stat.S_IMODE(script.stat().st_mode) == 0o755
    assert not (await write(ws, "a/b/c.txt", "x")).is_error
    assert (ws / "a" / "b" / "c.txt").read_text() == "x"
    assert not [p for p in ws.rglob(".keel-tmp-*")]
    assert "is a folder" in (await write(ws, "src")).output
    assert "is a folder" in (await write(ws, "src/..")).output


def test_helpers_refuse_when_links_loop_or_point_out(ws: Path, host: Path) -> None:
    (ws / "a").symlink_to("b")
    (ws / "b").symlink_to("a")
    (ws / "out").symlink_to(host / "secret.txt")
    with pytest.raises(PathRefused, match="too many levels"):
        read_inside(ws, "a", 10)
    with pytest.raises(PathRefused, match="absolute"):
        read_inside_text(ws, "out", 100)
    with pytest.raises(PathRefused, match="absolute"):
        open_inside(ws, "out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, for_write=True)
    with pytest.raises(PathRefused, match="absolute"):
        write_inside_atomic(ws, "out", b"pwned")
    assert read_inside_text(ws, "README.md", 3) == "hel"
    assert host_untouched(host)


RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> None:
    """Swap two names in one step, as a hostile command racing Keel would."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, bytes(a), -100, bytes(b), RENAME_EXCHANGE) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


@pytest.mark.parametrize("relative", [False, True])
async def test_race_never_reaches_host_when_folder_flips_to_link(
    ws: Path, host: Path, relative: bool
) -> None:
    flip, alt = ws / "flip", ws / "flip.alt"
    flip.mkdir()
    (flip / "secret.txt").write_text("inside\n")
    alt.symlink_to("../host" if relative else host)
    try:
        exchange(flip, alt)
        exchange(flip, alt)
    except (OSError, AttributeError) as e:
        pytest.skip(f"renameat2(RENAME_EXCHANGE) unavailable: {e}")
    stop = threading.Event()
    flips = 0

    def flipper() -> None:
        nonlocal flips
        while not stop.is_set() and flips < 200_000:
            exchange(flip, alt)
            flips += 1

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    thread = threading.Thread(target=flipper, daemon=True)
    thread.start()
    outputs: list[str] = []
    try:
        deadline = time.monotonic() + 3
        for i in range(3000):
            if time.monotonic() > deadline:
                break
            outputs.append((await read(ws, "flip/secret.txt")).output)
            outputs.append((await listing(ws, "flip")).output)
            await write(ws, f"flip/out-{i % 5}.txt", "x")
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(switch)
    assert flips > 100, "the race did not run"
    assert "inside\n" in outputs
    assert not [o for o in outputs if MARKER in o or HOST_ONLY in o]
    assert host_untouched(host)


@pytest.mark.parametrize(
    ("link", "target"), [(".keel/files", "{host}"), (".keel", "../host"), (".keel", "{host}")]
)
def test_save_writes_nothing_when_keel_files_links_out(
    ws: Path, host: Path, link: str, target: str
) -> None:
    (ws / link).parent.mkdir(parents=True, exist_ok=True)
    (ws / link).symlink_to(target.format(host=host))
    download = Download(FileRef("F1", "notes.txt", "text/plain", 5), b"hello")
    note = save(ws, [download])["F1"]
    assert note.saved_as is None and note.note is not None and note.note.startswith("not saved")
    assert host_untouched(host)


def test_save_writes_attachment_when_workspace_is_plain(ws: Path) -> None:
    download = Download(FileRef("F1", "../notes.txt", "text/plain", 5), b"hello")
    note = save(ws, [download])["F1"]
    assert note.saved_as == ".keel/files/F1-notes.txt"
    assert (ws / ".keel" / "files" / "F1-notes.txt").read_bytes() == b"hello"
    assert (ws / ".keel" / "files" / ".gitignore").read_text() == "*\n"


# -- repository files Keel itself reads: AGENTS.md and DAEMON.md ---------------------------


class _OneWorkspace:
    def __init__(self, ws: Path) -> None:
        self.ws = ws

    async def workspace_for(self, task: object) -> Path:
        return self.ws


@pytest.mark.parametrize("target", ["/proc/self/environ", "{host}/secret.txt"])
async def test_repository_guidance_not_read_through_a_link_out(
    ws: Path, host: Path, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repository that ships AGENTS.md as a link to Keel's environment gets nothing in."""
    from typing import cast

    from adapters.assembly import RepoGuidance
    from adapters.checkouts import Checkouts
    from runtime.store.records import Task

    monkeypatch.setenv("KEEL_TEST_SECRET", MARKER)
    (ws / "AGENTS.md").symlink_to(target.format(host=host))
    guidance = RepoGuidance(cast(Checkouts, _OneWorkspace(ws)))
    any_task = cast(Task, None)  # the one workspace is every task's
    sections = await guidance.sections(any_task)
    assert sections == []
    (ws / "AGENTS.md").unlink()
    (ws / "AGENTS.md").write_text("Run make test.\n")
    assert await guidance.sections(any_task) == [
        "Repository guidance (AGENTS.md):\nRun make test.\n"
    ]


def test_daemon_file_not_read_through_a_link_out(ws: Path, host: Path) -> None:
    from routing.daemons import DaemonFileError, load_repo_daemons

    folder = ws / ".agents" / "daemons" / "ci"
    folder.mkdir(parents=True)
    (folder / "DAEMON.md").symlink_to(host / "secret.txt")
    with pytest.raises(DaemonFileError) as refused:
        load_repo_daemons(ws)
    assert MARKER not in str(refused.value)
    (folder / "DAEMON.md").unlink()
    (ws / ".agents" / "daemons").rename(ws / "elsewhere")
    (ws / ".agents" / "daemons").symlink_to(host)
    assert load_repo_daemons(ws) == ()
