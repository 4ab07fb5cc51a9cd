"""Egress under real bubblewrap: an allowlisted command reaches the web only through Keel's
proxy, and only the hosts and ports its allowlist names; ``off`` reaches nothing and ``on``
the host's network. Two loopback servers play the web: the allowed one and another. The
proxy leaves no process behind however the command ends, and the command cannot touch its
allowlist, its refusal log or its socket. Secrets reach the command's environment, are
masked in what the model sees, and are written to no file.

The probes run in the sandbox with Keel's own interpreter, from a script the test writes
into the workspace before the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pytest

from runtime.tools.base import Completed, Started, Stopped
from runtime.tools.devbox import RunCommand
from runtime.workspace.commands import (
    CommandRun,
    Finished,
    check,
    execution_id,
    launch,
    refused_hosts,
    stop,
)
from runtime.workspace.egress import ALLOW_FILE, REFUSED_FILE, SOCKET_FILE, Egress
from runtime.workspace.egress_bridge import PORT, SOCKET
from runtime.workspace.process import descendants
from runtime.workspace.sandbox import Sandbox
from tests.security.kit import (
    TOOL_TIMEOUT_S,
    context,
    sections,
    serving,
    settle,
    state_of,
    streams,
    wait_for,
)


class _Site(ThreadingHTTPServer):
    """A loopback web server that says who it is and records the paths it was asked for."""

    daemon_threads = True

    def __init__(self, name: str) -> None:
        super().__init__(("127.0.0.1", 0), _SiteHandler)
        self.name = name
        self.paths: list[str] = []

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _SiteHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        site = cast(_Site, self.server)
        site.paths.append(self.path)
        body = f"site {site.name} served {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


PROBE = r'''
import socket, sys, urllib.error, urllib.request

def read_all(sock):
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        data += b" (still open)"
    return data.decode(errors="replace")

def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return f"{answer.status} {answer.read().decode()}"
    except urllib.error.HTTPError as e:
        return f"{e.code} {e.read().decode()}"
    except OSError as e:
        return f"failed {e}"

def tunnel(host, port, path):
    with socket.create_connection(("127.0.0.1", PROXY_PORT), timeout=10) as s:
        s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head and (chunk := s.recv(1)):
            head += chunk
        if b" 200 " not in head.split(b"\r\n")[0]:
            return head.decode(errors="replace") + read_all(s)
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        return head.decode() + read_all(s)

def raw(request):
    try:
        with socket.create_connection(("127.0.0.1", PROXY_PORT), timeout=3) as s:
            s.sendall(request.encode())
            return read_all(s) or "closed with no answer"
    except OSError as e:
        return f"failed {e}"

def direct(host, port):
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        return "connected"
    except OSError as e:
        return f"failed {e}"

for i, action in enumerate(sys.argv[1:]):
    kind, _, rest = action.partition(" ")
    print(f"@@{i}", flush=True)
    args = rest.split(" ")
    found = {
        "get": lambda: get(rest),
        "tunnel": lambda: tunnel(*args),
        "direct": lambda: direct(*args),
        "raw": lambda: raw(rest.replace("\\r\\n", "\r\n")),
    }[kind]()
    print(found, flush=True)
'''.replace("PROXY_PORT", str(PORT))


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "workspaces" / "root-1"
    workspace.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / "probe.py").write_text(PROBE)
    return workspace


@pytest.fixture
def allowed() -> Iterator[_Site]:
    with serving(_Site("allowed")) as site:
        yield site


@pytest.fixture
def other() -> Iterator[_Site]:
    with serving(_Site("other")) as site:
        yield site


def allowlisted(site: _Site, **fields: Any) -> Sandbox:
    return Sandbox(mode="bwrap", egress=Egress("allowlist", (f"127.0.0.1:{site.port}",)), **fields)


def probe(*actions: str) -> str:
    return " ".join([sys.executable, "probe.py", *(f"'{a}'" for a in actions)])


async def run(
    sandbox: Sandbox, ws: Path, command: str, tool: RunCommand | None = None
) -> tuple[Completed, CommandRun]:
    ctx = context(ws)
    tool = tool or RunCommand(sandbox, output_limit=1 << 16)
    result = await settle(tool, {"command": command, "timeout_s": 60}, ctx)
    return result, CommandRun(ws, execution_id(ctx.task_id, ctx.call_id))


def answers(result: Completed) -> dict[str, str]:
    return sections(streams(result.output)[0])


NUL = b"\0"


def processes_of(run: CommandRun, marker: str = "") -> list[str]:
    """The processes whose command line names the execution's folder (its wrapper and each
    of its proxy's processes) or ``marker``, a token of the command (the bridge carries the
    command it became as its arguments)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
        except OSError:
            continue
        if str(run.folder).encode() in cmdline or (marker and marker.encode() in cmdline):
            found.append(f"{entry.name}: {cmdline.replace(NUL, b' ')[:3000]!r}")
    return found


