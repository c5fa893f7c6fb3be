#!/usr/bin/env bash
# Sets up and runs xrealm on this machine: everything embedded, data in
# ./data. Extra arguments go to `xrealm serve` (see bin/xrealm serve -h).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec bin/xrealm serve "$@"
