-- sseproxy records (schema_version 1.x) in ClickHouse: one row per request.finished record.
-- Typed columns for what people filter and group on; nested values (error, usage, tool
-- calls, ...) kept as their JSON text, read with JSONExtract*. Columns a record may lack
-- (the fallback record has few) are Nullable: absent and null read the same.
CREATE DATABASE IF NOT EXISTS sseproxy;

CREATE TABLE IF NOT EXISTS sseproxy.requests
(
    timestamp DateTime64(6, 'UTC'),
    level LowCardinality(String),
    event LowCardinality(String),
    schema_version LowCardinality(String),
    request_id String,
    upstream_request_id Nullable(String),
    method LowCardinality(String),
    path String,
    route LowCardinality(Nullable(String)),
    upstream Nullable(String),
    status Nullable(UInt16),
    answered_by LowCardinality(Nullable(String)),  -- proxy, upstream; null: nothing was sent
    content_type LowCardinality(Nullable(String)),
    model LowCardinality(Nullable(String)),
    response_model LowCardinality(Nullable(String)),
    stream Nullable(Bool),
    ttfb_ms Nullable(Float64),
    ttft_ms Nullable(Float64),
    duration_ms Nullable(Float64),
    max_gap_ms Nullable(Float64),
    content_gap_ms Nullable(Float64),
    dialect LowCardinality(Nullable(String)),
    state LowCardinality(String),
    finish_reason Nullable(String),
    finish_category LowCardinality(Nullable(String)),
    finish_reasons Nullable(String),        -- JSON array
    last_event Nullable(String),
    last_event_id Nullable(String),
    interruption Nullable(String),          -- JSON {reason, partial_event_bytes}
    http_complete Nullable(Bool),           -- null: not known
    error Nullable(String),                 -- JSON {type, code, message}
    anomalies Map(LowCardinality(String), UInt64),
    bytes Nullable(UInt64),
    events Nullable(UInt64),
    comments Nullable(UInt64),
    text_chars Nullable(UInt64),
    reasoning_chars Nullable(UInt64),
    refusal_chars Nullable(UInt64),
    tool_calls Nullable(String),            -- JSON array of {id, name, arguments_bytes, ...}
    server_tool_calls Nullable(String),     -- JSON array
    usage Nullable(String),                 -- JSON {input_tokens, output_tokens, ...}
    response_id Nullable(String),
    content_burst_ms Nullable(Float64),
    output_tokens_per_s Nullable(Float64),
    output_tokens_per_s_unmeasured LowCardinality(Nullable(String)),
    client_wait_ms Nullable(Float64),
    client_bytes Nullable(UInt64),
    events_delivered Nullable(UInt64),
    last_event_delivered Nullable(String),
    injected Nullable(String),              -- JSON array of drill rules
    trace_id Nullable(String),
    span_id Nullable(String),
    no_body_expected Nullable(Bool),
    resume Nullable(String),                -- JSON {of, cursor, verdict, first_event, ...}
    retry Nullable(String),                 -- JSON {of, regenerated, shared_prefix_chars}
    mcp_session_id Nullable(String),
    sse_retry_ms Nullable(UInt64),
    transport LowCardinality(Nullable(String)),  -- "websocket" for a session's turn
    session_id Nullable(String),
    turn Nullable(UInt32),
    audio_bytes Nullable(UInt64),
    audio_ms Nullable(Float64),
    trailers Nullable(String),              -- JSON {name: value} of the upstream's trailers
    trailers_forwarded Nullable(String),    -- JSON array of the names the client got
    client Nullable(String),                -- JSON {name, version} (schema 1.4)
    run_id Nullable(String),                -- the agent run the client named (schema 1.4)
    first_chunk_ms Nullable(Float64),       -- to the first chunk of any kind (schema 1.4)
    mcp_protocol_version LowCardinality(Nullable(String)),  -- schema 1.4
    round_trip Nullable(String),            -- JSON {of, number}: an MCP input round trip
    fallback_hops Nullable(UInt32),         -- Anthropic's fallback blocks (schema 1.4)
    text_model Nullable(String),            -- the model that wrote the answer (schema 1.4)
    lane Nullable(String),                  -- a WebSocket turn's lane (schema 1.4)
    continues Nullable(String),             -- JSON {turn, response_id}: a steered successor

    -- The keys the report groups by, computed once at insert. The proxy's own refusals
    -- (answered by the proxy, nothing cut) are the report's `proxy_refused`, apart from the
    -- upstream's errors.
    state_key LowCardinality(String) MATERIALIZED
        if(state = 'http_error' AND ifNull(answered_by, '') = 'proxy' AND interruption IS NULL,
           'proxy_refused', state),
    model_key LowCardinality(String) MATERIALIZED
        if(ifNull(model, '') != '', substringUTF8(model, 1, 200),
           if(ifNull(response_model, '') != '', substringUTF8(response_model, 1, 200), '-')),
    route_key LowCardinality(String) MATERIALIZED
        if(ifNull(route, '') != '', substringUTF8(route, 1, 200), '-'),
    dialect_key LowCardinality(String) MATERIALIZED
        if(ifNull(dialect, '') != '', substringUTF8(dialect, 1, 200), '-'),
    -- the report's by_client key: a client without a name is `-`, its version too
    client_key LowCardinality(String) MATERIALIZED
        if(JSONExtractString(ifNull(client, ''), 'name') != '',
           substringUTF8(JSONExtractString(ifNull(client, ''), 'name'), 1, 200), '-'),
    client_version_key LowCardinality(String) MATERIALIZED
        if(JSONExtractString(ifNull(client, ''), 'name') != ''
           AND JSONExtractString(ifNull(client, ''), 'version') != '',
           substringUTF8(JSONExtractString(ifNull(client, ''), 'version'), 1, 200), '-'),
    interruption_reason LowCardinality(Nullable(String)) MATERIALIZED
        if(interruption IS NULL, NULL,
           if(JSONExtractString(interruption, 'reason') != '',
              substringUTF8(JSONExtractString(interruption, 'reason'), 1, 200), '-')),
    error_type LowCardinality(Nullable(String)) MATERIALIZED
        if(error IS NULL, NULL, JSONExtract(error, 'type', 'Nullable(String)')),
    output_tokens Nullable(UInt64) MATERIALIZED
        if(usage IS NULL, NULL, JSONExtract(usage, 'output_tokens', 'Nullable(UInt64)'))
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(timestamp)
ORDER BY (state, model_key, timestamp)
TTL toDateTime(timestamp) + INTERVAL 90 DAY;

-- One row per session.finished record: how a WebSocket connection ended. Its turns are rows
-- of sseproxy.requests (transport = 'websocket', the same session_id).
CREATE TABLE IF NOT EXISTS sseproxy.sessions
(
    timestamp DateTime64(6, 'UTC'),
    level LowCardinality(String),
    event LowCardinality(String),
    schema_version LowCardinality(String),
    transport LowCardinality(String),
    session_id String,
    route LowCardinality(Nullable(String)),
    upstream Nullable(String),
    path String,
    dialect LowCardinality(Nullable(String)),
    subprotocol Nullable(String),
    extensions Nullable(String),            -- JSON {client: [...], upstream: [...]}
    close_code Nullable(UInt16),            -- null: no close frame, or one without a status
    close_reason Nullable(String),
    closed_by LowCardinality(Nullable(String)),  -- client, upstream, proxy
    close_frame Nullable(Bool),
    end_reason LowCardinality(Nullable(String)),  -- proxy_shutdown, upstream_closed, ...
    duration_ms Nullable(Float64),
    turns Nullable(UInt32),
    states Map(LowCardinality(String), UInt64),  -- turns per state
    errors Nullable(UInt64),
    messages Nullable(String),              -- JSON {client, upstream}
    bytes Nullable(String),                 -- JSON {client, upstream}
    largest_message_bytes Nullable(UInt64),
    ping_ms Nullable(String),               -- JSON array
    client_wait_ms Nullable(Float64),
    last_message_delivered Nullable(String),
    go_away_s Nullable(Float64),
    resumable Nullable(Bool),
    anomalies Map(LowCardinality(String), UInt64),
    client Nullable(String),                -- JSON {name, version} (schema 1.4)
    run_id Nullable(String),                -- the agent run the client named (schema 1.4)
    steering Nullable(String),              -- JSON {sent, accepted, pending, failed} (1.4)

    route_key LowCardinality(String) MATERIALIZED
        if(ifNull(route, '') != '', substringUTF8(route, 1, 200), '-'),
    closed_by_key LowCardinality(String) MATERIALIZED
        if(ifNull(closed_by, '') != '', substringUTF8(closed_by, 1, 200), '-'),
    close_code_key LowCardinality(String) MATERIALIZED
        if(close_code IS NULL, '-', toString(close_code))
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(timestamp)
ORDER BY (route_key, closed_by_key, timestamp)
TTL toDateTime(timestamp) + INTERVAL 90 DAY;

-- One row per connect.finished record (schema 1.4): a connection to intercept mode's listener
-- that was not an intercepted exchange: a tunnel or a forwarded plain-HTTP request when it
-- closed, or a connection refused or failed before that.
CREATE TABLE IF NOT EXISTS sseproxy.connects
(
    timestamp DateTime64(6, 'UTC'),
    level LowCardinality(String),
    event LowCardinality(String),
    schema_version LowCardinality(String),
    host Nullable(String),                  -- null: the head was refused or never came
    port Nullable(UInt16),
    mode LowCardinality(String),            -- tunnel, forward, intercept, setup
    outcome LowCardinality(String),         -- closed, upstream_unreachable, bad_connect, ...
    duration_ms Float64,
    bytes_up Nullable(UInt64),              -- null: nothing was relayed
    bytes_down Nullable(UInt64),
    closed_by LowCardinality(Nullable(String)),  -- client, upstream, proxy
    egress Nullable(String),                -- the egress proxy, without credentials
    error Nullable(String),
    hint Nullable(String),

    host_key LowCardinality(String) MATERIALIZED
        if(ifNull(host, '') != '', substringUTF8(host, 1, 200), '-')
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(timestamp)
ORDER BY (outcome, host_key, timestamp)
TTL toDateTime(timestamp) + INTERVAL 90 DAY;