# -- allowlist: through the proxy, and only there -----------------------------------------------


async def test_allowed_host_reached_through_the_proxy_when_allowlisted(
    ws: Path, allowed: _Site
) -> None:
    url = f"http://127.0.0.1:{allowed.port}"
    command = probe(f"get {url}/urllib", f"tunnel 127.0.0.1 {allowed.port} /tunnel")
    command += f"; curl -sS -m 10 {url}/curl"
    result, execution = await run(allowlisted(allowed), ws, command)
    seen = answers(result)
    assert seen["0"] == "200 site allowed served /urllib", result.output
    assert "200 Connection established" in seen["1"], result.output
    assert "site allowed served /tunnel" in seen["1"], result.output
    assert "site allowed served /curl" in result.output
    assert allowed.paths == ["/urllib", "/tunnel", "/curl"]
    assert refused_hosts(execution) == [] and "network: refused" not in result.output


async def test_other_hosts_and_ports_refused_and_named_when_allowlisted(
    ws: Path, allowed: _Site, other: _Site
) -> None:
    command = probe(
        f"get http://localhost:{allowed.port}/by-another-name",
        f"tunnel 127.0.0.1 {other.port} /other-port",
        f"get http://127.0.0.1:{other.port}/other-port",
        f"get http://localhost:{allowed.port}/again",
    )
    result, execution = await run(allowlisted(allowed), ws, command)
    seen = answers(result)
    named = f"localhost:{allowed.port}: it is not in this agent's allowlist"
    assert seen["0"].startswith("403 ") and named in seen["0"], result.output
    assert seen["1"].startswith("HTTP/1.1 403"), result.output
    assert seen["2"].startswith("403 "), result.output
    assert allowed.paths == [] and other.paths == []
    refused = [f"localhost:{allowed.port}", f"127.0.0.1:{other.port}"]
    assert (execution.folder / REFUSED_FILE).read_text().splitlines() == refused
    assert refused_hosts(execution) == refused
    line = f"network: refused {', '.join(refused)} (not in this agent's allowlist)"
    assert line in result.output.splitlines()


@pytest.mark.parametrize(
    "request_text",
    [
        "GET /relative HTTP/1.1\\r\\nHost: 127.0.0.1:{allowed}\\r\\n\\r\\n",
        "GET http://127.0.0.1:{other}/host HTTP/1.1\\r\\nHost: 127.0.0.1:{allowed}\\r\\n\\r\\n",
        "GET http://127.0.0.1:{allowed}@localhost:{other}/userinfo HTTP/1.1\\r\\n\\r\\n",
        "GET https://127.0.0.1:{allowed}/other-scheme HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n",
        "GET file:///etc/passwd HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n",
        "GET unix:///run/keel-egress.sock HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n",
        "GET http://[::ffff:127.0.0.1]:{allowed}/mapped HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n",
        "GET http://127.1:{allowed}/short-form HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n",
        "CONNECT localhost:{allowed} HTTP/1.1\\r\\nHost: 127.0.0.1:{allowed}\\r\\n\\r\\n",
    ],
)
async def test_requests_the_proxy_cannot_check_refused_when_allowlisted(
    ws: Path, allowed: _Site, other: _Site, request_text: str
) -> None:
    text = request_text.format(allowed=allowed.port, other=other.port)
    result, _ = await run(allowlisted(allowed), ws, probe(f"raw {text}"))
    answer = answers(result)["0"]
    assert not answer.startswith("HTTP/1.1 200"), answer
    assert allowed.paths == [] and other.paths == [], answer


