# The official OpenAI Node SDK against kvroute (mode v2) over a 2-instance simulated fleet:
# see openai_sdk_client.cjs. The SDK comes from `npm root -g` (deploy/install-deps.sh) or is
# installed into NODE_DIR on first use (lib.sh's use_node_packages); without node, npm or
# network access to the npm registry the test is skipped, not failed.
# Usage: openai_sdk_test.sh SOURCE_DIR KVROUTE_BIN SIM_BIN NODE_DIR
# shellcheck source=tests/deploy/lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
# $1: the source tree (unused here: the client script sits beside this one)
KVROUTE=$2
SIM=$3
NODE_DIR=$4
HERE=$(cd "$(dirname "$0")" && pwd)

use_node_packages "$NODE_DIR" openai
print_node_versions openai

make_workdir openai-sdk
start_fleet "$SIM" 2
write_kvroute_config "$WORK/kvroute.yaml" v2
start_kvroute "$KVROUTE" "$WORK/kvroute.yaml"

timeout 100 node "$HERE/openai_sdk_client.cjs" \
  "http://127.0.0.1:$KVROUTE_PORT/v1" "http://127.0.0.1:${SIM_PORTS[0]},http://127.0.0.1:${SIM_PORTS[1]}"

# kvroute's side of the story: two offloads that completed, nothing broken mid-stream.
metrics=$(curl -fsS "http://127.0.0.1:$KVROUTE_PORT/metrics")
ok=$(grep -E '^kvroute_offloads_total\{connector="nixl",outcome="ok"\} ' <<<"$metrics" | awk '{print $2}')
[ "${ok:-0}" -ge 2 ] || fail "expected >= 2 ok offloads, /metrics says: $(grep '^kvroute_offloads_total' <<<"$metrics")"
if grep -E '^kvroute_offloads_total\{[^}]*outcome="(stream_error|decode_failed|prefill_failed)"' <<<"$metrics" \
    | awk '$2 > 0 {found=1} END {exit !found}'; then
  fail "failed offloads: $(grep '^kvroute_offloads_total' <<<"$metrics")"
fi
heavy=$(grep -c '"class":"HEAVY"' "$WORK/requests.jsonl" || true)
[ "$heavy" -ge 2 ] || fail "request log has $heavy HEAVY requests"
echo "PASS: OpenAI Node SDK end to end through kvroute"
