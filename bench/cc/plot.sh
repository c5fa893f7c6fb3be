#!/usr/bin/env bash
# Makes the benchmark plots from results.jsonl files:
#   bench/cc/plot.sh OUTDIR results.jsonl [more.jsonl...]
# Installs matplotlib into a virtual environment under /tmp on first use.
set -euo pipefail
venv=${XREALM_PLOT_VENV:-/tmp/xrealm-plot-venv}
if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q matplotlib
fi
exec "$venv/bin/python" "$(dirname "$0")/plot.py" "$@"
