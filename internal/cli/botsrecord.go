package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/xrealm/xrealm/bots"
	"github.com/xrealm/xrealm/topic"
)

// runBotsRecord implements `xrealm bots record`: it subscribes to a scene
// as a viewer and writes one camera's poses to a pose trace, which
// `xrealm bots --behaviour replay --trace FILE` plays back.
func runBotsRecord(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bots record", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: xrealm bots record --scene NS/SCENE --out FILE [flags]: record a camera's poses\n"+
			"(a user in the browser, an arena-py program, a bot) to a pose trace for xrealm bots --behaviour replay")
		fs.PrintDefaults()
	}
	addr := fs.String("addr", "127.0.0.1:1883", "MQTT server: host:port (or mqtt://host:port) for TCP, or ws://host:port/mqtt for WebSocket")
	tokenURL := fs.String("token-url", "http://127.0.0.1:8080", "get a viewer token from this server's POST /user/v2/mqtt_auth")
	bearer := fs.String("token", "", "sign in to --token-url with this token (xrealm token) for a scene anonymous users cannot read")
	dataDir := fs.String("data", "", "sign the token with the keys in this server data directory instead of asking --token-url")
	noAuth := fs.Bool("no-auth", false, "connect without a token (xrealm serve --insecure, Mosquitto)")
	sceneName := fs.String("scene", "", "the scene, NS/SCENE (required)")
	realm := fs.String("realm", "realm", "realm")
	object := fs.String("object", "", "the camera's object id (e.g. camera_1234_alice); empty: the first camera that sends a pose")
	out := fs.String("out", "", "the trace file to write (required; - for standard output)")
	duration := fs.Duration("duration", 0, "stop after this long (0: until interrupted)")
	maxSamples := fs.Int("samples", 0, "stop after this many samples (0: no limit)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if err := checkTokenFlags(fs); err != nil {
		return err
	}
	if *sceneName == "" {
		return usageErr(errors.New("--scene NS/SCENE is required"))
	}
	ns, scene, err := topic.ParseSceneName(*sceneName)
	if err != nil {
		return usagef("--scene: %w", err)
	}
	if err := topic.ValidLevel("--realm", *realm); err != nil {
		return usageErr(err)
	}
	if *out == "" {
		return usageErr(errors.New("--out FILE is required (- for standard output)"))
	}
	if *duration < 0 || *maxSamples < 0 {
		return usagef("--duration (%s) and --samples (%d) must not be negative", *duration, *maxSamples)
	}
	if err := checkBotsAddr(*addr); err != nil {
		return err
	}
	tokens, err := botTokens(*noAuth, *dataDir, *tokenURL, *bearer)
	if err != nil {
		return err
	}
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	// The recording goes to a new file next to --out, made once the
	// recorder is subscribed, and replaces --out only when it holds a
	// sample: a typo in --addr or --scene, or a scene where no camera
	// moved, leaves an earlier recording of the name as it was.
	var f *os.File
	open := func() (*bots.TraceWriter, error) {
		w := stdout
		if *out != "-" {
			var err error
			if f, err = os.CreateTemp(filepath.Dir(*out), "."+filepath.Base(*out)+".recording-*"); err != nil {
				return nil, fmt.Errorf("%s: %w", *out, err)
			}
			f.Chmod(0o644) // as os.Create would make it (CreateTemp: 0600)
			w = f
		}
		return bots.NewTraceWriter(w)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rec, err := recordPoses(ctx, recordConfig{
		Addr: *addr, Tokens: tokens, Realm: *realm, Namespace: ns, Scene: scene,
		Object: *object, Max: *maxSamples, Log: log, Progress: stderr,
	}, open)
	if rec == nil {
		return err
	}
	if ferr := rec.Flush(); ferr != nil && err == nil {
		err = fmt.Errorf("%s: %w", *out, ferr)
	}
	if f != nil {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("%s: %w", *out, cerr)
		}
	}
	if rec.Samples() == 0 {
		if f != nil {
			os.Remove(f.Name())
		}
		what := "no camera sent a pose"
		if *object != "" {
			what = "camera " + *object + " sent no pose"
		}
		if err != nil {
			return err
		}
		kept := ""
		if *out != "-" {
			kept = "; " + *out + " left as it was"
		}
		return fmt.Errorf("%s in %s/%s while recording: nothing recorded%s", what, ns, scene, kept)
	}
	if f != nil {
		if rerr := os.Rename(f.Name(), *out); rerr != nil {
			os.Remove(f.Name())
			if err == nil {
				err = rerr
			}
			return err
		}
	}
	fmt.Fprintf(stderr, "%d samples written to %s\n", rec.Samples(), *out)
	return err
}

