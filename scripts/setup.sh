#!/usr/bin/env bash
# Create .venv and install kbroker into it, with extras when asked: setup.sh test (the test suite),
# setup.sh spark (the test suite and pyspark, for pyspark_examples/), setup.sh bench (plots, progress
# bars and py-spy for `kbroker bench`), setup.sh all (all of them).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
extras=""
case "${1:-}" in
    test) extras="[test]" ;;
    spark) extras="[test,spark]" ;;
    bench) extras="[bench]" ;;
    all) extras="[test,spark,bench]" ;;
esac
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e ".${extras}"
