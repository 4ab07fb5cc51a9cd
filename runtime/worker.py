"""The worker: N concurrent claim-and-tick loops, lease renewal, and the sweeper.

``keel worker`` and ``keel serve`` run this. On stop (SIGTERM) a loop finishes the phase it
is in, then releases its lease with an immediate next tick, so another worker (or the next
start) continues the task without waiting for the lease to expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
from pathlib import Path

from runtime.executor.runner import Runner, TickResult
from runtime.leases import Claimed
from runtime.scheduler import Scheduler
from runtime.store import owners
from runtime.store.records import Lease

log = logging.getLogger(__name__)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def machine_identity(workspace_root: Path) -> str:
    """Who holds the workspaces under ``workspace_root``: this host's name and the root's
    path, so every worker sharing that folder is one machine, and two folders on one host
    (two test deployments, say) are two."""
    folder = str(workspace_root.expanduser().absolute()).encode()
    return f"{socket.gethostname()[:150]}:{hashlib.sha256(folder).hexdigest()[:12]}"


class Worker:
    def __init__(
        self,
        scheduler: Scheduler,
        runner: Runner,
        *,
        concurrency: int = 4,
        poll_interval_s: float = 1.0,
        name: str | None = None,
        machine: str | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.runner = runner
        self.concurrency = concurrency
        self.poll_interval_s = poll_interval_s
        self.name = name or worker_name()
        # Whose workspaces this worker's claims take, and keep alive (``runtime.store.owners``).
        self.machine = machine
        self.stopping = asyncio.Event()
        self.ticks = 0
        # Idle loops take turns looking for work: one waits for a wake-up and claims, then
        # hands the turn on (the next looks at once: there may be more). A wake-up costs one
        # look, not one per idle loop.
        self._turn = asyncio.Lock()

    async def run(self) -> None:
        """Run until ``stop()``; returns once every loop has let go of its task."""
        self.scheduler.notifier.bind(asyncio.get_running_loop())
        if self.machine is not None:
            await self._renew_machine()
        loops = [
            asyncio.create_task(self._loop(f"{self.name}/{i}")) for i in range(self.concurrency)
        ]
        background = [asyncio.create_task(self._sweep_loop())]
        if self.machine is not None:
            background.append(asyncio.create_task(self._machine_loop()))
        try:
            await asyncio.gather(*loops)
        finally:
            for task in background:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def stop(self) -> None:
        self.stopping.set()
        self.scheduler.notifier.notify()

    async def _loop(self, slot: str) -> None:
        while not self.stopping.is_set():
            async with self._turn:
                claimed = await self._look(slot)
            if claimed is not None:
                if claimed.moved_from is not None:
                    await self._moved_here(claimed)
                await self._drive(claimed.lease)

    async def _look(self, slot: str) -> Claimed | None:
        """Claim work, waiting for a wake-up (or the poll interval) between looks."""
        while not self.stopping.is_set():
            try:
                claimed = await self.scheduler.leases.claim_next(slot, machine=self.machine)
            except Exception:  # loop boundary: the database may be briefly unavailable
                log.exception("claim failed; retrying")
                await asyncio.sleep(self.poll_interval_s)
                continue
            if isinstance(claimed, Claimed):
                return claimed
            await self.scheduler.notifier.wait(self.poll_interval_s)
        return None

    async def _moved_here(self, claimed: Claimed) -> None:
        """The task's workspace came from a lost machine: a copy this machine kept from an
        earlier time it held the tree is stale, so the next use restores the snapshot."""
        log.warning(
            "task %s: its workspace moved here from %s, whose lease passed",
            claimed.task.task_id,
            claimed.moved_from,
            extra={"task_id": claimed.task.task_id},
        )
        try:
            await self.runner.ctx.discard_workspace(claimed.task.root_id)
        except Exception:  # loop boundary: the task still runs; its workspace may be stale
            log.exception("could not discard the stale workspace of %s", claimed.task.root_id)

    async def _drive(self, lease: Lease) -> None:
        renewer = asyncio.create_task(self._renew(lease))
        try:
            result = TickResult("continue", "")
            while result.status == "continue" and not self.stopping.is_set():
                result = await self._tick(lease)
            if result.status == "continue":  # stopping: hand the task on at once
                at = self.scheduler.clock.now()
                await self.scheduler.db.run(lambda s: self.scheduler.leases.release(s, lease, at))
        finally:
            self.runner.forget(lease)
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    async def _tick(self, lease: Lease) -> TickResult:
        try:
            result = await self.runner.tick(lease)
        except Exception:  # loop boundary: leave the lease to expire into a recovery
            log.exception(
                "tick of task %s failed outside any phase",
                lease.task_id,
                extra={"task_id": lease.task_id},
            )
            return TickResult("lost", "")
        self.ticks += 1
        return result

    async def _renew(self, lease: Lease) -> None:
        interval = self.scheduler.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            with contextlib.suppress(Exception):
                if await self.scheduler.leases.renew(lease) is None:
                    return

    async def _sweep_loop(self) -> None:
        interval = max(0.5, self.scheduler.lease_seconds / 3)
        while True:
            try:
                await self.scheduler.transact(self.scheduler.sweep)
            except Exception:  # loop boundary: try again next round
                log.exception("sweep failed")
            await asyncio.sleep(interval)

    async def _machine_loop(self) -> None:
        """Renew the machine's lease on a loop of its own: a sweep that fails or runs long
        must not let this machine's workspaces pass to another while its workers run."""
        interval = self.scheduler.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                await self._renew_machine()
            except Exception:  # loop boundary: try again next round
                log.exception("renewing the machine's lease failed")

    async def _renew_machine(self) -> None:
        """This machine's workspaces stay its own for one more lease."""
        machine, scheduler = self.machine, self.scheduler
        assert machine is not None
        await scheduler.db.run(
            lambda s: owners.renew_machine(
                s, machine, scheduler.clock.now(), scheduler.lease_seconds
            )
        )
