"""The model adapter a configuration names (``demo``, ``openai``, ``openai-responses`` or ``anthropic``), with tools
as text around it when the model's ``tool_calling`` is ``text``."""

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

        return OpenAIAdapter(cfg)  # tools as text inside: it also switches to them when a server refuses tools
    adapter: ModelAdapter
    if cfg.adapter == "anthropic":
        from .anthropic import AnthropicAdapter  # the anthropic package is an optional extra

        adapter = AnthropicAdapter(cfg)
    elif cfg.adapter == "openai-responses":
        from .openai_responses import OpenAIResponsesAdapter  # the openai package is an optional extra

        adapter = OpenAIResponsesAdapter(cfg)
    else:
        raise ValueError(cfg.adapter)  # config validation prevents this
    if cfg.tool_calling == "text":
        from .tools_text import TextToolsAdapter

        return TextToolsAdapter(adapter)
    return adapter
