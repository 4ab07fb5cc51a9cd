"""Whether a model's arguments fit a tool's declared parameters (its JSON Schema).

A call that does not fit is answered to the model with the reasons, so it can call again;
it is never run and never fails the task. Validators are built once per schema.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

_MAX_REASONS = 5


def argument_problems(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` do not fit ``schema``, in words; None if they do."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    reasons = [_reason(e.absolute_path, e.message) for e in errors[:_MAX_REASONS]]
    return "; ".join(reasons)


def _reason(path: Any, message: str) -> str:
    where = ".".join(str(part) for part in path)
    return f"{where}: {message}" if where else message


@lru_cache(maxsize=256)
def _validator(schema_text: str) -> Any:
    # Imported here: only a process that checks a call pays for loading the validator.
    from jsonschema.validators import validator_for  # type: ignore[import-untyped, unused-ignore]

    schema = json.loads(schema_text)
    cls = validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def refusal(
    name: str, arguments: dict[str, Any], unreadable: str | None, schema: dict[str, Any] | None
) -> str | None:
    """What the model is told instead of running its call, if the call cannot run as asked:
    its arguments were unreadable (``unreadable``) or do not fit the tool's ``schema``."""
    problem = unreadable
    if problem is None and schema is not None:
        problem = argument_problems(schema, arguments)
    if problem is None:
        return None
    return (
        f"invalid arguments for {name}: {problem}. It was not run; call it again with "
        "arguments that match its parameters."
    )
