"""The variables app.yaml reads are the ones deploy/keel.env.example and README's table name.

Each of the three is read as written: app.yaml's ``${VAR}`` references in its values (not its
comments), every ``VAR=`` line of the example (commented out or not), and the rows of the
README's table, whose columns say which key a variable sets and its default. Mutated copies
prove each check can fail.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from adapters.config import dotted
from tests.unit.test_packaging import env_file_names, yaml_references

ROOT = Path(__file__).resolve().parents[2]
APP_YAML = ROOT / "app.yaml"
ENV_FILE = ROOT / "deploy" / "keel.env.example"
COMPOSE = ROOT / "deploy" / "compose.yaml"
README = ROOT / "README.md"

_REFERENCE = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_TABLE_INTRO = "The variables it reads"


def references(tree: object, loc: tuple[str | int, ...] = ()) -> list[tuple[str, str, str]]:
    """(variable, the dotted key app.yaml sets from it, its ``:-`` default or "") for each
    ``${VAR}`` in the tree's values."""
    if isinstance(tree, dict):
        return [ref for key, value in tree.items() for ref in references(value, (*loc, key))]
    if isinstance(tree, list):
        return [ref for i, value in enumerate(tree) for ref in references(value, (*loc, i))]
    found = _REFERENCE.findall(tree) if isinstance(tree, str) else []
    return [(name, dotted(loc), default) for name, default in found]


def variable_uses(app_yaml: str) -> dict[str, set[str]]:
    """Variable → the dotted keys app.yaml sets from it."""
    uses: dict[str, set[str]] = {}
    for name, path, _ in references(yaml.safe_load(app_yaml)):
        uses.setdefault(name, set()).add(path)
    return uses


def variable_defaults(app_yaml: str) -> dict[str, str]:
    """Variable → the default app.yaml gives it (none: not in the result)."""
    return {name: default for name, _, default in references(yaml.safe_load(app_yaml)) if default}


def readme_rows(readme: str) -> list[list[str]]:
    """The cells of each row of the environment-variable table in README's Configuration."""
    section = readme.split("## Configuration", 1)[1].split("\n#", 1)[0]
    table = section.split(_TABLE_INTRO, 1)[1]
    lines = (line.strip() for line in table.splitlines())
    rows = [line.strip("|").split("|") for line in lines if line.startswith("| `")]
    return [[cell.strip() for cell in row] for row in rows]


def _code(text: str) -> str:
    return f"`{text}`"


def documentation_problems(app_yaml: str, env_file: str, readme: str) -> list[str]:
    """Where the example env file or README's table disagrees with what app.yaml reads."""
    uses = variable_uses(app_yaml)
    defaults = variable_defaults(app_yaml)
    compose_only = yaml_references(yaml.safe_load(COMPOSE.read_text())) - set(uses)
    found = []
    listed = {name for name, _ in env_file_names(env_file)}
    found += [f"keel.env.example lacks {name}" for name in sorted(set(uses) - listed)]
    found += [
        f"keel.env.example: app.yaml reads no {name}"
        for name in sorted(listed - set(uses) - compose_only)
    ]
    rows = {row[0]: row for row in readme_rows(readme)}
    documented = {cell.strip("`") for cell in rows}
    found += [f"README's table lacks {name}" for name in sorted(set(uses) - documented)]
    stale = sorted(documented - set(uses))
    found += [f"README's table: app.yaml reads no {name}" for name in stale]
    if len(rows) != len(readme_rows(readme)):
        found.append("README's table names a variable twice")
    for name in sorted(set(uses) & documented):
        _, sets, default, *_ = rows[_code(name)]
        keys = ", ".join(_code(path) for path in sorted(uses[name]))
        if sets != keys:
            found.append(f"README's table: {name} sets {keys}, not {sets}")
        if name in defaults and default != _code(defaults[name]):
            expected = _code(defaults[name])
            found.append(f"README's table: {name} defaults to {expected}, not {default}")
        if name not in defaults and default.startswith("`"):
            found.append(f"README's table: {name} has no default in app.yaml, not {default}")
    return found


def test_env_file_and_readme_name_every_variable_app_yaml_reads_and_no_other() -> None:
    found = documentation_problems(APP_YAML.read_text(), ENV_FILE.read_text(), README.read_text())

    assert found == []


def test_variables_are_read_from_app_yaml_values_with_their_keys_and_defaults() -> None:
    uses = variable_uses(APP_YAML.read_text())
    defaults = variable_defaults(APP_YAML.read_text())

    assert uses["SLACK_SIGNING_SECRET"] == {"slack.signing_secret"}
    assert uses["KEEL_ENCRYPTION_KEY"] == {"slack.oauth.encryption_key"}
    assert defaults["KEEL_DATABASE_URL"] == "sqlite:///./keel.db"
    assert "KEEL_ADMIN_TOKEN" not in defaults
    assert {"VAR", "ACME_PIP_INDEX_URL", "NPM_TOKEN"}.isdisjoint(uses)  # only in comments
    assert len(readme_rows(README.read_text())) == len(uses)


MUTATIONS = [
    (APP_YAML, "${KEEL_PORT:-8080}", "${KEEL_PORTS:-8080}", "keel.env.example lacks KEEL_PORTS"),
    (APP_YAML, "${KEEL_PORT:-8080}", "${KEEL_PORTS:-8080}", "README's table lacks KEEL_PORTS"),
    (APP_YAML, "${KEEL_PORT:-8080}", "8080", "keel.env.example: app.yaml reads no KEEL_PORT"),
    (APP_YAML, "${KEEL_PORT:-8080}", "8080", "README's table: app.yaml reads no KEEL_PORT"),
    (APP_YAML, "${KEEL_PORT:-8080}", "${KEEL_PORT:-9090}", "KEEL_PORT defaults to `9090`"),
    (APP_YAML, "${KEEL_PORT:-8080}", "${KEEL_PORT}", "KEEL_PORT has no default in app.yaml"),
    (APP_YAML, "model: ${KEEL_MODEL:-", "name: ${KEEL_MODEL:-", "KEEL_MODEL sets `model.name`"),
    (ENV_FILE, "\nKEEL_DEFAULT_REPO=", "\nKEEL_DEFAULT_REPOS=", "lacks KEEL_DEFAULT_REPO"),
    (ENV_FILE, "\nKEEL_DEFAULT_REPO=", "\nKEEL_DEFAULT_REPOS=", "reads no KEEL_DEFAULT_REPOS"),
    (README, "| `KEEL_MODEL` |", "| `KEEL_MODELS` |", "README's table lacks KEEL_MODEL"),
    (README, "| `KEEL_MODEL` |", "| `KEEL_MODELS` |", "app.yaml reads no KEEL_MODELS"),
]


@pytest.mark.parametrize(("path", "old", "new", "named"), MUTATIONS)
def test_check_fails_when_app_yaml_the_env_file_or_readme_drifts(
    path: Path, old: str, new: str, named: str
) -> None:
    texts = {p: p.read_text() for p in (APP_YAML, ENV_FILE, README)}
    assert old in texts[path]
    texts[path] = texts[path].replace(old, new, 1)

    found = documentation_problems(texts[APP_YAML], texts[ENV_FILE], texts[README])

    assert any(named in problem for problem in found), found
