#!/usr/bin/env bash
# Installs what the SFU and volumetric tests need. Idempotent; run as root.
#   - draco (Debian): draco_encoder/draco_decoder, Google Draco's tools
#   - iproute2 (tc, ip netns) for `xrealm bench sfu`
#   - aiortc (PyPI) for tests/python/sfu
#   - chromium (Debian) for the browser test, only with --browser
set -euo pipefail
need=()
for p in draco iproute2; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [[ "${1:-}" == "--browser" ]]; then
	dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed" || need+=(chromium)
fi
if ((${#need[@]})); then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${need[@]}"
fi
if command -v python3 >/dev/null; then
	python3 -c 'import aiortc' 2>/dev/null || python3 -m pip install -q aiortc
fi
echo "setup-sfu: draco_encoder=$(command -v draco_encoder || echo missing) aiortc=$(python3 -c 'import aiortc; print(aiortc.__version__)' 2>/dev/null || echo missing)"
