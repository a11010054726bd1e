#!/usr/bin/env bash
# Starts N PD-combined vLLM instances on this node (one GPU each, HTTP ports from a base) for
# kvroute, and writes the matching kvroute config beside their logs.
#
# Every instance runs prefill and decode, with prefix caching, `cached_tokens` in `usage`, and
# a KV connector in both roles so kvroute's v2 mode can prefill on one instance and decode on
# another: NIXL (default; per-instance side channel host/port) or Mooncake (per-instance
# bootstrap server port). `--connector none` gives a fleet for baseline/v1 only.
#
# Usage: deploy/vllm/launch-fleet.sh --model MODEL [options] [-- EXTRA_VLLM_ARGS...]
#   --model M                   model to serve (HF id or local path; required)
#   --served-model-name NAME    name clients send as "model" (default: M)
#   --instances N               number of instances (default 8)
#   --gpus LIST                 comma-separated GPU ids, one per instance (default 0..N-1)
#   --base-port P               instance i listens on P+i (default 8100)
#   --bind HOST                 address vLLM binds (default 0.0.0.0)
#   --advertise-host HOST       address kvroute and peer engines use to reach this node
#                               (default: first address of `hostname -I`, else 127.0.0.1)
#   --connector C               nixl | mooncake | none (default nixl)
#   --side-channel-base-port P  NIXL handshake port of instance i is P+i (default 5600)
#   --bootstrap-base-port P     Mooncake bootstrap port of instance i is P+i (default 8998)
#   --kv-load-failure-policy X  fail | recompute (NIXL; default: the engine's own default)
#   --ucx-net-devices LIST      UCX_NET_DEVICES for NIXL (default all)
#   --kv-events-base-port P     instance i publishes its KV cache events (ZeroMQ PUB) on P+i
#                               and kvroute follows them (default 5557)
#   --kv-events-replay-base-port P  instance i answers event replays on P+i (default 5800)
#   --no-kv-events              no KV cache events (kvroute then estimates evictions itself)
#   --scheduling-policy P       fcfs | priority (default fcfs): vLLM's --scheduling-policy;
#                               with priority kvroute sets each request's deadline as its
#                               priority (backends[].scheduling_policy in the written config)
#   --block-size N              KV block size in tokens (default 16, kvroute's assumption)
#   --gpu-memory-utilization U  (default 0.9)
#   --max-model-len N           (default: the model's)
#   --tensor-parallel-size N    GPUs per instance (default 1; --gpus then lists N per instance
#                               as "0+1,2+3,...")
#   --kvroute-listen HOST:PORT  kvroute's listen address in the written config (default 0.0.0.0:8000)
#   --mode M                    kvroute mode in the written config (default v2); the modes and
#                               whether each needs a connector come from `kvroute --list-modes`
#   --kvroute BIN               the kvroute binary asked for its modes (default: build-pgo/ or
#                               build/ of this checkout, else kvroute on PATH)
#   --heavy-threshold N|auto    kvroute heavy threshold in the written config (default 20000;
#                               auto: v1_cost and v2 decide every request that is not WARM)
#   --out DIR                   logs, pid files and kvroute.yaml (default ./kvroute-fleet)
#   --vllm BIN                  the vllm executable (default vllm)
#   --wait-timeout S            seconds to wait for every /health (default 1800; 0 = no wait)
#   --dry-run                   print the commands and the kvroute config, start nothing
#   --stop                      stop the instances recorded in --out DIR and exit
#
# Checked against vLLM's documentation (vLLM v0.12.0 `vllm serve` CLI reference,
# docs.vllm.ai/en/v0.12.0/cli/serve/; the CacheConfig reference up to v0.29,
# docs.vllm.ai/en/v0.29.0/api/vllm/config/cache/; FrontendArgs in
# vllm/entrypoints/openai/cli_args.py; and the NixlConnector / MooncakeConnector usage guides
# as published for v0.32.0, docs/features/{nixl,mooncake}_connector_usage.md). Block size and
# GPU memory utilisation are always passed explicitly: their defaults moved between versions
# (platform-chosen block size; utilisation 0.9 -> 0.92), and kvroute assumes 16-token blocks.
#   vllm serve MODEL --host --port --served-model-name --enable-prefix-caching
#     --enable-prompt-tokens-details (frontend arg: "enable prompt_tokens_details in usage")
#     --block-size --gpu-memory-utilization --max-model-len --tensor-parallel-size
#     --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
#       (optional "kv_load_failure_policy": "fail"|"recompute", documented since ~v0.13)
#     --kv-transfer-config '{"kv_connector":"MooncakeConnector","kv_role":"kv_both"}'
#     --kv-events-config '{"enable_kv_cache_events":true,"publisher":"zmq",
#       "endpoint":"tcp://*:P","replay_endpoint":"tcp://*:R"}' (KVEventsConfig,
#       vllm/config/kv_events.py; an endpoint with "*" is bound; docs/kv-events.md)
#   env: CUDA_VISIBLE_DEVICES; UCX_NET_DEVICES (NIXL over UCX);
#     VLLM_NIXL_SIDE_CHANNEL_HOST (default "localhost": must be reachable by the peer engine)
#     VLLM_NIXL_SIDE_CHANNEL_PORT (default 5600: unique per instance on a host)
#     VLLM_MOONCAKE_BOOTSTRAP_PORT (default 8998: unique per prefill instance on a host; kvroute
#       asks GET http://HOST:PORT/query there, so the config's bootstrap_port must match).
# Field sets move between vLLM versions; pass anything else after `--`.
set -euo pipefail

