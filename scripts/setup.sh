#!/usr/bin/env bash
# Create .venv and install kbroker into it (with the test extras when asked: setup.sh test).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
extras=""
[ "${1:-}" = "test" ] && extras="[test]"
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e ".${extras}"
