"""SQLite's group commit: writes that queue together share a commit, and one that fails
fails alone (its caller gets the error; the others land once; its own writes never land)."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import text

from runtime.store.engine import Database, Transaction


def _insert(key: str, ran: Counter[str]) -> Callable[[Transaction], str]:
    def work(session: Transaction) -> str:
        ran[key] += 1
        session.execute(text("INSERT INTO marks (k) VALUES (:k)"), {"k": key})
        return key

    return work


def _insert_then_fail(key: str) -> Callable[[Transaction], None]:
    def work(session: Transaction) -> None:
        session.execute(text("INSERT INTO marks (k) VALUES (:k)"), {"k": key})
        raise ValueError(f"{key} changed its mind")

    return work


async def test_failing_write_fails_alone_when_it_shares_a_commit(tmp_path: Path) -> None:
    db = Database.from_url(f"sqlite:///{tmp_path / 'group.db'}")
    try:
        db.run_sync(lambda s: s.execute(text("CREATE TABLE marks (k TEXT PRIMARY KEY)")))
        db.run_sync(lambda s: s.execute(text("INSERT INTO marks (k) VALUES ('taken')")))
        gate = threading.Event()
        # The committer waits inside this one, so the writes below queue up as one batch.
        blocker = asyncio.ensure_future(db.run(lambda s: gate.wait(10)))
        await asyncio.sleep(0.1)
        ran: Counter[str] = Counter()
        writes = [
            asyncio.ensure_future(db.run(_insert("a", ran))),
            asyncio.ensure_future(db.run(_insert_then_fail("b"))),
            asyncio.ensure_future(db.run(_insert("taken", ran))),  # a unique violation
            asyncio.ensure_future(db.run(_insert("c", ran))),
        ]
        await asyncio.sleep(0.1)
        gate.set()
        assert await blocker is True
        outcomes = await asyncio.gather(*writes, return_exceptions=True)

        assert outcomes[0] == "a" and outcomes[3] == "c"
        assert isinstance(outcomes[1], ValueError)
        assert "UNIQUE" in str(outcomes[2])
        rows = db.read_sync(lambda s: [r[0] for r in s.execute(text("SELECT k FROM marks"))])
        assert sorted(rows) == ["a", "c", "taken"]
        # They were one batch: "a" ran in the shared try (rolled back with it) and alone.
        assert (ran["a"], ran["c"]) == (2, 1)
    finally:
        db.close()