die() { echo "launch-fleet: $*" >&2; exit 2; }
usage() { sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//'; }

MODEL=""
SERVED_NAME=""
INSTANCES=8
GPUS=""
BASE_PORT=8100
BIND=0.0.0.0
ADVERTISE=""
CONNECTOR=nixl
SIDE_BASE=5600
BOOT_BASE=8998
FAILURE_POLICY=""
UCX_DEVICES=all
KV_EVENTS=1
KV_EVENTS_BASE=5557
KV_REPLAY_BASE=5800
SCHED_POLICY=fcfs
BLOCK_SIZE=16
GPU_UTIL=0.9
MAX_MODEL_LEN=""
TP=1
KV_LISTEN=0.0.0.0:8000
KV_MODE=v2
KV_THRESHOLD=20000
OUT=./kvroute-fleet
VLLM=vllm
KVROUTE=""
WAIT_TIMEOUT=1800
DRY_RUN=0
STOP=0
EXTRA=()

need() { [ $# -ge 2 ] || die "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --model) need "$@"; MODEL=$2; shift ;;
    --served-model-name) need "$@"; SERVED_NAME=$2; shift ;;
    --instances) need "$@"; INSTANCES=$2; shift ;;
    --gpus) need "$@"; GPUS=$2; shift ;;
    --base-port) need "$@"; BASE_PORT=$2; shift ;;
    --bind) need "$@"; BIND=$2; shift ;;
    --advertise-host) need "$@"; ADVERTISE=$2; shift ;;
    --connector) need "$@"; CONNECTOR=$2; shift ;;
    --side-channel-base-port) need "$@"; SIDE_BASE=$2; shift ;;
    --bootstrap-base-port) need "$@"; BOOT_BASE=$2; shift ;;
    --kv-load-failure-policy) need "$@"; FAILURE_POLICY=$2; shift ;;
    --ucx-net-devices) need "$@"; UCX_DEVICES=$2; shift ;;
    --kv-events-base-port) need "$@"; KV_EVENTS_BASE=$2; shift ;;
    --kv-events-replay-base-port) need "$@"; KV_REPLAY_BASE=$2; shift ;;
    --no-kv-events) KV_EVENTS=0 ;;
    --scheduling-policy) need "$@"; SCHED_POLICY=$2; shift ;;
    --block-size) need "$@"; BLOCK_SIZE=$2; shift ;;
    --gpu-memory-utilization) need "$@"; GPU_UTIL=$2; shift ;;
    --max-model-len) need "$@"; MAX_MODEL_LEN=$2; shift ;;
    --tensor-parallel-size) need "$@"; TP=$2; shift ;;
    --kvroute-listen) need "$@"; KV_LISTEN=$2; shift ;;
    --mode) need "$@"; KV_MODE=$2; shift ;;
    --heavy-threshold) need "$@"; KV_THRESHOLD=$2; shift ;;
    --out) need "$@"; OUT=$2; shift ;;
    --vllm) need "$@"; VLLM=$2; shift ;;
    --kvroute) need "$@"; KVROUTE=$2; shift ;;
    --wait-timeout) need "$@"; WAIT_TIMEOUT=$2; shift ;;
    --dry-run) DRY_RUN=1 ;;
    --stop) STOP=1 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) usage >&2; die "unknown option $1" ;;
  esac
  shift
