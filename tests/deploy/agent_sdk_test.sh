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
node -e 'const fs = require("fs"), path = require("path");
  const version = (p) => process.env.NODE_PATH.split(":").map((d) => path.join(d, p, "package.json"))
    .filter((f) => fs.existsSync(f)).map((f) => JSON.parse(fs.readFileSync(f)).version)[0];
  console.log(`node ${process.version}, openai ${version("openai")}, @anthropic-ai/sdk ${version("@anthropic-ai/sdk")}`);' 

make_workdir agent-sdk
case "$TARGET" in
  direct)
    start_fleet "$SIM" 1
    BASE="http://127.0.0.1:${SIM_PORTS[0]}"
    ;;
  *) fail "unknown TARGET '$TARGET' (direct)" ;;
esac
MODEL=$(http_get "http://127.0.0.1:${SIM_PORTS[0]}/v1/models" | node -e \
  'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).data[0].id))')

timeout 100 node "$HERE/agent_sdk_client.cjs" "$BASE" "$MODEL" | tee "$WORK/client.jsonl"
grep -q '"step":"done"' "$WORK/client.jsonl" || fail "the client did not finish"
echo "PASS: Anthropic and OpenAI Responses SDKs end to end ($TARGET)"
