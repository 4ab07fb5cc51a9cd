"""Running an ASGI app under uvicorn on a free loopback port, in a background thread.

The server has its own event loop in its own thread, so synchronous clients (slack_sdk's
WebClient, PyGithub) and the caller's event loop can both talk to it over a real socket.

``serve(app, tls=True)`` serves HTTPS with a self-signed certificate for 127.0.0.1 and localhost,
made at start; ``RunningServer.ca_file`` is that certificate, for clients to trust (git's
``GIT_SSL_CAINFO``, requests' ``REQUESTS_CA_BUNDLE``).
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import uvicorn

_STARTUP_TIMEOUT_S = 10.0


@dataclass(slots=True)
class RunningServer:
    """A live server; ``url`` has no trailing slash."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread
    ca_file: Path | None = None

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=_STARTUP_TIMEOUT_S)
        if self.ca_file is not None:
            shutil.rmtree(self.ca_file.parent, ignore_errors=True)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def serve(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    lifespan: Literal["on", "off"] = "off",
    tls: bool = False,
) -> RunningServer:
    """Start ``app`` and return once it accepts connections (port 0 picks a free port).

    ``lifespan="on"`` runs the app's startup (and shutdown) around serving, as Keel needs.
    ``tls=True`` serves HTTPS with a fresh self-signed certificate (see the module docstring).
    """
    ca_file, key_file = _self_signed_certificate() if tls else (None, None)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan=lifespan,
        timeout_graceful_shutdown=5,
        access_log=False,
        ssl_certfile=ca_file,
        ssl_keyfile=key_file,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"emulator:{bound_port}", daemon=True
    )
    thread.start()
    _wait_until_answering(server, host, bound_port)
    scheme = "https" if tls else "http"
    return RunningServer(
        url=f"{scheme}://{host}:{bound_port}", server=server, thread=thread, ca_file=ca_file
    )


def _self_signed_certificate() -> tuple[Path, Path]:
    """A key and a self-signed certificate for 127.0.0.1, ::1 and localhost, in a fresh
    directory; the certificate is its own CA, so clients trust it as a CA bundle."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Keel emulator")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("::1")),
                ]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    folder = Path(tempfile.mkdtemp(prefix="keel-emulator-tls-"))
    ca_file = folder / "ca.pem"
    key_file = folder / "key.pem"
    ca_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_file, key_file


def _wait_until_answering(server: uvicorn.Server, host: str, port: int) -> None:
    deadline = time.monotonic() + _STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.started:
            with socket.create_connection((host, port), timeout=1.0):
                return
        time.sleep(0.01)
    raise RuntimeError(f"emulator on {host}:{port} did not start")
