# deploy/systemd/kvroute.service and the replica template kvroute@.service pass
# `systemd-analyze verify` (unknown keys, bad values), with ExecStart pointed at the freshly built
# kvroute, and keep their hardening settings; the template runs replica %i from its own config
# and orders itself after the cluster store (redis-server.service).
# Usage: systemd_verify_test.sh SOURCE_DIR KVROUTE_BIN
# shellcheck source=tests/deploy/lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
DIR=$1/deploy/systemd
KVROUTE=$2
HARDENING=(User=kvroute NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes
           Restart=on-failure RestartPreventExitStatus=2 CapabilityBoundingSet=)
for unit in kvroute.service kvroute@.service; do
  for key in "${HARDENING[@]}"; do
    grep -qx -- "$key" "$DIR/$unit" || fail "$unit lacks $key"
  done
done
# The template carries every [Service] setting of the single unit but ExecStart and ExecReload's
# comment: the same hardening, not a drifting copy.
diff <(sed -n '/^\[Service\]/,$p' "$DIR/kvroute.service" | grep -v '^#' | grep -v '^ExecStart=') \
     <(sed -n '/^\[Service\]/,$p' "$DIR/kvroute@.service" | grep -v '^#' | grep -v '^ExecStart=') \
  || fail "kvroute@.service's [Service] and [Install] differ from kvroute.service's beyond ExecStart"
TEMPLATE=$DIR/kvroute@.service
grep -qx -- 'ExecStart=/usr/local/bin/kvroute --config /etc/kvroute/kvroute-%i.yaml --request-log /var/log/kvroute/requests-%i.jsonl' "$TEMPLATE" \
  || fail "kvroute@.service does not run replica %i from /etc/kvroute/kvroute-%i.yaml"
for key in After Wants; do
  grep -qE -- "^$key=.*\bredis-server\.service\b" "$TEMPLATE" || fail "kvroute@.service lacks $key=redis-server.service"
done

command -v systemd-analyze >/dev/null 2>&1 || skip "systemd-analyze not installed"
make_workdir systemd
# verify_unit FILE NAME: NAME is what systemd-analyze loads (an instance for the template).
verify_unit() {
  local file=$1 name=$2
  mkdir -p "$WORK/units"
  sed "s#^ExecStart=/usr/local/bin/kvroute #ExecStart=$KVROUTE #" "$file" >"$WORK/units/$(basename "$file")"
  if ! (cd "$WORK/units" && systemd-analyze verify "$PWD/$name") >"$WORK/verify-$name.log" 2>&1; then
    cat "$WORK/verify-$name.log" >&2
    fail "systemd-analyze verify $name"
  fi
  if grep -E 'kvroute@?[0-9a-z]*\.service:[0-9]+:' "$WORK/verify-$name.log"; then
    fail "systemd-analyze warns about $name"
  fi
}
verify_unit "$DIR/kvroute.service" kvroute.service
# An instance of the template, as `systemctl start kvroute@1` loads it.
verify_unit "$TEMPLATE" kvroute@1.service
echo "PASS: systemd units (kvroute.service, kvroute@.service)"
