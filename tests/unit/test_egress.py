"""The egress allowlist as a table: what each entry admits, what is malformed, and the hosts a
hostile command names to slip past a suffix or a case; the sandbox's side of it (argv and
environment), the refusal line and the masking of secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.errors import ConfigError
from runtime.tools.devbox.command import refusal_line
from runtime.workspace import egress_bridge
from runtime.workspace.commands import mask
from runtime.workspace.egress import (
    PACKAGE_REGISTRIES,
    REFUSED_FILE,
    Egress,
    EgressMode,
    check_allow_entry,
    read_allowlist,
    read_refused,
    write_allowlist,
)
from runtime.workspace.sandbox import Sandbox

ALLOWS = [
    # (entries, host, port, allowed)
    (("pypi.org",), "pypi.org", 443, True),
    (("pypi.org",), "pypi.org", 80, True),
    (("pypi.org",), "pypi.org", 8443, False),
    (("pypi.org",), "PyPI.org.", 443, True),
    (("PyPI.ORG.",), "pypi.org", 443, True),
    (("pypi.org",), "pypi.org.evil.com", 443, False),
    (("pypi.org",), "evilpypi.org", 443, False),
    (("pypi.org",), "files.pypi.org", 443, False),
    (("pypi.org",), "user@pypi.org", 443, False),
    (("pypi.org",), "pypi.org:443", 443, False),
    (("pypi.org",), "pypi.org..", 443, False),
    (("pypi.org",), "pypi%2eorg", 443, False),
    (("pypi.org",), "pypi.org\n", 443, False),
    (("pypi.org",), "", 443, False),
    (("pypi.org",), "pypi.org", 0, False),
    (("pypi.org",), "pypi.org", 70000, False),
    (("*.example.org",), "a.example.org", 443, True),
    (("*.example.org",), "a.b.example.org", 80, True),
    (("*.example.org",), "example.org", 443, False),
    (("*.example.org",), "badexample.org", 443, False),
    (("*.example.org",), "a.example.org.evil", 443, False),
    (("*.example.org:8443",), "a.example.org", 8443, True),
    (("*.example.org:8443",), "a.example.org", 443, False),
    (("localhost:8080",), "localhost", 8080, True),
    (("localhost:8080",), "localhost", 80, False),
    (("127.0.0.1:8080",), "127.0.0.1", 8080, True),
    (("127.0.0.1:8080",), "localhost", 8080, False),
    (("127.0.0.1:8080",), "127.1", 8080, False),
    (("127.0.0.1:8080",), "0x7f.0.0.1", 8080, False),
    (("127.0.0.1:8080",), "2130706433", 8080, False),
    (("127.0.0.1:8080",), "::ffff:127.0.0.1", 8080, False),
    (("localhost",), "127.0.0.1", 80, False),
    (("[::1]:8080",), "[::1]", 8080, True),
    (("[::1]:8080",), "::1", 8080, True),
    (("[::1]:8080",), "[0:0::1]", 8080, True),
    (("[::1]:8080",), "[::2]", 8080, False),
    (("[::1]:8080",), "[fe80::1%eth0]", 8080, False),
    (("[::1]",), "[::1]", 443, True),
    (("\u212aeel.org",), "keel.org", 443, False),  # Kelvin sign: lower() folds it to "k"
    (("keel.org",), "\u212aeel.org", 443, False),
    # malformed entries admit nothing, and do not spoil the others
    (("*",), "pypi.org", 443, False),
    (("*.org",), "pypi.org", 443, False),
    (("pypi.org:",), "pypi.org", 443, False),
    (("pypi.org:0443x",), "pypi.org", 443, False),
    (("pypi.org:99999",), "pypi.org", 443, False),
    ((" pypi.org",), "pypi.org", 443, False),
    (("http://pypi.org",), "pypi.org", 443, False),
    (("pypi.org/simple",), "pypi.org", 443, False),
    (("user@pypi.org",), "pypi.org", 443, False),
    (("*.127.0.0.1",), "127.0.0.1", 443, False),
    (("::1",), "::1", 443, False),
    (("[::1",), "::1", 443, False),
    (("pypi..org",), "pypi..org", 443, False),
    (("-pypi.org",), "-pypi.org", 443, False),
    (("pypi_org.com",), "pypi_org.com", 443, False),
    (("*", "pypi.org"), "pypi.org", 443, True),
]


@pytest.mark.parametrize(("entries", "host", "port", "allowed"), ALLOWS)
def test_allows_matches_the_table_when_allowlisted(
    entries: tuple[str, ...], host: str, port: int, allowed: bool
) -> None:
    assert Egress("allowlist", entries).allows(host, port) is allowed


def test_allows_nothing_when_off_and_everything_when_on() -> None:
    assert not Egress("off", ("pypi.org",)).allows("pypi.org", 443)
    assert Egress("on").allows("anything.test", 1)


def test_package_registries_admit_their_hosts_on_https_when_used_as_allowlist() -> None:
    registries = Egress("allowlist", PACKAGE_REGISTRIES)
    for host in ("pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "index.crates.io",
                 "proxy.golang.org", "repo1.maven.org", "index.rubygems.org"):
        assert registries.allows(host, 443), host
    assert not registries.allows("github.com", 443)
    assert [check_allow_entry(e) for e in PACKAGE_REGISTRIES] == list(PACKAGE_REGISTRIES)


@pytest.mark.parametrize(
    ("entry", "canonical"),
    [
        ("PyPI.org.", "pypi.org"),
        ("*.Example.org:8443", "*.example.org:8443"),
        ("127.0.0.1:80", "127.0.0.1:80"),
        ("[0:0::1]", "[::1]"),
        ("[::1]:8080", "[::1]:8080"),
        ("localhost", "localhost"),
    ],
)
def test_entry_canonical_when_checked(entry: str, canonical: str) -> None:
    assert check_allow_entry(entry) == canonical


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("*", "not a host name"),
        ("*.org", "a wildcard needs a domain"),
        ("*.10.0.0.1", "an address takes no wildcard"),
        ("10.0.0.256", "not an IPv4 address"),
        ("127.1", "not an IPv4 address"),
        ("[::1", "expected host"),
        ("[nope]", "not an IPv6 address"),
        ("::1", "not a port"),
        ("pypi.org:https", "not a port"),
        ("pypi.org:0", "not a port"),
        ("https://pypi.org", "not a port"),
        ("pypi.org/simple", "not a host name"),
        ("", "not a host name"),
    ],
)
def test_entry_refused_with_a_reason_when_malformed(entry: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as refused:
        check_allow_entry(entry)
    assert repr(entry) in str(refused.value)


def test_allowlist_read_back_as_written_when_round_tripped(tmp_path: Path) -> None:
    egress = Egress("allowlist", ("pypi.org", "*.example.org:8443"))
    write_allowlist(tmp_path, egress)
    assert read_allowlist(tmp_path) == egress


def test_refusals_read_once_each_in_order_when_logged_twice(tmp_path: Path) -> None:
    (tmp_path / REFUSED_FILE).write_text("b.test:443\na.test:80\nb.test:443\n")
    assert read_refused(tmp_path) == ["b.test:443", "a.test:80"]
    assert read_refused(tmp_path / "missing") == []


def test_refusal_line_names_each_host_when_some_were_refused() -> None:
    assert refusal_line([]) == []
    assert refusal_line(["example.com:443", "evil.test:80"]) == [
        "network: refused example.com:443, evil.test:80 (not in this agent's allowlist)"
    ]
    many = refusal_line([f"h{i}.test:443" for i in range(13)])[0]
    assert "h9.test:443 and 3 more" in many and "h10.test" not in many


def test_secret_values_masked_when_printed() -> None:
    text = "token=abcd1234 short=abc nested=abcd1234-and-more"
    masked = mask(text, ["abcd1234", "abc", "abcd1234-and-more"])
    assert masked == "token=*** short=abc nested=***"


def test_wrap_keeps_secret_values_out_of_argv_when_secrets_granted(tmp_path: Path) -> None:
    secret = "value-that-must-stay-in-memory"
    sandbox = Sandbox(mode="bwrap", secrets={"GITHUB_TOKEN": secret})
    argv = sandbox.wrap(["true"], tmp_path / "ws", "bwrap")
    assert not any(secret in arg for arg in argv)
    assert '--setenv GITHUB_TOKEN "$GITHUB_TOKEN"' in argv[2]
    assert sandbox.launcher_env(tmp_path / "ws")["GITHUB_TOKEN"] == secret


@pytest.mark.parametrize("name", ["BAD NAME", "1X", "PATH", "BASH_ENV", "LD_PRELOAD", "A=B"])
def test_sandbox_refused_when_a_secret_name_is_unsafe(name: str) -> None:
    with pytest.raises(ConfigError):
        Sandbox(secrets={name: "x"})


def test_wrap_confines_the_network_and_points_at_the_bridge_when_allowlisted(
    tmp_path: Path,
) -> None:
    sock = tmp_path / "egress.sock"
    sandbox = Sandbox(mode="bwrap", egress=Egress("allowlist", ("pypi.org",)))
    argv = sandbox.wrap(["true"], tmp_path / "ws", "bwrap", egress_socket=sock)
    assert "--unshare-net" in argv
    bind = argv.index(str(sock))
    assert argv[bind - 1 : bind + 2] == ["--ro-bind", str(sock), egress_bridge.SOCKET]
    assert argv[argv.index("--") + 1 :][-1] == "true"
    assert ["--setenv", "HTTPS_PROXY", f"http://127.0.0.1:{egress_bridge.PORT}"] == argv[
        argv.index("HTTPS_PROXY") - 1 : argv.index("HTTPS_PROXY") + 2
    ]
    with pytest.raises(ValueError):
        sandbox.wrap(["true"], tmp_path / "ws", "bwrap")


@pytest.mark.parametrize(("mode", "unshared"), [("off", True), ("on", False)])
def test_wrap_unshares_the_network_unless_on(
    tmp_path: Path, mode: EgressMode, unshared: bool
) -> None:
    sandbox = Sandbox(mode="bwrap", egress=Egress(mode))
    argv = sandbox.wrap(["true"], tmp_path / "ws", "bwrap")
    assert ("--unshare-net" in argv) is unshared
    assert "HTTPS_PROXY" not in argv
