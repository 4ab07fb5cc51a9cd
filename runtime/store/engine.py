"""The one engine factory and the transaction runner.

SQLite is the embedded default: WAL, ``synchronous=FULL`` (an acknowledged signal survives a
power cut), a busy timeout, and ``BEGIN IMMEDIATE`` so writers queue instead of failing on
lock upgrades. PostgreSQL runs through psycopg 3. SQLAlchemy is synchronous here and wrapped
in exactly one place, ``Database.run``, which moves the work off the event loop.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from runtime.store.failures import is_conflict, retryable
from runtime.store.group_commit import GroupCommitter
from runtime.store.nul import without_nul
from runtime.store.threads import Threads

T = TypeVar("T")

# What code outside runtime/store sees: an open transaction, and the error a unique
# constraint raises. Only this package knows they are SQLAlchemy's.
Transaction = Session
UniqueViolation = IntegrityError

DEFAULT_URL = "sqlite:///./keel.db"
POOL_RECYCLE_S = 300
# A hand-off thread's kept connection is closed after this long without a transaction.
KEPT_IDLE_S = 60.0
# libpq's own defaults wait for an unreachable or silent server as long as TCP does (minutes):
# a connection attempt gives up after ``connect_timeout`` seconds, and an open connection
# whose sent data goes unacknowledged for ``tcp_user_timeout`` ms, or whose idle peer stops
# answering keepalive probes, fails its transaction (``Retryable``) instead of hanging the
# worker, its lease renewal and its shutdown with it. A server that is merely slow is not
# cut off: its TCP stack still acknowledges. The database URL's own values win.
PG_CONNECTION_DEFAULTS: dict[str, int] = {
    "connect_timeout": 10,
    "tcp_user_timeout": 30_000,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


def resolve_url(configured: str | None) -> str:
    """``KEEL_DATABASE_URL`` overrides the configured URL."""
    return os.environ.get("KEEL_DATABASE_URL") or configured or DEFAULT_URL


SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")  # the database file and its companions


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names (None for other backends, memory and URI filenames)."""
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:"):
        return None  # a URI filename: its own mode= parameter decides
    return Path(database)


def missing_sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names, if it does not exist yet. Opening the URL would create it
    empty, so commands that only read or operate on existing data check this first."""
    path = sqlite_file(url)
    return None if path is None or path.exists() else path


def make_engine(url: str, *, pool_size: int = 10, echo: bool = False) -> Engine:
    """``pool_size`` (PostgreSQL only) and ``echo`` are ``database.pool_size`` / ``.echo``."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url, echo=echo)
    if parsed.drivername == "postgresql":
        url = str(parsed.set(drivername="postgresql+psycopg"))
    # No pre-ping: it is a round trip on every checkout, i.e. on every transition. A
    # connection that broke fails its transaction instead (``Retryable``, the caller tries
    # again), and SQLAlchemy then invalidates every pooled connection older than the error,
    # so the retry gets a fresh one; ``pool_recycle`` retires connections a proxy or the
    # server may have dropped while idle.
    engine = create_engine(
        url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=False,
        pool_recycle=POOL_RECYCLE_S, echo=echo,
        connect_args={k: v for k, v in PG_CONNECTION_DEFAULTS.items() if k not in parsed.query},
    )
    event.listen(engine, "connect", without_nul)
    return engine


