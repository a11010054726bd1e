# deploy/systemd/kvroute.service passes `systemd-analyze verify` (unknown keys, bad values),
# with ExecStart pointed at the freshly built kvroute, and keeps its hardening settings.
# Usage: systemd_verify_test.sh SOURCE_DIR KVROUTE_BIN
# shellcheck source=tests/deploy/lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
UNIT=$1/deploy/systemd/kvroute.service
KVROUTE=$2
for key in User=kvroute NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes \
           PrivateTmp=yes Restart=on-failure RestartPreventExitStatus=2 CapabilityBoundingSet=; do
  grep -qx -- "$key" "$UNIT" || fail "$UNIT lacks $key"
done
command -v systemd-analyze >/dev/null 2>&1 || skip "systemd-analyze not installed"
make_workdir systemd
sed "s#^ExecStart=/usr/local/bin/kvroute #ExecStart=$KVROUTE #" "$UNIT" >"$WORK/kvroute.service"
if ! systemd-analyze verify "$WORK/kvroute.service" >"$WORK/verify.log" 2>&1; then
  cat "$WORK/verify.log" >&2
  fail "systemd-analyze verify"
fi
if grep -E 'kvroute\.service:[0-9]+:' "$WORK/verify.log"; then
  fail "systemd-analyze warns about the unit"
fi
echo "PASS: systemd unit"
