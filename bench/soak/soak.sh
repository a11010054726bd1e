#!/usr/bin/env bash
# kvroute soak: memory and file descriptors under a fixed load (not a test; see README.md).
#
#   1. starts kvroute-sim (8 simulated instances, real time) and kvroute (release build) on
#      loopback,
#   2. drives a fixed load with kvroute-bench (agentic jobs, Poisson arrivals at --jps) for
#      --duration seconds, sampling kvroute's RSS (/proc/PID/status VmRSS) and open file
#      descriptors (/proc/PID/fd) every --interval seconds into soak.csv,
#   3. holds --idle-connections idle client connections and reports RSS before/while/after,
#   4. sends --sessions requests, each with its own X-Session-Id (the router's session table
#      is an LRU bounded by router.max_sessions = --max-sessions), reporting RSS per quarter,
#   5. prints first/last/max of RSS and fds and the verdict (flat or not).
#
# Usage: bench/soak/soak.sh [--duration S] [--interval S] [--jps N] [--build-dir DIR]
#                           [--out DIR] [--idle-connections N] [--sessions N]
#                           [--max-sessions N] [--mode MODE] [--base-port P]
#                           [--skip-load] [--skip-idle] [--skip-flood]
# Exit status: 0 when both stayed flat, 1 when growth was detected, 2 on setup errors.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
TOOLS="$ROOT/bench/soak/soak_tools.py"

DURATION=600
INTERVAL=10
JPS=1
BUILD_DIR=build-release
OUT=""
IDLE=10000
SESSIONS=30000
MAX_SESSIONS=10000
MODE=baseline
BASE_PORT=18100   # instances on BASE_PORT..BASE_PORT+7, kvroute on BASE_PORT-100
SKIP_LOAD=0
SKIP_IDLE=0
SKIP_FLOOD=0

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION=$2; shift ;;
    --interval) INTERVAL=$2; shift ;;
    --jps) JPS=$2; shift ;;
    --build-dir) BUILD_DIR=$2; shift ;;
    --out) OUT=$2; shift ;;
    --idle-connections) IDLE=$2; shift ;;
    --sessions) SESSIONS=$2; shift ;;
    --max-sessions) MAX_SESSIONS=$2; shift ;;
    --mode) MODE=$2; shift ;;
    --base-port) BASE_PORT=$2; shift ;;
    --skip-load) SKIP_LOAD=1 ;;
    --skip-idle) SKIP_IDLE=1 ;;
    --skip-flood) SKIP_FLOOD=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "soak: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[ -n "$OUT" ] || OUT="$BUILD_DIR/soak/$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
INSTANCES=8
KVROUTE_PORT=$((BASE_PORT - 100))

# --- binaries (Release) -------------------------------------------------------------------
KVROUTE="$BUILD_DIR/proxy/kvroute"
SIM="$BUILD_DIR/sim/kvroute-sim"
BENCH="$BUILD_DIR/bench/kvroute_bench/kvroute-bench"
if [ ! -x "$KVROUTE" ] || [ ! -x "$SIM" ] || [ ! -x "$BENCH" ]; then
  echo "== building kvroute, kvroute-sim, kvroute-bench (Release) in $BUILD_DIR"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  nice -n 10 cmake --build "$BUILD_DIR" -j "$(nproc)" --target kvroute kvroute-sim kvroute-bench \
    >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log" >&2; exit 2; }
fi

# --- file descriptors: idle connections need one each in kvroute (and in the client) ------
need=$((IDLE + 1024))
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$need" ]; then
  echo "soak: ulimit -Hn is $hard, below the $need needed for $IDLE idle connections;" \
       "lowering --idle-connections to $((hard - 1024))" >&2
  IDLE=$((hard - 1024))
  need=$hard
fi
ulimit -n "$need"

# --- processes ------------------------------------------------------------------------------
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in $(seq "$BASE_PORT" $((BASE_PORT + INSTANCES - 1))) "$KVROUTE_PORT"; do
  port_free "$p" || { echo "soak: port $p is in use (try --base-port)" >&2; exit 2; }
done
wait_http() {  # URL: up to 30 s for a 200
  for _ in $(seq 150); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.2
  done
  echo "soak: $1 did not answer" >&2
  return 1
}

