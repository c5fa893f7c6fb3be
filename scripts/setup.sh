#!/usr/bin/env bash
# Installs what xrealm and its tests need on a fresh machine, from the
# package registries only (apt, the Go module proxy, PyPI, npm). Safe to run
# again: it installs only what is missing.
#
#   scripts/setup.sh          # server only: builds bin/xrealm
#   scripts/setup.sh --test   # plus the test tools: mosquitto, Python venv, ...
set -euo pipefail
cd "$(dirname "$0")/.."
want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

apt_install() {
	local missing=()
	for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
	((${#missing[@]})) || return 0
	if [[ $(id -u) -ne 0 ]]; then
		say "missing Debian packages: ${missing[*]} (run as root, or install them yourself)"
		return 1
	fi
	say "apt-get install ${missing[*]}"
	apt-get update -q >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
}

# Go: the machine's, if it is at least the version go.mod names; else that
# version's toolchain from the Go module proxy (the module the go command
# itself downloads toolchains from), in .tools/go. Debian's golang-go is
# too old to fetch a newer toolchain itself.
source scripts/tools-env.sh
go_want=$(awk '$1 == "go" { print $2; exit }' go.mod)
go_have() { command -v go >/dev/null && go env GOVERSION 2>/dev/null | sed 's/^go//'; }
go_new_enough() {
	local have
	have=$(go_have) || return 1
	[[ -n $have && $(printf '%s\n%s\n' "$go_want" "$have" | sort -V | head -1) == "$go_want" ]]
}
if ! go_new_enough; then
	case $(uname -m) in
	x86_64) go_arch=amd64 ;;
	aarch64 | arm64) go_arch=arm64 ;;
	*) say "no Go $go_want for $(uname -m) on the Go proxy: install Go $go_want or newer (https://go.dev/dl) and run again"; exit 1 ;;
	esac
	command -v curl >/dev/null && command -v unzip >/dev/null || apt_install curl unzip ca-certificates
	proxy=${GOPROXY:-https://proxy.golang.org}
	proxy=${proxy%%[,|]*}
	[[ $proxy == direct || $proxy == off ]] && proxy=https://proxy.golang.org
	mod="v0.0.1-go$go_want.linux-$go_arch"
	say "Go $go_want not found (have: $(go_have || echo none)): fetching it from $proxy into .tools/go"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	curl -fsSL --retry 3 -o "$tmp/go.zip" "$proxy/golang.org/toolchain/@v/$mod.zip"
	unzip -q "$tmp/go.zip" -d "$tmp"
	rm -rf .tools/go
	mkdir -p .tools
	mv "$tmp/golang.org/toolchain@$mod" .tools/go
	source scripts/tools-env.sh
	go_new_enough || { say "the fetched Go does not run: $(.tools/go/bin/go version 2>&1)"; exit 1; }
fi

# Node.js for the web client: the machine's, if it is one Vite takes
# (20.19 or newer); else Node.js and npm from the npm registry (packages
# node-linux-{arch} and npm), in .tools/node. Debian 12's nodejs is 18.
node_want=20.19.0
node_fetch=22.23.3
npm_fetch=10.9.9
node_new_enough() {
	local have
	have=$(node --version 2>/dev/null | sed 's/^v//') || return 1
	[[ -n $have && $(printf '%s\n%s\n' "$node_want" "$have" | sort -V | head -1) == "$node_want" ]] && command -v npm >/dev/null
}
fetch_node() {
	local arch registry tmp
	case $(uname -m) in
	x86_64) arch=x64 ;;
	aarch64 | arm64) arch=arm64 ;;
	*) say "no Node.js for $(uname -m) on the npm registry: install Node.js $node_want or newer and run again"; exit 1 ;;
	esac
	command -v curl >/dev/null || apt_install curl ca-certificates
	registry=${npm_config_registry:-https://registry.npmjs.org}
	registry=${registry%/}
	say "Node.js $node_want or newer not found (have: $(node --version 2>/dev/null || echo none)): fetching Node.js $node_fetch and npm $npm_fetch from $registry into .tools/node"
	tmp=$(mktemp -d)
	curl -fsSL --retry 3 "$registry/node-linux-$arch/-/node-linux-$arch-$node_fetch.tgz" | tar xz -C "$tmp"
	mv "$tmp/package" "$tmp/node"
	mkdir -p "$tmp/node/lib/node_modules"
	curl -fsSL --retry 3 "$registry/npm/-/npm-$npm_fetch.tgz" | tar xz -C "$tmp/node/lib/node_modules"
	mv "$tmp/node/lib/node_modules/package" "$tmp/node/lib/node_modules/npm"
	ln -s ../lib/node_modules/npm/bin/npm-cli.js "$tmp/node/bin/npm"
	ln -s ../lib/node_modules/npm/bin/npx-cli.js "$tmp/node/bin/npx"
	rm -rf .tools/node
	mkdir -p .tools
	mv "$tmp/node" .tools/node
	rm -rf "$tmp"
	source scripts/tools-env.sh
	node_new_enough || { say "the fetched Node.js does not run: $(.tools/node/bin/node --version 2>&1)"; exit 1; }
}

# The web client, when present, is built before the server that serves it.
if [[ -f web/package.json ]]; then
	node_new_enough || fetch_node
	# again when the lock file changed (a new dependency) since the last install
	if [[ ! -d web/node_modules || web/package-lock.json -nt web/node_modules/.package-lock.json ]]; then
		say "npm ci (web)"
		(cd web && npm ci --no-audit --no-fund --loglevel=error)
	fi
	say "building the web client"
	(cd web && npm run build --silent)
fi

say "building bin/xrealm"
go build -buildvcs=auto -o bin/xrealm ./cmd/xrealm  # stamps the commit (xrealm version) in a git checkout

if ((want_test)); then
	# draco: Google Draco's tools for the volumetric and point-cloud tests
	apt_install mosquitto python3-venv iproute2 draco
	if [[ ! -x .venv/bin/python ]]; then
		say "creating .venv"
		python3 -m venv .venv
	fi
	if ! .venv/bin/python -c 'import arena, paho, pytest' 2>/dev/null || [[ tests/requirements.txt -nt .venv/.installed ]]; then
		say "pip install -r tests/requirements.txt"
		.venv/bin/pip install -q --disable-pip-version-check -r tests/requirements.txt
		touch .venv/.installed
	fi
	if [[ -x scripts/setup-cc.sh && $(id -u) -eq 0 ]]; then
		scripts/setup-cc.sh >/dev/null
	fi
fi
say "ready"
