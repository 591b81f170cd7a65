"""Every anomaly name the core can put in a verdict: the one list the anomaly table of
docs/record.md is checked against. A name counted anywhere in the core must be here
(tests/unit/test_metrics.py scans the keys the core counts under), and every name here must be
counted somewhere, so the list neither lags nor rots.
"""

from __future__ import annotations

__all__ = ["ANOMALIES"]

ANOMALIES: frozenset[str] = frozenset(
    {
        # How the bytes ended, against the events' own end.
        "client_left_before_end",
        "truncated_after_terminal",
        "truncated_compressed_body",
        "no_terminal_signal",
        "empty_body",
        "missing_done",
        "done_without_finish_reason",
        "done_after_error",
        "delta_after_done",
        "unexpected_done",
        "stop_reason_without_message_stop",
        "events_after_terminal",
        # What the request asked for, against what came back.
        "stream_not_honoured",
        "usage_missing",
        "choices_missing",
        "content_type_mismatch",
        "unexpected_content_type",
        "unexpected_framing",
        # The events' content and order.
        "snapshot_mismatch",
        "sequence_gap",
        "sequence_regression",
        "event_type_mismatch",
        "unknown_event_type",
        "unknown_delta_type",
        "unknown_finish_reason",
        "repeated_finish_reason",
        "repeated_error",
        "delta_without_block_start",
        "index_out_of_range",
        "unexpected_payload",
        # Tool calls.
        "invalid_tool_arguments",
        "repeated_tool_call_fields",
        "duplicate_tool_call_id",
        "conflicting_tool_call_id",
        "conflicting_tool_call_name",
        "too_many_tool_calls",
        "tool_call_type_missing",
        "tool_input_error",
        "tool_output_error",
        # Framing and decoding.
        "partial_event_discarded",
        "invalid_utf8",
        "oversized_event",
        "unknown_sse_field",
        "json_decode_error",
        "content_decoding_error",
        # The analysis itself stopped short of the whole stream.
        "analysis_budget_exceeded",
        "body_too_large_to_analyse",
        "analysis_cut_short",
        "core_error",
        # Pacing (core/pacing.py).
        "content_stall",
        "upstream_buffered",
        # Azure's content-filter annotations (core/dialects/azure.py).
        "content_filtered",
        "prompt_filtered",
        "content_filter_error",
        # Bedrock and the AWS event stream.
        "metadata_missing",
        "invocation_metrics_missing",
        "invalid_chunk_bytes",
        "eventstream_prelude_crc_mismatch",
        "eventstream_message_crc_mismatch",
        "eventstream_impossible_length",
        "eventstream_malformed_headers",
        # Resumes and sessions (core/resume.py, core/dialects/mcp.py).
        "reconnect_before_retry",
        "session_expired",
        # WebSocket sessions (core/sessions/): the session record's, but session_expired
        # and the named errors, which the turn they answer counts too.
        "active_response_conflict",
        "connection_limit_reached",
        "previous_response_not_found",
        "error_without_response",
        "turn_open_at_close",
        "too_many_open_turns",
        "go_away",
        "tool_call_cancellation",
    }
)