type recordConfig struct {
	Addr                    string
	Tokens                  bots.TokenSource // nil: no credentials
	Realm, Namespace, Scene string
	Object                  string // "": the first camera that sends a pose
	Max                     int    // samples; 0: no limit
	Log                     *slog.Logger
	Progress                io.Writer // a line a second while recording
}

// recordPoses subscribes to the scene, then opens the trace with open and
// adds the poses of one camera to it until ctx ends, Max samples are
// written, or the connection fails. The end of ctx is not an error. The
// trace is returned (nil if it was not opened) for the caller to flush.
func recordPoses(ctx context.Context, cfg recordConfig, open func() (*bots.TraceWriter, error)) (*bots.TraceWriter, error) {
	id := bots.Identity{
		Realm: cfg.Realm, Namespace: cfg.Namespace, Scene: cfg.Scene,
		User: "recorder", UserClient: fmt.Sprintf("recorder_%d", time.Now().UnixNano()%1e9),
	}
	user, pass := id.User, ""
	if cfg.Tokens != nil {
		var err error
		if user, pass, err = cfg.Tokens.Token(ctx, id); err != nil {
			return nil, err
		}
	}
	var (
		mu      sync.Mutex
		rec     *bots.TraceWriter // nil until subscribed
		stopped bool              // recordPoses returned: add nothing more
		object  = cfg.Object
		werr    error
		skipped int // malformed camera poses of the object
		full    = make(chan struct{})
		once    sync.Once
	)
	onPub := func(_, payload []byte, at int64) {
		cp, err := bots.ParseCameraPose(payload)
		mu.Lock()
		defer mu.Unlock()
		if rec == nil || stopped || werr != nil || (cfg.Max > 0 && rec.Samples() >= cfg.Max) {
			return
		}
		switch {
		case errors.Is(err, bots.ErrNotCamera):
			return
		case err != nil:
			skipped++
			if skipped == 1 {
				cfg.Log.Warn("skipping a malformed camera pose", "err", err)
			}
			return
		}
		if object == "" {
			object = cp.ObjectID
			fmt.Fprintf(cfg.Progress, "recording camera %s\n", object)
		}
		if cp.ObjectID != object {
			return
		}
		if _, werr = rec.AddCamera(cp, at); werr != nil {
			once.Do(func() { close(full) })
			return
		}
		if cfg.Max > 0 && rec.Samples() >= cfg.Max {
			once.Do(func() { close(full) })
		}
	}
	c, err := bots.DialMQTT(ctx, bots.MQTTConfig{Addr: cfg.Addr, ClientID: id.UserClient, Username: user, Password: pass, OnPublish: onPub})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.Subscribe(ctx, id.SceneBase()+"/+/+/+"); err != nil {
		return nil, err
	}
	tw, err := open()
	if err != nil {
		return nil, err
	}
	mu.Lock()
	rec = tw
	mu.Unlock()
	if cfg.Object == "" {
		fmt.Fprintf(cfg.Progress, "subscribed to %s; waiting for a camera to move\n", id.SceneBase())
	} else {
		fmt.Fprintf(cfg.Progress, "subscribed to %s; recording camera %s\n", id.SceneBase(), cfg.Object)
	}
	// finish ends the recording: the read goroutine may still deliver a
	// message until the connection is closed, and must not add it while
	// the caller flushes.
	finish := func(err error) (*bots.TraceWriter, error) {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		if err == nil {
			err = werr
		}
		return tw, err
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := 0
	for {
		select {
		case <-ctx.Done():
			return finish(nil)
		case <-full:
			return finish(nil)
		case <-c.Done():
			return finish(fmt.Errorf("connection to %s ended: %w", cfg.Addr, c.Err()))
		case <-tick.C:
			mu.Lock()
			n, obj, err := rec.Samples(), object, rec.Flush()
			mu.Unlock()
			if err != nil {
				return finish(err)
			}
			if obj != "" {
				fmt.Fprintf(cfg.Progress, "%s: %d samples (+%d/s)\n", obj, n, n-last)
			}
			last = n
		}
	}
}
