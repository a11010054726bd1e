# deploy/k8s renders with `kubectl kustomize` (offline: no cluster needed) into the expected
# objects: kvroute at several replicas behind a Service without affinity, sharing through the
# Redis the ConfigMap's cluster.store names, and a PodDisruptionBudget over kvroute's pods.
# Usage: k8s_kustomize_test.sh SOURCE_DIR
# shellcheck source=tests/deploy/lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
command -v kubectl >/dev/null 2>&1 || skip "kubectl not installed"
make_workdir kustomize
kubectl kustomize "$1/deploy/k8s" >"$WORK/rendered.yaml" 2>"$WORK/kustomize.log" \
  || { cat "$WORK/kustomize.log" >&2; fail "kubectl kustomize deploy/k8s"; }
for kind in Namespace ConfigMap Deployment Service PodDisruptionBudget ServiceMonitor StatefulSet \
            NetworkPolicy; do
  grep -qx "kind: $kind" "$WORK/rendered.yaml" || fail "rendered manifests lack a $kind"
done
n=$(grep -c '^kind: ' "$WORK/rendered.yaml")
[ "$n" -eq 13 ] || fail "expected 13 objects, rendered $n"

# One file per object (kustomize writes top-level keys sorted, metadata.name at two spaces).
awk -v dir="$WORK" 'BEGIN {n = 0} /^---$/ {n++; next} {print > (dir "/object-" n ".yaml")}' \
  "$WORK/rendered.yaml"
# object KIND NAME: the file holding that object.
object() {
  local f
  for f in "$WORK"/object-*.yaml; do
    if grep -qx "kind: $1" "$f" && grep -qx "  name: $2" "$f"; then echo "$f"; return 0; fi
  done
  fail "no $1 $2 in the rendered manifests"
}

# The store: a Redis Deployment and its Service, which the ConfigMap's cluster.store names.
redis=$(object Deployment kvroute-redis)
grep -qE '^ +image: redis:7' "$redis" || fail "kvroute-redis does not run a redis:7 image"
grep -qE '^ +limits:' "$redis" || fail "kvroute-redis has no resource limits"
object Service kvroute-redis >/dev/null
store=$(grep -E '^ +store: ' "$(object ConfigMap kvroute-config)" | head -1)
grep -q 'redis://kvroute-redis\.kvroute\.svc\.cluster\.local:6379' <<<"$store" \
  || fail "the ConfigMap's cluster.store is not the kvroute-redis Service: $store"

# kvroute itself: several replicas, no session affinity, a budget that selects its pods.
replicas=$(awk '/^spec:/ {s = 1} s && /^  replicas:/ {print $2; exit}' "$(object Deployment kvroute)")
[ "${replicas:-0}" -ge 2 ] || fail "the kvroute Deployment runs ${replicas:-?} replicas, want >= 2"
if grep -q 'sessionAffinity: ClientIP' "$(object Service kvroute)"; then
  fail "the kvroute Service pins clients (sessionAffinity: ClientIP)"
fi
pdb=$(object PodDisruptionBudget kvroute)
sed -n '/^  selector:/,$p' "$pdb" | grep -qx '      app.kubernetes.io/name: kvroute' \
  || fail "PodDisruptionBudget kvroute does not select app.kubernetes.io/name: kvroute"
echo "PASS: kubectl kustomize deploy/k8s ($n objects; kvroute x$replicas sharing through kvroute-redis)"
