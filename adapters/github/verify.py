"""GitHub webhook signature check (X-Hub-Signature-256) on the raw request body."""

from __future__ import annotations

import hashlib
import hmac

_PREFIX = "sha256="


def verify_github_signature(secret: bytes, body: bytes, header: str | None) -> bool:
    """True only when `header` is `sha256=<hex HMAC of body>` under `secret`.

    Compared in constant time, as bytes so a non-ASCII header is simply unequal.
    """
    if not header or not header.startswith(_PREFIX):
        return False
    expected = _PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.encode("utf-8", "surrogateescape"))