done

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

if [ "$STOP" -eq 1 ]; then
  shopt -s nullglob
  pids=("$OUT"/gpu*.pid)
  [ ${#pids[@]} -gt 0 ] || die "no pid files in $OUT"
  for f in "${pids[@]}"; do
    pid=$(cat "$f")
    # Each instance was started as its own process group (setsid): stop the whole group.
    if kill -0 "$pid" 2>/dev/null; then
      echo "launch-fleet: stopping $(basename "$f" .pid) (pid $pid)"
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" || true
    fi
    rm -f "$f"
  done
  exit 0
fi

[ -n "$MODEL" ] || { usage >&2; die "--model is required"; }
[ -n "$SERVED_NAME" ] || SERVED_NAME=$MODEL
for v in INSTANCES BASE_PORT SIDE_BASE BOOT_BASE KV_EVENTS_BASE KV_REPLAY_BASE BLOCK_SIZE TP \
         WAIT_TIMEOUT; do
  is_uint "${!v}" || die "${v,,}: expected a non-negative integer, got '${!v}'"
done
[ "$KV_THRESHOLD" = auto ] || is_uint "$KV_THRESHOLD" ||
  die "--heavy-threshold: expected a non-negative integer or auto, got '$KV_THRESHOLD'"
[ "$INSTANCES" -ge 1 ] || die "--instances must be at least 1"
[ "$TP" -ge 1 ] || die "--tensor-parallel-size must be at least 1"
[ -z "$MAX_MODEL_LEN" ] || is_uint "$MAX_MODEL_LEN" || die "--max-model-len: expected an integer"
case "$CONNECTOR" in nixl|mooncake|none) ;; *) die "--connector: expected nixl, mooncake or none, got '$CONNECTOR'" ;; esac
case "$SCHED_POLICY" in fcfs|priority) ;; *) die "--scheduling-policy: expected fcfs or priority, got '$SCHED_POLICY'" ;; esac
case "$FAILURE_POLICY" in ""|fail|recompute) ;; *) die "--kv-load-failure-policy: expected fail or recompute" ;; esac
# The modes and their properties live in kvroute's policy table; ask the binary.
if [ -z "$KVROUTE" ]; then
  root=$(cd "$(dirname "$0")/../.." && pwd)
  for candidate in "$root/build-pgo/proxy/kvroute" "$root/build/proxy/kvroute"; do
    if [ -x "$candidate" ]; then KVROUTE=$candidate; break; fi
  done
  [ -n "$KVROUTE" ] || KVROUTE=$(command -v kvroute || true)
fi
[ -n "$KVROUTE" ] || die "no kvroute binary to ask for its modes (build it or pass --kvroute BIN)"
MODES=$("$KVROUTE" --list-modes) || die "--kvroute: '$KVROUTE --list-modes' failed"
MODE_LINE=$(awk -v m="$KV_MODE" '$1 == m' <<<"$MODES")
[ -n "$MODE_LINE" ] ||
  die "--mode: unknown mode '$KV_MODE' (expected one of $(awk '{print $1}' <<<"$MODES" | paste -sd ' '))"
if [ "$CONNECTOR" = none ] && [[ " $MODE_LINE " == *" needs_connector=yes "* ]]; then
  die "--mode $KV_MODE needs a KV connector (use --connector nixl or mooncake)"
fi
[ $((BASE_PORT + INSTANCES - 1)) -le 65535 ] || die "--base-port: ports run past 65535"
if [ "$KV_EVENTS" -eq 1 ]; then
  [ $((KV_EVENTS_BASE + INSTANCES - 1)) -le 65535 ] || die "--kv-events-base-port: ports run past 65535"
  [ $((KV_REPLAY_BASE + INSTANCES - 1)) -le 65535 ] ||
    die "--kv-events-replay-base-port: ports run past 65535"
  if [ "$KV_REPLAY_BASE" -lt $((KV_EVENTS_BASE + INSTANCES)) ] &&
     [ "$KV_EVENTS_BASE" -lt $((KV_REPLAY_BASE + INSTANCES)) ]; then
    die "--kv-events-base-port and --kv-events-replay-base-port ranges overlap"
  fi
