"""A PostgreSQL that stops answering fails a connection instead of hanging the process.

libpq waits for a silent server as long as TCP does. A ``keel worker`` that runs its
transactions on its event loop would sit there with its lease renewal and its shutdown, so
``make_engine`` gives every PostgreSQL connection a connect timeout, a TCP user timeout and
keepalives, unless the URL sets its own. The silent server here is a real listening socket
that completes the TCP handshake and never says a word.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy.exc import OperationalError

from runtime.store.engine import PG_CONNECTION_DEFAULTS, Database, make_engine

LIBPQ_MINIMUM_S = 2  # libpq treats a connect_timeout of 1 as 2


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port whose listener never accepts: connections open, and hear nothing."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def attempt(url: str, wait_s: float) -> tuple[BaseException | None, float]:
    """Connect in a thread (a hang must not hang the test run); its error and duration."""
    outcome: list[BaseException | None] = []
    started = time.monotonic()

    def connect() -> None:
        engine = make_engine(url)
        try:
            with engine.connect():
                outcome.append(None)
        except BaseException as e:  # handed to the test to judge
            outcome.append(e)
        finally:
            engine.dispose()

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(wait_s)
    assert outcome, f"still connecting after {wait_s} s: the attempt hangs"
    return outcome[0], time.monotonic() - started


def test_a_silent_server_fails_the_attempt_within_the_connect_timeout(
    silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(PG_CONNECTION_DEFAULTS, "connect_timeout", LIBPQ_MINIMUM_S)
    error, took = attempt(f"postgresql://keel@127.0.0.1:{silent_port}/keel", wait_s=20)
    assert isinstance(error, OperationalError), error
    assert "timeout" in str(error).lower()
    assert LIBPQ_MINIMUM_S - 0.5 <= took < 15


def test_the_urls_own_connect_timeout_wins(
    silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(PG_CONNECTION_DEFAULTS, "connect_timeout", 600)
    url = f"postgresql://keel@127.0.0.1:{silent_port}/keel?connect_timeout={LIBPQ_MINIMUM_S}"
    error, took = attempt(url, wait_s=20)
    assert isinstance(error, OperationalError), error
    assert took < 15


def test_connections_carry_the_timeouts_and_keepalives(database: Database) -> None:
    if not database.is_postgres:
        pytest.skip("libpq's settings: SQLite has no connection to lose")
    with database.engine.connect() as conn:
        driver = conn.connection.driver_connection
        assert driver is not None
        given = driver.info.get_parameters()  # libpq's non-default settings
    for name, value in PG_CONNECTION_DEFAULTS.items():
        assert given.get(name) == str(value), (name, given)

