"""deploy/ uses only what Keel has: commands, options, environment variables, health routes.

The Dockerfile, compose.yaml, keel.service and keel.env.example are read as their tools read
them, and each use is checked against the real thing: every ``keel …`` invocation is parsed
by the CLI's own command tree (typer's click commands, parsed but not run); every variable
set for a Keel process is one app.yaml substitutes, Keel's code reads from the environment,
or (for the interpreter) ``python --help-env`` lists; every healthcheck URL is a GET route of
the app ``create_app`` builds. Mutated copies of the files prove each check can fail.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.core
import yaml
from starlette.routing import Route

from adapters import cli
from adapters.config import build_config
from adapters.web.app import create_app

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = DEPLOY / "compose.yaml"
UNIT = DEPLOY / "keel.service"
ENV_FILE = DEPLOY / "keel.env.example"
SOURCE_PACKAGES = ("runtime", "routing", "adapters")

# typer >= 0.2x builds its commands with its own copy of click; older ones with click itself.
_click: Any = getattr(typer.core, "_click", None) or importlib.import_module("click")
_REFERENCE = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)")
# A URL's path, or a quoted path literal a URL is built from ('http://…:' + port + '/readyz').
_URL_PATH = re.compile(r"https?://[^/'\"\s]+(/[^'\"\s?#]*)|'(/[^'\s?#]*)'")
_ENV_LINE = re.compile(r"^#?\s*([A-Za-z_][A-Za-z0-9_]*)=")


@dataclass(frozen=True, slots=True)
class Known:
    """What Keel really offers, derived from its code and app.yaml."""

    env: frozenset[str]
    routes: frozenset[str]


# --- what Keel really offers ---------------------------------------------------------------


def cli_problem(argv: Sequence[str]) -> str | None:
    """Why ``keel argv`` would be refused by the real CLI, or None when it parses."""
    command: Any = typer.main.get_command(cli.app)
    args, path = list(argv), ["keel"]
    while isinstance(command, typer.core.TyperGroup):
        if not args or args[0].startswith("-"):
            return f"`{' '.join(path)}` needs a subcommand"
        sub = command.get_command(_click.Context(command), args[0])
        if sub is None:
            return f"`{' '.join(path)}` has no command {args[0]!r}"
        command, path = sub, [*path, args.pop(0)]
    try:
        command.make_context(" ".join(path), args)
    except _click.ClickException as e:  # UsageError, NoSuchOption, BadParameter…
        return f"`{' '.join(path)}`: {e.format_message()}"
    return None


def yaml_references(tree: object) -> set[str]:
    """The ``${VAR}`` names in a parsed YAML tree's values (so not in its comments)."""
    if isinstance(tree, dict):
        return set().union(*(yaml_references(v) for v in tree.values()))
    if isinstance(tree, list):
        return set().union(*(yaml_references(v) for v in tree))
    return set(_REFERENCE.findall(tree)) if isinstance(tree, str) else set()


def _is_environment(node: ast.expr) -> bool:
    return ast.unparse(node).split(".")[-1] in ("environ", "env", "getenv")


def _is_environment_get(func: ast.expr) -> bool:
    return isinstance(func, ast.Attribute) and func.attr in ("get", "pop") and _is_environment(
        func.value
    )


