# SIGHUP reloads the backend list of a running kvroute (in front of kvroute-sim): a backend
# added to the file starts receiving requests, an invalid file changes nothing (and says
# why), and a backend removed from the file stops receiving requests. No restart, no
# request lost.
# Usage: sighup_reload_test.sh SOURCE_DIR KVROUTE_BIN SIM_BIN
# shellcheck source=tests/deploy/lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
KVROUTE=$2
SIM=$3
command -v curl >/dev/null 2>&1 || skip "curl not installed"
make_workdir sighup

start_fleet "$SIM" 2
CFG=$WORK/kvroute.yaml
# write_config NAMES...: a round-robin config over the named simulated instances (gpuN).
write_config() {
  {
    echo "listen: 127.0.0.1:0"
    echo "mode: round_robin"
    echo "health: {interval_s: 0.2}"
    echo "backends:"
    local name
    for name in "$@"; do
      echo "  - {name: $name, url: http://127.0.0.1:${SIM_PORTS[${name#gpu}]}}"
    done
  } >"$CFG.tmp"
  mv "$CFG.tmp" "$CFG"
}
write_config gpu0
start_kvroute "$KVROUTE" "$CFG"
KV_PID=${STARTED_PIDS[-1]}
KV=http://127.0.0.1:$KVROUTE_PORT
MODEL=$(curl -fsS "$KV/v1/models" | grep -m1 -oE '"id": *"[^"]+"' | sed -E 's/.*"([^"]+)"$/\1/')

# served_by: the X-Kvroute-Backend of 4 completions, one per line (each must be a 200).
served_by() {
  local i
  for i in 1 2 3 4; do
    curl -fsS --max-time 10 -o /dev/null -D - "$KV/v1/completions" \
      -H 'Content-Type: application/json' \
      -d "{\"model\":\"$MODEL\",\"prompt\":\"reload test $i\",\"max_tokens\":2}" \
      | tr -d '\r' | sed -n 's/^[Xx]-[Kk]vroute-[Bb]ackend: //p'
  done
}

[ "$(served_by | sort -u)" = "gpu0" ] || fail "before the reload only gpu0 serves"

write_config gpu0 gpu1
kill -HUP "$KV_PID"
wait_for_line "$WORK/kvroute.log" "config reloaded \(2 backends\)" 30 "$KV_PID" >/dev/null
[ "$(served_by | sort -u | tr '\n' ' ')" = "gpu0 gpu1 " ] || fail "after adding gpu1 both serve"
echo "added gpu1 without a restart"

echo "backends: [{name: gpu0, url: 'ftp://nowhere'}]" >"$CFG"
kill -HUP "$KV_PID"
line=$(wait_for_line "$WORK/kvroute.log" "config reload failed" 30 "$KV_PID")
grep -q "backends\[0\].url" <<<"$line" || fail "the reload error names the key: $line"
[ "$(served_by | sort -u | tr '\n' ' ')" = "gpu0 gpu1 " ] || fail "an invalid file changes nothing"
echo "invalid config refused: $line"

write_config gpu1
kill -HUP "$KV_PID"
wait_for_line "$WORK/kvroute.log" "config reloaded \(1 backends\)" 30 "$KV_PID" >/dev/null
[ "$(served_by | sort -u)" = "gpu1" ] || fail "after removing gpu0 only gpu1 serves"
curl -fsS "$KV/admin/backends" | grep -q '"name":"gpu0","role":"both","retired":true' \
  || fail "/admin/backends shows gpu0 retired"
kill -0 "$KV_PID" || fail "kvroute exited"
echo "removed gpu0 without a restart"
