# Shared helpers for the tests/deploy shell tests. Source it; it sets a cleanup trap that
# stops every process started through start_bg (by pid, never by name) and removes WORK.
#
#   source lib.sh; make_workdir NAME
#   start_bg LOGFILE cmd args...        # background process; pid in LAST_PID
#   wait_for_line LOGFILE REGEX SECONDS # bounded poll of a readiness line; echoes the line
#   free_port                           # a free 127.0.0.1 TCP port from the kernel
set -euo pipefail

STARTED_PIDS=()
WORK=""
KEEP_WORK=${KEEP_WORK:-0}

cleanup() {
  local rc=$?
  local pid
  for pid in "${STARTED_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${STARTED_PIDS[@]}"; do
    # Bounded: SIGKILL whatever has not exited after ~5 s.
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ -n "$WORK" ] && [ "$rc" -eq 0 ] && [ "$KEEP_WORK" != 1 ]; then rm -rf "$WORK"; fi
  if [ -n "$WORK" ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
    echo "--- logs kept in $WORK" >&2
    for f in "$WORK"/*.log; do
      [ -f "$f" ] || continue
      echo "--- tail $f" >&2
      tail -n 30 "$f" >&2 || true
    done
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

make_workdir() {
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvroute-$1.XXXXXX")
}

start_bg() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 </dev/null &
  LAST_PID=$!
  STARTED_PIDS+=("$LAST_PID")
}

# wait_for_line LOG REGEX SECONDS [PID]: polls LOG until a line matches REGEX (ERE), at most
# SECONDS; fails early if PID exits. Prints the first matching line.
wait_for_line() {
  local log=$1 re=$2 secs=$3 pid=${4:-}
  local deadline=$((SECONDS + secs))
  while :; do
    if [ -f "$log" ] && grep -Eq -- "$re" "$log"; then
      grep -E -m1 -- "$re" "$log"
      return 0
    fi
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      fail "process $pid exited before printing /$re/ (log $log)"
    fi
    [ "$SECONDS" -lt "$deadline" ] || fail "no /$re/ in $log after ${secs}s"
    sleep 0.05
  done
}

free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
  elif command -v node >/dev/null 2>&1; then
    node -e 'const s=require("net").createServer(); s.listen(0,"127.0.0.1",()=>{console.log(s.address().port); s.close();});'
  else
    fail "free_port needs python3 or node"
  fi
}

# use_node_packages NODE_DIR PKG...: finds the npm packages globally (deploy/install-deps.sh
# installs them there) or in NODE_DIR/node_modules, else installs them into NODE_DIR; sets
# NODE_PATH for node. Skips the test when node, npm or the registry is missing.
use_node_packages() {
  local dir=$1
  shift
  command -v node >/dev/null 2>&1 || skip "node not installed (deploy/install-deps.sh installs it)"
  local global="" p missing=()
  if command -v npm >/dev/null 2>&1; then global=$(npm root -g 2>/dev/null || true); fi
  for p in "$@"; do
    if [ -n "$global" ] && [ -f "$global/$p/package.json" ]; then continue; fi
    [ -f "$dir/node_modules/$p/package.json" ] || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    command -v npm >/dev/null 2>&1 || skip "npm not installed (deploy/install-deps.sh installs it)"
    mkdir -p "$dir"
    [ -f "$dir/package.json" ] || echo '{"name": "kvroute-deploy-tests", "private": true}' >"$dir/package.json"
    if ! timeout 120 npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
        "${missing[@]}" >"$dir/npm-install.log" 2>&1; then
      cat "$dir/npm-install.log" >&2
      skip "npm install ${missing[*]} failed (no access to the npm registry?)"
    fi
  fi
  export NODE_PATH="$dir/node_modules${global:+:$global}"
}

# print_node_versions PKG...: node's version and each package's, as NODE_PATH resolves them
# (after use_node_packages).
print_node_versions() {
  node -e 'const fs = require("fs"), path = require("path");
    const version = (p) => process.env.NODE_PATH.split(":").map((d) => path.join(d, p, "package.json"))
      .filter((f) => fs.existsSync(f)).map((f) => JSON.parse(fs.readFileSync(f)).version)[0];
    console.log([`node ${process.version}`, ...process.argv.slice(1).map((p) => `${p} ${version(p)}`)]
      .join(", "));' "$@"
}

# start_fleet SIM_BIN N: starts kvroute-sim with N instances on ephemeral ports, as fast as
# possible (time scale 0). Sets SIM_PORTS (array).
start_fleet() {
  local sim=$1 n=$2
  start_bg "$WORK/sim.log" "$sim" --instances "$n" --base-port 0 --time-scale 0
  local sim_pid=$LAST_PID
  SIM_PORTS=()
  local i line
  for ((i = 0; i < n; i++)); do
    line=$(wait_for_line "$WORK/sim.log" "kvroute-sim: instance $i listening on 127\.0\.0\.1:[0-9]+" 30 "$sim_pid")
    SIM_PORTS+=("${line##*:}")
  done
}

# write_kvroute_config FILE MODE EXTRA_YAML: a config for the simulated fleet in SIM_PORTS.
write_kvroute_config() {
  local file=$1 mode=$2 extra=${3:-}
  {
    echo "listen: 127.0.0.1:0"
    echo "mode: $mode"
    echo "heavy_threshold: 20000"
    echo "threads: 2"
    echo "health: {interval_s: 0.5, scrape_interval_s: 0.5}"
    echo "transfer: {connector: nixl}"
    # v2 offloads every HEAVY request: these tests exercise the handoff, not the decision.
    echo "router: {offload_gate: threshold}"
    [ -z "$extra" ] || echo "$extra"
    echo "backends:"
    local i
    for ((i = 0; i < ${#SIM_PORTS[@]}; i++)); do
      echo "  - {name: gpu$i, url: http://127.0.0.1:${SIM_PORTS[$i]}, bootstrap_port: ${SIM_PORTS[$i]}}"
    done
  } >"$file"
}

# start_kvroute KVROUTE_BIN CONFIG: sets KVROUTE_PORT.
start_kvroute() {
  start_bg "$WORK/kvroute.log" "$1" --config "$2" --request-log "$WORK/requests.jsonl"
  local line
  line=$(wait_for_line "$WORK/kvroute.log" "kvroute: listening on 127\.0\.0\.1:[0-9]+" 30 "$LAST_PID")
  # shellcheck disable=SC2034  # read by the sourcing test
  KVROUTE_PORT=${line##*:}
}

# http_get URL: body on stdout (curl when present, else bash's /dev/tcp).
http_get() {
  curl -fsS --max-time 5 "$1"
}
