"""What model calls cost: the configured prices applied to the provider's reported usage,
recorded with the call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from runtime.config import ModelPrice
from runtime.models.base import Purpose, Usage
from runtime.store.usage import ModelCall


@dataclass(frozen=True, slots=True)
class Accounting:
    """The model calls are priced by; ``prices`` by model name (no price costs nothing)."""

    model: str = ""
    prices: Mapping[str, ModelPrice] = field(default_factory=dict)

    def cost_usd(self, usage: Usage) -> float:
        price = self.prices.get(self.model)
        if price is None:
            return 0.0
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        cached_price = (
            price.cached_input_per_million
            if price.cached_input_per_million is not None
            else price.input_per_million
        )
        dollars = (
            (usage.prompt_tokens - cached) * price.input_per_million
            + cached * cached_price
            + usage.completion_tokens * price.output_per_million
        )
        return dollars / 1_000_000

    def call(self, key: str, purpose: Purpose, usage: Usage | None, seconds: float) -> ModelCall:
        """The record of one call; a provider that reports no usage is recorded as zero."""
        usage = usage or Usage(0, 0)
        return ModelCall(
            key,
            purpose,
            self.model,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_tokens,
            self.cost_usd(usage),
            seconds,
        )
