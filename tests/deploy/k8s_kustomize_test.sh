# deploy/k8s renders with `kubectl kustomize` (offline: no cluster needed) into the expected
# objects. Usage: k8s_kustomize_test.sh SOURCE_DIR
# shellcheck source=tests/deploy/lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
command -v kubectl >/dev/null 2>&1 || skip "kubectl not installed"
make_workdir kustomize
kubectl kustomize "$1/deploy/k8s" >"$WORK/rendered.yaml" 2>"$WORK/kustomize.log" \
  || { cat "$WORK/kustomize.log" >&2; fail "kubectl kustomize deploy/k8s"; }
for kind in Namespace ConfigMap Deployment Service PodDisruptionBudget ServiceMonitor StatefulSet; do
  grep -qx "kind: $kind" "$WORK/rendered.yaml" || fail "rendered manifests lack a $kind"
done
n=$(grep -c '^kind: ' "$WORK/rendered.yaml")
[ "$n" -eq 10 ] || fail "expected 10 objects, rendered $n"
echo "PASS: kubectl kustomize deploy/k8s ($n objects)"
