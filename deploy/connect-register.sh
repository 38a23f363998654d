#!/bin/sh
# The `connect-register` service of docker-compose.yml (curlimages/curl, one shot): gives
# Kafka Connect the connector config in $CONNECTOR_CONFIG under the name $CONNECTOR_NAME.
# PUT /connectors/<name>/config creates the connector or replaces its config, so running
# this again is harmless. Retries while the worker is still joining its group (409) or
# the database is not reachable yet; stops with the worker's answer after $ATTEMPTS tries,
# $RETRY_DELAY_S seconds apart.
set -u
url="$CONNECT_URL/connectors/$CONNECTOR_NAME/config"
attempts="${ATTEMPTS:-30}"
delay="${RETRY_DELAY_S:-5}"
answer="${TMPDIR:-/tmp}/connect-answer"
attempt=1
while :; do
    code=$(curl -sS -o "$answer" -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
        --data-binary @"$CONNECTOR_CONFIG" "$url") || code=000
    case "$code" in
        200|201)
            echo "connector $CONNECTOR_NAME registered at $CONNECT_URL (HTTP $code)"
            exit 0
            ;;
    esac
    echo "attempt $attempt/$attempts: HTTP $code from $url: $(cat "$answer" 2>/dev/null)" >&2
    if [ "$attempt" -ge "$attempts" ]; then
        exit 1
    fi
    attempt=$((attempt + 1))
    sleep "$delay"
done