fi

# GPU assignment: "0,1,2" (TP 1) or "0+1,2+3" (TP 2); default: consecutive ids.
GPU_SETS=()
if [ -n "$GPUS" ]; then
  IFS=, read -r -a GPU_SETS <<<"$GPUS"
  [ ${#GPU_SETS[@]} -eq "$INSTANCES" ] || die "--gpus lists ${#GPU_SETS[@]} entries for $INSTANCES instances"
else
  for ((i = 0; i < INSTANCES; i++)); do
    set_ids=()
    for ((t = 0; t < TP; t++)); do set_ids+=($((i * TP + t))); done
    GPU_SETS+=("$(IFS=+; echo "${set_ids[*]}")")
  done
fi

if [ -z "$ADVERTISE" ]; then
  ADVERTISE=$( (hostname -I 2>/dev/null || true) | awk '{print $1}')
  [ -n "$ADVERTISE" ] || ADVERTISE=127.0.0.1
fi

kv_transfer_config() {
  case "$CONNECTOR" in
    nixl)
      local policy=""
      [ -z "$FAILURE_POLICY" ] || policy=",\"kv_load_failure_policy\":\"$FAILURE_POLICY\""
      echo "{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"$policy}" ;;
    mooncake)
      echo '{"kv_connector":"MooncakeConnector","kv_role":"kv_both"}' ;;
  esac
}

# vLLM's KVEventsConfig for instance $1: a PUB socket and a replay ROUTER socket, both bound.
kv_events_config() {
  local i=$1
  echo "{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"endpoint\":\"tcp://*:$((KV_EVENTS_BASE + i))\",\"replay_endpoint\":\"tcp://*:$((KV_REPLAY_BASE + i))\"}"
}

# Builds instance $1's environment and argv into ENV_I / ARGV_I.
build_instance() {
  local i=$1
  ENV_I=("CUDA_VISIBLE_DEVICES=${GPU_SETS[$i]//+/,}")
  case "$CONNECTOR" in
    nixl)
      ENV_I+=("UCX_NET_DEVICES=$UCX_DEVICES"
              "VLLM_NIXL_SIDE_CHANNEL_HOST=$ADVERTISE"
              "VLLM_NIXL_SIDE_CHANNEL_PORT=$((SIDE_BASE + i))") ;;
    mooncake)
      ENV_I+=("VLLM_MOONCAKE_BOOTSTRAP_PORT=$((BOOT_BASE + i))") ;;
  esac
  ARGV_I=("$VLLM" serve "$MODEL"
          --host "$BIND" --port "$((BASE_PORT + i))"
          --served-model-name "$SERVED_NAME"
          --enable-prefix-caching
          --enable-prompt-tokens-details
          --block-size "$BLOCK_SIZE"
          --gpu-memory-utilization "$GPU_UTIL"
          --tensor-parallel-size "$TP")
  [ -z "$MAX_MODEL_LEN" ] || ARGV_I+=(--max-model-len "$MAX_MODEL_LEN")
  [ "$CONNECTOR" = none ] || ARGV_I+=(--kv-transfer-config "$(kv_transfer_config)")
  [ "$KV_EVENTS" -eq 0 ] || ARGV_I+=(--kv-events-config "$(kv_events_config "$i")")
  [ "$SCHED_POLICY" = fcfs ] || ARGV_I+=(--scheduling-policy "$SCHED_POLICY")
  ARGV_I+=(${EXTRA[@]+"${EXTRA[@]}"})
}

