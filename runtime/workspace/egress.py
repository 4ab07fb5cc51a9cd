"""What a sandboxed command may reach on the network, and the files that carry that choice.

Three modes: ``off`` (an empty network namespace: loopback of its own only), ``on`` (the host's
network) and ``allowlist``: still the empty namespace, whose only way out is Keel's egress
proxy (``runtime.workspace.egress_proxy``), a host process that forwards HTTP and HTTPS
(``CONNECT``) to the hosts and ports this allowlist admits and refuses the rest with a 403.

An entry is ``host``, ``*.domain`` (its sub-domains, not the domain itself) or an IP address
(IPv6 in brackets), optionally followed by ``:port``; without a port it admits 80 and 443
only. Names compare case-insensitively, a trailing dot ignored. Anything that is not plainly
one of these forms admits nothing: a malformed entry never widens the list, and a requested
host that is not a plain name or address (userinfo, a percent sign, a non-canonical number
such as ``127.1``) matches no entry. An address is reached only when listed as an address.

An execution's egress files live in its record folder, which no sandbox can see: the
allowlist Keel writes at launch (``egress-allow``), the proxy's socket (``egress.sock``) and
the proxy's refusal log (``refused``, one ``host:port`` a line).
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

EgressMode = Literal["off", "allowlist", "on"]
WEB_PORTS = (80, 443)
PACKAGE_REGISTRIES: tuple[str, ...] = (
    "pypi.org", "files.pythonhosted.org",  # PyPI
    "registry.npmjs.org",  # npm
    "crates.io", "static.crates.io", "index.crates.io",  # crates.io
    "proxy.golang.org", "sum.golang.org",  # Go modules
    "repo.maven.apache.org", "repo1.maven.org",  # Maven Central
    "rubygems.org", "index.rubygems.org",  # RubyGems
)

ALLOW_FILE = "egress-allow"
SOCKET_FILE = "egress.sock"
REFUSED_FILE = "refused"
REFUSED_LIMIT = 200  # distinct refusals recorded: a command may try endless made-up names
PROXY_START_S = 10.0  # how long a wrapper waits for the proxy's socket before giving up

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?", re.ASCII)
_PORT = re.compile(r"[1-9][0-9]{0,4}", re.ASCII)
_FORM = "expected host, *.domain or an IP address ([v6] in brackets), optionally with :port"
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class Egress:
    mode: EgressMode = "off"
    allow: tuple[str, ...] = ()  # "host", "*.suffix", optionally ":port" on either

    def allows(self, host: str, port: int) -> bool:
        """Whether a command may reach ``host:port``; malformed entries and hosts never do."""
        match self.mode:
            case "off":
                return False
            case "on":
                return True
            case "allowlist":
                target = _target(host)
                if target is None or not 0 < port < 65536:
                    return False
                return any(rule.admits(target, port) for rule in _rules(self.allow))


def check_allow_entry(entry: str) -> str:
    """``entry`` in its canonical form (lower case, no trailing dot); ValueError saying what
    is wrong when it is not an allowlist entry. For configuration."""
    return _Rule.parse(entry).text()


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str | Address  # a host name (the domain, for a wildcard) or an address
    wildcard: bool
    ports: tuple[int, ...]

    @classmethod
    def parse(cls, entry: str) -> _Rule:
        if not entry.isascii():  # lower() folds some letters into ASCII ones (K, the Kelvin)
            raise ValueError(f"allowlist entry {entry!r}: write names in ASCII (punycode)")
        text = entry.lower()
        if text.startswith("["):
            address, bracket, rest = text[1:].partition("]")
            if not bracket or (rest and not rest.startswith(":")):
                raise ValueError(f"allowlist entry {entry!r}: {_FORM}")
            return cls(_ipv6(address, entry), False, _ports(rest, entry))
        host, colon, port = text.partition(":")
        ports = _ports(colon + port, entry)
        host = host.removesuffix(".")
        wildcard = host.startswith("*.")
        host = host.removeprefix("*.")
        if _numeric(host):
            if wildcard:
                raise ValueError(f"allowlist entry {entry!r}: an address takes no wildcard")
            return cls(_ipv4(host, entry), False, ports)
        if not _hostname(host):
            raise ValueError(f"allowlist entry {entry!r}: {host!r} is not a host name; {_FORM}")
        if wildcard and "." not in host:
            raise ValueError(f"allowlist entry {entry!r}: a wildcard needs a domain, not a TLD")
        return cls(host, wildcard, ports)

    def admits(self, target: str | Address, port: int) -> bool:
        if port not in self.ports:
            return False
        if isinstance(self.name, str) and isinstance(target, str) and self.wildcard:
            return target.endswith("." + self.name)
        return type(target) is type(self.name) and target == self.name

    def text(self) -> str:
        name = f"[{self.name}]" if isinstance(self.name, ipaddress.IPv6Address) else self.name
        host = f"*.{name}" if self.wildcard else str(name)
        return host if self.ports == WEB_PORTS else f"{host}:{self.ports[0]}"


def _rules(entries: tuple[str, ...]) -> list[_Rule]:
    rules = []
    for entry in entries:
        try:
            rules.append(_Rule.parse(entry))
        except ValueError:
            continue  # refused, never widened: config checks entries with check_allow_entry
    return rules


def _target(host: str) -> str | Address | None:
    """The host a request names, normalised; None when it is not plainly a name or address."""
    if not host.isascii() or "%" in host:  # no IDN folding, no IPv6 zone
        return None
    text = host.lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            return None
    text = text.removesuffix(".")
    if _numeric(text):
        try:
            return ipaddress.IPv4Address(text)
        except ValueError:
            return None  # 127.1, 0x7f.1, 017.0.0.1: resolvers read them as addresses
    return text if _hostname(text) else None


def _numeric(host: str) -> bool:
    """A last label of digits (or hex) reads as an address to resolvers, never as a name."""
    last = host.rsplit(".", 1)[-1]
    return last.isdigit() or last.startswith("0x")


def _hostname(host: str) -> bool:
    labels = host.split(".")
    return len(host) <= 253 and all(_LABEL.fullmatch(label) for label in labels)


def _ports(text: str, entry: str) -> tuple[int, ...]:
    """``""`` (the web ports) or ``":port"``."""
    if not text:
        return WEB_PORTS
    port = text.removeprefix(":")
    if not _PORT.fullmatch(port) or int(port) > 65535:
        raise ValueError(f"allowlist entry {entry!r}: {port!r} is not a port (1-65535)")
    return (int(port),)


def _ipv4(text: str, entry: str) -> ipaddress.IPv4Address:
    try:
        return ipaddress.IPv4Address(text)
    except ValueError:
        raise ValueError(f"allowlist entry {entry!r}: {text!r} is not an IPv4 address") from None


def _ipv6(text: str, entry: str) -> ipaddress.IPv6Address:
    try:
        if "%" in text:
            raise ValueError(text)
        return ipaddress.IPv6Address(text)
    except ValueError:
        raise ValueError(f"allowlist entry {entry!r}: {text!r} is not an IPv6 address") from None


# -- an execution's egress files ---------------------------------------------------------------


def write_allowlist(folder: Path, egress: Egress) -> None:
    """The proxy's allowlist, in the execution's record folder (never in the workspace)."""
    path = folder / ALLOW_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(f"{entry}\n" for entry in egress.allow))


def read_allowlist(folder: Path) -> Egress:
    fd = os.open(folder / ALLOW_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd) as f:
        return Egress("allowlist", tuple(line for line in f.read().splitlines() if line))


def read_refused(folder: Path) -> list[str]:
    """The distinct ``host:port`` the proxy refused, in the order it refused them."""
    try:
        fd = os.open(folder / REFUSED_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as f:
        lines = f.read(64 * 1024).decode("ascii", "replace").splitlines()
    return list(dict.fromkeys(line for line in lines if line))[:REFUSED_LIMIT]


def proxy_argv(folder: Path) -> list[str]:
    """How the wrapper starts the proxy for the execution recorded in ``folder``: Keel's own
    interpreter, isolated (``-I``: no environment variables, no current folder on the module
    path), with an environment of nothing but ``HOME`` set to that folder, where proxy.py
    keeps its data folders, rather than the command's ``$HOME``. Keel's source is put on the
    module path explicitly, installed or not."""
    root = Path(__file__).resolve().parents[2]
    code = (
        f"import sys; sys.path[:0] = [{str(root)!r}]; "
        "from runtime.workspace.egress_proxy import main; main(sys.argv[1:])"
    )
    env = ["env", "-i", f"HOME={folder}", "LANG=C.UTF-8"]
    return [*env, sys.executable, "-I", "-c", code, str(folder)]