async def test_no_way_out_but_the_proxy_when_allowlisted(ws: Path, allowed: _Site) -> None:
    """The namespace is empty: the allowed server itself is out of reach without the proxy."""
    command = probe(f"direct 127.0.0.1 {allowed.port}") + "; echo @@links; cat /proc/net/dev"
    result, _ = await run(allowlisted(allowed), ws, command)
    seen = answers(result)
    assert seen["0"].startswith("failed"), result.output
    links = {line.split(":")[0].strip() for line in seen["links"].splitlines() if ":" in line}
    assert links == {"lo"}, seen["links"]


# -- off and on ----------------------------------------------------------------------------------


async def test_nothing_reachable_when_off(ws: Path, allowed: _Site) -> None:
    sandbox = Sandbox(mode="bwrap", egress=Egress("off", (f"127.0.0.1:{allowed.port}",)))
    command = probe(f"direct 127.0.0.1 {allowed.port}", f"get http://127.0.0.1:{allowed.port}/")
    command += f"; echo @@proxy; env | grep -i _proxy; ls -la {SOCKET}"
    result, execution = await run(sandbox, ws, command)
    seen = answers(result)
    assert seen["0"].startswith("failed") and seen["1"].startswith("failed"), result.output
    assert "127.0.0.1" not in seen["proxy"], result.output
    assert allowed.paths == []
    assert not (execution.folder / ALLOW_FILE).exists()
    assert not (execution.folder / "egress.log").exists()


async def test_host_loopback_reachable_when_on(ws: Path, allowed: _Site) -> None:
    sandbox = Sandbox(mode="bwrap", egress=Egress("on"))
    command = probe(f"direct 127.0.0.1 {allowed.port}", f"get http://127.0.0.1:{allowed.port}/on")
    result, _ = await run(sandbox, ws, command)
    seen = answers(result)
    assert seen["0"] == "connected" and seen["1"] == "200 site allowed served /on", result.output


# -- the proxy's life ----------------------------------------------------------------------------


async def test_proxy_and_bridge_gone_when_the_command_ends(ws: Path, allowed: _Site) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    command = probe(f"get http://127.0.0.1:{allowed.port}/{marker}")
    result, execution = await run(allowlisted(allowed), ws, command)
    assert f"200 site allowed served /{marker}" in result.output, result.output
    assert wait_for(lambda: not processes_of(execution, marker)), processes_of(execution, marker)
    assert not (execution.folder / SOCKET_FILE).exists()


@pytest.mark.parametrize("ending", ["stopped", "timed_out"])
async def test_proxy_gone_when_the_command_is_killed(
    ws: Path, allowed: _Site, ending: str
) -> None:
    tool = RunCommand(allowlisted(allowed))
    ctx = context(ws)
    timeout_s = 3 if ending == "timed_out" else 60
    marker = f"marker-{uuid.uuid4().hex}"
    args = {"command": f"touch ready; sleep 60; echo {marker}", "timeout_s": timeout_s}
    async with asyncio.timeout(TOOL_TIMEOUT_S):
        started = await tool.start(args, ctx)
        assert isinstance(started, Started), started
        execution = CommandRun(ws, started.handle)
        while not (ws / "ready").exists():
            await asyncio.sleep(0.05)
        assert any("egress_proxy" in p for p in processes_of(execution))
        assert any("keel-egress.sock" in p for p in processes_of(execution, marker))
        if ending == "stopped":
            assert isinstance(await tool.cancel(started.handle, ctx, "stop"), Stopped)
        else:
            while not isinstance(result := await tool.poll(started.handle, ctx), Completed):
                await asyncio.sleep(0.1)
            assert "timed out" in result.output
    assert wait_for(lambda: not processes_of(execution, marker)), processes_of(execution, marker)


async def test_proxy_exits_by_itself_when_its_wrapper_is_killed_alone(
    ws: Path, allowed: _Site
) -> None:
    """Whatever kills the wrapper and nothing else (an operator, the OOM killer), the proxy
    notices its wrapper is gone and exits."""
    tool = RunCommand(allowlisted(allowed))
    ctx = context(ws)
    async with asyncio.timeout(TOOL_TIMEOUT_S):
        started = await tool.start({"command": "touch ready; sleep 60", "timeout_s": 60}, ctx)
        assert isinstance(started, Started), started
        while not (ws / "ready").exists():
            await asyncio.sleep(0.05)
    execution = CommandRun(ws, started.handle)
    wrapper = int((execution.folder / "pid").read_text())
    below = descendants(wrapper)
    try:
        os.kill(wrapper, signal.SIGKILL)
        assert wait_for(lambda: not any("egress_proxy" in p for p in processes_of(execution)))
    finally:
        for pid in below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        stop(execution)


