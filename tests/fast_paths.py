"""The dialects whose fast paths tests compare with the full parse, and the switch."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sseproxy.core import Dialect
from sseproxy.core.dialects.anthropic_messages import AnthropicMessagesAssembler
from sseproxy.core.dialects.openai_chat import OpenAIChatAssembler
from sseproxy.core.dialects.openai_responses import OpenAIResponsesAssembler

ASSEMBLERS: dict[Dialect, Any] = {
    Dialect.OPENAI_CHAT: OpenAIChatAssembler,
    Dialect.ANTHROPIC_MESSAGES: AnthropicMessagesAssembler,
    Dialect.OPENAI_RESPONSES: OpenAIResponsesAssembler,
}


@contextmanager
def full_parse(dialect: Dialect) -> Iterator[None]:
    cls = ASSEMBLERS[dialect]
    cls.fast_path = False
    try:
        yield
    finally:
        cls.fast_path = True
