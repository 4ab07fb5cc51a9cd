"""The ``keel`` command line. Exit codes: 0 ok, 1 failure, 2 usage or configuration error."""

from __future__ import annotations

import typer

from runtime.store.engine import make_engine, resolve_url
from runtime.store.migrate import is_current, upgrade

app = typer.Typer(help="Keel: durable, evidence-backed agent tasks from Slack and GitHub.")
db_app = typer.Typer(help="Database schema.")
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(
    database_url: str | None = typer.Option(None, help="Overrides KEEL_DATABASE_URL."),
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
def demo() -> None:
    """Run the end-to-end demo on embedded defaults."""
    typer.echo("keel demo is not built yet: it arrives with the application issue.")


def main() -> None:
    app()
