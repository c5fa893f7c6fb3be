# Sourced by the scripts: puts the Go toolchain that scripts/setup.sh
# fetched from the Go module proxy (when the machine had no Go new enough)
# first on PATH.
if [[ -x .tools/go/bin/go ]]; then
	export PATH="$PWD/.tools/go/bin:$PATH"
fi