def _literal(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def environment_reads(tree: ast.AST) -> set[str]:
    """Literal names read as ``os.environ[...]``, ``os.getenv(...)``, ``<…>env.get(...)``."""
    names: set[str | None] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_environment(node.value):
            names.add(_literal(node.slice))
        elif isinstance(node, ast.Call) and node.args and _is_environment(node.func):
            names.add(_literal(node.args[0]))  # os.getenv("X")
        elif isinstance(node, ast.Call) and node.args and _is_environment_get(node.func):
            names.add(_literal(node.args[0]))  # os.environ.get("X"), resolution.env.get("X")
    return {name for name in names if name}


def source_environment_reads() -> set[str]:
    files = (f for package in SOURCE_PACKAGES for f in (ROOT / package).rglob("*.py"))
    return set().union(*(environment_reads(ast.parse(f.read_text())) for f in files))


def interpreter_variables() -> set[str]:
    listing = subprocess.run(
        [sys.executable, "--help-env"], capture_output=True, text=True, check=True
    ).stdout
    return set(re.findall(r"^(PYTHON[A-Z0-9_]*)", listing, re.MULTILINE))


def served_get_routes(tmp_path: Path) -> set[str]:
    config = build_config({"database": {"url": f"sqlite:///{tmp_path / 'routes.db'}"}}, env={})
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("KEEL_DATABASE_URL", raising=False)
        patch.chdir(tmp_path)
        app = create_app(config)
    app.state.keel.db.engine.dispose()
    return {r.path for r in app.routes if isinstance(r, Route) and "GET" in (r.methods or ())}


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> Known:
    app_yaml = yaml_references(yaml.safe_load((ROOT / "app.yaml").read_text()))
    env = app_yaml | source_environment_reads() | interpreter_variables()
    return Known(frozenset(env), frozenset(served_get_routes(tmp_path_factory.mktemp("app"))))


# --- reading the deploy files ------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)  # line continuations
    lines = (line.strip() for line in joined.splitlines())
    pairs = (line.split(maxsplit=1) for line in lines if line and not line.startswith("#"))
    return [(pair[0].upper(), pair[1] if len(pair) > 1 else "") for pair in pairs]


def command_argv(value: str | list[str]) -> list[str]:
    """A Dockerfile/compose command in exec (JSON list) or shell form, as argv."""
    if isinstance(value, list):
        return [str(v) for v in value]
    return json.loads(value) if value.startswith("[") else shlex.split(value)


def keel_args(argv: Sequence[str]) -> list[str] | None:
    """What follows ``keel`` (or ``/path/to/keel``) in argv; None when argv runs no keel."""
    at = next((i for i, arg in enumerate(argv) if Path(arg).name == "keel"), None)
    return None if at is None else list(argv[at + 1 :])


def env_assignments(rest: str) -> list[str]:
    """Names an ``ENV`` instruction or a systemd ``Environment=`` line sets."""
    words = shlex.split(rest)
    if words and all("=" in word for word in words):
        return [word.split("=", 1)[0] for word in words]
    return words[:1]  # the legacy `ENV NAME value` form


def healthcheck_text(value: str | list[str]) -> str:
    return value if isinstance(value, str) else " ".join(command_argv(value))


@dataclass(frozen=True, slots=True)
class Uses:
    """What one deploy file asks of Keel."""

    invocations: list[list[str]]
    env: list[str]
    health_urls: list[str]


def dockerfile_uses(text: str) -> Uses:
    found = dockerfile_instructions(text)
    last = {keyword: rest for keyword, rest in found}
    argv = command_argv(last.get("ENTRYPOINT", "[]")) + command_argv(last.get("CMD", "[]"))
    invoked = keel_args(argv)
    env = [name for keyword, rest in found if keyword == "ENV" for name in env_assignments(rest)]
    checks = [rest.split(" CMD ", 1)[-1] for keyword, rest in found if keyword == "HEALTHCHECK"]
    return Uses([invoked] if invoked is not None else [], env, checks)


def compose_keel_services(tree: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services built from deploy/Dockerfile, i.e. the ones that run Keel."""
    return {name: svc for name, svc in tree["services"].items() if "build" in svc}


def compose_uses(text: str, image_cmd: Sequence[str]) -> Uses:
    services = compose_keel_services(yaml.safe_load(text)).values()
    invocations, env, checks = [], [], []
    for svc in services:
        args = keel_args(command_argv(svc["command"]) if "command" in svc else image_cmd)
        invocations.append(args if args is not None else ["<runs no keel command>"])
        environment = svc.get("environment") or {}
        if isinstance(environment, list):
            environment = dict(item.partition("=")[::2] for item in environment)
        env += list(environment)
        if "test" in svc.get("healthcheck", {}):
            checks.append(healthcheck_text(svc["healthcheck"]["test"]))
    return Uses(invocations, env, checks)


def unit_entries(text: str) -> list[tuple[str, str]]:
    lines = (line.strip() for line in text.splitlines())
    pairs = (line.split("=", 1) for line in lines if "=" in line and line[0] not in "#;[")
    return [(key.strip(), value.strip()) for key, value in pairs]


def unit_uses(text: str) -> Uses:
    entries = unit_entries(text)
    execs = [shlex.split(value.lstrip("-@:+!")) for key, value in entries if key.startswith("Exec")]
    invocations = [args for args in map(keel_args, execs) if args is not None]
    settings = (value for key, value in entries if key == "Environment")
    env = [name for value in settings for name in env_assignments(value)]
    return Uses(invocations, env, [])


def env_file_names(text: str) -> list[tuple[str, bool]]:
    """(name, commented out) for every VAR=… line; a commented one is an invitation to use it."""
    lines = (line.strip() for line in text.splitlines())
    return [(m.group(1), line.startswith("#")) for line in lines if (m := _ENV_LINE.match(line))]


# --- the checks --------------------------------------------------------------------------


def problems(where: str, uses: Uses, known: Known) -> list[str]:
    found = [f"{where}: {p}" for args in uses.invocations if (p := cli_problem(args))]
    unknown = [name for name in uses.env if name not in known.env]
    found += [f"{where}: Keel reads no variable {name}" for name in unknown]
    for check in uses.health_urls:
        paths = [url or quoted for url, quoted in _URL_PATH.findall(check)]
        if not paths:
            found.append(f"{where}: healthcheck names no URL: {check}")
        found += [f"{where}: Keel serves no GET {p}" for p in paths if p not in known.routes]
    return found


def image_cmd() -> list[str]:
    found = dockerfile_instructions(DOCKERFILE.read_text())
    last = {keyword: rest for keyword, rest in found}
    return command_argv(last.get("ENTRYPOINT", "[]")) + command_argv(last["CMD"])


def dockerfile_problems(text: str, known: Known) -> list[str]:
    return problems("Dockerfile", dockerfile_uses(text), known)


def compose_problems(text: str, known: Known) -> list[str]:
    return problems("compose.yaml", compose_uses(text, image_cmd()), known)


def unit_problems(text: str, known: Known) -> list[str]:
    return problems("keel.service", unit_uses(text), known)


def env_file_problems(text: str, known: Known) -> list[str]:
    """keel.env.example serves keel.service and, as deploy/.env, compose.yaml: each name in it
    is one Keel reads or compose.yaml substitutes, and compose.yaml passes each Keel one on."""
    compose = COMPOSE.read_text()
    substituted = yaml_references(yaml.safe_load(compose))
    passed = set(compose_uses(compose, image_cmd()).env)
    found = []
    for name, commented in env_file_names(text):
        if name not in known.env | substituted:
            found.append(f"keel.env.example: neither Keel nor compose.yaml reads {name}")
        elif name in known.env and name not in passed and not commented:
            found.append(f"keel.env.example: compose.yaml does not pass {name} to Keel")
    return found


def test_dockerfile_uses_only_real_commands_variables_and_routes(known: Known) -> None:
    uses = dockerfile_uses(DOCKERFILE.read_text())
    assert uses.invocations == [["serve", "--config", "/etc/keel/app.yaml"]]
    assert uses.health_urls, "the image has a HEALTHCHECK"
    assert dockerfile_problems(DOCKERFILE.read_text(), known) == []


def test_compose_file_uses_only_real_commands_variables_and_routes(known: Known) -> None:
    uses = compose_uses(COMPOSE.read_text(), image_cmd())
    assert sorted(args[0] for args in uses.invocations) == ["serve", "worker"]
    assert "KEEL_DATABASE_URL" in uses.env
    assert compose_problems(COMPOSE.read_text(), known) == []


def test_systemd_unit_uses_only_real_commands_and_variables(known: Known) -> None:
    uses = unit_uses(UNIT.read_text())
    assert uses.invocations == [["serve", "--config", "/etc/keel/app.yaml"]]
    assert unit_problems(UNIT.read_text(), known) == []


def test_env_file_names_only_variables_keel_or_compose_reads(known: Known) -> None:
    names = dict(env_file_names(ENV_FILE.read_text()))
    assert names["KEEL_DATABASE_URL"] is True and names["SLACK_BOT_TOKEN"] is False
    assert env_file_problems(ENV_FILE.read_text(), known) == []


def test_known_variables_come_from_app_yaml_and_the_source(known: Known) -> None:
    source = source_environment_reads()
    assert {"KEEL_DATABASE_URL", "KEEL_CORPORA_DIR"} <= source  # os.environ and env.get reads
    app_yaml = yaml_references(yaml.safe_load((ROOT / "app.yaml").read_text()))
    assert "KEEL_CORPORA_DIR" not in app_yaml and "SLACK_BOT_TOKEN" in app_yaml
    assert {"SLACK_BOT_TOKEN", "KEEL_CORPORA_DIR", "PYTHONUNBUFFERED"} <= known.env
    assert "VAR" not in known.env  # app.yaml's comments explain `${VAR}`; they are not reads
    assert {"/healthz", "/readyz"} <= known.routes


MUTATIONS = [
    (DOCKERFILE, '"keel", "serve"', '"keel", "serv"', "no command 'serv'"),
    (DOCKERFILE, '"--config"', '"--confg"', "--confg"),
    (DOCKERFILE, "KEEL_PORT=8080", "KEEL_PROT=8080", "KEEL_PROT"),
    (DOCKERFILE, "/readyz", "/ready", "GET /ready"),
    (COMPOSE, '"keel", "worker"', '"keel", "wroker"', "no command 'wroker'"),
    (COMPOSE, '"worker", "--config"', '"worker", "--confg"', "--confg"),
    (COMPOSE, "SLACK_BOT_TOKEN: ", "SLACK_BOT_TOKNE: ", "SLACK_BOT_TOKNE"),
    (COMPOSE, "8080/readyz", "8080/status", "GET /status"),
    (UNIT, "bin/keel serve", "bin/keel serv", "no command 'serv'"),
    (UNIT, "--config", "--confg", "--confg"),
    (UNIT, "StateDirectory=keel", "Environment=KEEL_DATABSE_URL=x\nStateDirectory=keel",
     "KEEL_DATABSE_URL"),
    (ENV_FILE, "\nSLACK_BOT_TOKEN=", "\nSLACK_BOT_TOKNE=", "SLACK_BOT_TOKNE"),
    (ENV_FILE, "\n# KEEL_DATABASE_URL=", "\n# KEEL_DATABSE_URL=", "KEEL_DATABSE_URL"),
    (ENV_FILE, "\n# KEEL_PORT=", "\nKEEL_PORT=", "does not pass KEEL_PORT"),
]


@pytest.mark.parametrize(("path", "old", "new", "named"), MUTATIONS)
def test_checks_fail_when_a_deploy_file_names_what_does_not_exist(
    known: Known, path: Path, old: str, new: str, named: str
) -> None:
    text = path.read_text()
    assert old in text
    mutated = text.replace(old, new, 1)
    checks = {
        DOCKERFILE: dockerfile_problems,
        COMPOSE: compose_problems,
        UNIT: unit_problems,
        ENV_FILE: env_file_problems,
    }
    found = checks[path](mutated, known)
    assert any(named in problem for problem in found), found


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (["serve", "--config", "app.yaml"], False),
        (["worker", "--config", "app.yaml"], False),
        (["db", "upgrade"], False),
        (["serv"], True),
        (["serve", "--confg", "app.yaml"], True),
        (["db"], True),
        (["db", "upgrad"], True),
    ],
)
def test_cli_check_refuses_unknown_commands_and_options_when_parsing(
    argv: list[str], refused: bool
) -> None:
    assert (cli_problem(argv) is not None) == refused


# --- the image's healthcheck against a real `keel serve` ----------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _image_env(port: int, tmp_path: Path) -> dict[str, str]:
    """The image's ENV, but on loopback and a free port, on a fresh SQLite file."""
    found = dockerfile_instructions(DOCKERFILE.read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEEL_", "SLACK_", "GITHUB_"))}
    for keyword, rest in found:
        if keyword == "ENV":
            env |= dict(word.split("=", 1) for word in shlex.split(rest))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env | {
        "KEEL_HOST": "127.0.0.1",
        "KEEL_PORT": str(port),
        "KEEL_DATABASE_URL": f"sqlite:///{tmp_path / 'keel.db'}",
    }


def _image_cmd_here() -> list[str]:
    """The image's CMD, with each COPY'd file read from the checkout instead."""
    copies = {}
    for keyword, rest in dockerfile_instructions(DOCKERFILE.read_text()):
        if keyword == "COPY" and len(words := rest.split()) == 2:
            copies[words[1]] = str(ROOT / words[0])
    args = keel_args(image_cmd()) or []
    return [str(Path(sys.executable).parent / "keel"), *(copies.get(a, a) for a in args)]


@contextmanager
def _serve(env: dict[str, str], cwd: Path) -> Iterator[None]:
    process = subprocess.Popen(
        _image_cmd_here(), cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield
    finally:
        process.terminate()
        process.wait(timeout=30)


def _healthy(command: str, env: dict[str, str]) -> bool:
    return subprocess.run(["sh", "-c", command], env=env, capture_output=True).returncode == 0


def test_image_healthcheck_passes_when_keel_serve_is_ready(tmp_path: Path) -> None:
    (command,) = dockerfile_uses(DOCKERFILE.read_text()).health_urls
    env = _image_env(_free_port(), tmp_path)
    assert not _healthy(command, env), "nothing listens yet, so the check must fail"
    with _serve(env, tmp_path):
        deadline = time.monotonic() + 60
        while not _healthy(command, env):
            assert time.monotonic() < deadline, "keel serve never became ready"
            time.sleep(0.5)


def _readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    following = text.find("\n## ", start + 1)
    return text[start : following if following != -1 else len(text)]


def test_readme_deployment_shows_every_deploy_file() -> None:
    section = _readme_section("Deployment")
    missing = [f.name for f in DEPLOY.iterdir() if f"deploy/{f.name}" not in section]
    assert not missing, f"README's Deployment section does not show {missing}"


def test_readme_sandbox_policy_names_what_the_sandbox_does() -> None:
    """The written policy and the code agree on the paths and the secret prefixes."""
    from runtime.workspace import sandbox

    section = _readme_section("Deployment").split("### Sandbox policy", 1)[1]
    for directory in ("/usr", "/etc", "/root", "/home", "/tmp", "/proc"):
        assert f"`{directory}" in section, directory
    for prefix in sandbox.SECRET_PREFIXES:
        assert f"`{prefix}*`" in section, prefix
    assert "`/etc/keel`" in section and "/etc/keel" in sandbox.ETC_SECRETS
    assert "workspace.readonly_paths" in section