"$SIM" --instances "$INSTANCES" --base-port "$BASE_PORT" --time-scale 1 --seed 1 \
  --log-level warn >"$OUT/sim.log" 2>&1 &
PIDS+=($!)
for i in $(seq 0 $((INSTANCES - 1))); do wait_http "http://127.0.0.1:$((BASE_PORT + i))/health"; done

{
  echo "listen: 127.0.0.1:$KVROUTE_PORT"
  echo "mode: $MODE"
  echo "log_level: warn"
  echo "threads: 2"
  echo "limits:"
  echo "  max_connections: $((IDLE + 2000))"
  echo "  header_timeout_s: 120      # the idle connections are held while measured"
  echo "router:"
  echo "  max_sessions: $MAX_SESSIONS"
  echo "backends:"
  for i in $(seq 0 $((INSTANCES - 1))); do
    echo "  - {name: gpu$i, url: http://127.0.0.1:$((BASE_PORT + i))}"
  done
} >"$OUT/kvroute.yaml"
"$KVROUTE" --config "$OUT/kvroute.yaml" >"$OUT/kvroute.log" 2>&1 &
KV_PID=$!
PIDS+=("$KV_PID")
wait_http "http://127.0.0.1:$KVROUTE_PORT/health"

CSV="$OUT/soak.csv"
echo "t_s,phase,rss_kb,fds,shadow_tokens,capacity_tokens" >"$CSV"
T0=$(date +%s)
sample() {  # PHASE
  read -r rss nfd shadow capacity < <(python3 "$TOOLS" sample "$KV_PID" "$KVROUTE_PORT")
  echo "$(($(date +%s) - T0)),$1,$rss,$nfd,$shadow,$capacity" >>"$CSV"
  echo "   t=$(($(date +%s) - T0))s $1: RSS ${rss} KiB, ${nfd} fds, shadow index ${shadow}/${capacity} tokens"
}

echo "== soak: kvroute pid $KV_PID (mode $MODE), 8 instances on $BASE_PORT.., output in $OUT"
sample start

# --- 1. fixed load ---------------------------------------------------------------------------
if [ "$SKIP_LOAD" = 0 ]; then
  echo "== 1/3 fixed load: $JPS agent jobs/s for $DURATION s, sampling every $INTERVAL s"
  "$BENCH" run --target "http://127.0.0.1:$KVROUTE_PORT" --workload agentic --jps "$JPS" \
    --duration "$DURATION" --seed 1 --progress-interval 60 --request-timeout 120 \
    --drain-timeout 120 --out "$OUT/bench" >"$OUT/bench.log" 2>&1 &
  BENCH_PID=$!
  PIDS+=("$BENCH_PID")
  end=$(($(date +%s) + DURATION))
  while [ "$(date +%s)" -lt "$end" ] && kill -0 "$BENCH_PID" 2>/dev/null; do
    sample load
    sleep "$INTERVAL"
  done
  bench_status=0
  wait "$BENCH_PID" || bench_status=$?
  sample after_load
  echo "   kvroute-bench exit $bench_status; last progress line:"
  grep -E "elapsed|done" "$OUT/bench.log" | tail -1 | sed 's/^/   /'
fi

# --- 2. idle connections ------------------------------------------------------------------------
if [ "$SKIP_IDLE" = 0 ]; then
  echo "== 2/3 $IDLE idle client connections"
  python3 "$TOOLS" idle --port "$KVROUTE_PORT" --pid "$KV_PID" --n "$IDLE" | tee "$OUT/idle.json"
  sample after_idle
fi

# --- 3. session-id flood ------------------------------------------------------------------------
if [ "$SKIP_FLOOD" = 0 ]; then
  echo "== 3/3 $SESSIONS requests with distinct X-Session-Id (router.max_sessions $MAX_SESSIONS)"
  python3 "$TOOLS" flood --port "$KVROUTE_PORT" --pid "$KV_PID" --n "$SESSIONS" |
    tee "$OUT/flood.json"
  sample after_flood
fi

# --- verdict ------------------------------------------------------------------------------
echo "== result ($CSV)"
status=0
if [ "$SKIP_LOAD" = 0 ]; then
  python3 "$TOOLS" verdict "$CSV" | tee "$OUT/verdict.txt" || status=1
fi
kill -0 "$KV_PID" 2>/dev/null || { echo "soak: kvroute died" >&2; status=1; }
exit $status
