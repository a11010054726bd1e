# deploy/vllm/launch-fleet.sh: syntax, --dry-run output for the NIXL, Mooncake and no-connector
# fleets, argument errors, and the kvroute config it writes (loaded by the real kvroute).
# Usage: launch_fleet_dry_run_test.sh SOURCE_DIR KVROUTE_BIN
# shellcheck source=tests/deploy/lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
SRC=$1
KVROUTE=$2
launch_fleet() { bash "$SRC/deploy/vllm/launch-fleet.sh" --kvroute "$KVROUTE" "$@"; }
make_workdir launch-fleet

bash -n "$SRC/deploy/vllm/launch-fleet.sh" || fail "bash -n launch-fleet.sh"

expect() {  # expect FILE FIXED_STRING
  grep -qF -- "$2" "$1" || fail "expected '$2' in $1:\n$(cat "$1")"
}

# --- NIXL, 8 instances (defaults), one GPU each.
launch_fleet --model Qwen/Qwen3-Coder-30B-A3B-Instruct --served-model-name qwen3-coder \
  --advertise-host 10.1.2.3 --out "$WORK/nixl" --dry-run >"$WORK/nixl.out"
[ "$(grep -c ' vllm serve ' "$WORK/nixl.out")" -eq 8 ] || fail "expected 8 vllm commands"
for i in 0 1 7; do
  line=$(grep "CUDA_VISIBLE_DEVICES=$i " "$WORK/nixl.out") || fail "no command for GPU $i"
  for want in "VLLM_NIXL_SIDE_CHANNEL_HOST=10.1.2.3" "VLLM_NIXL_SIDE_CHANNEL_PORT=$((5600 + i))" \
              "UCX_NET_DEVICES=all" "--port $((8100 + i))" "--enable-prefix-caching" \
              "--enable-prompt-tokens-details" "--served-model-name qwen3-coder" "--block-size 16" \
              "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}'" \
              "--kv-events-config '{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"endpoint\":\"tcp://*:$((5557 + i))\",\"replay_endpoint\":\"tcp://*:$((5800 + i))\"}'"; do
    [[ $line == *"$want"* ]] || fail "gpu$i: missing '$want' in: $line"
  done
