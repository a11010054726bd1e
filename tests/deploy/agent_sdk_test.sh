# The official Anthropic TypeScript SDK and the OpenAI Node SDK's Responses client against the
# simulated fleet: see agent_sdk_client.cjs. With TARGET=direct the client talks to one
# kvroute-sim instance (the simulator's wire shapes alone); with TARGET=kvroute it goes through
# kvroute in front of a 2-instance fleet. The SDKs come from `npm root -g`
# (deploy/install-deps.sh) or are installed into NODE_DIR on first use; without node, npm or
# the npm registry the test is skipped, not failed.
# Usage: agent_sdk_test.sh SOURCE_DIR KVROUTE_BIN SIM_BIN NODE_DIR TARGET
# shellcheck source=tests/deploy/lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
KVROUTE=$2
SIM=$3
NODE_DIR=$4
TARGET=$5
HERE=$(cd "$(dirname "$0")" && pwd)

use_node_packages "$NODE_DIR" openai @anthropic-ai/sdk
print_node_versions openai @anthropic-ai/sdk

make_workdir agent-sdk
case "$TARGET" in
  direct)
    start_fleet "$SIM" 1
    BASE="http://127.0.0.1:${SIM_PORTS[0]}"
    ;;
  kvroute)
    start_fleet "$SIM" 2
    write_kvroute_config "$WORK/kvroute.yaml" v2
    start_kvroute "$KVROUTE" "$WORK/kvroute.yaml"
    BASE="http://127.0.0.1:$KVROUTE_PORT"
    ;;
  *) fail "unknown TARGET '$TARGET' (direct | kvroute)" ;;
esac
MODEL=$(http_get "http://127.0.0.1:${SIM_PORTS[0]}/v1/models" | node -e \
  'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).data[0].id))')

HEAVY=""
[ "$TARGET" = kvroute ] && HEAVY=heavy
timeout 100 node "$HERE/agent_sdk_client.cjs" "$BASE" "$MODEL" $HEAVY | tee "$WORK/client.jsonl"
grep -q '"step":"done"' "$WORK/client.jsonl" || fail "the client did not finish"

if [ "$TARGET" = kvroute ]; then
  # field STEP KEY: a string field of the client's report for STEP.
  field() {
    node -e 'const [step, key] = process.argv.slice(1);
      for (const l of require("fs").readFileSync(0, "utf8").split("\n")) {
        if (!l) continue; const o = JSON.parse(l); if (o.step === step) { console.log(o[key]); break; }
      }' "$1" "$2" <"$WORK/client.jsonl"
  }
  # The session's second turn is WARM on the instance that served its first.
  b1=$(field messages.create backend)
  b2=$(field messages.turn2_stream backend)
  c2=$(field messages.turn2_stream class)
  [ -n "$b1" ] && [ "$b1" != null ] || fail "no X-Kvroute-Backend on /v1/messages"
  [ "$b1" = "$b2" ] || fail "turn 2 went to $b2, turn 1 to $b1"
  [ "$c2" = WARM ] || fail "turn 2 was $c2, not WARM"
  # ... because kvroute knew that instance held turn 1: its estimate covers most of turn 2.
  id2=$(field messages.turn2_stream id)
  node -e 'const [id] = process.argv.slice(1);
    for (const l of require("fs").readFileSync(0, "utf8").split("\n")) {
      if (!l) continue; const o = JSON.parse(l);
      if (`chatcmpl-${o.id}` !== id) continue;
      if (!(o.cached_tokens_est >= 0.9 * o.prompt_tokens_est)) {
        console.error(`turn 2 cached_tokens_est ${o.cached_tokens_est} of ${o.prompt_tokens_est}`);
        process.exit(1);
      }
      process.exit(0);
    }
    console.error(`turn 2 (${id}) not in the request log`); process.exit(1);' "$id2" \
    <"$WORK/requests.jsonl" || fail "turn 2 was not routed as a cache hit"
  # The HEAVY Messages request was offloaded through the NIXL handoff and completed.
  hb=$(field messages.heavy backend)
  case "$hb" in *"->"*) ;; *) fail "the HEAVY /v1/messages request was not offloaded ($hb)" ;; esac
  metrics=$(curl -fsS "http://127.0.0.1:$KVROUTE_PORT/metrics")
  ok=$(grep -E '^kvroute_offloads_total\{connector="nixl",outcome="ok"\} ' <<<"$metrics" | awk '{print $2}')
  [ "${ok:-0}" -ge 1 ] || fail "no ok offload: $(grep '^kvroute_offloads_total' <<<"$metrics")"
  # The previous_response_id follow-up landed on the instance holding the response.
  r1=$(field responses.create backend)
  r2=$(field responses.follow_up backend)
  [ "$r1" = "$r2" ] || fail "follow-up went to $r2, the response lives on $r1"
  # Every agent request is in kvroute's request log under its route.
  for route in /v1/messages /v1/responses; do
    n=$(grep -c "\"route\":\"$route\"" "$WORK/requests.jsonl" || true)
    [ "$n" -ge 3 ] || fail "request log has $n $route requests"
  done
  echo "turn 2 WARM on $b2; previous_response_id follow-up on $r2; HEAVY offloaded $hb"
fi
echo "PASS: Anthropic and OpenAI Responses SDKs end to end ($TARGET)"
