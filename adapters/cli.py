"""The ``keel`` command line. Exit codes: 0 ok, 1 failure, 2 usage or configuration error
(including a database that does not exist or cannot be read); ``keel tasks tail`` adds its own
(see its --help)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from adapters import cli_tasks
from adapters.config import AppConfig, describe, load_config
from runtime.errors import ConfigError, UnknownSchema
from runtime.store.engine import make_engine, resolve_url
from runtime.store.migrate import is_current, upgrade
from runtime.version import VERSION

app = typer.Typer(help="Keel: durable, evidence-backed agent tasks from Slack and GitHub.")
db_app = typer.Typer(help="Database schema.")
config_app = typer.Typer(help="Configuration.")
app.add_typer(db_app, name="db")
app.add_typer(config_app, name="config")
app.add_typer(cli_tasks.tasks_app, name="tasks")
app.add_typer(cli_tasks.signals_app, name="signals")
cache_app = typer.Typer(help="Cached environments (what repositories' setup steps produced).")
app.add_typer(cache_app, name="cache")

ConfigPath = Annotated[Path | None, typer.Option("--config", help="app.yaml to use.")]


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"keel {VERSION}")
        raise typer.Exit()


@app.callback()
def _keel(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print Keel's version."
        ),
    ] = False,
) -> None:
    """Keel: durable, evidence-backed agent tasks from Slack and GitHub."""


def _load(path: Path | None) -> AppConfig:
    """The configuration, or exit 2 with every problem named by its key.

    ``--config PATH`` is that file or an error, never a fallback: a path that names no file
    exits 2 saying so, though ./app.yaml or the defaults would have loaded. Without
    ``--config``, ./app.yaml if there is one, else the defaults."""
    if path is not None and not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        typer.echo(
            f"configuration error: --config {path} {what} (absolute: {path.absolute()}); "
            "name an existing app.yaml, or leave --config out to use ./app.yaml or the defaults",
            err=True,
        )
        raise typer.Exit(2)
    chosen = path or (Path("app.yaml") if Path("app.yaml").exists() else None)
    try:
        return load_config(chosen) if chosen else AppConfig()
    except ConfigError as e:
        typer.echo(f"configuration error:\n{e}", err=True)
        raise typer.Exit(2) from e


def _warn_if_deaf(config: AppConfig) -> None:
    """Say so on stderr when no surface is enabled: such a Keel runs but never gets work."""
    if config.slack.enabled or config.github.enabled:
        return
    typer.echo(
        "warning: nothing can receive work: Slack and GitHub are both disabled "
        "(see the slack: and github: lines for the missing settings)",
        err=True,
    )


@config_app.command("check")
def config_check(
    path: Annotated[Path | None, typer.Argument()] = None,
    online: Annotated[
        bool,
        typer.Option(
            "--online",
            help="Also ask GitHub and Slack if the credentials work, and each model if it "
            "answers a tool call.",
        ),
    ] = False,
) -> None:
    """Validate app.yaml and say what is enabled (secrets are never printed).

    Exits 2 on a configuration error, or when the sandbox ``workspace.sandbox`` asks for
    cannot start here (Keel would refuse to run commands); warns (exit 0) when no surface can
    receive work or when commands run unsandboxed (``none``). With ``--online``, exits 1 when
    a provider refuses the credentials.
    """
    config = _load(path)
    for line in describe(config):
        typer.echo(line)
    _warn_if_deaf(config)
    sandboxed = _check_sandbox(config)
    if online:
        from adapters.online import online_checks  # PyGithub and slack_sdk: only when asked

        checks = online_checks(config)
        for check in checks:
            typer.echo(check.line, err=not check.ok)
        if sandboxed and not all(check.ok for check in checks):
            raise typer.Exit(1)
    if not sandboxed:
        raise typer.Exit(2)


def _check_sandbox(config: AppConfig) -> bool:
    """Print how commands will be isolated; False when they could not run at all.

    ``auto`` and ``bwrap`` start bubblewrap once to find out (as the first command would);
    ``none`` is a warning, not a failure: it works, but nothing confines the commands.
    """
    import asyncio

    from adapters.sandbox_check import sandbox_status

    status = asyncio.run(sandbox_status(config.workspace.sandbox))
    if not status.ok:
        typer.echo(f"sandbox error: {status.line}", err=True)
    elif status.warning:
        typer.echo(f"warning: {status.warning}", err=True)
    else:
        typer.echo(status.line)
    return status.ok


@app.command()
def serve(
    config_path: ConfigPath = None,
    host: Annotated[str | None, typer.Option(help="Overrides server.host.")] = None,
    port: Annotated[int | None, typer.Option(help="Overrides server.port.")] = None,
) -> None:
    """HTTP (webhooks, API, UI) plus in-process workers: the embedded default."""
    import uvicorn

    from adapters.logs import setup_logging
    from adapters.web.app import create_app

    config = _load(config_path)
    server = config.server.model_copy(
        update={k: v for k, v in (("host", host), ("port", port)) if v is not None}
    )
    config = config.model_copy(update={"server": server})
    setup_logging()
    for line in describe(config):
        typer.echo(line)
    _warn_if_deaf(config)
    _migrate(resolve_url(config.database.url), echo=config.database.echo)
    uvicorn.run(create_app(config), host=server.host, port=server.port, log_config=None)


@app.command()
def worker(config_path: ConfigPath = None) -> None:
    """Workers only (no HTTP): run several of these against PostgreSQL to scale out."""
    import asyncio
    import signal

    from adapters.assembly import Keel
    from adapters.logs import setup_logging

    config = _load(config_path)
    setup_logging()
    _migrate(resolve_url(config.database.url), echo=config.database.echo)

    async def run() -> None:
        keel = Keel(config)
        await asyncio.to_thread(keel.migrate)
        await keel.connect()
        await keel.start(workers=True, intake=False)  # keel serve finishes its deliveries
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        typer.echo(f"worker {keel.worker.name} running; SIGTERM stops it cleanly")
        await stop.wait()
        await keel.stop()

    asyncio.run(run())


@db_app.command("upgrade")
def db_upgrade(
    config_path: ConfigPath = None,
    database_url: Annotated[
        str | None, typer.Option(help="Overrides KEEL_DATABASE_URL and database.url.")
    ] = None,
) -> None:
    """Apply migrations to database.url of app.yaml; a no-op on a current database."""
    database = _load(config_path).database
    current = _migrate(database_url or resolve_url(database.url), echo=database.echo)
    typer.echo(f"database schema is {'current' if current else 'NOT current'}")


def _migrate(url: str, *, echo: bool) -> bool:
    """Upgrade the schema (True when it is then current); exit 2 with one line, the database
    untouched, when it is at a revision this Keel does not know."""
    engine = make_engine(url, pool_size=1, echo=echo)
    try:
        upgrade(engine)
        return is_current(engine)
    except UnknownSchema as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    finally:
        engine.dispose()


@app.command()
def demo(
    workdir: Annotated[Path | None, typer.Option(help="Keep the demo's files here.")] = None,
    socket_mode: Annotated[
        bool, typer.Option(help="Slack events over Socket Mode instead of HTTP.")
    ] = False,
) -> None:
    """Run the whole job end to end: emulated Slack and GitHub, SQLite, the scripted model."""
    import asyncio
    import tempfile

    from adapters.demo.scenario import closing_lines, print_thread, run_demo

    folder = workdir or Path(tempfile.mkdtemp(prefix="keel-demo-"))
    typer.echo(f"Keel demo in {folder}")
    result = asyncio.run(run_demo(folder, echo=typer.echo, socket_mode=socket_mode))
    print_thread(result, typer.echo)
    for line in closing_lines(result):
        typer.echo(line)
    if not result.ok:
        for problem in result.problems:
            typer.echo(f"✗ {problem}", err=True)
        raise typer.Exit(1)
    typer.echo("✓ the reply landed in the thread with its evidence")


@app.command("run")
def run_task(
    text: Annotated[str, typer.Argument(help="What to do, as you would ask in a thread.")],
    repo: Annotated[
        str, typer.Option("--repo", help="A local git repository (its committed state) or a URL.")
    ],
    agent: Annotated[str | None, typer.Option(help="A configured agent.")] = None,
    config_path: ConfigPath = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            help="Keep the task here (default: a temporary SQLite); never a server's "
            "database, whose workers would claim the task."
        ),
    ] = None,
) -> None:
    """Run one task against a repository with the configured model, the terminal as its thread.

    Progress and the reply with its evidence are printed as they happen; Ctrl-C stops the
    task. Exit codes: 0 succeeded, 1 ended otherwise, 2 bad request, 3 stopped with Ctrl-C.
    """
    from adapters.local_run import run_command
    from adapters.terminal import terminal_echo

    config = _load(config_path)
    raise typer.Exit(run_command(config, text, repo, agent, database_url, terminal_echo))


@cli_tasks.tasks_app.command("ls")
def tasks_ls(
    config_path: ConfigPath = None,
    status: Annotated[str | None, typer.Option(help="Only tasks with this status.")] = None,
    limit: int = 50,
    as_json: cli_tasks.JsonFlag = False,
) -> None:
    """List tasks, newest first."""
    cli_tasks.list_tasks(_load(config_path), status, limit, as_json)


@cli_tasks.tasks_app.command("show")
def tasks_show(
    task_id: str, config_path: ConfigPath = None, as_json: cli_tasks.JsonFlag = False
) -> None:
    """A task's tree, phases, tool calls, mailbox, evidence and replies."""
    cli_tasks.show_task(_load(config_path), task_id, as_json)