async def test_allowlist_refusals_and_socket_out_of_the_commands_reach(
    ws: Path, allowed: _Site, other: _Site
) -> None:
    ctx = context(ws)
    folder = CommandRun(ws, execution_id(ctx.task_id, ctx.call_id)).folder
    attempts = "; ".join(
        [
            f"echo 127.0.0.1:{other.port} >> {folder}/{ALLOW_FILE}",
            f"echo made-up.test:1 >> {folder}/{REFUSED_FILE}",
            f"ls {folder}",
            f"rm -f {SOCKET}",
            f"mv {SOCKET} /run/moved",
            f"ln -sf /tmp/elsewhere {SOCKET}",
            f"echo x > {SOCKET}",
            f"{sys.executable} -c 'import socket as s; s.socket(s.AF_UNIX).bind(\"{SOCKET}\")'",
        ]
    )
    command = f"{attempts}; echo @@after; test -S {SOCKET} && echo still-a-socket; "
    command += probe(f"get http://127.0.0.1:{other.port}/after")
    sandbox = allowlisted(allowed)
    tool = RunCommand(sandbox, output_limit=1 << 16)
    result = await settle(tool, {"command": command, "timeout_s": 60}, ctx)
    seen = answers(result)
    assert "still-a-socket" in seen.get("after", ""), result.output
    assert seen["0"].startswith("403 "), result.output
    assert other.paths == []
    assert (folder / ALLOW_FILE).read_text() == f"127.0.0.1:{allowed.port}\n"
    assert (folder / REFUSED_FILE).read_text() == f"127.0.0.1:{other.port}\n"


# -- secrets -------------------------------------------------------------------------------------


def files_holding(value: str, *folders: Path) -> list[str]:
    needle = value.encode()
    return [
        str(path)
        for folder in folders
        for path in folder.rglob("*")
        if path.is_file() and not path.is_symlink() and needle in path.read_bytes()
    ]


async def test_secrets_in_the_env_masked_in_output_and_in_no_file(
    ws: Path, allowed: _Site
) -> None:
    token = f"ghp-{uuid.uuid4().hex}"
    granted = f"task-{uuid.uuid4().hex}"

    async def task_secrets(task_id: str) -> dict[str, str]:
        return {"DEPLOY_KEY": granted}

    # A prefix the environment filter drops from extra_env: a secret is passed as given.
    sandbox = allowlisted(allowed, secrets={"GITHUB_TOKEN": token})
    tool = RunCommand(sandbox, output_limit=1 << 16, secrets=task_secrets)
    hashed = 'printf %s "$GITHUB_TOKEN" | sha256sum; printf %s "$DEPLOY_KEY" | sha256sum'
    result, execution = await run(sandbox, ws, hashed, tool)
    for value in (token, granted):
        assert hashlib.sha256(value.encode()).hexdigest() in result.output, result.output
        assert files_holding(value, state_of(ws), ws) == []
    assert '"$GITHUB_TOKEN"' in (execution.folder / "run.sh").read_text()

    printed, _ = await run(sandbox, ws, 'echo "token=$GITHUB_TOKEN key=$DEPLOY_KEY"', tool)
    assert "token=*** key=***" in printed.output, printed.output
    assert token not in printed.output and granted not in printed.output


async def test_a_secret_is_on_no_command_line_while_its_command_runs(ws: Path) -> None:
    """Every user of the host may read any process's ``/proc/<pid>/cmdline``: a secret must
    not be in bubblewrap's arguments, nor the wrapper's, nor the command's."""
    token = f"npm-{uuid.uuid4().hex}"
    sandbox = Sandbox(mode="bwrap", secrets={"NPM_TOKEN": token})
    run = CommandRun(ws, uuid.uuid4().hex[:16])
    await launch(run, 'test -n "$NPM_TOKEN" && sleep 3', 30, sandbox)
    seen: list[int] = []
    for _ in range(20):  # while it runs
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    seen.append(int(entry.name))
            except OSError:
                continue
        await asyncio.sleep(0.1)
    while not isinstance(finished := check(run), Finished):
        await asyncio.sleep(0.1)
    assert finished.exit_code == 0, "the command saw its secret"
    assert seen == [], "a secret was on a command line"