def _sqlite_engine(url: str, *, echo: bool) -> Engine:
    engine = create_engine(
        url, connect_args={"timeout": 30, "check_same_thread": False}, echo=echo
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Writers take the lock up front; readers use a deferred snapshot and never block.
        conn.exec_driver_sql("BEGIN" if conn.info.get("keel_read_only") else "BEGIN IMMEDIATE")

    return engine


class Database:
    """Owns the engine, hands out transactions, and runs blocking work off the event loop."""

    def __init__(
        self, engine: Engine, *, threads: int = 8, kept_idle_s: float = KEPT_IDLE_S
    ) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._threads = Threads(
            threads, "keel-db", on_idle=self._release_kept, idle_s=kept_idle_s
        )
        # PostgreSQL: run transactions on the event loop's own thread (``run_on_loop``).
        self._on_loop = False
        # SQLite has one writer at a time; queueing writers of this process here is cheaper
        # than letting them sleep in SQLite's busy handler.
        self._write_lock: Any = contextlib.nullcontext() if self.is_postgres else threading.Lock()
        # On SQLite concurrent writers share commits (one fsync for many transitions), on a
        # connection the committer keeps: a pool checkout and reset per batch cost more
        # than a small batch's statements.
        self._group = None if self.is_postgres else GroupCommitter(self._batch_transaction)
        self._batch = _Kept()
        # PostgreSQL: each hand-off thread keeps a connection of its own, for the same reason.
        self._local = threading.local()
        self._kept: list[_Kept] = []

    @classmethod
    def from_url(cls, url: str, *, pool_size: int = 10, echo: bool = False) -> Database:
        return cls(make_engine(url, pool_size=pool_size, echo=echo))

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        with self._write_lock, self._sessions() as session:
            try:
                with session.begin():
                    yield session
            except (OperationalError, DBAPIError) as e:
                retry = retryable(e)
                if retry is None:
                    raise
                raise retry from e

    @contextmanager
    def _batch_transaction(self) -> Iterator[Session]:
        """The group committer's transaction (its thread is the only user of the connection)."""
        with self._write_lock, self._kept_transaction(self._batch) as session:
            yield session

    @contextmanager
    def _kept_transaction(
        self, kept: _Kept, *, read_only: bool = False, flush: bool = True
    ) -> Iterator[Session]:
        """A transaction on a connection one thread keeps (a checkout and reset per
        transaction cost more than a small transaction's statements). A connection that
        broke is closed, and the next transaction opens another; one older than the pool's
        recycle age is replaced, as the pool would. ``flush=False``: see ``run``."""
        connection = kept.connection
        if connection is not None and (
            connection.closed or connection.invalidated
            or time.monotonic() - kept.opened > POOL_RECYCLE_S
        ):
            kept.close()
        try:
            if kept.connection is None:
                kept.connection = self.engine.connect()  # fails as the transaction would
                kept.opened = time.monotonic()
            connection = kept.connection
            connection.info["keel_read_only"] = read_only  # SQLite: BEGIN, not BEGIN IMMEDIATE
            unflushed = self.is_postgres and not flush and not read_only
            with (
                self._autocommit_if((read_only and self.is_postgres) or unflushed, connection),
                connection.begin(),
                Session(bind=connection) as session,
            ):
                if unflushed:
                    # One round trip, as the driver's own BEGIN would be; the driver still
                    # sends the COMMIT (or ROLLBACK), since the server reports a transaction.
                    connection.exec_driver_sql(_BEGIN_UNFLUSHED)
                yield session
                session.flush()
        except (OperationalError, DBAPIError) as e:
            retry = retryable(e)
            if retry is None:
                raise  # rolled back; the connection is still good
            if not is_conflict(e):
                kept.close()  # it broke: the next transaction opens another
            raise retry from e

    @staticmethod
    @contextmanager
    def _autocommit_if(wanted: bool, connection: Connection) -> Iterator[None]:
        """PostgreSQL reads run without BEGIN and COMMIT, two round trips of a one-query
        read's three. At READ COMMITTED (the isolation used here) each statement takes its
        own snapshot inside a transaction too, so a read sees what it would have seen. An
        unflushed write runs here too, and sends its own BEGIN (``_BEGIN_UNFLUSHED``)."""
        if not wanted:
            yield
            return
        driver = connection.connection.driver_connection
        driver.autocommit = True  # type: ignore[union-attr]
        try:
            yield
        finally:
            with contextlib.suppress(Exception):  # a broken connection is closed anyway
                driver.autocommit = False  # type: ignore[union-attr]

    def _on_kept_connection(
        self, work: Callable[[Session], T], read_only: bool = False, flush: bool = True
    ) -> T:
        """``work`` in a transaction on this hand-off thread's own connection."""
        kept: _Kept | None = getattr(self._local, "kept", None)
        if kept is None:
            kept = self._local.kept = _Kept()
            self._kept.append(kept)
        with self._kept_transaction(kept, read_only=read_only, flush=flush) as session:
            return work(session)

    def _release_kept(self) -> None:
        """On a hand-off thread with nothing to do for a while: close the connection it
        keeps, for good rather than into the pool. A burst leaves no connections open behind
        it, and after ``run_on_loop`` the threads' connections (the loop's thread keeps its
        own) are not held for the life of the process. The next transaction on this thread
        opens another."""
        kept: _Kept | None = getattr(self._local, "kept", None)
        if kept is not None:
            kept.close(discard=True)

    def run_sync(self, work: Callable[[Session], T]) -> T:
        with self.transaction() as session:
            return work(session)

    def read_sync(self, work: Callable[[Session], T]) -> T:
        """A read-only transaction: on SQLite it does not take the write lock."""
        with self.engine.connect() as conn:
            conn.info["keel_read_only"] = True
            try:
                with Session(bind=conn, expire_on_commit=False) as session, session.begin():
                    return work(session)
            finally:
                conn.info.pop("keel_read_only", None)

    async def run(self, work: Callable[[Session], T], *, flush: bool = True) -> T:
        """``work`` in a write transaction: on a hand-off thread, or on the awaiting loop's
        own thread after ``run_on_loop``.

        ``flush=False`` is for a transaction whose loss in a crash of the database server is
        harmless because it can be done again: an executor transition, which records where a
        run is and what stayed inside the database. On PostgreSQL its commit then returns
        without waiting for the write-ahead log to reach disk (``synchronous_commit`` off for
        this transaction alone): the server's WAL writer flushes it within a fraction of a
        second, and so does any later commit that waits, because the log is written in
        order. Every commit that comes before something outside the database (a webhook's
        acknowledgement, the mark before a tool runs, a tool's settlement, the outbox's mark
        before a post) waits as before, so what such an effect depended on is on disk
        first. The outbox's reactions and edits have no mark: sent again from a lost row,
        a reaction is already there and an edit rewrites the same message. A worker process
        that dies loses nothing either way: the server holds the commit. SQLite commits as
        always (its group commit already shares the sync).
        """
        if self._group is not None:
            result: T = await self._group.run(work)
            return result
        if self._on_loop:
            return self._on_kept_connection(work, flush=flush)
        return await self._threads.call(
            functools.partial(self._on_kept_connection, work, flush=flush)
        )

    async def read(self, work: Callable[[Session], T]) -> T:
        """A read, on a connection its hand-off thread keeps (opening one per read cost more
        than the read): on SQLite a deferred transaction, which takes no write lock; on
        PostgreSQL no transaction at all (``_autocommit_if``)."""
        if self._on_loop:
            return self._on_kept_connection(work, True)
        return await self._threads.call(functools.partial(self._on_kept_connection, work, True))

    def run_on_loop(self) -> None:
        """From now on, on PostgreSQL, run each transaction on the thread of the event loop
        that awaits it, not on a hand-off thread; on SQLite, nothing changes.

        For a process whose loop has little else to do while it waits for the database: a
        ``keel worker`` running one task at a time. There a hand-off costs two thread
        switches per transaction; with several processes sharing the machine's cores, those
        switches were what kept two workers from running twice as fast as one. The worker's
        other loops (the outbox, lease renewal, the sweeper, its signal handlers) run
        between transactions, which take milliseconds; a server that stops answering holds
        them no longer than the connection's timeouts (``PG_CONNECTION_DEFAULTS``). Not for
        ``keel serve``, whose loop answers webhooks, nor for a worker running several tasks
        at once, whose transactions would queue behind each other.
        """
        self._on_loop = self.is_postgres

    def schema_revision_sync(self) -> str | None:
        """The applied migration, read over a fresh connection: proof the database answers."""
        query = "SELECT version_num FROM alembic_version"
        if self.is_postgres:
            with self.engine.connect() as conn:
                return conn.exec_driver_sql(query).scalar()
        import sqlite3

        path = self.engine.url.database or ""
        connection = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=5)
        try:
            row = connection.execute(query).fetchone()
        finally:
            connection.close()
        return str(row[0]) if row else None

    async def schema_revision(self) -> str | None:
        return await self._threads.call(self.schema_revision_sync)

    def close(self) -> None:
        if self._group is not None:
            self._group.close()
        self._threads.close()
        for kept in [self._batch, *self._kept]:
            kept.close()
        self.engine.dispose()


class _Kept:
    """A connection one thread keeps between transactions."""

    def __init__(self) -> None:
        self.connection: Connection | None = None
        self.opened = 0.0

    def close(self, *, discard: bool = False) -> None:
        """Give the connection back to the pool, or with ``discard`` close it for good (the
        pool keeps up to ``pool_size`` connections open that nobody uses)."""
        connection, self.connection = self.connection, None
        if connection is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close
                if discard:
                    connection.invalidate()
                connection.close()


# A transaction that commits without waiting for the WAL flush (``Database.run``), begun in
# one simple-protocol round trip.
_BEGIN_UNFLUSHED = "BEGIN; SET LOCAL synchronous_commit TO off"
