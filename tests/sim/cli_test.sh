#!/usr/bin/env bash
# kvroute-sim CLI: ephemeral ports printed one line per instance, faults at start, the host KV
# tier's size, clean exit on SIGTERM. Usage: cli_test.sh KVROUTE_SIM PROFILE
set -euo pipefail
SIM=$1
PROFILE=$2
coproc SIMP { exec "$SIM" --instances 2 --base-port 0 --time-scale 0 --profile "$PROFILE" \
  --fault '1:{"unhealthy":true}' --kv-offloading-size 2; }
pid=$SIMP_PID
ports=()
host_tier=""
# Blocks on the pipe until the lines arrive (no sleeping).
while read -r line <&"${SIMP[0]}"; do
  if [[ $line =~ instance\ ([0-9]+)\ listening\ on\ 127\.0\.0\.1:([0-9]+) ]]; then
    ports[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
  fi
  [[ $line == *"KV offloading to host memory"* ]] && host_tier=$line
  [ ${#ports[@]} -eq 2 ] && break
done
[ ${#ports[@]} -eq 2 ] || { echo "expected 2 listening lines"; exit 1; }
# 2 GiB of blocks of 16 tokens x 2,048 B (the tiny profile's KV per token).
[[ $host_tier == *"2 GiB = 65536 blocks of 16 tokens"* ]] || { echo "host tier: $host_tier"; exit 1; }

status_line() {
  exec 3<>"/dev/tcp/127.0.0.1/$1"
  printf 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3
  head -1 <&3
  exec 3<&-
}
s0=$(status_line "${ports[0]}")
s1=$(status_line "${ports[1]}")
[[ $s0 == *" 200 "* ]] || { echo "instance 0: $s0"; exit 1; }
[[ $s1 == *" 503 "* ]] || { echo "instance 1 (unhealthy at start): $s1"; exit 1; }

kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 0 ] || { echo "kvroute-sim exited with $rc on SIGTERM"; exit 1; }
echo "ok"