@cli_tasks.tasks_app.command("cancel")
def tasks_cancel(
    task_id: str, config_path: ConfigPath = None, as_json: cli_tasks.JsonFlag = False
) -> None:
    """Record a stop; the task and its descendants stop at their next checkpoint."""
    cli_tasks.cancel_task(_load(config_path), task_id, as_json=as_json)


@cli_tasks.tasks_app.command("tail")
def tasks_tail(
    task_id: str, config_path: ConfigPath = None, as_json: cli_tasks.JsonFlag = False
) -> None:
    """Follow a task's progress and transcript until it finishes; the exit code says how it
    ended. With --json: one JSON object per line (status, transcript items, then the end).

    Exit codes: 0 succeeded, 1 failed, 3 canceled, 4 timed_out, 5 no such task,
    2 configuration error or no usable database.
    """
    cli_tasks.tail_task(_load(config_path), task_id, as_json=as_json)


@cli_tasks.signals_app.command("replay")
def signals_replay(
    file: Path,
    config_path: ConfigPath = None,
    url: Annotated[str, typer.Option(help="The running Keel.")] = "http://127.0.0.1:8080",
) -> None:
    """Send a saved payload ({provider, event, payload}) to a running Keel, signed."""
    cli_tasks.replay(_load(config_path), file, url)


