"""Bounded retries for the fetches of a brief: a fetch that keeps failing becomes a named gap.

A transient failure (5xx, timeout, rate limit) is tried again, at most ``attempts`` times in
all, after a short backoff (or the provider's ``Retry-After``, capped); a permanent one
(``missing_scope``, 403, 404) is not repeated. Either way the caller gets ``Failed`` and
carries on: gathering context never fails a task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from runtime.errors import Permanent, Retryable

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Failed:
    what: str
    reason: str

    def __str__(self) -> str:
        return f"{self.what}: {self.reason}"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 3
    base_delay_s: float = 0.2
    max_delay_s: float = 2.0

    def delay(self, attempt: int, error: Retryable) -> float:
        wanted = error.retry_after_s
        if wanted is None:
            wanted = self.base_delay_s * 2**attempt
        return min(self.max_delay_s, wanted)


async def attempt(
    what: str, call: Callable[[], Awaitable[T]], policy: RetryPolicy
) -> T | Failed:
    """``call()``'s result, or ``Failed`` naming ``what`` and why, after bounded retries."""
    reason = "not tried"
    for number in range(policy.attempts):
        try:
            return await call()
        except Retryable as e:
            reason = f"{e} (tried {number + 1} time{'s' if number else ''})"
            if number + 1 < policy.attempts:
                await asyncio.sleep(policy.delay(number, e))
        except Permanent as e:
            return Failed(what, str(e))
    return Failed(what, reason)
