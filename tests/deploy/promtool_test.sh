# promtool: the scrape config, the alert rules and their unit tests.
# Usage: promtool_test.sh SOURCE_DIR
# shellcheck source=tests/deploy/lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
DIR=$1/deploy/prometheus
command -v promtool >/dev/null 2>&1 || skip "promtool not installed (apt-get install prometheus; deploy/install-deps.sh does)"
promtool check rules "$DIR/kvroute-alerts.yml"
promtool check config "$DIR/prometheus.yml"
(cd "$DIR" && promtool test rules kvroute-alerts.test.yml)
echo "PASS: promtool"