def main() -> None:
    app()


@cache_app.command("ls")
def cache_ls(config_path: ConfigPath = None) -> None:
    """Each cached environment: its repository, size and when it was last used."""
    from adapters.assembly import env_cache

    config = _load(config_path)
    cache = env_cache(config.workspace)
    if cache is None:
        typer.echo("the environment cache is off (workspace.cache.enabled: false)")
        return
    entries = cache.entries()
    for entry in reversed(entries):
        used = datetime.fromtimestamp(entry.last_used, UTC).strftime("%Y-%m-%d %H:%M")
        typer.echo(f"{entry.key}  {entry.repo}  {entry.bytes / 2**20:.1f} MiB  used {used} UTC")
    total = sum(e.bytes for e in entries) / 2**20
    typer.echo(f"{len(entries)} entries, {total:.1f} MiB in {cache.root}")


@cache_app.command("clear")
def cache_clear(
    repo: Annotated[str | None, typer.Option(help="Only this repository's entries.")] = None,
    config_path: ConfigPath = None,
) -> None:
    """Remove cached environments; the next task of each repository runs its setup."""
    from adapters.assembly import env_cache

    config = _load(config_path)
    cache = env_cache(config.workspace)
    if cache is None:
        typer.echo("the environment cache is off (workspace.cache.enabled: false)")
        return
    gone = cache.clear(repo)
    typer.echo(f"removed {len(gone)} entries ({sum(e.bytes for e in gone) / 2**20:.1f} MiB)")
