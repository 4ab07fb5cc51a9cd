"""Structured logs: JSON lines when not on a terminal, with secrets redacted.

Task, signal, delivery and phase ids travel as ``extra`` fields; any value that looks like a
known secret (registered at start-up) is replaced before the line is written.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from datetime import UTC, datetime

CONTEXT_FIELDS = ("task_id", "signal_id", "delivery_id", "phase")
# Module state on purpose: the formatters below hang on the root logger, which is itself one
# per process, and ``setup_logging`` installs them before the config naming the secrets is read
# (``Keel`` registers them when it is built). Any library's log line must be masked too, so
# the set belongs with the process-wide logging, not with one object Keel could pass around.
_secrets: set[str] = set()


def register_secrets(values: Iterable[str | None]) -> None:
    _secrets.update(v for v in values if v and len(v) >= 6)


def redact(text: str) -> str:
    for secret in _secrets:
        text = text.replace(secret, "***")
    return text


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        for name in CONTEXT_FIELDS:
            if hasattr(record, name):
                line[name] = getattr(record, name)
        if record.exc_info:
            line["error"] = redact(self.formatException(record.exc_info))
        return json.dumps(line)


class RedactingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def setup_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if sys.stderr.isatty():
        handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
