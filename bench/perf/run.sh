#!/usr/bin/env bash
# bench/perf/run.sh: proxy overhead of kvroute side by side with nginx and
# HAProxy, in one run, with one load generator and one fast upstream.
#
#   bash bench/perf/run.sh                      # ~6 minutes with the defaults
#   DURATION=2 CONNS="1 16" bash bench/perf/run.sh
#
# Targets: direct (wrk -> upstream), nginx, haproxy, kvroute round_robin,
# kvroute v2 (shadow index warmed by a warm-up run of the same body).
# Scenarios (see gen_fixtures.py): 1k / 32k / 128k-token prompts to
# /v1/completions, and a 1k-token streamed chat answered by 1 or 256 SSE
# content events.
#
# Upstream: one nginx worker (two ports = two "instances") answering every
# request with a fixed vLLM-shaped file; kvroute health-checks /health and
# scrapes /metrics on it. Pinning (2 cores): the proxy under test on core
# PROXY_CPU, wrk and the upstream on core CLIENT_CPU; every proxy gets one
# worker (nginx worker_processes 1, HAProxy nbthread 1, kvroute threads 1).
#
# Environment (defaults in brackets):
#   BUILD_DIR   [build-rel]       where build-rel/proxy/kvroute is
#   OUT         [/tmp/kvroute-perf-<time>]  results.json, results.md, raw logs
#   DURATION    [5]   seconds per measured wrk run
#   WARMUP      [1]   seconds of unmeasured load before each run
#   ROUNDS      [1]   measure every target this many times, in turn; the
#                     report gives medians over the rounds (report.py)
#   CONNS       ["1 16"]          wrk connections (one thread)
#   TARGETS     ["direct nginx haproxy kvroute-rr kvroute-v2"]; also
#               kvroute-v2-pgo: v2 from the profile-guided release build
#               (deploy/build-release.sh; trained on its own traffic, not this);
#               kvroute-v2-base: v2 from another build, KVROUTE_BASE (an A/B of
#               two builds measured in turn within one run)
#   KVROUTE_PGO [build-pgo/proxy/kvroute]
#   KVROUTE_BASE [""]  the kvroute-v2-base target's binary
#   SCENARIOS   ["small 32k 128k sse1 sse256"]
#   PORT_BASE   [18400]  ports PORT_BASE+1,+2 upstream, +10.. proxies
#   PROXY_CPU   [1]   CLIENT_CPU [0]   PIN [1]: taskset pinning on/off.
#               PROXY_CPU=0 CLIENT_CPU=0 is the one-core layout: proxy, wrk
#               and upstream share a core, so no request crosses vCPUs and a
#               c=1 latency is the proxies' own work without the VM's
#               cross-vCPU wake-ups (README "Latency on one core")
#   KVROUTE_THREADS [1]
#   PROXY_ENV   [""]  environment assignments for every proxy under test
#               alike (nginx, HAProxy, kvroute; not the upstream or wrk),
#               e.g. "GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F" (README)
#   PROXY_CPU_QUOTA [""]  percent of one core every proxy under test may use
#               (a cgroup CPU quota, 10 ms period; needs root and a cgroup
#               cpu controller). With it the proxy, not the load generator's
#               core, limits throughput: req/s then compares the proxies'
#               capacity per CPU (README "Which core limits throughput").
#
# Every measured run also records how busy the proxy's core and the client's
# core (wrk + upstream) were (/proc/stat), so the report can say which side
# limited throughput.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-build-rel}"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$repo/$BUILD_DIR" ;; esac
KVROUTE="${KVROUTE:-$BUILD_DIR/proxy/kvroute}"
KVROUTE_PGO="${KVROUTE_PGO:-$repo/build-pgo/proxy/kvroute}"
KVROUTE_BASE="${KVROUTE_BASE:-}"
OUT="${OUT:-/tmp/kvroute-perf-$(date +%Y%m%d-%H%M%S)}"
DURATION="${DURATION:-5}"
WARMUP="${WARMUP:-1}"
ROUNDS="${ROUNDS:-1}"
CONNS="${CONNS:-1 16}"
TARGETS="${TARGETS:-direct nginx haproxy kvroute-rr kvroute-v2}"
SCENARIOS="${SCENARIOS:-small 32k 128k sse1 sse256}"
PORT_BASE="${PORT_BASE:-18400}"
PROXY_CPU="${PROXY_CPU:-1}"
CLIENT_CPU="${CLIENT_CPU:-0}"
PIN="${PIN:-1}"
KVROUTE_THREADS="${KVROUTE_THREADS:-1}"
PROXY_ENV="${PROXY_ENV:-}"
PROXY_CPU_QUOTA="${PROXY_CPU_QUOTA:-}"

