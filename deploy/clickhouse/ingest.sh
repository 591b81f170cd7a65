#!/bin/sh
# The plain path: send sseproxy's JSON-lines logs (plain or gzip-rotated) to ClickHouse.
#   deploy/clickhouse/ingest.sh sseproxy.log sseproxy.log.1.gz   (stdin when no file)
# request.finished lines go to sseproxy.requests, session.finished lines to sseproxy.sessions,
# connect.finished lines (intercept mode's listener) to sseproxy.connects;
# other lines (startup messages, console output) are left out by the filter, and a newer minor
# version's added fields are skipped until the table has their column.
set -eu
QUERY="INSERT INTO sseproxy.requests
SETTINGS date_time_input_format = 'best_effort', input_format_skip_unknown_fields = 1
FORMAT JSONEachRow"
SESSIONS_QUERY="INSERT INTO sseproxy.sessions
SETTINGS date_time_input_format = 'best_effort', input_format_skip_unknown_fields = 1
FORMAT JSONEachRow"
CONNECTS_QUERY="INSERT INTO sseproxy.connects
SETTINGS date_time_input_format = 'best_effort', input_format_skip_unknown_fields = 1
FORMAT JSONEachRow"
if [ "$#" -eq 0 ]; then  # stdin is read twice: keep it for the second pass
  spool=$(mktemp)
  trap 'rm -f "$spool"' EXIT
  cat > "$spool"
  set -- "$spool"
fi
lines() {
  for file in "$@"; do gzip -cdf -- "$file"; done
}
lines "$@" | grep -F '"event":"request.finished"' | clickhouse-client ${CLICKHOUSE_ARGS:-} --query "$QUERY"
# a log without sessions sends no empty insert (ClickHouse refuses one)
if lines "$@" | grep -qF '"event":"session.finished"'; then
  lines "$@" | grep -F '"event":"session.finished"' \
    | clickhouse-client ${CLICKHOUSE_ARGS:-} --query "$SESSIONS_QUERY"
fi
if lines "$@" | grep -qF '"event":"connect.finished"'; then
  lines "$@" | grep -F '"event":"connect.finished"' \
    | clickhouse-client ${CLICKHOUSE_ARGS:-} --query "$CONNECTS_QUERY"
fi
