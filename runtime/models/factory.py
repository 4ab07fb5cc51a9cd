"""Builds the configured ModelProvider; the composition root calls this with app.yaml settings."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, assert_never

from runtime.errors import ConfigError
from runtime.models.base import ModelProvider
from runtime.models.scripted import ScriptedProvider

if TYPE_CHECKING:  # imported when built: the SDK is a weight a scripted Keel does without
    from runtime.models.anthropic import AnthropicProvider
    from runtime.models.openai import OpenAIProvider

ProviderKind = Literal["openai", "anthropic", "scripted"]


def build_provider(kind: ProviderKind, **settings: Any) -> ModelProvider:
    """``openai``: OpenAIProvider's parameters, plus ``api_key_env`` to read the key from the
    environment. ``anthropic``: AnthropicProvider's, ``api_key_env`` likewise. ``scripted``:
    exactly one of ``path``, ``yaml`` or ``script`` (a mapping)."""
    match kind:
        case "openai":
            return _build_openai(settings)
        case "anthropic":
            return _build_anthropic(settings)
        case "scripted":
            return _build_scripted(settings)
        case _:
            assert_never(kind)


def _build_openai(settings: dict[str, Any]) -> OpenAIProvider:
    from runtime.models.openai import OpenAIProvider

    _key_from_env(settings)
    settings.setdefault("api_key", None)
    _reject_unknown("openai", settings, OpenAIProvider.__init__)
    return OpenAIProvider(**settings)


def _build_anthropic(settings: dict[str, Any]) -> AnthropicProvider:
    from runtime.models.anthropic import AnthropicProvider

    _key_from_env(settings)
    if not settings.get("api_key"):
        raise ConfigError(
            "model: the anthropic provider needs an api_key (e.g. ${ANTHROPIC_API_KEY})"
        )
    _reject_unknown("anthropic", settings, AnthropicProvider.__init__)
    return AnthropicProvider(**settings)


def _key_from_env(settings: dict[str, Any]) -> None:
    env_name = settings.pop("api_key_env", None)
    if env_name is not None:
        if settings.get("api_key"):
            raise ConfigError("model: set either 'api_key' or 'api_key_env', not both")
        settings["api_key"] = _secret_from_env(str(env_name))


def _secret_from_env(env_name: str) -> str:
    value = os.environ.get(env_name)
    if not value:
        raise ConfigError(f"model: api_key_env names {env_name!r}, which is not set")
    return value


def _build_scripted(settings: dict[str, Any]) -> ScriptedProvider:
    sources: dict[str, Callable[[Any], ScriptedProvider]] = {
        "path": ScriptedProvider.from_path,
        "yaml": ScriptedProvider.from_yaml,
        "script": _from_mapping,
    }
    unknown = sorted(set(settings) - set(sources))
    if unknown:
        raise ConfigError(f"model: unknown setting {unknown[0]!r} for the scripted provider")
    given = [name for name in sources if name in settings]
    if len(given) != 1:
        raise ConfigError("model: the scripted provider needs exactly one of path, yaml, script")
    return sources[given[0]](settings[given[0]])


def _from_mapping(script: Any) -> ScriptedProvider:
    if not isinstance(script, Mapping):
        raise ConfigError("model: 'script' must be a mapping with a 'scripts' key")
    return ScriptedProvider.from_dict(script)


def _reject_unknown(kind: str, settings: Mapping[str, Any], target: Callable[..., Any]) -> None:
    signature = inspect.signature(target)
    unknown = sorted(set(settings) - set(signature.parameters) - {"self"})
    if unknown:
        raise ConfigError(f"model: unknown setting {unknown[0]!r} for the {kind} provider")
    try:
        signature.bind(None, **settings)
    except TypeError as e:
        raise ConfigError(f"model: invalid settings for the {kind} provider: {e}") from e
