-- The queries behind `sseproxy report`, as views over sseproxy.requests. Each one gives the
-- rows of one table of `sseproxy report --json`, ordered the same way. A failure is a request
-- whose client saw an error: failed, interrupted or http_error (the proxy's own refusals,
-- state_key `proxy_refused`, are not). Filter a time window with
-- `SELECT ... FROM sseproxy.requests WHERE timestamp >= ...` and the same expressions.

CREATE OR REPLACE VIEW sseproxy.requests_by_state AS
SELECT state_key AS state, count() AS requests
FROM sseproxy.requests
GROUP BY state
ORDER BY requests DESC, state;

CREATE OR REPLACE VIEW sseproxy.failure_rate_by_model_route AS
SELECT
    model_key AS model,
    route_key AS route,
    count() AS requests,
    countIf(state_key IN ('failed', 'interrupted', 'http_error')) AS failures,
    round(failures / requests, 4) AS failure_rate
FROM sseproxy.requests
GROUP BY model, route
ORDER BY requests DESC, model, route;

CREATE OR REPLACE VIEW sseproxy.failure_rate_by_model AS
SELECT
    model_key AS model,
    count() AS requests,
    countIf(state_key IN ('failed', 'interrupted', 'http_error')) AS failures,
    round(failures / requests, 4) AS failure_rate
FROM sseproxy.requests
GROUP BY model
ORDER BY requests DESC, model;

CREATE OR REPLACE VIEW sseproxy.failure_rate_by_route AS
SELECT
    route_key AS route,
    count() AS requests,
    countIf(state_key IN ('failed', 'interrupted', 'http_error')) AS failures,
    round(failures / requests, 4) AS failure_rate
FROM sseproxy.requests
GROUP BY route
ORDER BY requests DESC, route;

-- The report's by_client: requests per client (name, version) as the record names it.
CREATE OR REPLACE VIEW sseproxy.failure_rate_by_client AS
SELECT
    client_key AS client,
    client_version_key AS version,
    count() AS requests,
    countIf(state_key IN ('failed', 'interrupted', 'http_error')) AS failures,
    round(failures / requests, 4) AS failure_rate
FROM sseproxy.requests
GROUP BY client, version
ORDER BY requests DESC, client, version;

CREATE OR REPLACE VIEW sseproxy.cuts_by_reason AS
SELECT interruption_reason AS reason, count() AS requests
FROM sseproxy.requests
WHERE interruption_reason IS NOT NULL
GROUP BY reason
ORDER BY requests DESC, reason;

-- quantileExactInclusive: linear interpolation between closest ranks, as the report computes
-- (the report samples beyond 2048 values per model; these are exact at any size).
CREATE OR REPLACE VIEW sseproxy.ttft_by_model AS
SELECT
    model_key AS model,
    count(ttft_ms) AS count,
    round(quantileExactInclusive(0.5)(ttft_ms), 3) AS p50,
    round(quantileExactInclusive(0.95)(ttft_ms), 3) AS p95,
    round(max(ttft_ms), 3) AS max
FROM sseproxy.requests
WHERE ttft_ms IS NOT NULL
GROUP BY model
ORDER BY count DESC, model;

CREATE OR REPLACE VIEW sseproxy.duration_by_model AS
SELECT
    model_key AS model,
    count(duration_ms) AS count,
    round(quantileExactInclusive(0.5)(duration_ms), 3) AS p50,
    round(quantileExactInclusive(0.95)(duration_ms), 3) AS p95,
    round(max(duration_ms), 3) AS max
FROM sseproxy.requests
WHERE duration_ms IS NOT NULL
GROUP BY model
ORDER BY count DESC, model;

CREATE OR REPLACE VIEW sseproxy.anomalies_top AS
SELECT name, sum(n) AS occurrences, count() AS requests
FROM sseproxy.requests
ARRAY JOIN mapKeys(anomalies) AS name, mapValues(anomalies) AS n
GROUP BY name
ORDER BY occurrences DESC, name
LIMIT 20;

-- The report's "worst requests": interrupted, then failed, http_error, unconfirmed, then the
-- rest; the slowest first within each.
CREATE OR REPLACE VIEW sseproxy.worst_requests AS
SELECT
    timestamp, request_id, state_key AS state, model_key AS model, route_key AS route, status,
    duration_ms, interruption_reason, error_type, anomalies
FROM sseproxy.requests
ORDER BY
    multiIf(state_key = 'interrupted', 4, state_key = 'failed', 3, state_key = 'http_error', 2,
            state_key = 'unconfirmed', 1, 0) DESC,
    ifNull(duration_ms, 0) DESC,
    timestamp
LIMIT 10;

-- How WebSocket sessions ended: the report's sessions.by_close.
CREATE OR REPLACE VIEW sseproxy.sessions_by_close AS
SELECT
    route_key AS route, closed_by_key AS closed_by, close_code_key AS close_code,
    count() AS sessions
FROM sseproxy.sessions
GROUP BY route, closed_by, close_code
ORDER BY sessions DESC, route, closed_by, close_code;

CREATE OR REPLACE VIEW sseproxy.session_anomalies_top AS
SELECT name, sum(n) AS occurrences, count() AS sessions
FROM sseproxy.sessions
ARRAY JOIN mapKeys(anomalies) AS name, mapValues(anomalies) AS n
GROUP BY name
ORDER BY occurrences DESC, name
LIMIT 20;