done
# The printed commands are runnable shell: the quoted JSON survives a round trip.
cmd=$(grep 'CUDA_VISIBLE_DEVICES=0 ' "$WORK/nixl.out")
eval "set -- ${cmd#*vllm serve }"
json=""
events_json=""
while [ $# -gt 0 ]; do
  [ "$1" = --kv-transfer-config ] && json=$2
  [ "$1" = --kv-events-config ] && events_json=$2
  shift
done
[ "$json" = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' ] || fail "bad quoting: $json"
[ "$events_json" = '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5800"}' ] ||
  fail "bad --kv-events-config: $events_json"
expect "$WORK/nixl/kvroute.yaml" "connector: nixl"
expect "$WORK/nixl/kvroute.yaml" "- {name: gpu7, url: http://10.1.2.3:8107, role: both, cached_tokens_absent: zero, kv_events: tcp://10.1.2.3:5564, kv_events_replay: tcp://10.1.2.3:5807}"
expect "$WORK/nixl/kvroute.yaml" "block_size: 16"

# --- Mooncake, 2 instances on chosen GPUs, extra vLLM flags after --.
launch_fleet --model m --instances 2 --gpus 4,6 --connector mooncake --base-port 9000 \
  --bootstrap-base-port 9100 --advertise-host 127.0.0.1 --mode v2 --heavy-threshold 30000 \
  --out "$WORK/mooncake" --dry-run -- --max-num-seqs 64 >"$WORK/mooncake.out"
expect "$WORK/mooncake.out" "CUDA_VISIBLE_DEVICES=6 VLLM_MOONCAKE_BOOTSTRAP_PORT=9101 vllm serve m --host 0.0.0.0 --port 9001"
expect "$WORK/mooncake.out" "'{\"kv_connector\":\"MooncakeConnector\",\"kv_role\":\"kv_both\"}' --kv-events-config"
expect "$WORK/mooncake.out" "\"replay_endpoint\":\"tcp://*:5801\"}' --max-num-seqs 64"
grep -q NIXL "$WORK/mooncake.out" && fail "NIXL variables in a Mooncake fleet"
expect "$WORK/mooncake/kvroute.yaml" "- {name: gpu1, url: http://127.0.0.1:9001, role: both, bootstrap_port: 9101, cached_tokens_absent: zero, kv_events: tcp://127.0.0.1:5558, kv_events_replay: tcp://127.0.0.1:5801}"
expect "$WORK/mooncake/kvroute.yaml" "heavy_threshold: 30000"

# --- Tensor parallel 2: GPU pairs.
launch_fleet --model m --instances 2 --tensor-parallel-size 2 --connector none --mode baseline \
  --advertise-host 127.0.0.1 --out "$WORK/tp2" --dry-run >"$WORK/tp2.out"
expect "$WORK/tp2.out" "CUDA_VISIBLE_DEVICES=2,3 vllm serve m"
grep -q -- --kv-transfer-config "$WORK/tp2.out" && fail "connector none still passes --kv-transfer-config"

# --- v1_cost needs no connector; the threshold may be auto.
launch_fleet --model m --instances 2 --connector none --mode v1_cost --heavy-threshold auto \
  --advertise-host 127.0.0.1 --out "$WORK/v1cost" --dry-run >"$WORK/v1cost.out"
expect "$WORK/v1cost/kvroute.yaml" "mode: v1_cost"
expect "$WORK/v1cost/kvroute.yaml" "heavy_threshold: auto"

# --- KV cache events on chosen ports, and off.
launch_fleet --model m --instances 2 --connector none --mode baseline --advertise-host 127.0.0.1 \
  --kv-events-base-port 7000 --kv-events-replay-base-port 7100 --out "$WORK/events" --dry-run \
  >"$WORK/events.out"
expect "$WORK/events.out" "\"endpoint\":\"tcp://*:7001\",\"replay_endpoint\":\"tcp://*:7101\"}'"
expect "$WORK/events/kvroute.yaml" "- {name: gpu1, url: http://127.0.0.1:8101, role: both, cached_tokens_absent: zero, kv_events: tcp://127.0.0.1:7001, kv_events_replay: tcp://127.0.0.1:7101}"
launch_fleet --model m --instances 2 --connector none --mode baseline --advertise-host 127.0.0.1 \
  --no-kv-events --out "$WORK/noevents" --dry-run >"$WORK/noevents.out"
grep -q -- --kv-events-config "$WORK/noevents.out" && fail "--no-kv-events still passes --kv-events-config"
grep -q kv_events "$WORK/noevents/kvroute.yaml" && fail "--no-kv-events still writes kv_events"
expect "$WORK/noevents/kvroute.yaml" "- {name: gpu1, url: http://127.0.0.1:8101, role: both, cached_tokens_absent: zero}"

# --- vLLM's priority scheduler: the flag on every instance, the policy on every backend.
launch_fleet --model m --instances 2 --connector none --mode baseline --advertise-host 127.0.0.1 \
  --no-kv-events --scheduling-policy priority --out "$WORK/prio" --dry-run >"$WORK/prio.out"
expect "$WORK/prio.out" "--scheduling-policy priority"
expect "$WORK/prio/kvroute.yaml" "- {name: gpu1, url: http://127.0.0.1:8101, role: both, cached_tokens_absent: zero, scheduling_policy: priority}"
grep -q -- --scheduling-policy "$WORK/noevents.out" && fail "fcfs still passes --scheduling-policy"

# --- The modes come from kvroute's table: every mode it lists is accepted, and exactly the ones
# it marks needs_connector=yes are refused without a connector.
"$KVROUTE" --list-modes >"$WORK/modes.txt" || fail "kvroute --list-modes failed"
[ -s "$WORK/modes.txt" ] || fail "kvroute --list-modes printed nothing"
while read -r mode props; do
  set +e
  launch_fleet --model m --instances 1 --connector none --mode "$mode" --advertise-host 127.0.0.1 \
    --out "$WORK/mode-$mode" --dry-run >"$WORK/mode-$mode.out" 2>&1
  rc=$?
  set -e
  if [[ " $props " == *" needs_connector=yes "* ]]; then
    [ "$rc" -eq 2 ] || fail "--mode $mode without a connector exited $rc, expected 2"
    expect "$WORK/mode-$mode.out" "--mode $mode needs a KV connector"
  else
    [ "$rc" -eq 0 ] || fail "--mode $mode exited $rc: $(cat "$WORK/mode-$mode.out")"
    expect "$WORK/mode-$mode/kvroute.yaml" "mode: $mode"
  fi
done <"$WORK/modes.txt"

# --- Argument errors exit 2 with a message.
for bad in "--connector rdma" "--instances x" "--mode fast" "--connector none --mode v2" \
           "--heavy-threshold lots" \
           "--instances 3 --gpus 0,1" "--bogus" "--kv-events-base-port x" \
           "--kv-events-base-port 5800" "--kv-events-base-port 65534" \
           "--scheduling-policy lifo" "--kvroute /nonexistent/kvroute"; do
  set +e
  # shellcheck disable=SC2086
  launch_fleet --model m --out "$WORK/bad" --dry-run $bad >"$WORK/bad.out" 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "'$bad' exited $rc, expected 2"
  grep -q "launch-fleet:" "$WORK/bad.out" || fail "'$bad' printed no error"
done
set +e
launch_fleet --dry-run >/dev/null 2>&1
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "missing --model exited $rc"

# --- A real launch and --stop, with a stand-in for vllm that records its arguments and idles.
cat >"$WORK/fake-vllm" <<'FAKE'
#!/usr/bin/env bash
echo "args: $*" >"$FAKE_DIR/port-${6}.args"
env | grep -E '^(CUDA_VISIBLE_DEVICES|VLLM_NIXL_SIDE_CHANNEL_PORT)=' >>"$FAKE_DIR/port-${6}.args"
exec sleep 600
FAKE
chmod +x "$WORK/fake-vllm"
export FAKE_DIR=$WORK
launch_fleet --model m --instances 2 --base-port 18100 --advertise-host 127.0.0.1 \
  --vllm "$WORK/fake-vllm" --wait-timeout 0 --out "$WORK/real" >"$WORK/real.out"
pids=()
for i in 0 1; do
  pid=$(cat "$WORK/real/gpu$i.pid")
  pids+=("$pid")
  STARTED_PIDS+=("$pid")  # cleaned up by lib.sh even if --stop fails
done
for i in 0 1; do
  wait_for_line "$WORK/port-$((18100 + i)).args" "VLLM_NIXL_SIDE_CHANNEL_PORT=$((5600 + i))" 10 >/dev/null
done
expect "$WORK/port-18101.args" "args: serve m --host 0.0.0.0 --port 18101"
expect "$WORK/port-18101.args" "CUDA_VISIBLE_DEVICES=1"
expect "$WORK/real/gpu0.log" "vllm serve m --host 0.0.0.0 --port 18100"
[ -f "$WORK/real/kvroute.yaml" ] || fail "no kvroute.yaml beside the fleet"
launch_fleet --stop --out "$WORK/real" >"$WORK/stop.out"
for pid in "${pids[@]}"; do
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  kill -0 "$pid" 2>/dev/null && fail "instance pid $pid still running after --stop"
done
[ ! -e "$WORK/real/gpu0.pid" ] || fail "--stop left pid files"

# --- Every written config is a valid kvroute config: kvroute starts with it.
for fleet in nixl mooncake tp2 events noevents real; do
  start_bg "$WORK/kvroute-$fleet.log" "$KVROUTE" --config "$WORK/$fleet/kvroute.yaml" \
    --listen 127.0.0.1:0 --log-level warn
  pid=$LAST_PID
  wait_for_line "$WORK/kvroute-$fleet.log" "kvroute: listening on 127\.0\.0\.1:[0-9]+" 20 "$pid" >/dev/null
  kill -TERM "$pid"
  wait "$pid" || fail "kvroute with the $fleet config exited $?"
done
echo "PASS: launch-fleet.sh dry runs and configs"
