# Sourced by the scripts: puts the Go and Node.js that scripts/setup.sh
# fetched from the package registries (when the machine had none new
# enough) first on PATH.
for d in .tools/go/bin .tools/node/bin; do
	if [[ -d $d ]]; then
		export PATH="$PWD/$d:$PATH"
	fi
done
