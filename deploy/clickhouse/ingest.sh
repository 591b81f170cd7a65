#!/bin/sh
# The plain path: send sseproxy's JSON-lines logs (plain or gzip-rotated) to ClickHouse.
#   deploy/clickhouse/ingest.sh sseproxy.log sseproxy.log.1.gz   (stdin when no file)
# Other lines (startup messages, console output) are left out by the filter; a newer minor
# version's added fields are skipped until the table has their column.
set -eu
QUERY="INSERT INTO sseproxy.requests
SETTINGS date_time_input_format = 'best_effort', input_format_skip_unknown_fields = 1
FORMAT JSONEachRow"
if [ "$#" -eq 0 ]; then set -- -; fi
for file in "$@"; do
  if [ "$file" = "-" ]; then cat; else gzip -cdf -- "$file"; fi
done | grep -F '"event":"request.finished"' | clickhouse-client ${CLICKHOUSE_ARGS:-} --query "$QUERY"
