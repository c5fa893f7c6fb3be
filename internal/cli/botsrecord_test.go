package cli

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/auth"
	"github.com/xrealm/xrealm/bots"
	"github.com/xrealm/xrealm/internal/testnet"
	"github.com/xrealm/xrealm/server"
)

// startTestServer starts a server in this process with HTTP and MQTT on
// loopback, the rest off; it is shut down when the test ends.
func startTestServer(t *testing.T, insecure bool) (server.Config, *server.Server) {
	t.Helper()
	cfg := server.Defaults()
	cfg.DataDir = t.TempDir()
	cfg.Insecure = insecure
	ports := testnet.FreePorts(t, 2)
	cfg.HTTPAddr, cfg.MQTTAddr = ports[0], ports[1]
	cfg.HTTPSAddr, cfg.MQTTSAddr, cfg.MQTTWSAddr, cfg.NATSAddr, cfg.NATSWSAddr = "", "", "", "", ""
	cfg.UbiqAddr, cfg.UbiqWSSAddr, cfg.UbiqWSAddr = "", "", ""
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		srv.Shutdown(sctx)
	})
	return cfg, srv
}

// TestBotsRecord records one of two cameras moving in a real server's
// scene with `xrealm bots record` and checks that the trace holds that
// camera's poses, in order, and plays back with replay.
func TestBotsRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg, _ := startTestServer(t, false)
	ports := testnet.FreePorts(t, 1)
	keys, err := auth.LoadOrCreateKeys(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}

	// Two cameras publish: alice walks along +x, bob along -x.
	pub := func(user string) (*bots.MQTTClient, string) {
		uc := user + "_1_web"
		tok, err := keys.Issue(user, auth.SceneRights("realm", "lab", "walk", auth.RoleViewer, uc), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		c, err := bots.DialMQTT(ctx, bots.MQTTConfig{Addr: cfg.MQTTAddr, ClientID: uc, Username: user, Password: tok})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, "realm/s/lab/walk/u/" + uc + "/camera_1_" + user
	}
	alice, aliceTopic := pub("alice")
	bob, bobTopic := pub("bob")
	pose := func(i int, sign float64) bots.Pose {
		return bots.Pose{Pos: bots.Vec3{X: sign * float64(i) * 0.05, Y: 1.6, Z: 1}, Rot: bots.NoRotation}
	}
	const want = 15
	stop := make(chan struct{})
	published := make(chan int, 1)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		i := 0
		defer func() { published <- i }()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			i++
			now := time.Now().UnixNano()
			if alice.Publish(aliceTopic, bots.AppendPose(nil, "camera_1_alice", pose(i, 1), now, 200)) != nil ||
				bob.Publish(bobTopic, bots.AppendPose(nil, "camera_1_bob", pose(i, -1), now, 200)) != nil {
				return
			}
		}
	}()

	out := filepath.Join(t.TempDir(), "bob.trace")
	var stdout, stderr bytes.Buffer
	err = runBotsRecord(ctx, []string{"--addr", cfg.MQTTAddr, "--data", cfg.DataDir, "--scene", "lab/walk",
		"--object", "camera_1_bob", "--samples", "15", "--out", out}, &stdout, &stderr)
	close(stop)
	if err != nil {
		t.Fatalf("bots record: %v\n%s", err, stderr.String())
	}
	if n := <-published; n < want {
		t.Fatalf("only %d poses published before the recorder stopped", n)
	}
	if !strings.Contains(stderr.String(), "15 samples written to "+out) {
		t.Errorf("stderr does not report the samples written:\n%s", stderr.String())
	}
	tr, err := bots.ReadTraceFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Samples) != want {
		t.Fatalf("%d samples, want %d", len(tr.Samples), want)
	}
	// Bob's poses, consecutive (the recorder joined while he walked, so
	// the first is any of his), never alice's.
	first := -1
	for k, s := range tr.Samples {
		i := int(-s.Pose.Pos.X/0.05 + 0.5)
		if w := pose(i, -1); s.Pose.Pos.Sub(w.Pos).Len() > 1e-9 || s.Pose.Rot != w.Rot {
			t.Fatalf("sample %d %+v is not one of bob's poses", k, s.Pose)
		}
		if k == 0 {
			first = i
		} else if i != first+k {
			t.Fatalf("sample %d is bob's pose %d, want %d (in order, none lost)", k, i, first+k)
		}
	}
	if tr.Samples[0].T != 0 {
		t.Errorf("the trace starts at %g s, want 0", tr.Samples[0].T)
	}
	// A recording that cannot start leaves an earlier one of the name as
	// it was; one that cannot make its file says which.
	before, _ := os.ReadFile(out)
	err = runBotsRecord(ctx, []string{"--addr", ports[0], "--no-auth", "--scene", "lab/walk", "--out", out}, &stdout, &stderr)
	if err == nil {
		t.Error("bots record against a closed port: no error")
	}
	if after, _ := os.ReadFile(out); !bytes.Equal(after, before) {
		t.Error("a recording that could not connect changed the file")
	}
	// A recording in which no camera moves fails, saying so, and leaves an
	// earlier one of the name as it was (not a header only, which replay
	// refuses, with exit 0).
	stderr.Reset()
	err = runBotsRecord(ctx, []string{"--addr", cfg.MQTTAddr, "--data", cfg.DataDir, "--scene", "lab/empty", "--out", out, "--duration", "300ms"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "no camera sent a pose in lab/empty") || !strings.Contains(err.Error(), out+" left as it was") {
		t.Errorf("bots record of a scene where nobody moves: %v, want an error saying nothing was recorded", err)
	}
	if after, _ := os.ReadFile(out); !bytes.Equal(after, before) {
		t.Error("a recording of no sample changed the file")
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*recording*")); len(left) > 0 {
		t.Errorf("files left behind: %v", left)
	}
	noDir := filepath.Join(t.TempDir(), "no", "such", "dir", "x")
	err = runBotsRecord(ctx, []string{"--addr", cfg.MQTTAddr, "--data", cfg.DataDir, "--scene", "lab/walk", "--out", noDir, "--duration", "5s"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("bots record --out %s: %v, want an error naming the missing directory", noDir, err)
	}
	// Played back, the trace passes through what was recorded.
	r := bots.NewReplay(tr, 0)
	mid := tr.Samples[7]
	if p := r.Step(time.Duration(mid.T*1e9), nil); p.Pos.Sub(mid.Pose.Pos).Len() > 1e-6 {
		t.Errorf("replay at %g s = %+v, want %+v", mid.T, p.Pos, mid.Pose.Pos)
	}
}

func TestBotsRecordRefusesBadFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--out", "x"}, "--scene NS/SCENE is required"},
		{[]string{"--scene", "lab/walk"}, "--out FILE is required"},
		{[]string{"--scene", "lab", "--out", "x"}, "--scene"},
		{[]string{"--scene", "lab/+", "--out", "x"}, "--scene"},
		{[]string{"--scene", "lab/walk", "--realm", "a/b", "--out", "x"}, "--realm"},
		{[]string{"--scene", "lab/walk", "--out", "x", "--samples", "-1"}, "must not be negative"},
		{[]string{"--scene", "lab/walk", "--out", "x", "extra"}, "unexpected arguments"},
		{[]string{"--scene", "lab/walk", "--out", "x", "--data", t.TempDir()}, "signing key"},
		{[]string{"--scene", "lab/walk", "--out", "x", "--addr", "host"}, `--addr "host"`},
		{[]string{"--scene", "lab/walk", "--out", "x", "--token-url", "localhost:8080"}, `--token-url "localhost:8080"`},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		err := runBotsRecord(context.Background(), c.args, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("bots record %q: %v, want an error with %q", c.args, err, c.want)
		}
	}
}
