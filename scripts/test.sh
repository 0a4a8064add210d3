#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh Debian machine, then run it.
# Usage: scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v kcat >/dev/null || need_apt+=(kcat)
# Chromium for the web console's test in a real browser (tests/integration/test_console.py).
command -v chromium >/dev/null || need_apt+=(chromium)
# Debian's ZooKeeper (and the Java it needs): the cluster tests start a real one.
{ [ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null; } || need_apt+=(zookeeper)
# Debian's Prometheus: a real one scrapes the metrics endpoint (tests/integration/test_metrics.py).
command -v prometheus >/dev/null || need_apt+=(prometheus)
if [ ${#need_apt[@]} -gt 0 ]; then
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# With pyspark, for the Spark examples' tests (pyspark_examples/tests): ~40 s the first time, cached after.
scripts/setup.sh spark
# The Java client scenarios (compat_tests/) need kafka-clients and its jars: fetched from PyPI
# into .cache/java once (sha256-pinned), and the harness compiled, before pytest starts.
if command -v java >/dev/null && command -v javac >/dev/null; then
    .venv/bin/python -m compat_tests.java_deps >/dev/null
else
    echo "test.sh: java/javac not found; the Java client scenarios will be skipped" >&2
fi
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