UP0=$((PORT_BASE + 1))
UP1=$((PORT_BASE + 2))

for tool in wrk nginx haproxy python3 curl taskset; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool is missing (bash deploy/install-deps.sh)" >&2; exit 1; }
done
if [[ " $TARGETS " == *" kvroute"* && ! -x "$KVROUTE" ]]; then
  echo "run.sh: $KVROUTE not built; build it with:" >&2
  echo "  cmake -S . -B build-rel -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVROUTE_BUILD_TESTS=OFF -DKVROUTE_BUILD_BENCH=OFF && cmake --build build-rel --target kvroute" >&2
  exit 1
fi
if [[ " $TARGETS " == *" kvroute-v2-pgo "* && ! -x "$KVROUTE_PGO" ]]; then
  echo "run.sh: $KVROUTE_PGO not built; build it with: bash deploy/build-release.sh" >&2
  exit 1
fi
if [[ " $TARGETS " == *" kvroute-v2-base "* && ! -x "$KVROUTE_BASE" ]]; then
  echo "run.sh: target kvroute-v2-base needs KVROUTE_BASE, a kvroute binary (now '$KVROUTE_BASE')" >&2
  exit 1
fi

mkdir -p "$OUT/run" "$OUT/fix" "$OUT/raw"
RUN="$OUT/run"
FIX="$OUT/fix"
python3 "$here/gen_fixtures.py" "$FIX"

# Command prefixes (arrays, so that `$!` of a background job is the
# process itself: taskset execs its command).
PIN_PROXY=(); PIN_CLIENT=()
if [[ "$PIN" == 1 ]]; then PIN_PROXY=(taskset -c "$PROXY_CPU"); PIN_CLIENT=(taskset -c "$CLIENT_CPU"); fi
# env execs its command too; PROXY_ENV's words are assignments (no spaces inside).
if [[ -n "$PROXY_ENV" ]]; then read -r -a proxy_env <<< "$PROXY_ENV"; PIN_PROXY=(env "${proxy_env[@]}" "${PIN_PROXY[@]}"); fi

# PROXY_CPU_QUOTA: a cgroup (v2, else v1's cpu controller) that every proxy
# under test starts in (the shell joins it, then execs the proxy, so forked
# workers are in it too); removed on exit.
CGROUP_DIR=""
if [[ -n "$PROXY_CPU_QUOTA" ]]; then
  if ! [[ "$PROXY_CPU_QUOTA" =~ ^[0-9]+$ ]] || (( PROXY_CPU_QUOTA < 1 || PROXY_CPU_QUOTA > 100 )); then
    echo "run.sh: PROXY_CPU_QUOTA must be a percentage of one core, 1-100, not '$PROXY_CPU_QUOTA'" >&2; exit 1
  fi
  quota_us=$((PROXY_CPU_QUOTA * 100))  # of a 10,000 µs period
  if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    CGROUP_DIR=/sys/fs/cgroup/kvroute-perf-$$
    mkdir "$CGROUP_DIR" && echo "$quota_us 10000" > "$CGROUP_DIR/cpu.max"
  elif [[ -d /sys/fs/cgroup/cpu ]]; then
    CGROUP_DIR=/sys/fs/cgroup/cpu/kvroute-perf-$$
    mkdir "$CGROUP_DIR" && echo 10000 > "$CGROUP_DIR/cpu.cfs_period_us" &&
      echo "$quota_us" > "$CGROUP_DIR/cpu.cfs_quota_us"
  else
    echo "run.sh: PROXY_CPU_QUOTA needs a cgroup cpu controller (none found)" >&2; exit 1
  fi
  # $0 of the inner shell is the cgroup's procs file; "$@" the proxy's command.
  PIN_PROXY=(sh -c 'echo $$ > "$0" && exec "$@"' "$CGROUP_DIR/cgroup.procs" "${PIN_PROXY[@]}")
fi

render() {  # render TEMPLATE OUTPUT PORT MODE
  sed -e "s#@RUN@#$RUN#g; s#@FIX@#$FIX#g; s#@UP0@#$UP0#g; s#@UP1@#$UP1#g" \
      -e "s#@PORT@#$3#g; s#@MODE@#${4:-}#g; s#@THREADS@#$KVROUTE_THREADS#g" "$1" > "$2"
}

PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do
    [[ -n "$p" ]] && kill "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [[ -n "$CGROUP_DIR" ]]; then rmdir "$CGROUP_DIR" 2>/dev/null || true; fi
}
trap cleanup EXIT INT TERM

wait_http() {  # wait_http URL: until it answers 200 (10 s at most)
  for _ in $(seq 1 100); do
    if [[ "$(curl -s -o /dev/null -w '%{http_code}' "$1" 2>/dev/null)" == 200 ]]; then return 0; fi
    sleep 0.1
  done
  echo "run.sh: $1 never answered 200" >&2
  return 1
}

