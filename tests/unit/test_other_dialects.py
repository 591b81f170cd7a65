"""Gemini, Ollama, the Vercel UI stream and plain SSE: every state each can reach."""

from __future__ import annotations

from typing import Any

from sseproxy.core import Dialect, EndReason
from tests.streams import ndjson, sse, verdict_of

GEM, OLL, VER, SSE = Dialect.GEMINI, Dialect.OLLAMA, Dialect.VERCEL_UI, Dialect.SSE


def cand(text: str | None = None, finish: str | None = None, index: int = 0, **part: Any) -> dict:
    c: dict[str, Any] = {"index": index}
    if text is not None or part:
        c["content"] = {
            "role": "model",
            "parts": [{"text": text, **part} if text is not None else part],
        }
    if finish:
        c["finishReason"] = finish
    return {
        "candidates": [c],
        "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 5},
        "modelVersion": "g",
    }


class TestGemini:
    def test_completed(self) -> None:
        v = verdict_of(sse(cand("Hel"), cand("lo"), cand("", "STOP")), GEM)
        assert (v.state, v.finish_reason, v.finish_category, v.text_chars) == (
            "completed",
            "STOP",
            "stop",
            5,
        )

    def test_no_finish_reason_is_interrupted(self) -> None:
        assert verdict_of(sse(cand("Hel")), GEM).state == "interrupted"

    def test_partial_event_after_stop_is_interrupted(self) -> None:
        v = verdict_of(sse(cand("Hel", "STOP")) + b'data: {"candidates"', GEM)
        assert v.state == "interrupted"

    def test_incomplete_reasons(self) -> None:
        for reason, category in (
            ("MAX_TOKENS", "length"),
            ("SAFETY", "content_filter"),
            ("MALFORMED_FUNCTION_CALL", "other"),
        ):
            v = verdict_of(sse(cand("x", reason)), GEM, bytewise=False)
            assert (v.state, v.finish_category) == ("incomplete", category)

    def test_prompt_blocked(self) -> None:
        v = verdict_of(sse({"promptFeedback": {"blockReason": "SAFETY"}}), GEM)
        assert (v.state, v.finish_reason) == ("incomplete", "SAFETY")

    def test_error_chunk_is_failed(self) -> None:
        err = {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}
        v = verdict_of(sse(cand("Hel"), err), GEM)
        assert v.state == "failed"
        assert v.error is not None and (v.error.type, v.error.code) == ("UNAVAILABLE", "503")

    def test_thought_parts_are_reasoning(self) -> None:
        v = verdict_of(sse(cand("plan", thought=True), cand("ok", "STOP")), GEM)
        assert (v.reasoning_chars, v.text_chars) == (4, 2)

    def test_function_call(self) -> None:
        data = sse(cand(functionCall={"name": "f", "args": {"a": 1}}), cand("", "STOP"))
        v = verdict_of(data, GEM)
        assert (v.state, v.finish_category) == ("completed", "tool_use")
        assert [(c.name, c.arguments_valid_json) for c in v.tool_calls] == [("f", True)]

    def test_crlf_framing(self) -> None:
        data = sse(cand("a"), cand("b", "STOP")).replace(b"\n", b"\r\n")
        assert verdict_of(data, GEM).state == "completed"

    def test_two_candidates(self) -> None:
        both = {"candidates": [{"index": 0, "finishReason": "STOP"}, {"index": 1}]}
        v = verdict_of(sse(both), GEM)
        assert (v.state, v.finish_reason, v.finish_reasons) == (
            "interrupted",
            "STOP",
            ("STOP", None),
        )


def line(**fields: Any) -> dict[str, Any]:
    return {"model": "llama", "created_at": "t", **fields}


class TestOllama:
    def test_chat_completed(self) -> None:
        data = ndjson(
            line(message={"role": "assistant", "content": "", "thinking": "hm"}, done=False),
            line(message={"role": "assistant", "content": "Hi"}, done=False),
            line(
                message={"role": "assistant", "content": ""},
                done=True,
                done_reason="stop",
                prompt_eval_count=9,
                eval_count=2,
            ),
        )
        v = verdict_of(data, OLL)
        assert (v.state, v.finish_reason, v.text_chars, v.reasoning_chars, v.events) == (
            "completed",
            "stop",
            2,
            2,
            3,
        )
        assert v.usage is not None and (
            v.usage.input_tokens,
            v.usage.output_tokens,
            v.usage.total_tokens,
        ) == (9, 2, 11)

    def test_generate_length(self) -> None:
        v = verdict_of(
            ndjson(
                line(response="Hi", done=False), line(response="", done=True, done_reason="length")
            ),
            OLL,
        )
        assert (v.state, v.finish_category, v.text_chars) == ("incomplete", "length", 2)

    def test_error_line(self) -> None:
        v = verdict_of(ndjson(line(response="Hi", done=False), {"error": "model crashed"}), OLL)
        assert v.state == "failed"
        assert v.error is not None and v.error.message == "model crashed"

    def test_cut_without_done(self) -> None:
        v = verdict_of(ndjson(line(response="Hi", done=False)) + b'{"model":', OLL)
        assert v.state == "interrupted"
        assert v.interruption is not None and v.interruption.partial_event_bytes == 9

    def test_tool_calls_arrive_whole(self) -> None:
        call = {"function": {"name": "f", "arguments": {"city": "Paris"}}}
        data = ndjson(
            line(message={"role": "assistant", "content": "", "tool_calls": [call]}, done=False),
            line(message={"content": ""}, done=True, done_reason="stop"),
        )
        v = verdict_of(data, OLL)
        assert (v.state, v.finish_category) == ("completed", "tool_use")
        assert v.tool_calls[0].arguments_valid_json

    def test_detected_without_being_told(self) -> None:
        data = ndjson(
            line(response="Hi", done=False), line(response="", done=True, done_reason="stop")
        )
        v = verdict_of(data, None)
        assert (v.dialect, v.state) == ("ollama", "completed")


