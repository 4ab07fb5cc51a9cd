"""PostgreSQL text without NUL: the psycopg string dumpers that replace it.

PostgreSQL text cannot hold NUL; SQLite can, so only PostgreSQL connections get these.
"""

from __future__ import annotations

import functools
from typing import Any


def without_nul(dbapi_conn: Any, _record: Any) -> None:
    """PostgreSQL text cannot hold NUL, which a signed webhook or a URL may carry: it becomes
    U+FFFD instead of an error (a 500 the provider would redeliver forever). Done by the
    driver's string dumpers, so no statement pays for a pass over its parameters in a cursor
    listener, and the prepared statements (``runtime.store.prepared``) go straight to the
    driver."""
    adapters = getattr(dbapi_conn, "adapters", None)
    if adapters is None:  # not psycopg 3
        return
    binary, text = _nul_free_dumpers()
    adapters.register_dumper(str, binary)
    adapters.register_dumper(str, text)  # registered last: it also serves PyFormat.AUTO


@functools.cache
def _nul_free_dumpers() -> tuple[type, type]:
    from psycopg.types.string import StrBinaryDumper, StrDumperUnknown

    class NulFreeBinary(StrBinaryDumper):
        def dump(self, obj: str) -> Any:
            return super().dump(obj.replace("\x00", "\ufffd") if "\x00" in obj else obj)

    class NulFreeText(StrDumperUnknown):
        def dump(self, obj: str) -> Any:
            return super().dump(obj.replace("\x00", "\ufffd") if "\x00" in obj else obj)

    return NulFreeBinary, NulFreeText
