#!/usr/bin/env bash
# Create .venv and install kbroker into it, with extras when asked: setup.sh test (the test suite),
# setup.sh bench (plots, progress bars and py-spy for `kbroker bench`), setup.sh all (both).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
extras=""
case "${1:-}" in
    test) extras="[test]" ;;
    bench) extras="[bench]" ;;
    all) extras="[test,bench]" ;;
esac
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e ".${extras}"
