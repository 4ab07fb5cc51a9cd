"""The providers' API descriptions as response validators (used by tests; needs jsonschema).

GitHub's description is OpenAPI 3.0 (``nullable`` instead of JSON Schema's null type) and
Slack's is Swagger 2.0 (``#/definitions``). Both are turned into plain JSON Schema documents
once, so an emulator response is checked against the real operation's response schema. The
tests load trimmed copies (tests/fixtures/{github,slack}/openapi): the operations they check
and every component those reference, as upstream wrote them; the whole files work as well.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped, unused-ignore]
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4, DRAFT202012

_GITHUB_URI = "urn:keel:github-openapi"
_SLACK_URI = "urn:keel:slack-openapi"


def _without_nullable(node: Any) -> Any:
    """Rewrite OpenAPI ``nullable: true`` into JSON Schema's null type, recursively."""
    if isinstance(node, list):
        return [_without_nullable(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _without_nullable(value) for key, value in node.items()}
    if converted.pop("nullable", False) is not True:
        return converted
    if "type" in converted:
        converted["type"] = [converted["type"], "null"]
        if "enum" in converted:
            converted["enum"] = [*converted["enum"], None]
        return converted
    return {"anyOf": [{"type": "null"}, converted]}


@dataclass(frozen=True, slots=True)
class GitHubContract:
    """GitHub's REST description, able to validate a response body of one operation."""

    spec: dict[str, Any]
    registry: Registry[Any]

    def response_schema(self, path: str, verb: str, status: int) -> dict[str, Any]:
        response = self.spec["paths"][path][verb]["responses"][str(status)]
        if "$ref" in response:
            response = self._resolve(response["$ref"])
        schema: dict[str, Any] = response["content"]["application/json"]["schema"]
        return schema

    def validate(self, path: str, verb: str, status: int, body: Any) -> None:
        """Raise jsonschema.ValidationError when ``body`` breaks the operation's schema."""
        schema = self.response_schema(path, verb, status)
        validator = jsonschema.Draft202012Validator(
            {"$ref": f"{_GITHUB_URI}#/x-keel-schema", "$defs": {}},
            registry=self.registry.with_resource(
                _GITHUB_URI,
                DRAFT202012.create_resource({**self.spec, "x-keel-schema": schema}),
            ),
        )
        validator.validate(body)

    def example(self, name: str) -> Any:
        """The value of ``#/components/examples/<name>``."""
        return self.spec["components"]["examples"][name]["value"]

    def _resolve(self, ref: str) -> dict[str, Any]:
        node: Any = self.spec
        for part in ref.removeprefix("#/").split("/"):
            node = node[part]
        resolved: dict[str, Any] = node
        return resolved


@dataclass(frozen=True, slots=True)
class SlackContract:
    """Slack's Web API description (Swagger 2.0, draft-4 schemas) for response bodies."""

    spec: dict[str, Any]
    registry: Registry[Any]

    def response_schema(self, method: str, status: str = "200") -> dict[str, Any]:
        operations: dict[str, Any] = self.spec["paths"][f"/{method}"]
        operation = next(iter(operations.values()))
        schema: dict[str, Any] = operation["responses"][status]["schema"]
        return schema

    def definition(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.spec["definitions"][name]
        return found

    def validate_schema(self, schema: dict[str, Any], body: Any) -> None:
        """Validate against any schema whose ``$ref``s point into Slack's definitions."""
        validator = jsonschema.Draft4Validator(
            {"allOf": [{"$ref": f"{_SLACK_URI}#/x-keel-schema"}]},
            registry=self.registry.with_resource(
                _SLACK_URI, DRAFT4.create_resource({**self.spec, "x-keel-schema": schema})
            ),
        )
        validator.validate(body)

    def validate(self, method: str, body: Any, status: str = "200") -> None:
        self.validate_schema(self.response_schema(method, status), body)


def load_github_contract(description: Path) -> GitHubContract:
    """Read and convert GitHub's REST description; callers load it once per session."""
    raw = json.loads(description.read_text())
    spec = _without_nullable(raw)
    resource: Resource[Any] = DRAFT202012.create_resource(spec)
    return GitHubContract(spec=spec, registry=Registry().with_resource(_GITHUB_URI, resource))


def load_slack_contract(description: Path) -> SlackContract:
    """Read Slack's Web API description (Swagger 2.0)."""
    spec = json.loads(description.read_text())
    resource: Resource[Any] = DRAFT4.create_resource(spec)
    return SlackContract(spec=spec, registry=Registry().with_resource(_SLACK_URI, resource))
