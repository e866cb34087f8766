"""The model adapter a configuration names (``demo`` or ``openai``)."""

from __future__ import annotations

from ..config import ModelConfig
from .base import ModelAdapter
from .demo import DemoModel


def make_adapter(cfg: ModelConfig) -> ModelAdapter:
    """The adapter ``cfg`` names; the OpenAI SDK is imported only when one is configured."""
    if cfg.adapter == "demo":
        return DemoModel(chunk_delay_ms=cfg.chunk_delay_ms)
    if cfg.adapter == "openai":
        from .openai_chat import OpenAIAdapter  # the openai package is an optional extra

        return OpenAIAdapter(cfg)
    raise ValueError(cfg.adapter)  # config validation prevents this