class TestVercelUI:
    START = [
        {"type": "start", "messageId": "m"},
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": "Hi"},
        {"type": "text-end", "id": "t"},
    ]

    def test_completed(self) -> None:
        v = verdict_of(sse(*self.START, {"type": "finish", "finishReason": "stop"}, "[DONE]"), VER)
        assert (v.state, v.finish_reason, v.text_chars) == ("completed", "stop", 2)

    def test_error_then_done_is_failed(self) -> None:
        v = verdict_of(
            sse(*self.START, {"type": "error", "errorText": "An error occurred."}, "[DONE]"), VER
        )
        assert v.state == "failed"

    def test_done_without_finish_is_unconfirmed(self) -> None:
        assert verdict_of(sse(*self.START, "[DONE]"), VER).state == "unconfirmed"

    def test_length_is_incomplete(self) -> None:
        assert (
            verdict_of(
                sse(*self.START, {"type": "finish", "finishReason": "length"}, "[DONE]"), VER
            ).state
            == "incomplete"
        )

    def test_cut(self) -> None:
        assert verdict_of(sse(*self.START), VER).state == "interrupted"

    def test_tool_input(self) -> None:
        data = sse(
            {"type": "tool-input-start", "toolCallId": "c1", "toolName": "f"},
            {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '{"a":'},
            {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": "1}"},
            {
                "type": "tool-input-available",
                "toolCallId": "c1",
                "toolName": "f",
                "input": {"a": 1},
            },
            {"type": "finish", "finishReason": "tool-calls"},
            "[DONE]",
        )
        v = verdict_of(data, VER)
        assert (v.state, v.finish_category) == ("completed", "tool_use")
        assert [(c.id, c.name, c.arguments_bytes) for c in v.tool_calls] == [("c1", "f", 7)]


class TestPlainSSE:
    def test_clean_end_is_unconfirmed_and_says_why(self) -> None:
        """No protocol means no terminal signal: a whole body is never `completed`."""
        v = verdict_of(b"data: a\n\nevent: x\ndata: b\n\n", SSE)
        assert (v.state, v.anomalies.get("no_terminal_signal")) == ("unconfirmed", 1)

    def test_partial_event(self) -> None:
        v = verdict_of(b"data: a\n\ndata: b", SSE)
        assert v.state == "interrupted"
        assert v.anomalies["partial_event_discarded"] == 1

    def test_reset_is_interrupted_even_on_a_boundary(self) -> None:
        v = verdict_of(b"data: a\n\n", SSE, end=EndReason.UPSTREAM_RESET)
        assert v.interruption is not None and v.interruption.reason == "upstream_reset"


class TestDetection:
    def test_sniffed_from_first_events(self) -> None:
        cases = {
            b'data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n': "openai-chat",
            b'event: message_start\ndata: {"type":"message_start","message":{}}\n\n': "anthropic-messages",
            b'event: response.created\ndata: {"type":"response.created","response":{}}\n\n': "openai-responses",
            b'data: {"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}]}\n\n': "gemini",
            b'data: {"type":"start"}\n\ndata: {"type":"finish"}\n\ndata: [DONE]\n\n': "vercel-ui",
            b"data: hello\n\n": "sse",
        }
        for data, dialect in cases.items():
            assert verdict_of(data, None).dialect == dialect

    def test_from_request(self) -> None:
        from sseproxy.core.dialects import detect

        assert (
            detect("POST", "/openai/deployments/gpt/chat/completions?api-version=1")
            == "openai-chat"
        )
        assert detect("GET", "/v1/responses/resp_1?stream=true") == "openai-responses"
        assert detect("POST", "/v1/messages") == "anthropic-messages"
        assert detect("POST", "/v1beta/models/gemini-2.5:streamGenerateContent?alt=sse") == "gemini"
        assert detect("POST", "/ollama/api/chat") == "ollama"
        assert detect("POST", "/x", {"x-vercel-ai-ui-message-stream": "v1"}) == "vercel-ui"
        assert detect("POST", "/whatever") is None
