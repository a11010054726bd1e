#!/usr/bin/env bash
# kvroute quickstart: from a bare Debian 12 machine to an ablation report in one command.
#
#   1. installs build dependencies (deploy/install-deps.sh, Debian packages),
#   2. builds kvroute, kvroute-sim and kvroute-bench,
#   3. runs an ablation (~2 minutes a configuration): for each configuration kvroute-bench starts 8
#      simulated H20 instances (configs/profiles/h20-qwen3-coder-30b-a3b.yaml) and one kvroute
#      on loopback, replays the same seeded agentic workload at a sped-up time scale, and
#   4. prints the summary table and the path of the report (report.html/.md/.json).
#
# With --serve it then leaves 8 simulated instances (127.0.0.1:8100-8107, real time) and
# kvroute (mode v2) running on 127.0.0.1:8000 for curl, until Ctrl-C.
#
# The default load, 0.5 jobs/s, sits below the fleet's knee: most requests meet their SLOs and
# the configurations' goodput and TTFT differ. The saturated point, where every configuration
# misses most SLOs and streams stall, is the second command:
#   bash deploy/quickstart.sh --jps 0.75
# (bench/kvroute_bench/README.md, "Ablation on the calibrated H20 profile", has the load sweep.)
#
# Usage: deploy/quickstart.sh [--serve] [--serve-only] [--build-dir DIR] [--out DIR]
#                             [--time-scale X] [--jps N] [--duration S]
#                             [--modes LIST] [--thresholds LIST]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

BUILD_DIR=build
OUT=""
SERVE=0
SERVE_ONLY=0
TIME_SCALE=0.1        # 1 modelled second = 0.1 s of wall time
JPS=0.5               # agent jobs per modelled second across the fleet (0.75: saturated)
DURATION=180          # modelled seconds of job arrivals per configuration
# Jobs start from a unique context of 2K-50K tokens, so first turns span the WARM/MEDIUM/HEAVY
# boundaries at every threshold of the ablation.
TASK_TOKENS=2000
TASK_TOKENS_MAX=50000
MODES=baseline,v1,v2
THRESHOLDS=10000,20000,40000
PROFILE=configs/profiles/h20-qwen3-coder-30b-a3b.yaml
INSTANCES=8

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --serve) SERVE=1 ;;
    --serve-only) SERVE=1; SERVE_ONLY=1 ;;
    --build-dir) BUILD_DIR=$2; shift ;;
    --out) OUT=$2; shift ;;
    --time-scale) TIME_SCALE=$2; shift ;;
    --jps) JPS=$2; shift ;;
    --duration) DURATION=$2; shift ;;
    --modes) MODES=$2; shift ;;
    --thresholds) THRESHOLDS=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "quickstart: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[ -n "$OUT" ] || OUT="$BUILD_DIR/quickstart/ablation-$(date -u +%Y%m%d-%H%M%S)"

echo "== 1/4 dependencies"
bash deploy/install-deps.sh

echo "== 2/4 build ($BUILD_DIR)"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
BUILD_LOG="$BUILD_DIR/quickstart-build.log"
echo "   full compiler output: $BUILD_LOG"
# Show ninja's [n/N] progress lines only; everything goes to the log.
set +o pipefail
cmake --build "$BUILD_DIR" --target kvroute kvroute-sim kvroute-bench -j "$(nproc)" 2>&1 |
  tee "$BUILD_LOG" | grep --line-buffered -E '^\[[0-9]+/[0-9]+\] (Building|Linking)' |
  sed -E 's/^(\[[0-9]+\/[0-9]+\]) .* ([^ ]+)$/   \1 \2/'
build_status=${PIPESTATUS[0]}
set -o pipefail
if [ "$build_status" -ne 0 ]; then
  grep -E "error|FAILED" "$BUILD_LOG" | head -40 >&2
  echo "quickstart: build failed, see $BUILD_LOG" >&2
  exit 1
fi
KVROUTE="$BUILD_DIR/proxy/kvroute"
SIM="$BUILD_DIR/sim/kvroute-sim"
BENCH="$BUILD_DIR/bench/kvroute_bench/kvroute-bench"
for b in "$KVROUTE" "$SIM" "$BENCH"; do
  [ -x "$b" ] || { echo "quickstart: $b was not built" >&2; exit 1; }
done

if [ "$SERVE_ONLY" -eq 0 ]; then
  echo "== 3/4 ablation: modes $MODES, thresholds $THRESHOLDS, $INSTANCES simulated H20" \
       "instances, time scale $TIME_SCALE"
  "$BENCH" ablation \
    --modes "$MODES" --thresholds "$THRESHOLDS" \
    --instances "$INSTANCES" --profile "$PROFILE" --time-scale "$TIME_SCALE" \
    --kvroute-bin "$KVROUTE" --sim-bin "$SIM" \
    --workload agentic --jps "$JPS" --duration "$DURATION" --seed 1 \
    --task-tokens "$TASK_TOKENS" --task-tokens-max "$TASK_TOKENS_MAX" \
    --sample-interval 0.5 --progress-interval 10 \
    --out "$OUT"
  case "$OUT" in /*) REPORT_DIR=$OUT ;; *) REPORT_DIR=$ROOT/$OUT ;; esac
  echo "== 4/4 report: $REPORT_DIR/report.html"
  echo "   (also report.md and report.json; child logs in $OUT/<config>/)"
fi

if [ "$SERVE" -eq 1 ]; then
  SERVE_DIR="$OUT/serve"
  mkdir -p "$SERVE_DIR"
  pids=()
  cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
  }
  trap cleanup EXIT INT TERM
  "$SIM" --instances "$INSTANCES" --base-port 8100 --profile "$PROFILE" --time-scale 1 \
    >"$SERVE_DIR/sim.log" 2>&1 &
  pids+=($!)
  {
    echo "listen: 127.0.0.1:8000"
    echo "mode: v2"
    echo "heavy_threshold: 20000"
    echo "profile: $ROOT/$PROFILE    # the simulated fleet's model, GPU and link"
    echo "backends:"
    for i in $(seq 0 $((INSTANCES - 1))); do
      # kvroute-sim writes prompt_tokens_details as vLLM with --enable-prompt-tokens-details.
      echo "  - {name: gpu$i, url: http://127.0.0.1:$((8100 + i)), cached_tokens_absent: zero}"
    done
  } >"$SERVE_DIR/kvroute.yaml"
  # kvroute's health checks mark instances up as soon as they answer; no fixed sleeps.
  for _ in $(seq 1 100); do
    [ "$(grep -c 'listening on' "$SERVE_DIR/sim.log" 2>/dev/null || true)" -ge "$INSTANCES" ] && break
    kill -0 "${pids[0]}" 2>/dev/null || { cat "$SERVE_DIR/sim.log" >&2; exit 1; }
    sleep 0.1
  done
  "$KVROUTE" --config "$SERVE_DIR/kvroute.yaml" --request-log "$SERVE_DIR/requests.jsonl" &
  pids+=($!)
  cat <<EOF

kvroute (mode v2) is serving on http://127.0.0.1:8000 in front of $INSTANCES simulated
H20 instances (127.0.0.1:8100-$((8100 + INSTANCES - 1))). Try:

  curl -s http://127.0.0.1:8000/v1/models
  curl -si http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \\
       -H 'X-Session-Id: demo' -d '{"model": "Qwen/Qwen3-Coder-30B-A3B-Instruct",
       "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}'
  curl -s http://127.0.0.1:8000/admin/backends

Request log: $SERVE_DIR/requests.jsonl. Press Ctrl-C to stop.
EOF
  wait "${pids[1]}"
fi
