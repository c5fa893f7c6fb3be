package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xrealm/xrealm/auth"
)

func runToken(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	user := fs.String("user", "", "user name (the token's sub; the MQTT user name)")
	scene := fs.String("scene", "", "scene as namespace/scene")
	role := fs.String("role", "viewer", "editor or viewer in --scene; or sfu for an SFU node joining the bus (xrealm sfu --token), which needs no --scene")
	ttl := fs.Duration("ttl", time.Hour, "lifetime")
	data := fs.String("data", "./data", "data directory of the server (holds the signing key)")
	realm := fs.String("realm", "realm", "realm")
	client := fs.String("userclient", "", "limit a viewer's own topics to this client id (default: any)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *user == "" {
		return fmt.Errorf("--user is required")
	}
	if *ttl <= 0 {
		return fmt.Errorf("--ttl must be positive, got %s", *ttl)
	}
	if *role == "sfu" {
		return printToken(*data, *user, auth.ServiceRights("sfu"), *ttl)
	}
	ns, sc, ok := strings.Cut(*scene, "/")
	if !ok || ns == "" || sc == "" || strings.Contains(sc, "/") {
		return fmt.Errorf("--scene must be namespace/scene, got %q", *scene)
	}
	r, ok := auth.ParseRole(*role)
	if !ok {
		return fmt.Errorf("--role must be editor, viewer or sfu, got %q", *role)
	}
	return printToken(*data, *user, auth.SceneRights(*realm, ns, sc, r, *client), *ttl)
}

func printToken(dataDir, user string, r auth.Rights, ttl time.Duration) error {
	keys, err := auth.LoadKeys(dataDir)
	if errors.Is(err, os.ErrNotExist) {
		// Making the key here lets a cluster's nodes share one before any
		// starts; but a mistyped --data would sign with a key no server has.
		keys, err = auth.LoadOrCreateKeys(dataDir)
		if err == nil {
			fmt.Fprintf(os.Stderr, "xrealm token: no signing key in %s, so a new one was made there: only a server started with --data %s accepts this token\n",
				filepath.Join(dataDir, "keys"), dataDir)
		}
	}
	if err != nil {
		return err
	}
	tok, err := keys.Issue(user, r, ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stdout, tok)
	return nil
}
