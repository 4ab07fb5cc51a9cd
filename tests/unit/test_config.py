"""app.yaml, ${VAR} substitution, error paths, derived enablement and secret hygiene."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from adapters.config import AppConfig, build_config, describe, load_config
from runtime.config import agent_model
from runtime.errors import ConfigError
from runtime.threads import GitHubIssue, SlackChannel, SlackThread

APP_YAML = Path(__file__).resolve().parents[2] / "app.yaml"

SECRETS = {
    "KEEL_ADMIN_TOKEN": "admin-s3cret-1111",
    "SLACK_BOT_TOKEN": "xoxb-s3cret-2222",
    "SLACK_SIGNING_SECRET": "signing-s3cret-3333",
    "GITHUB_TOKEN": "ghp_s3cret4444",
    "GITHUB_WEBHOOK_SECRET": "webhook-s3cret-5555",
    "OPENAI_API_KEY": "sk-s3cret-6666",
}
DATABASE_PASSWORD = "dbpass-s3cret-7777"
FULL_ENV = {
    **SECRETS,
    "KEEL_DATABASE_URL": f"postgresql+psycopg://keel:{DATABASE_PASSWORD}@127.0.0.1:5432/keel",
    "SLACK_API_URL": "http://127.0.0.1:8801/api",
    "GITHUB_API_URL": "http://127.0.0.1:8802",
    "OPENAI_BASE_URL": "http://127.0.0.1:8803/v1",
    "KEEL_MODEL": "llama3.1",
    "KEEL_MODEL_PROVIDER": "openai",
    "SLACK_ALLOWED_CHANNELS": "C111, C222",
}


def problems_of(tree: Any, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        build_config(tree, env or {})
    return str(raised.value).splitlines()


def make_daemon(**overrides: Any) -> dict[str, Any]:
    return {"id": "ci", "purpose": "fix CI", "watch": [{"provider": "github"}], **overrides}


def roles(*daemons: dict[str, Any]) -> dict[str, Any]:
    return {"daemons": {"roles": list(daemons)}}


def write_yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "app.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_app_yaml_disables_surfaces_when_env_is_empty() -> None:
    config = load_config(APP_YAML, {})

    assert not config.slack.enabled
    assert not config.github.enabled
    assert config.github.auth is None
    assert config.database.url == "sqlite:///./keel.db"
    assert config.slack.api_url == "https://slack.com/api/"
    assert config.github.api_url == "https://api.github.com"
    assert (config.model.provider, config.model.model) == ("openai", "gpt-4o-mini")
    assert AppConfig().model.provider == "openai"
    assert config.model.outage_give_up_s == AppConfig().model.outage_give_up_s == 1800
    assert config.server.admin_token is None
    lines = describe(config)
    assert "slack: disabled (SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET not set)" in lines
    github_line = next(line for line in lines if line.startswith("github:"))
    assert "disabled" in github_line
    assert "GITHUB_WEBHOOK_SECRET not set" in github_line
    assert "GITHUB_TOKEN not set" in github_line


def test_app_yaml_enables_surfaces_when_env_is_full() -> None:
    config = load_config(APP_YAML, FULL_ENV)

    assert config.slack.enabled
    assert config.github.enabled
    assert config.github.auth == "token"
    assert config.slack.api_url == "http://127.0.0.1:8801/api/"
    assert config.slack.allowed_channels == ("C111", "C222")
    assert config.github.api_url == "http://127.0.0.1:8802"
    assert config.model.provider == "openai"
    assert config.model.base_url == "http://127.0.0.1:8803/v1"
    assert config.model.model == "llama3.1"
    assert config.model.api_key is not None
    assert config.model.api_key.get_secret_value() == SECRETS["OPENAI_API_KEY"]
    lines = describe(config)
    assert any(line.startswith("slack: enabled") for line in lines)
    assert any(line.startswith("github: enabled (token auth") for line in lines)
    assert any(line.startswith("model: openai llama3.1") for line in lines)


def test_every_section_has_defaults_when_config_is_empty() -> None:
    config = build_config({}, {})

    assert config == AppConfig()
    assert list(config.agents) == ["default"]
    assert config.agents["default"].limits.max_turns == 30
    assert config.agents["default"].mailbox_template == (
        "<mailbox_update>\nFrom {sender}:\n{text}\n</mailbox_update>"
    )
    assert (config.context.max_chars, config.model.vision) == (24_000, False)
    assert config.routing.stop_words == ("stop", "cancel")
    assert (config.worker.concurrency, config.worker.lease_seconds) == (4, 30)
    assert config.server.body_limit_bytes == 1024 * 1024


@pytest.mark.parametrize(
    ("tree", "expected"),
    [
        ({"slak": {}}, "slak: unknown key"),
        ({"slack": {"signing_secert": "x"}}, "slack.signing_secert: unknown key"),
        ({"github": {"app": {"app_idd": 1}}}, "github.app.app_idd: unknown key"),
        (
            {"agents": {"default": {"limits": {"max_turnz": 3}}}},
            "agents.default.limits.max_turnz: unknown key",
        ),
        (
            roles(make_daemon(), make_daemon(id="ci2", watch=[{"provider": "github", "knd": 1}])),
            "daemons.roles[1].watch[0].knd: unknown key",
        ),
        (
            {"workspace": {"repositories": {"acme/w": {"url": "/srv/w", "reff": "main"}}}},
            "workspace.repositories.acme/w.reff: unknown key",
        ),
        ({"slack": {"enabled": True}}, "slack.enabled: unknown key"),
        ({"context": {"max_char": 5000}}, "context.max_char: unknown key"),
    ],
)
def test_unknown_key_names_its_dotted_path_when_misspelt_at_any_depth(
    tree: dict[str, Any], expected: str
) -> None:
    assert problems_of(tree) == [expected]


def test_unknown_key_names_its_path_when_loaded_from_a_file(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "slack:\n  bot_token: x\n  signing_secert: y\n")

    with pytest.raises(ConfigError, match=r"^slack\.signing_secert: unknown key$"):
        load_config(path, {})


@pytest.mark.parametrize(
    ("tree", "expected"),
    [
        (
            {"slack": {"signing_secert": "${SLACK_SIGNING_SECRET}"}},
            "slack.signing_secert: unknown key (from SLACK_SIGNING_SECRET)",
        ),
        ({"slack": {"signing_secert": None}}, "slack.signing_secert: unknown key"),
        ({"github": {"app": {"app_idd": ""}}}, "github.app.app_idd: unknown key"),
        (
            {"agents": {"default": {"limits": {"max_turnz": "${TURNS}"}}}},
            "agents.default.limits.max_turnz: unknown key (from TURNS)",
        ),
        (
            {"workspace": {"repositories": {"acme/w": {"url": "/srv/w", "reff": "${REF}"}}}},
            "workspace.repositories.acme/w.reff: unknown key (from REF)",
        ),
        ({"slak": {"bot_token": "${SLACK_BOT_TOKEN}"}}, "slak: unknown key"),
    ],
)
def test_unknown_key_is_refused_when_its_value_comes_out_empty(
    tree: dict[str, Any], expected: str
) -> None:
    assert problems_of(tree) == [expected]


def test_unknown_key_with_an_unset_variable_is_named_beside_other_problems() -> None:
    tree = {"server": {"port": "eighty", "hots": "${KEEL_HOST}"}, "worker": {"lease": None}}

    assert sorted(problems_of(tree)) == [
        "server.hots: unknown key (from KEEL_HOST)",
        "server.port: Input should be a valid integer, unable to parse string as an integer",
        "worker.lease: unknown key",
    ]


def test_known_keys_with_unset_variables_still_take_their_defaults_in_app_yaml() -> None:
    """app.yaml reads many variables; with none set, every one of its keys is a real key."""
    config = load_config(APP_YAML, {})

    assert config.slack.signing_secret is None and config.github.app.app_id is None
    assert config.routing.default_repo is None


def test_unknown_key_in_app_yaml_header_example_is_refused_when_its_variable_is_unset(
    tmp_path: Path,
) -> None:
    text = APP_YAML.read_text().replace(
        "signing_secret: ${SLACK_SIGNING_SECRET}", "signing_secert: ${SLACK_SIGNING_SECRET}"
    )
    path = write_yaml(tmp_path, text)

    with pytest.raises(ConfigError) as raised:
        load_config(path, {})
    assert str(raised.value) == "slack.signing_secert: unknown key (from SLACK_SIGNING_SECRET)"


@pytest.mark.parametrize(
    ("tree", "key"),
    [
        ({"server": {"port": "eighty"}}, "server.port"),
        ({"worker": {"concurrency": [1]}}, "worker.concurrency"),
        ({"reporting": {"ack": "wave"}}, "reporting.ack"),
        ({"model": {"provider": "bedrock"}}, "model.provider"),
        ({"github": {"min_permission": "owner"}}, "github.min_permission"),
        ({"routing": {"join_thread_replies": "perhaps"}}, "routing.join_thread_replies"),
        ({"agents": {"a": {"limits": {"fanout": 0}}}}, "agents.a.limits.fanout"),
        ({"agents": {"a": {"mailbox_template": "no placeholder"}}}, "agents.a.mailbox_template"),
        ({"slack": "on"}, "slack"),
        ({"database": {"url": "mysql://127.0.0.1/keel"}}, "database.url"),
        ({"context": {"max_chars": 100}}, "context.max_chars"),
        ({"context": {"fetch_attempts": 0}}, "context.fetch_attempts"),
        ({"model": {"vision": "sometimes"}}, "model.vision"),
    ],
)
def test_wrong_value_names_the_key_when_type_or_choice_is_invalid(
    tree: dict[str, Any], key: str
) -> None:
    (line,) = problems_of(tree)

    assert line.startswith(f"{key}: ")


def test_every_problem_gets_its_own_line_when_there_are_several() -> None:
    lines = problems_of({"server": {"port": "x", "hots": "127.0.0.1"}, "worker": {"lease": 1}})

    assert sorted(lines) == [
        "server.hots: unknown key",
        "server.port: Input should be a valid integer, unable to parse string as an integer",
        "worker.lease: unknown key",
    ]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, 9000),
        ({"KEEL_PORT": ""}, 9000),
        ({"KEEL_PORT": "9100"}, 9100),
    ],
)
def test_default_is_used_when_variable_is_unset_or_empty(
    env: dict[str, str], expected: int
) -> None:
    config = build_config({"server": {"port": "${KEEL_PORT:-9000}"}}, env)

    assert config.server.port == expected


def test_variable_is_substituted_when_embedded_in_a_string() -> None:
    tree = {"server": {"public_url": "http://${HOST}:${PORT:-80}/keel"}}

    config = build_config(tree, {"HOST": "127.0.0.1"})

    assert config.server.public_url == "http://127.0.0.1:80/keel"


def test_reference_is_literal_when_escaped_with_double_dollar() -> None:
    config = build_config({"routing": {"new_task_prefix": "$${NEW}"}}, {"NEW": "x"})

    assert config.routing.new_task_prefix == "${NEW}"


def test_key_takes_its_default_when_variable_is_missing() -> None:
    tree = {"github": {"bot_login": "${BOT}", "token": "${GITHUB_TOKEN}"}, "model": {"script": ""}}

    config = build_config(tree, {})

    assert config.github.bot_login == "keel-bot"
    assert config.github.token is None
    assert config.model.script is None


def test_required_key_names_the_variable_when_it_is_missing() -> None:
    tree = {"workspace": {"repositories": {"demo": {"url": "${DEMO_REPO_URL}"}}}}

    assert problems_of(tree) == [
        "workspace.repositories.demo.url: required; DEMO_REPO_URL is not set"
    ]


def test_database_url_comes_from_env_when_keel_database_url_is_set(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "database:\n  url: sqlite:///./other.db\n  echo: true\n")

    config = load_config(path, {"KEEL_DATABASE_URL": FULL_ENV["KEEL_DATABASE_URL"]})

    assert config.database.url == FULL_ENV["KEEL_DATABASE_URL"]
    assert config.database.backend == "postgresql"
    assert config.database.echo is True
    assert load_config(path, {}).database.url == "sqlite:///./other.db"


def test_secrets_are_hidden_when_config_is_printed_or_described() -> None:
    config = load_config(APP_YAML, FULL_ENV)
    shown = "\n".join([repr(config), str(config), *describe(config)])

    for secret in [*SECRETS.values(), DATABASE_PASSWORD]:
        assert secret not in shown
    assert "keel:***@127.0.0.1:5432/keel" in shown


def test_secrets_are_absent_from_errors_when_config_is_invalid(tmp_path: Path) -> None:
    text = APP_YAML.read_text(encoding="utf-8") + "extra_section: {}\n"
    text = text.replace("port: ${KEEL_PORT:-8080}", "port: ${SLACK_BOT_TOKEN}")
    path = write_yaml(tmp_path, text)

    with pytest.raises(ConfigError) as raised:
        load_config(path, FULL_ENV)

    shown = "".join(traceback.format_exception(raised.value))
    assert "extra_section: unknown key" in shown
    assert "server.port: " in shown
    for secret in [*SECRETS.values(), DATABASE_PASSWORD]:
        assert secret not in shown


def test_agent_named_default_exists_when_agents_section_is_empty(tmp_path: Path) -> None:
    config = load_config(write_yaml(tmp_path, "agents:\n"), {})

    assert list(config.agents) == ["default"]
    assert "run_command" in config.agents["default"].tools


def test_configured_agents_replace_the_default_when_listed() -> None:
    tree = {"agents": {"reviewer": {"tools": "read_file, list_files", "limits": {"fanout": 2}}}}

    config = build_config(tree, {})

    assert list(config.agents) == ["reviewer"]
    assert config.agents["reviewer"].tools == ("read_file", "list_files")
    assert config.agents["reviewer"].limits.fanout == 2
    assert config.agents["reviewer"].limits.max_turns == 30


def test_require_approval_names_the_agents_own_tools_when_configured() -> None:
    tree = {"agents": {"default": {"tools": "git_push, read_file", "require_approval": "git_push"}}}
    assert build_config(tree, {}).agents["default"].require_approval == ("git_push",)

    typo = {"agents": {"default": {"tools": "git_push", "require_approval": ["git_psuh"]}}}
    with pytest.raises(ConfigError, match=r"agents\.default\.require_approval: .*git_psuh"):
        build_config(typo, {})


def _pem_with_escaped_newlines() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    return pem.strip().replace("\n", "\\n")


def test_github_uses_app_auth_when_app_credentials_are_complete() -> None:
    pem = _pem_with_escaped_newlines()
    tree = {
        "github": {
            "webhook_secret": "${GITHUB_WEBHOOK_SECRET}",
            "app": {"app_id": "${APP_ID}", "private_key": "${PEM}", "installation_id": 7},
        }
    }

    config = build_config(tree, {"GITHUB_WEBHOOK_SECRET": "w", "APP_ID": "42", "PEM": pem})

    assert (config.github.auth, config.github.enabled) == ("app", True)
    assert config.github.app.app_id == 42
    assert config.github.app.private_key is not None
    assert "-----\nMII" in config.github.app.private_key.get_secret_value()


def test_github_app_key_that_is_not_a_pem_key_is_refused_naming_its_variable() -> None:
    tree = {
        "github": {
            "webhook_secret": "w",
            "app": {"app_id": 42, "private_key": "${GITHUB_APP_PRIVATE_KEY}", "installation_id": 7},
        }
    }
    garbage = "-----BEGIN RSA PRIVATE KEY-----\\nnot-a-key\\n-----END RSA PRIVATE KEY-----"

    (line,) = problems_of(tree, {"GITHUB_APP_PRIVATE_KEY": garbage})

    assert line.startswith("github.app.private_key: not a valid")
    assert "GITHUB_APP_PRIVATE_KEY" in line and "not-a-key" not in line


def test_github_is_disabled_with_reasons_when_app_credentials_are_partial() -> None:
    tree = {
        "github": {
            "webhook_secret": "w",
            "app": {"private_key": "${GITHUB_APP_PRIVATE_KEY}", "installation_id": 7},
        }
    }

    config = build_config(tree, {})

    assert not config.github.enabled
    (line,) = [line for line in describe(config) if line.startswith("github:")]
    assert "GITHUB_APP_PRIVATE_KEY" in line
    assert "github.app.app_id" in line
    assert "webhook" not in line


def test_github_is_rejected_when_token_and_app_are_both_set() -> None:
    pem = _pem_with_escaped_newlines()
    tree = {
        "github": {"token": "t", "app": {"app_id": 1, "private_key": pem, "installation_id": 2}}
    }

    (line,) = problems_of(tree)

    assert line.startswith("github: both token and app are set")


def test_slack_is_disabled_naming_only_the_missing_secret_when_one_is_set() -> None:
    tree = {
        "slack": {"bot_token": "${SLACK_BOT_TOKEN}", "signing_secret": "${SLACK_SIGNING_SECRET}"}
    }

    config = build_config(tree, {"SLACK_BOT_TOKEN": "xoxb-1"})

    assert not config.slack.enabled
    assert "slack: disabled (SLACK_SIGNING_SECRET not set)" in describe(config)


def test_describe_warns_when_bound_beyond_loopback_without_admin_token() -> None:
    tree = {"server": {"host": "0.0.0.0", "admin_token": "${KEEL_ADMIN_TOKEN}"}}

    config = build_config(tree, {})

    assert not config.server.is_loopback
    (line,) = [line for line in describe(config) if line.startswith("server:")]
    assert "refuse every request (KEEL_ADMIN_TOKEN not set" in line
    assert build_config({}, {}).server.is_loopback


def test_served_hosts_are_the_public_url_host_and_a_bound_address_when_configured() -> None:
    server_tree = {"host": "10.0.0.5", "public_url": "https://Keel.Example.com:8443/x"}
    tree = {"server": {**server_tree, "admin_token": "s3cret"}}

    server = build_config(tree, {}).server

    assert server.served_hosts == {"keel.example.com", "10.0.0.5"}
    assert build_config({"server": {"host": "0.0.0.0"}}, {}).server.served_hosts == set()
    (line,) = [line for line in describe(build_config(tree, {})) if line.startswith("server:")]
    assert line.endswith("Host 10.0.0.5, keel.example.com, loopback")


@pytest.mark.parametrize(
    ("tree", "problem"),
    [
        ({"server": {"public_url": "keel.example.com"}}, "server.public_url: expected an"),
        ({"slack": {"allowed_mentions": "U0OPS1, <!channel>"}}, "not Slack user ids"),
        ({"github": {"allowed_mentions": ["octocat", "a b"]}}, "not GitHub logins"),
    ],
)
def test_access_settings_are_refused_at_load_when_malformed(
    tree: dict[str, Any], problem: str
) -> None:
    [line] = problems_of(tree)

    assert problem in line


def test_allowed_mentions_are_read_without_their_at_when_configured() -> None:
    tree = {
        "github": {"allowed_mentions": ["@octocat", "acme/oncall"]},
        "slack": {"allowed_mentions": "U0OPS1,W0GRID2"},
    }

    config = build_config(tree, {})

    assert config.github.allowed_mentions == ("octocat", "acme/oncall")
    assert config.slack.allowed_mentions == ("U0OPS1", "W0GRID2")


def test_daemons_validate_when_fully_specified() -> None:
    rule = {"provider": "github", "kind": "check_run", "branch": "main", "conclusion": "failure"}
    daemon = make_daemon(id="ci-doctor", watch=[rule], deny=["git_push"])
    tree = {"daemons": {"roles": [daemon]}}

    config = build_config(tree, {})

    (role,) = config.daemons.roles
    assert (role.agent, role.watch[0].conclusion, role.deny) == (
        "default",
        "failure",
        ("git_push",),
    )


@pytest.mark.parametrize(
    ("tree", "expected"),
    [
        (
            roles(make_daemon(agent="ghost")),
            "daemons.roles[0].agent: unknown agent 'ghost' (agents: default)",
        ),
        (
            {"routing": {"default_repo": "acme/w"}},
            "routing.default_repo: unknown repository 'acme/w' (workspace.repositories: none), "
            "and GitHub is disabled, so Keel cannot clone it",
        ),
        (
            {
                "routing": {"channel_repos": {"C1": "nope"}},
                "workspace": {"repositories": {"acme/w": {"url": "/srv/w"}}},
            },
            "routing.channel_repos.C1: unknown repository 'nope' (workspace.repositories: acme/w); "
            "name an entry there, or a GitHub owner/name",
        ),
        (roles(make_daemon(), make_daemon()), "daemons: duplicate daemon id ci in roles"),
        (roles(make_daemon(watch=[])), "daemons.roles[0].watch: must list at least one rule"),
        (
            roles(make_daemon(watch=[{"provider": "github", "pattern": "("}])),
            "daemons.roles[0].watch[0].pattern: invalid regular expression: "
            "missing ), unterminated subpattern",
        ),
    ],
)
def test_daemon_or_reference_is_rejected_when_invalid_or_naming_nothing_configured(
    tree: dict[str, Any], expected: str
) -> None:
    assert problems_of(tree) == [expected]


GITHUB_ON = {"GITHUB_TOKEN": "ghp_x", "GITHUB_WEBHOOK_SECRET": "w"}


@pytest.mark.parametrize(
    ("env", "repo"),
    [
        ({"KEEL_DEFAULT_REPO": "acme/widgets", **GITHUB_ON}, "acme/widgets"),
        ({"KEEL_DEFAULT_REPO": "acme/widgets"}, None),
        ({"KEEL_DEFAULT_REPO": "widgets", **GITHUB_ON}, None),
    ],
)
def test_default_repo_is_a_github_repository_keel_clones_when_github_is_enabled(
    env: dict[str, str], repo: str | None
) -> None:
    """app.yaml lists no workspace.repositories: a GitHub owner/name is cloned on demand, so
    it may be the default, once GitHub is enabled; anything else names nothing."""
    if repo is None:
        with pytest.raises(ConfigError, match=r"^routing\.default_repo: unknown repository"):
            load_config(APP_YAML, env)
    else:
        assert load_config(APP_YAML, env).routing.default_repo == repo


def test_routed_repository_outside_the_github_allow_list_is_refused_naming_the_list() -> None:
    tree = {
        "github": {"token": "${GITHUB_TOKEN}", "webhook_secret": "${GITHUB_WEBHOOK_SECRET}",
                   "repositories": ["acme/*"]},
        "routing": {"channel_repos": {"C1": "acme/api", "C2": "other/api"}},
    }

    assert problems_of(tree, GITHUB_ON) == [
        "routing.channel_repos.C2: unknown repository 'other/api' (workspace.repositories: "
        "none), and github.repositories (acme/*) excludes it"
    ]


def test_routed_repository_may_be_any_entry_of_workspace_repositories() -> None:
    tree = {
        "routing": {"channel_repos": {"C1": "local"}, "default_repo": "acme/w"},
        "workspace": {"repositories": {"local": {"url": "/srv/l"}, "acme/w": {"url": "/srv/w"}}},
    }

    config = build_config(tree, {})

    assert (config.routing.default_repo, config.github.enabled) == ("acme/w", False)


def test_yaml_problem_names_the_line_when_a_key_is_repeated(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "slack:\n  bot_token: a\n  bot_token: b\n")

    with pytest.raises(
        ConfigError, match=r"app\.yaml:3:3: invalid YAML: duplicate key 'bot_token'"
    ):
        load_config(path, {})


def test_yaml_problem_names_the_position_when_syntax_is_broken(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "slack:\n  bot_token: [unclosed\n")

    with pytest.raises(ConfigError, match=r"app\.yaml:\d+:\d+: invalid YAML"):
        load_config(path, {})


def test_config_error_is_raised_when_the_file_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml", {})


def test_config_is_immutable_when_loaded() -> None:
    config = load_config(APP_YAML, {})

    with pytest.raises(pydantic.ValidationError):
        config.server.port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    "tree",
    [
        {"slack": {"ack": "reply"}},
        {"slack": {"mention_trigger": "keel:"}},
        {"daemons": {"repo_daemons": True}},
    ],
)
def test_removed_setting_is_an_unknown_key_when_an_old_config_has_it(tree: Any) -> None:
    (section, body), = tree.items()
    (key,) = body
    assert problems_of(tree) == [f"{section}.{key}: unknown key"]



def test_server_line_says_metrics_are_public_when_metrics_public_is_set() -> None:
    (line,) = [x for x in describe(build_config({"server": {"metrics_public": True}}, {}))
               if x.startswith("server:")]
    assert "/metrics public" in line
    assert "/metrics public" not in describe(build_config({}, {}))[1]


@pytest.mark.parametrize(
    ("surface", "thread_ref", "expected"),
    [
        ("slack", "keel-ops", "a channel id (C0123456789), #name, slack:<team id>/<channel id>"),
        ("slack", "#Keel Ops", "a channel id (C0123456789), #name"),
        ("slack", "github:acme/ops#1", "a channel id (C0123456789), #name"),
        ("github", "acme/ops#1", "github:<owner>/<repo>#<issue number>"),
        ("github", "slack:T1/C1/1700000000.000100", "github:<owner>/<repo>#<issue number>"),
        # One message or comment, or a commit, is not a thread a reply can start in.
        ("slack", "slack:T1/C1/1700000000.000100:1700000000.000200", "a channel id"),
        ("github", "github:acme/ops#1:99", "github:<owner>/<repo>#<issue number>"),
        ("github", "github:acme/ops@" + "a" * 40, "github:<owner>/<repo>#<issue number>"),
        # The terminal's thread is no fallback: only the keel run that made it shows it.
        ("slack", "local:1700000000.000100", "a channel id"),
        ("github", "local:1700000000.000100", "github:<owner>/<repo>#<issue number>"),
    ],
)
def test_fallback_thread_ref_must_be_a_thread_of_its_surface(
    surface: str, thread_ref: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        build_config({"reporting": {"fallback": {"surface": surface, "thread_ref": thread_ref}}})
    message = str(raised.value)
    assert message.startswith("reporting.fallback.thread_ref: ")
    assert f"is not a {surface} thread; expected {expected}" in message


def test_fallback_example_in_app_yaml_is_accepted() -> None:
    [line] = [
        line
        for line in (Path(__file__).parents[2] / "app.yaml").read_text().splitlines()
        if line.strip().startswith("# fallback:")
    ]
    example = yaml.safe_load(line.strip().removeprefix("#"))
    config = build_config({"reporting": example})
    assert config.reporting.fallback is not None
    assert config.reporting.fallback.thread_ref == example["fallback"]["thread_ref"]


def test_fallback_forms_accepted_at_load_are_ones_the_surfaces_can_post_to() -> None:
    slack = build_config(
        {"reporting": {"fallback": {"surface": "slack", "thread_ref": "slack:T1/C2/1700.0001"}}}
    )
    github = build_config(
        {"reporting": {"fallback": {"surface": "github", "thread_ref": "github:a/b.c#12"}}}
    )
    assert slack.reporting.fallback and github.reporting.fallback
    assert slack.reporting.fallback.target == SlackThread("T1", "C2", "1700.0001")
    assert github.reporting.fallback.target == GitHubIssue("a/b.c", 12)


@pytest.mark.parametrize(
    ("thread_ref", "channel"),
    [
        ("C0FALLBACK", SlackChannel("C0FALLBACK")),
        ("#keel-ops", SlackChannel("#keel-ops")),
        ("slack:T0123ABCD/C0FALLBACK", SlackChannel("C0FALLBACK", team="T0123ABCD")),
    ],
)
def test_fallback_may_be_a_slack_channel_by_id_or_name(
    thread_ref: str, channel: SlackChannel
) -> None:
    config = build_config(
        {"reporting": {"fallback": {"surface": "slack", "thread_ref": thread_ref}}}
    )
    assert config.reporting.fallback is not None
    assert config.reporting.fallback.target == channel


def test_a_channel_is_not_a_github_fallback() -> None:
    [problem] = problems_of(
        {"reporting": {"fallback": {"surface": "github", "thread_ref": "C0FALLBACK"}}}
    )
    assert problem.startswith("reporting.fallback.thread_ref: 'C0FALLBACK' is not a github")


def test_outage_give_up_is_refused_when_it_is_not_positive() -> None:
    assert build_config({"model": {"outage_give_up_s": 90}}, {}).model.outage_give_up_s == 90
    [problem] = problems_of({"model": {"outage_give_up_s": 0}})
    assert problem.startswith("model.outage_give_up_s:")


def test_a_bare_fallback_channel_is_refused_when_slack_has_many_workspaces() -> None:
    key = "A" * 43 + "="  # a Fernet key: 32 url-safe base64-encoded bytes
    oauth = {"client_id": "1.2", "client_secret": "s", "encryption_key": key}
    slack = {"signing_secret": "s", "oauth": oauth}
    bare = {"fallback": {"surface": "slack", "thread_ref": "C0FALLBACK"}}
    [problem] = problems_of({"slack": slack, "reporting": bare})
    assert problem.startswith("reporting.fallback.thread_ref: C0FALLBACK is in no one workspace")
    named = {"fallback": {"surface": "slack", "thread_ref": "slack:T0123ABCD/C0FALLBACK"}}
    assert build_config({"slack": slack, "reporting": named}, {}).reporting.fallback
    assert build_config({"reporting": bare}, {}).reporting.fallback  # one bot token: its own


def test_agents_own_model_overrides_the_default_and_switching_provider_drops_its_key() -> None:
    tree = {
        "model": {"api_key": "sk-openai", "prices": {"gpt-4o-mini": {"input_per_million": 1}}},
        "agents": {
            "default": {},
            "cheap": {"model": {"model": "gpt-4.1-nano", "context_window": 32000}},
            "claude": {
                "model": {
                    "provider": "anthropic",
                    "model": "claude-keel-test",
                    "api_key": "sk-ant",
                    "prices": {"claude-keel-test": {"output_per_million": 15}},
                }
            },
        },
    }
    config = build_config(tree, {})

    cheap = agent_model(config.model, config.agents["cheap"].model)
    claude = agent_model(config.model, config.agents["claude"].model)
    assert (cheap.provider, cheap.model, cheap.base_url) == (
        "openai", "gpt-4.1-nano", "https://api.openai.com/v1"
    )
    assert cheap.context_window == 32000 and cheap.api_key == config.model.api_key
    assert (claude.base_url, claude.api_key and claude.api_key.get_secret_value()) == (
        "https://api.anthropic.com", "sk-ant"
    )
    assert set(claude.prices) == {"gpt-4o-mini", "claude-keel-test"}
    assert agent_model(config.model, config.agents["default"].model) is config.model


@pytest.mark.parametrize(
    ("own", "problem"),
    [
        ({"provider": "anthropic", "model": "claude-keel-test"}, "needs api_key"),
        ({"provider": "scripted"}, "plays one script for every agent"),
        ({"context_window": 10}, "context_window: Input should be greater than or equal"),
        ({"vision": True}, "vision: unknown key"),
    ],
)
def test_config_check_refuses_an_agents_model_it_cannot_honour(
    own: dict[str, Any], problem: str
) -> None:
    (line,) = problems_of({"agents": {"reviewer": {"model": own}}})

    assert line.startswith("agents.reviewer.model")
    assert problem in line


def test_config_check_refuses_an_anthropic_model_without_a_key_when_its_variable_is_unset() -> None:
    (line,) = problems_of({"model": {"provider": "anthropic", "api_key": "${ANTHROPIC_API_KEY}"}})

    assert line.startswith("model: ") and "anthropic provider needs api_key" in line
