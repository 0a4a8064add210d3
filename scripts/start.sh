#!/usr/bin/env bash
# Install kbroker into .venv and start a single-node broker on 127.0.0.1:9092.
# Extra arguments go to `kbroker start`, e.g. --override log.dirs=/var/lib/kbroker
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/kbroker start conf/server.properties "$@"