# CPU ticks of a process and its children, threads included: "utime+stime utime".
cpu_ticks() {
  local total=0 user=0 p
  for p in $1 $(pgrep -P "$1" 2>/dev/null || true); do
    if [[ -r /proc/$p/stat ]]; then
      # Fields 14 and 15 after the ")" that closes the command name.
      total=$((total + $(sed -e 's/^.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
      user=$((user + $(sed -e 's/^.*) //' "/proc/$p/stat" | awk '{print $12}')))
    fi
  done
  echo "$total $user"
}

# Busy and total jiffies of one core ("busy total"; idle and iowait are not
# busy, steal is).
core_ticks() {
  awk -v c="cpu$1" '$1 == c { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat
}
busy_fraction() {  # busy_fraction "BUSY0 TOTAL0" "BUSY1 TOTAL1"
  awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ");
    if (y[2] > x[2]) printf "%.3f", (y[1] - x[1]) / (y[2] - x[2]); else print "null" }'
}

scenario() {  # sets BODY PATHQ RESP for a scenario name
  case "$1" in
    small)  BODY=body-1k.json;   PATHQ=/v1/completions;      RESP=json-1k.json ;;
    32k)    BODY=body-32k.json;  PATHQ=/v1/completions;      RESP=json-32k.json ;;
    128k)   BODY=body-128k.json; PATHQ=/v1/completions;      RESP=json-128k.json ;;
    sse1)   BODY=body-chat.json; PATHQ=/v1/chat/completions; RESP=sse-1.sse ;;
    sse256) BODY=body-chat.json; PATHQ=/v1/chat/completions; RESP=sse-256.sse ;;
    *) echo "run.sh: unknown scenario $1" >&2; exit 1 ;;
  esac
}

run_wrk() {  # run_wrk URL CONNS SECONDS LOGFILE
  BENCH_BODY="$FIX/$BODY" BENCH_PATH="$PATHQ" BENCH_RESPONSE="$RESP" \
    "${PIN_CLIENT[@]}" wrk -t1 -c"$2" -d"${3}s" --timeout 10s -s "$here/post.lua" "$1" > "$4" 2>&1
}

# --- upstream -----------------------------------------------------------------
render "$here/templates/upstream-nginx.conf" "$RUN/upstream-nginx.conf" 0
"${PIN_CLIENT[@]}" nginx -c "$RUN/upstream-nginx.conf" -p "$RUN" -g 'daemon off;' > "$RUN/upstream-nginx.out" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$UP0/health"
wait_http "http://127.0.0.1:$UP1/health"

RESULTS="$OUT/results.jsonl"
: > "$RESULTS"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "nginx: $(nginx -v 2>&1)"; echo "haproxy: $(haproxy -v | head -1)"; echo "wrk: $(wrk -v 2>&1 | head -1)"
  echo "kvroute: $KVROUTE ($(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown))"
  [[ " $TARGETS " == *" kvroute-v2-pgo "* ]] && echo "kvroute PGO build: $KVROUTE_PGO"
  [[ " $TARGETS " == *" kvroute-v2-base "* ]] && echo "kvroute-v2-base build: $KVROUTE_BASE"
  echo "ROUNDS=$ROUNDS DURATION=$DURATION WARMUP=$WARMUP CONNS=\"$CONNS\" PIN=$PIN PROXY_CPU=$PROXY_CPU CLIENT_CPU=$CLIENT_CPU KVROUTE_THREADS=$KVROUTE_THREADS PROXY_ENV=\"$PROXY_ENV\" PROXY_CPU_QUOTA=\"$PROXY_CPU_QUOTA\""
} > "$OUT/environment.txt"

port_of() {
  case "$1" in
    direct) echo "$UP0" ;; nginx) echo $((PORT_BASE + 10)) ;; haproxy) echo $((PORT_BASE + 11)) ;;
    kvroute-rr) echo $((PORT_BASE + 12)) ;; kvroute-v2) echo $((PORT_BASE + 13)) ;;
    kvroute-v2-pgo) echo $((PORT_BASE + 14)) ;;
    kvroute-v2-base) echo $((PORT_BASE + 15)) ;;
    *) echo "run.sh: unknown target $1" >&2; exit 1 ;;
  esac
}

