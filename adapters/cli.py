"""The ``keel`` command line. Exit codes: 0 ok, 1 failure, 2 usage or configuration error."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from runtime.store.engine import make_engine, resolve_url
from runtime.store.migrate import is_current, upgrade

app = typer.Typer(help="Keel: durable, evidence-backed agent tasks from Slack and GitHub.")
db_app = typer.Typer(help="Database schema.")
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(
    database_url: Annotated[str | None, typer.Option(help="Overrides KEEL_DATABASE_URL.")] = None,
) -> None:
    """Apply migrations; a no-op on a database that is already current."""
    url = database_url or resolve_url(None)
    engine = make_engine(url)
    try:
        upgrade(engine)
        state = "current" if is_current(engine) else "NOT current"
    finally:
        engine.dispose()
    typer.echo(f"database schema is {state}")


@app.command()
def demo(
    workdir: Annotated[Path | None, typer.Option(help="Keep the demo's files here.")] = None,
) -> None:
    """Run the whole job end to end: emulated Slack and GitHub, SQLite, the scripted model."""
    import asyncio
    import tempfile

    from adapters.demo.scenario import print_thread, run_demo

    folder = workdir or Path(tempfile.mkdtemp(prefix="keel-demo-"))
    typer.echo(f"Keel demo in {folder}")
    result = asyncio.run(run_demo(folder, echo=typer.echo))
    print_thread(result, typer.echo)
    if result.ui_url:
        typer.echo(f"Task UI (while Keel runs): {result.ui_url}")
    if not result.ok:
        for problem in result.problems:
            typer.echo(f"✗ {problem}", err=True)
        raise typer.Exit(1)
    typer.echo("✓ the reply landed in the thread with its evidence")


def main() -> None:
    app()
