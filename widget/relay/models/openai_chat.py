"""The OpenAI-compatible Chat Completions adapter (any compatible host: set ``base_url``)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

from ...errors import ConfigError
from ...protocol import TurnErrorCode
from ..config import ModelConfig
from .base import Chunk, ModelAdapter, ModelError, ModelRequest, TextDelta, ToolCall

log = logging.getLogger("widget.relay")

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class OpenAIAdapter(ModelAdapter):
    """Streams Chat Completions with tool calls through the official ``openai`` SDK."""

    name = "openai"

    def __init__(self, cfg: ModelConfig) -> None:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ConfigError("the openai adapter needs the 'openai' package (pip install "
                              "autopilot-widget[openai])") from exc
        self._openai = openai
        self.cfg = cfg
        if cfg.strict_tools:
            # What OpenAI's strict mode (Structured Outputs) takes besides types: enum; format (of ours:
            # email, date, date-time); minimum/maximum; maxItems. Not minLength/maxLength.
            self.schema_keywords = frozenset({"enum", "format", "minimum", "maximum", "maxItems"})
            self.schema_formats = frozenset({"email", "date", "date-time"})
        self.client = openai.AsyncOpenAI(
            base_url=cfg.base_url,
            api_key=cfg.api_key or "unused",
            timeout=cfg.request_timeout_s,
            max_retries=cfg.max_retries,
        )

    async def aclose(self) -> None:
        await self.client.close()

    def _error(self, exc: Exception) -> ModelError:
        o = self._openai
        if isinstance(exc, o.RateLimitError):
            return ModelError(TurnErrorCode.MODEL_RATE_LIMITED,
                              "The model provider is rate limiting requests; try again shortly.")
        if isinstance(exc, (o.AuthenticationError, o.PermissionDeniedError)):
            return ModelError(TurnErrorCode.MODEL_AUTH,
                              "The relay's model API key was refused by the provider.", retryable=False)
        if isinstance(exc, o.BadRequestError):
            text = str(exc).lower()
            if getattr(exc, "code", None) == "context_length_exceeded" or (
                "context" in text and ("length" in text or "window" in text or "too long" in text)):
                return ModelError(TurnErrorCode.CONTEXT_OVERFLOW,
                                  "The conversation is too long for the model's context window.")
            return ModelError(TurnErrorCode.MODEL_ERROR, "The model provider refused the request.")
        if isinstance(exc, (o.APIConnectionError, o.APITimeoutError)):
            return ModelError(TurnErrorCode.MODEL_UNAVAILABLE, "The model provider could not be reached.")
        if isinstance(exc, o.InternalServerError):
            return ModelError(TurnErrorCode.MODEL_UNAVAILABLE, "The model provider is down or overloaded.")
        return ModelError(TurnErrorCode.MODEL_ERROR, "The model request failed.")

    def _request_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.cfg.model, "messages": request.messages, "stream": True}
        tools = []
        for t in request.tools:
            if not _TOOL_NAME.match(t["name"]):
                continue
            fn: dict[str, Any] = {
                "name": t["name"],
                "description": t.get("description") or "",
                "parameters": t.get("parameters") or {"type": "object", "properties": {}},
            }
            if t.get("strict") and self.cfg.strict_tools:
                fn["strict"] = True
            tools.append({"type": "function", "function": fn})
        if tools:
            kwargs["tools"] = tools
        if self.cfg.temperature is not None:
            kwargs["temperature"] = self.cfg.temperature
        return kwargs

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        calls: dict[int, dict[str, Any]] = {}
        stream = None
        try:
            stream = await self.client.chat.completions.create(**self._request_kwargs(request))
            async for chunk in stream:
                choices = getattr(chunk, "choices", None)
                if not choices:
                    continue
                delta = choices[0].delta
                if delta is None:
                    continue
                if delta.content:
                    yield TextDelta(delta.content)
                for tc in delta.tool_calls or []:
                    slot = calls.setdefault(tc.index if tc.index is not None else len(calls),
                                            {"id": None, "name": "", "arguments": ""})
                    if tc.id:
                        slot["id"] = tc.id
                    if tc.function is not None:
                        if tc.function.name:
                            slot["name"] += tc.function.name
                        if tc.function.arguments:
                            slot["arguments"] += tc.function.arguments
        except self._openai.APIError as exc:
            raise self._error(exc) from exc
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            # A chunk the SDK or we could not read (bad JSON, a missing field): the reader gets a clear
            # error and the log one line, not a traceback.
            log.warning("model %s sent an unreadable chunk: %s: %s", self.cfg.model, type(exc).__name__, str(exc)[:200])
            raise ModelError(TurnErrorCode.MODEL_BAD_RESPONSE,
                             "The model sent a reply the relay could not read.") from exc
        finally:
            # Closing the response ends the provider's generation (and its billing) when the turn stops
            # early: on Stop, a deadline or a limit the relay's guard closes this generator.
            if stream is not None:
                await stream.close()
        for index in sorted(calls):
            slot = calls[index]
            raw = slot["arguments"] or "{}"
            try:
                args: Any = json.loads(raw)
            except ValueError:
                args = raw
            yield ToolCall(slot["name"], args, provider_id=slot["id"])