start_target() {  # sets TPID ("" for direct)
  local t="$1" port; port="$(port_of "$t")"
  TPID=""
  case "$t" in
    direct) return 0 ;;
    nginx)
      render "$here/templates/proxy-nginx.conf" "$RUN/proxy-nginx.conf" "$port"
      "${PIN_PROXY[@]}" nginx -c "$RUN/proxy-nginx.conf" -p "$RUN" -g 'daemon off;' > "$RUN/proxy-nginx.out" 2>&1 &
      TPID=$! ;;
    haproxy)
      render "$here/templates/haproxy.cfg" "$RUN/haproxy.cfg" "$port"
      "${PIN_PROXY[@]}" haproxy -db -f "$RUN/haproxy.cfg" > "$RUN/haproxy.log" 2>&1 &
      TPID=$! ;;
    kvroute-rr|kvroute-v2|kvroute-v2-pgo|kvroute-v2-base)
      local mode=round_robin bin="$KVROUTE"; [[ "$t" == kvroute-v2* ]] && mode=v2
      [[ "$t" == kvroute-v2-pgo ]] && bin="$KVROUTE_PGO"
      [[ "$t" == kvroute-v2-base ]] && bin="$KVROUTE_BASE"
      render "$here/templates/kvroute.yaml" "$RUN/$t.yaml" "$port" "$mode"
      "${PIN_PROXY[@]}" "$bin" --config "$RUN/$t.yaml" > "$RUN/$t.log" 2>&1 &
      TPID=$! ;;
  esac
  PIDS+=("$TPID")
  # kvroute answers /health itself once a backend is healthy; nginx and
  # HAProxy relay the upstream's.
  wait_http "http://127.0.0.1:$port/health"
}

stop_target() {
  [[ -z "$TPID" ]] && return 0
  kill "$TPID" 2>/dev/null || true
  wait "$TPID" 2>/dev/null || true
}

TCK="$(getconf CLK_TCK)"
echo "bench/perf: results in $OUT (each run ${DURATION}s after ${WARMUP}s warm-up)"
for round in $(seq 1 "$ROUNDS"); do
[[ "$ROUNDS" -gt 1 ]] && echo "round $round of $ROUNDS"
for t in $TARGETS; do
  start_target "$t"
  url="http://127.0.0.1:$(port_of "$t")"
  for s in $SCENARIOS; do
    scenario "$s"
    for c in $CONNS; do
      run_wrk "$url" "$c" "$WARMUP" "$OUT/raw/$t-$s-c$c-r$round.warmup.txt"
      c0="0 0"; [[ -n "$TPID" ]] && c0="$(cpu_ticks "$TPID")"
      pc0="$(core_ticks "$PROXY_CPU")"; cc0="$(core_ticks "$CLIENT_CPU")"
      run_wrk "$url" "$c" "$DURATION" "$OUT/raw/$t-$s-c$c-r$round.txt"
      c1="0 0"; [[ -n "$TPID" ]] && c1="$(cpu_ticks "$TPID")"
      pc1="$(core_ticks "$PROXY_CPU")"; cc1="$(core_ticks "$CLIENT_CPU")"
      line="$(grep '^BENCH_JSON ' "$OUT/raw/$t-$s-c$c-r$round.txt" | sed 's/^BENCH_JSON //')"
      if [[ -z "$line" ]]; then
        echo "run.sh: wrk failed for $t $s c=$c:" >&2; cat "$OUT/raw/$t-$s-c$c-r$round.txt" >&2; exit 1
      fi
      cpu_s="null"; cpu_user_s="null"
      if [[ -n "$TPID" ]]; then
        cpu_s="$(awk -v a="${c0% *}" -v b="${c1% *}" -v k="$TCK" 'BEGIN{printf "%.3f", (b-a)/k}')"
        cpu_user_s="$(awk -v a="${c0#* }" -v b="${c1#* }" -v k="$TCK" 'BEGIN{printf "%.3f", (b-a)/k}')"
      fi
      cores="\"proxy_core_busy\":$(busy_fraction "$pc0" "$pc1"),\"client_core_busy\":$(busy_fraction "$cc0" "$cc1")"
      echo "{\"round\":$round,\"target\":\"$t\",\"scenario\":\"$s\",\"conns\":$c,\"cpu_s\":$cpu_s,\"cpu_user_s\":$cpu_user_s,$cores,\"wrk\":$line}" >> "$RESULTS"
      printf '  %-11s %-7s c=%-3s %s\n' "$t" "$s" "$c" \
        "$(python3 -c 'import json,sys; w=json.loads(sys.argv[1]); print("%8.0f req/s  p50 %6d us  p99 %6d us  errors %d" % (w["requests"]/w["duration_us"]*1e6, w["lat_p50_us"], w["lat_p99_us"], w["errors_status"]+w["errors_read"]+w["errors_connect"]+w["errors_timeout"]))' "$line")"
    done
  done
  stop_target
done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/environment.txt"

python3 "$here/report.py" "$RESULTS" "$OUT/environment.txt" "$OUT/results.json" "$OUT/results.md"
cat "$OUT/results.md"
echo "bench/perf: $OUT/results.md, $OUT/results.json"
