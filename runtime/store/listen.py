"""PostgreSQL ``LISTEN keel_ready``: turns commits on any machine into local wake-up hints."""

from __future__ import annotations

import logging
import threading

import psycopg
from sqlalchemy.engine import make_url

from runtime.notifier import Notifier

log = logging.getLogger(__name__)
CHANNEL = "keel_ready"


class PgListener:
    """A daemon thread holding one autocommit connection that LISTENs and pokes the notifier.

    It is a hint only: workers also poll, so a dropped connection costs latency, not work.
    """

    def __init__(self, url: str, notifier: Notifier, *, reconnect_s: float = 2.0) -> None:
        parsed = make_url(url).set(drivername="postgresql")
        self._dsn = parsed.render_as_string(hide_password=False)
        self._notifier = notifier
        self._reconnect_s = reconnect_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="keel-pg-listen", daemon=True)
        self.ready = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen_once()
            except psycopg.Error as e:
                log.warning("LISTEN connection lost (%s); polling covers the gap", type(e).__name__)
                self._stop.wait(self._reconnect_s)

    def _listen_once(self) -> None:
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self.ready.set()
            while not self._stop.is_set():
                for _ in conn.notifies(timeout=0.5, stop_after=64):
                    self._notifier.notify()
