#!/usr/bin/env bash
# Installs every build and test dependency of kvroute from Debian 12 packages.
# Idempotent: packages already present are skipped; safe to run as root on a bare machine.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates curl
  # deploy/build-release.sh's training client, bench/perf's reports, tests/deploy.
  python3
  libboost1.81-dev libboost-json1.81-dev
  libabsl-dev libyaml-cpp-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libcli11-dev libxxhash-dev
  # Engines' KV cache events (docs/kv-events.md): ZeroMQ and MessagePack.
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev
  # Several kvroute replicas share state through Redis 7 (cluster/, docs/design.md "Several
  # replicas"): the hiredis C client to build, the server for tests/cluster and deployments.
  libhiredis-dev redis-server
  # The kvroute daemon's allocator (tcmalloc; CMake KVROUTE_MALLOC).
  libgoogle-perftools-dev
  # tests/deploy: a real Prometheus (and promtool) and Node.js for the OpenAI SDK client test.
  prometheus nodejs
  # Fuzzing and sanitizer stages (issue 7): clang with libFuzzer and the sanitizer runtimes.
  clang libclang-rt-14-dev
  # bench/perf (issue 8): the proxies kvroute is compared with, the load generator, profilers.
  nginx-light haproxy wrk valgrind
  # Debian's npm, unless an npm is already installed (NodeSource's nodejs bundles npm and
  # conflicts with Debian's npm package).
  $(command -v npm >/dev/null 2>&1 || echo npm)
)

# tests/deploy: the official client SDKs the end-to-end tests drive kvroute with (the OpenAI
# Node SDK for chat, completions and Responses; the Anthropic TypeScript SDK for Messages),
# installed globally with npm. The tests use them from `npm root -g`, else install them into
# the build tree on first use.
NPM_PACKAGES=(openai @anthropic-ai/sdk)

install_npm_packages() {
  local root missing_npm=()
  root=$(npm root -g)
  for p in "${NPM_PACKAGES[@]}"; do
    [ -f "$root/$p/package.json" ] || missing_npm+=("$p")
  done
  if [ ${#missing_npm[@]} -eq 0 ]; then
    echo "install-deps: npm packages present: ${NPM_PACKAGES[*]}"
    return
  fi
  echo "install-deps: npm install -g ${missing_npm[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ] && [ ! -w "$root" ]; then sudo="sudo"; fi
  $sudo npm install -g --no-audit --no-fund --loglevel=error "${missing_npm[@]}"
}

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  install_npm_packages
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Packages such as nginx, haproxy and redis-server would start their system services on install;
# the benchmarks and tests start their own instances on loopback, so keep the packaged ones stopped.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get update -q
# Debian 12's libmsgpack-cxx-dev depends on libboost-dev, i.e. Boost 1.74, which conflicts with
# the libboost1.81-dev kvroute builds with (msgpack-cxx is header-only and is built here with
# MSGPACK_NO_BOOST). An empty local package that provides libboost-dev on top of
# libboost1.81-dev satisfies that dependency, as equivs would.
if [[ " ${missing[*]} " == *" libmsgpack-cxx-dev "* ]] &&
   ! dpkg-query -W -f='${Status}' libboost-dev 2>/dev/null | grep -q "install ok installed" &&
   ! dpkg-query -W -f='${Provides}' kvroute-boost-dev-alias 2>/dev/null | grep -q libboost-dev; then
  $SUDO apt-get install -y -q --no-install-recommends libboost1.81-dev
  alias_dir=$(mktemp -d)
  mkdir -p "$alias_dir/pkg/DEBIAN"
  cat >"$alias_dir/pkg/DEBIAN/control" <<'CONTROL'
Package: kvroute-boost-dev-alias
Version: 1.81.0
Architecture: all
Maintainer: kvroute <kvroute@localhost>
Depends: libboost1.81-dev
Provides: libboost-dev (= 1.81.0)
Section: devel
Priority: optional
Description: Lets packages that depend on libboost-dev use Boost 1.81
 Debian 12's libmsgpack-cxx-dev depends on libboost-dev (Boost 1.74), which
 conflicts with libboost1.81-dev. This empty package provides libboost-dev.
CONTROL
  dpkg-deb --build "$alias_dir/pkg" "$alias_dir/alias.deb" >/dev/null
  $SUDO dpkg -i "$alias_dir/alias.deb"
  rm -rf "$alias_dir"
fi
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
install_npm_packages