write_kvroute_config() {
  local file=$1
  {
    echo "# kvroute config for the fleet started by deploy/vllm/launch-fleet.sh"
    echo "# (model $MODEL, $INSTANCES instances, connector $CONNECTOR)."
    echo "# Run: kvroute --config $file"
    echo "listen: $KV_LISTEN"
    echo "mode: $KV_MODE"
    echo "heavy_threshold: $KV_THRESHOLD"
    echo "upstream:"
    echo "  first_byte_timeout_s: 600     # a cold 100K-token prefill fits"
    echo "health:"
    echo "  interval_s: 2"
    echo "  scrape_interval_s: 5          # vllm:kv_cache_usage_perc, vllm:cache_config_info"
    if [ "$CONNECTOR" != none ]; then
      echo "transfer:"
      echo "  connector: $CONNECTOR"
      echo "  max_offload_inflight: 64"
    fi
    if [ "$KV_EVENTS" -eq 1 ]; then
      echo "kv_events:"
      echo "  block_size: $BLOCK_SIZE             # tokens per block (BlockRemoved carries none)"
    fi
    echo "backends:"
    for ((i = 0; i < INSTANCES; i++)); do
      local line="  - {name: gpu$i, url: http://$ADVERTISE:$((BASE_PORT + i)), role: both"
      [ "$CONNECTOR" != mooncake ] || line+=", bootstrap_port: $((BOOT_BASE + i))"
      # Every instance runs with --enable-prompt-tokens-details, which omits the details
      # when nothing was cached: a usage without them is a miss.
      line+=", cached_tokens_absent: zero"
      [ "$SCHED_POLICY" = fcfs ] || line+=", scheduling_policy: $SCHED_POLICY"
      if [ "$KV_EVENTS" -eq 1 ]; then
        line+=", kv_events: tcp://$ADVERTISE:$((KV_EVENTS_BASE + i))"
        line+=", kv_events_replay: tcp://$ADVERTISE:$((KV_REPLAY_BASE + i))"
      fi
      echo "$line}"
    done
  } >"$file"
}

# Shell-quotes one word for display: as is when safe, else in single quotes.
shquote() {
  if [[ $1 =~ ^[A-Za-z0-9_./:=+,@%-]+$ ]]; then
    printf '%s' "$1"
  else
    printf "'%s'" "${1//\'/\'\\\'\'}"
  fi
}

# Prints instance ENV_I/ARGV_I as one command line that a shell can run as is.
print_cmd() {
  local out="" w
  for w in "${ENV_I[@]}" "${ARGV_I[@]}"; do out+="$(shquote "$w") "; done
  echo "${out% }"
}

mkdir -p "$OUT"
CONFIG="$OUT/kvroute.yaml"
write_kvroute_config "$CONFIG"

if [ "$DRY_RUN" -eq 1 ]; then
  echo "# launch-fleet: dry run, $INSTANCES instances, connector $CONNECTOR, advertise $ADVERTISE"
  for ((i = 0; i < INSTANCES; i++)); do
    build_instance "$i"
    print_cmd
  done
  echo "# kvroute config written to $CONFIG:"
  sed 's/^/#   /' "$CONFIG"
  exit 0
fi

command -v "$VLLM" >/dev/null 2>&1 || die "'$VLLM' not found (pip install vllm, or --vllm PATH)"
command -v curl >/dev/null 2>&1 || die "curl is needed to wait for /health"
for ((i = 0; i < INSTANCES; i++)); do
  build_instance "$i"
  log="$OUT/gpu$i.log"
  echo "launch-fleet: gpu$i: port $((BASE_PORT + i)), GPUs ${GPU_SETS[$i]}, log $log"
  print_cmd >"$log"
  # Own session and process group, so --stop ends vLLM's engine-core children too.
  setsid env "${ENV_I[@]}" "${ARGV_I[@]}" >>"$log" 2>&1 </dev/null &
  echo $! >"$OUT/gpu$i.pid"
done

if [ "$WAIT_TIMEOUT" -gt 0 ]; then
  deadline=$((SECONDS + WAIT_TIMEOUT))
  for ((i = 0; i < INSTANCES; i++)); do
    url="http://127.0.0.1:$((BASE_PORT + i))/health"
    [ "$BIND" = 0.0.0.0 ] || url="http://$BIND:$((BASE_PORT + i))/health"
    until curl -fsS -o /dev/null --max-time 2 "$url"; do
      kill -0 "$(cat "$OUT/gpu$i.pid")" 2>/dev/null || die "gpu$i exited; see $OUT/gpu$i.log"
      [ "$SECONDS" -lt "$deadline" ] || die "gpu$i not healthy after ${WAIT_TIMEOUT}s; see $OUT/gpu$i.log"
      sleep 2  # polling a model load that takes minutes; bounded by --wait-timeout
    done
    echo "launch-fleet: gpu$i healthy"
  done
fi
echo "launch-fleet: kvroute config: $CONFIG"
echo "launch-fleet: stop with: $0 --stop --out $OUT"
