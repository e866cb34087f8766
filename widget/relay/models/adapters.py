"""The model adapter a configuration names (``demo``, ``openai`` or ``anthropic``)."""

from __future__ import annotations

from ..config import ModelConfig
from .base import ModelAdapter
from .demo import DemoModel


def make_adapter(cfg: ModelConfig) -> ModelAdapter:
    """The adapter ``cfg`` names; a provider's SDK is imported only when one of its models is configured."""
    if cfg.adapter == "demo":
        return DemoModel(chunk_delay_ms=cfg.chunk_delay_ms)
    if cfg.adapter == "openai":
        from .openai_chat import OpenAIAdapter  # the openai package is an optional extra

        return OpenAIAdapter(cfg)
    if cfg.adapter == "anthropic":
        from .anthropic import AnthropicAdapter  # the anthropic package is an optional extra

        return AnthropicAdapter(cfg)
    if cfg.adapter == "openai-responses":
        from .openai_responses import OpenAIResponsesAdapter  # the openai package is an optional extra

        return OpenAIResponsesAdapter(cfg)
    raise ValueError(cfg.adapter)  # config validation prevents this
