#!/usr/bin/env bash
# Sets up and runs the whole test suite: Go unit and integration tests, then
# the tests with real third-party clients (arena-py, paho-mqtt) against a
# real `xrealm serve`, then the browser tests when the web client exists.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
source scripts/tools-env.sh # the Go and Node.js setup.sh fetched, if the machine had none new enough

say() { printf '\033[1m[test]\033[0m %s\n' "$*"; }
start=$(date +%s)

say "go vet"
go vet ./...

say "go test ./..."
go test -count=1 -timeout 15m ./...

say "go test -race (front end, connection machinery, and the packages that race-test in seconds)"
go test -count=1 -race -timeout 10m ./fanout/ ./mqtt/ ./mqttwire/ ./streamread/ ./topic/ ./auth/ \
	./scene/ ./tlscert/ ./wsstream/ ./webclient/ ./interest/ ./hera/ ./cpuload/ ./httpapi/ ./cc/ \
	./bus/ ./volumetric/ ./internal/cli/ ./netem/ ./bots/

say "pytest tests/python (real clients against bin/xrealm)"
XREALM_BIN="$PWD/bin/xrealm" .venv/bin/python -m pytest -q tests/python

if [[ -f web/package.json ]] && grep -q '"test"' web/package.json; then
	say "web tests"
	(cd web && XREALM_BIN="$PWD/../bin/xrealm" npm test --silent)
fi
say "all tests passed in $(( $(date +%s) - start ))s"
