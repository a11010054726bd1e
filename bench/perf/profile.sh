#!/usr/bin/env bash
# bench/perf/profile.sh: callgrind instruction counts per request of the
# kvroute daemon under a short, bounded wrk load against the same fixed
# upstream as run.sh. Instruction counts are repeatable on a loaded machine,
# unlike wall-clock figures.
#
#   bash bench/perf/profile.sh                 # v2, scenarios small 128k sse256
#   MODE=round_robin SCENARIOS=small bash bench/perf/profile.sh
#
# Prints, per scenario, instructions per request (Ir / requests served in
# the measured window) and writes callgrind.out.<scenario> files to OUT for
# callgrind_annotate. Environment: BUILD_DIR [build-rel], OUT
# [/tmp/kvroute-profile-<time>], MODE [v2], SCENARIOS ["small 128k sse256"],
# SECONDS_PER [4] (wrk duration; one connection), PORT_BASE [18500].
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-build-rel}"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$repo/$BUILD_DIR" ;; esac
KVROUTE="${KVROUTE:-$BUILD_DIR/proxy/kvroute}"
OUT="${OUT:-/tmp/kvroute-profile-$(date +%Y%m%d-%H%M%S)}"
MODE="${MODE:-v2}"
SCENARIOS="${SCENARIOS:-small 128k sse256}"
SECONDS_PER="${SECONDS_PER:-4}"
PORT_BASE="${PORT_BASE:-18500}"
UP0=$((PORT_BASE + 1)); UP1=$((PORT_BASE + 2)); PORT=$((PORT_BASE + 10))

mkdir -p "$OUT/run" "$OUT/fix"
RUN="$OUT/run"; FIX="$OUT/fix"
python3 "$here/gen_fixtures.py" "$FIX"
render() {
  sed -e "s#@RUN@#$RUN#g; s#@FIX@#$FIX#g; s#@UP0@#$UP0#g; s#@UP1@#$UP1#g" \
      -e "s#@PORT@#$PORT#g; s#@MODE@#$MODE#g; s#@THREADS@#1#g" "$1" > "$2"
}
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM
wait_http() {
  for _ in $(seq 1 300); do
    [[ "$(curl -s -o /dev/null -w '%{http_code}' "$1" 2>/dev/null)" == 200 ]] && return 0
    sleep 0.1
  done
  echo "profile.sh: $1 never answered 200" >&2; return 1
}

render "$here/templates/upstream-nginx.conf" "$RUN/upstream-nginx.conf"
nginx -c "$RUN/upstream-nginx.conf" -p "$RUN" -g 'daemon off;' > "$RUN/upstream.out" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$UP0/health"

for s in $SCENARIOS; do
  case "$s" in
    small)  BODY=body-1k.json;   PATHQ=/v1/completions;      RESP=json-1k.json ;;
    32k)    BODY=body-32k.json;  PATHQ=/v1/completions;      RESP=json-32k.json ;;
    128k)   BODY=body-128k.json; PATHQ=/v1/completions;      RESP=json-128k.json ;;
    sse1)   BODY=body-chat.json; PATHQ=/v1/chat/completions; RESP=sse-1.sse ;;
    sse256) BODY=body-chat.json; PATHQ=/v1/chat/completions; RESP=sse-256.sse ;;
  esac
  render "$here/templates/kvroute.yaml" "$RUN/kvroute.yaml"
  valgrind --tool=callgrind ${VALGRIND_ARGS:-} --callgrind-out-file="$OUT/callgrind.out.$s" \
    "$KVROUTE" --config "$RUN/kvroute.yaml" > "$RUN/kvroute-$s.log" 2>&1 &
  KPID=$!
  PIDS+=("$KPID")
  wait_http "http://127.0.0.1:$PORT/health"
  export BENCH_BODY="$FIX/$BODY" BENCH_PATH="$PATHQ" BENCH_RESPONSE="$RESP"
  # Warm-up (warms the shadow index and the connection pool), then zero the
  # counters, measure, and dump.
  # Three sequential requests first: under callgrind a 2 s wrk run may not
  # finish even one 128k request, and the first one (HEAVY, offloaded in v2)
  # must not land in the measured window.
  for _ in 1 2 3; do
    curl -s -o /dev/null -X POST --data-binary "@$FIX/$BODY" -H "X-Bench-Response: $RESP" \
      -H 'Content-Type: application/json' "http://127.0.0.1:$PORT$PATHQ"
  done
  wrk -t1 -c1 -d2s --timeout 30s -s "$here/post.lua" "http://127.0.0.1:$PORT" > "$RUN/warm-$s.txt"
  callgrind_control -z "$KPID" > /dev/null
  wrk -t1 -c1 -d"${SECONDS_PER}s" --timeout 30s -s "$here/post.lua" "http://127.0.0.1:$PORT" \
    > "$RUN/wrk-$s.txt"
  callgrind_control -d "$KPID" > /dev/null
  kill "$KPID"; wait "$KPID" 2>/dev/null || true
  n="$(grep '^BENCH_JSON' "$RUN/wrk-$s.txt" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read().split(" ",1)[1])["requests"])')"
  # The dump made by -d is the measured window (the file with suffix .1).
  f="$(ls "$OUT"/callgrind.out."$s".* 2>/dev/null | head -1)"
  ir="$(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}')"
  printf '%-7s mode=%-11s requests=%-6s Ir/request=%s  (%s)\n' "$s" "$MODE" "$n" \
    "$(python3 -c "print(f'{$ir/$n:,.0f}')")" "$f"
done
