# Debian's real Prometheus scrapes a running kvroute (in front of kvroute-sim) on loopback,
# with deploy/prometheus/kvroute-alerts.yml loaded; the kvroute series must arrive through
# Prometheus's HTTP API, and every kvroute_* name the dashboard and the alert rules use must
# be one kvroute's /metrics declares.
# Usage: prometheus_scrape_test.sh SOURCE_DIR KVROUTE_BIN SIM_BIN
# shellcheck source=tests/deploy/lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
SRC=$1
KVROUTE=$2
SIM=$3
command -v prometheus >/dev/null 2>&1 || skip "prometheus not installed (apt-get install prometheus; deploy/install-deps.sh does)"
command -v curl >/dev/null 2>&1 || skip "curl not installed"
make_workdir prometheus

start_fleet "$SIM" 2
# A cluster store, so the kvroute_cluster_* families are declared too (one replica in it).
command -v redis-server >/dev/null 2>&1 || skip "redis-server not installed (deploy/install-deps.sh installs it)"
REDIS_PORT=$(free_port)
start_bg "$WORK/redis.log" redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no
wait_for_line "$WORK/redis.log" "Ready to accept connections" 30 "$LAST_PID" >/dev/null
write_kvroute_config "$WORK/kvroute.yaml" v2 "cluster: {store: \"redis://127.0.0.1:$REDIS_PORT\"}"
start_kvroute "$KVROUTE" "$WORK/kvroute.yaml"
KV=http://127.0.0.1:$KVROUTE_PORT

# Some traffic, so per-class and per-backend series exist.
MODEL=$(curl -fsS "$KV/v1/models" | grep -m1 -oE '"id": *"[^"]+"' | sed -E 's/.*"([^"]+)"$/\1/')
[ -n "$MODEL" ] || fail "no model in $KV/v1/models"
for i in 1 2 3; do
  curl -fsS --max-time 10 -o /dev/null "$KV/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$MODEL\",\"prompt\":\"hello number $i from the prometheus test\",\"max_tokens\":4}"
done

# kvroute's own /metrics declares every family the dashboard and the rules query (the
# kvroute_cluster_* ones because cluster.store is set).
curl -fsS "$KV/metrics" >"$WORK/metrics.txt"
declared=$(grep -E '^# (HELP|TYPE) kvroute_' "$WORK/metrics.txt" | awk '{print $3}' | sort -u)
used=$(cat "$SRC/deploy/grafana/kvroute.json" "$SRC/deploy/prometheus/kvroute-alerts.yml" \
  | grep -oE 'kvroute_[a-z_]+' | sed -E 's/_(bucket|count|sum)$//' | sort -u)
for name in $used; do
  grep -qx -- "$name" <<<"$declared" || fail "dashboard/rules use $name, which kvroute's /metrics does not declare"
done
echo "dashboard and rules use $(wc -w <<<"$used") kvroute metric families, all declared"

# Prometheus on a free loopback port, 1 s scrapes of kvroute and both instances, the real rules.
PROM_PORT=$(free_port)
cp "$SRC/deploy/prometheus/kvroute-alerts.yml" "$WORK/kvroute-alerts.yml"
cat >"$WORK/prometheus.yml" <<YAML
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [kvroute-alerts.yml]
scrape_configs:
  - job_name: kvroute
    static_configs: [{targets: ["127.0.0.1:$KVROUTE_PORT"]}]
  - job_name: vllm
    static_configs:
      - {targets: ["127.0.0.1:${SIM_PORTS[0]}"], labels: {backend: gpu0}}
      - {targets: ["127.0.0.1:${SIM_PORTS[1]}"], labels: {backend: gpu1}}
YAML
start_bg "$WORK/prometheus.log" prometheus --config.file="$WORK/prometheus.yml" \
  --storage.tsdb.path="$WORK/tsdb" --web.listen-address="127.0.0.1:$PROM_PORT"
PROM_PID=$LAST_PID
P=http://127.0.0.1:$PROM_PORT
wait_for_line "$WORK/prometheus.log" "Server is ready to receive web requests" 60 "$PROM_PID" >/dev/null

# query EXPR: the number of series the instant query returns.
query() {
  local body
  body=$(curl -fsS --max-time 5 -G "$P/api/v1/query" --data-urlencode "query=$1") || { echo 0; return; }
  grep -oE '"metric":' <<<"$body" | wc -l || true
}
# wait_series EXPR MIN: polls Prometheus (bounded, 60 s) until EXPR has at least MIN series.
wait_series() {
  local deadline=$((SECONDS + 60)) n=0
  while :; do
    n=$(query "$1")
    [ "$n" -ge "$2" ] && { echo "ok: $1 -> $n series"; return 0; }
    [ "$SECONDS" -lt "$deadline" ] || fail "Prometheus has $n series for '$1' after 60 s (want $2)"
    sleep 0.2
  done
}
wait_series 'up{job="kvroute"} == 1' 1
wait_series 'kvroute_backend_healthy{job="kvroute"} == 1' 2
wait_series 'kvroute_requests_total{job="kvroute",route="/v1/completions",status="200"}' 1
wait_series 'kvroute_time_to_first_byte_seconds_bucket{job="kvroute",le="+Inf"}' 1
wait_series 'kvroute_backend_inflight_prefill_tokens{job="kvroute"}' 2
wait_series 'kvroute_backend_kv_usage{job="kvroute"} >= 0' 2
wait_series 'up{job="vllm"} == 1' 2
wait_series 'vllm:kv_cache_usage_perc' 2

# The alert rules loaded and evaluate; with a healthy fleet the no-backend alert is silent.
rules=$(curl -fsS "$P/api/v1/rules")
for alert in KvrouteNoHealthyBackend KvrouteCacheEstimateDrift KvrouteOffloadFailures \
             KvrouteClusterStoreDown; do
  grep -q "\"name\":\"$alert\"" <<<"$rules" || fail "rule $alert not loaded: $rules"
done
grep -q '"health":"err"' <<<"$rules" && fail "a rule fails to evaluate: $rules"
firing=$(curl -fsS "$P/api/v1/alerts")
grep -q KvrouteNoHealthyBackend <<<"$firing" && fail "KvrouteNoHealthyBackend fires with a healthy fleet"
echo "PASS: Prometheus scraped kvroute and the simulated fleet"
