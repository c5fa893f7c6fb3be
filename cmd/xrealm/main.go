// Command xrealm is the collaborative XR backend: `xrealm serve` runs a
// node; see `xrealm help` for the other commands.
package main

import (
	"os"

	"github.com/xrealm/xrealm/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stderr)) }
