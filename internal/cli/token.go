package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/persist"
	"github.com/xrealm/xrealm/topic"
)

func runToken(ctx context.Context, args []string) error {
	req, err := parseToken(args)
	if err != nil {
		return err
	}
	return printToken(req.data, req.user, req.rights, req.ttl)
}

// tokenRequest is what `xrealm token` was asked for.
type tokenRequest struct {
	data, user string
	rights     auth.Rights
	ttl        time.Duration
}

// parseToken reads the flags of `xrealm token`. A token is for one scene:
// --scene, --realm and --userclient must be literal names, never MQTT
// wildcards, which would widen the token's rights (--scene '+/+' would
// edit every scene) or make filters MQTT refuses ('a/#' would give
// realm/s/a/#/#).
func parseToken(args []string) (tokenRequest, error) {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	user := fs.String("user", "", "user name (the token's sub; the MQTT user name)")
	scene := fs.String("scene", "", "one scene, as namespace/scene (names of "+topic.SceneNameChars+"; no wildcards)")
	role := fs.String("role", "viewer", "editor or viewer in --scene; or, needing no --scene, sfu for an SFU node joining the bus (xrealm sfu --token), or cluster for a cluster's administration (xrealm cluster --token)")
	ttl := fs.Duration("ttl", time.Hour, "lifetime")
	data := fs.String("data", "./data", "data directory of the server (holds the signing key)")
	realm := fs.String("realm", "realm", "realm")
	client := fs.String("userclient", "", "limit a viewer's own topics to this client id (default: any)")
	if err := parseFlags(fs, args); err != nil {
		return tokenRequest{}, err
	}
	if fs.NArg() > 0 {
		return tokenRequest{}, usagef("unexpected arguments %q", fs.Args())
	}
	if *user == "" {
		return tokenRequest{}, usagef("--user is required")
	}
	if len(*user) > auth.MaxUserLen {
		return tokenRequest{}, usagef("--user %s of %d bytes is longer than the longest, %d", topic.Clip(*user), len(*user), auth.MaxUserLen)
	}
	if auth.IsAnonymous(*user) {
		// The token endpoint gives such a name to anyone who asks, and
		// takes a token of one for an anonymous viewer's.
		return tokenRequest{}, usagef("--user %q: names starting %q are those of anonymous users, which anyone may take at POST /user/v2/mqtt_auth; choose another name", *user, auth.AnonymousPrefix)
	}
	if *ttl <= 0 {
		return tokenRequest{}, usagef("--ttl must be positive, got %s", *ttl)
	}
	req := tokenRequest{data: *data, user: *user, ttl: *ttl}
	if *role == "sfu" || *role == "cluster" {
		// A service's rights are on its own subjects, in no scene.
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, name := range []string{"scene", "realm", "userclient"} {
			if set[name] {
				return tokenRequest{}, usagef("--%s does not apply to --role %s (a service's token is for no scene)", name, *role)
			}
		}
		req.rights = auth.ServiceRights(*role)
		return req, nil
	}
	if err := persist.ValidRealm(*realm); err != nil {
		return tokenRequest{}, usagef("--realm: %w", err)
	}
	r, ok := auth.ParseRole(*role)
	if !ok {
		return tokenRequest{}, usagef("--role must be editor, viewer, sfu or cluster, got %q", *role)
	}
	if *scene == "" {
		return tokenRequest{}, usagef("--scene is required: namespace/scene (a token is for one scene)")
	}
	ns, sc, err := topic.ParseSceneName(*scene)
	if err != nil {
		return tokenRequest{}, usagef("--scene: %w (a token is for one scene)", err)
	}
	if *client != "" {
		if err := topic.ValidLevel("--userclient", *client); err != nil {
			return tokenRequest{}, usageErr(err)
		}
		if r != auth.RoleViewer {
			return tokenRequest{}, usagef("--userclient limits a viewer's own topics; a %s publishes everything in the scene, as any client: leave --userclient out", r)
		}
	}
	req.rights = auth.SceneRights(*realm, ns, sc, r, *client)
	return req, nil
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
