package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/bots"
	"github.com/xrealm/xrealm/internal/testlog"
	"github.com/xrealm/xrealm/server"
	"github.com/xrealm/xrealm/topic"
)

// xrealm bots prints a line per interval and a summary, and fails once
// every bot is disconnected (the server stopped) rather than printing
// empty lines until --duration ends and exiting 0.
func TestBotsProgressEndsWhenAllDisconnected(t *testing.T) {
	cfg, srv := startTestServer(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fleet, err := bots.StartFleet(ctx, bots.FleetConfig{
		Transport: &bots.MQTTTransport{Addr: cfg.MQTTAddr}, Users: 3, Scenes: []string{"public/progress"},
		Rate: 20, Behaviour: bots.Spec{Name: "randomwalk"}, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	var out testlog.Buffer
	done := make(chan error, 1)
	go func() { done <- botsProgress(ctx, &out, fleet, 200*time.Millisecond, false) }()

	// Two progress lines while the server runs.
	for strings.Count(out.String(), "\n") < 2 {
		if ctx.Err() != nil {
			t.Fatalf("no two progress lines in time; got:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	err = <-done
	// It says why the first bot lost its connection (not only "did the
	// server stop?", which misleads when another run has taken the client
	// ids).
	if err == nil || !strings.Contains(err.Error(), "all 3 bots were disconnected") || !strings.Contains(err.Error(), "the server closed the connection") {
		t.Fatalf("botsProgress after the server stopped: %v, want all 3 bots disconnected, the server having closed the connection", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 3 {
		t.Fatalf("want progress lines and a summary, got:\n%s", out.String())
	}
	if !strings.Contains(lines[0], "users 3/3") || !strings.Contains(lines[0], "latency p50 ") {
		t.Errorf("first line %q: want users 3/3 and latencies", lines[0])
	}
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "total ") || !strings.Contains(last, "users 0/3") || strings.Contains(last, "received 0 ") {
		t.Errorf("summary %q: want the total of the run, with what was received", last)
	}
}

// With --reconnect, bots whose server restarted join again, as browser
// pages do, and go on sending: the run does not end when every bot is
// gone, the poses due while they were away count as missed, and the
// summary says how many connections were lost and joined again.
func TestBotsReconnectAfterServerRestart(t *testing.T) {
	cfg, srv := startTestServer(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fleet, err := bots.StartFleet(ctx, bots.FleetConfig{
		Transport: &bots.MQTTTransport{Addr: cfg.MQTTAddr}, Users: 3, Scenes: []string{"public/reconnect"},
		Rate: 20, Behaviour: bots.Spec{Name: "randomwalk"}, Seed: 1, Reconnect: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- botsProgress(rctx, &out, fleet, 100*time.Millisecond, true) }()

	waitUntil := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	received := func() int64 { tot, _ := fleet.Accounts().Live(); return tot.Received }
	waitUntil("poses received", func() bool { return received() > 0 })
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	waitUntil("every bot disconnected", func() bool { return fleet.Connected() == 0 })
	select {
	case err := <-done:
		t.Fatalf("the run ended when every bot was gone (%v), want the bots to keep trying", err)
	case <-time.After(300 * time.Millisecond):
	}
	// The same server again, on the same ports and data.
	srv2, err := server.Start(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		srv2.Shutdown(sctx)
	}()
	waitUntil("every bot joined again", func() bool { return fleet.Connected() == 3 })
	back := received()
	waitUntil("poses received after the restart", func() bool { return received() > back+30 })
	rcancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "total ") || !strings.Contains(last, "users 3/3") || !strings.Contains(last, "connections lost 3, joined again 3") {
		t.Errorf("summary %q: want users 3/3, connections lost 3, joined again 3", last)
	}
	var missed int
	if i := strings.Index(last, "missed "); i < 0 {
		t.Fatalf("summary %q: no missed count", last)
	} else if _, err := fmt.Sscanf(last[i:], "missed %d", &missed); err != nil || missed == 0 {
		t.Errorf("summary %q: want the poses due while the bots were away counted as missed (%v)", last, err)
	}
	if lost, rejoined := fleet.Lost(); lost != 3 || rejoined != 3 {
		t.Errorf("fleet.Lost() = %d, %d; want 3 lost, 3 joined again", lost, rejoined)
	}
}

func TestLatenciesOfNone(t *testing.T) {
	h := bots.NewHistogram()
	if got := latencies(h); !strings.Contains(got, "none received") || strings.Contains(got, "0µs") {
		t.Errorf("latencies of an empty histogram = %q, want it to say none were received", got)
	}
	h.RecordValue(1500) // µs
	if got := latencies(h); !strings.HasPrefix(got, "p50 1.5ms p99 1.5ms max 1.5ms") {
		t.Errorf("latencies = %q", got)
	}
}

// The summary counts the whole run, up to its end: a run shorter than one
// progress interval (no progress line) still sums what was sent and
// received, rather than the totals of the last progress line.
func TestBotsSummaryCountsToTheEnd(t *testing.T) {
	cfg, _ := startTestServer(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fleet, err := bots.StartFleet(ctx, bots.FleetConfig{
		Transport: &bots.MQTTTransport{Addr: cfg.MQTTAddr}, Users: 2, Scenes: []string{"public/summary"},
		Rate: 20, Behaviour: bots.Spec{Name: "randomwalk"}, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	rctx, rcancel := context.WithTimeout(ctx, time.Second)
	defer rcancel()
	var out bytes.Buffer
	if err := botsProgress(rctx, &out, fleet, time.Hour, false); err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(out.String())
	if !strings.HasPrefix(line, "total ") || strings.Contains(line, "\n") {
		t.Fatalf("want only the summary, got:\n%s", out.String())
	}
	if strings.Contains(line, "sent 0 ") || strings.Contains(line, "received 0 ") || strings.Contains(line, "none received") {
		t.Errorf("summary %q: want what the run sent and received", line)
	}
	// The senders stop, then the poses on their way arrive before the
	// summary: each of the two bots receives every pose (it lacked the
	// last ones, as if lost).
	checkEverySentPoseDelivered(t, line, 2)
}

// checkEverySentPoseDelivered checks a summary line of a run of users
// bots in one scene: each bot received every pose sent (received is users
// × sent), and the delivered ratio is that over the poses due, sent or
// missed. On a loaded machine senders are late and skip ticks (missed:
// due, never delivered), so the ratio is 100 % only when none was (for
// example 57.50 % with 23 sent, 17 missed and all 46 received).
func checkEverySentPoseDelivered(t *testing.T, line string, users int) {
	t.Helper()
	i := strings.Index(line, "sent ")
	if i < 0 {
		t.Fatalf("summary %q: no sent count", line)
	}
	var sent, received, missed int
	var delivered string
	if _, err := fmt.Sscanf(line[i:], "sent %d  received %d  missed %d  delivered %s", &sent, &received, &missed, &delivered); err != nil {
		t.Fatalf("summary %q: %v", line, err)
	}
	if sent == 0 || received != users*sent {
		t.Errorf("summary %q: want every pose sent received by all %d bots (%d)", line, users, users*sent)
	}
	if want := strconv.FormatFloat(100*float64(received)/float64(users*(sent+missed)), 'f', 2, 64) + "%"; delivered != want {
		t.Errorf("summary %q: delivered %s, want %s (%d received of %d due: %d sent and %d missed, to each of %d bots)", line, delivered, want, received, users*(sent+missed), sent, missed, users)
	}
}

// xrealm bots refuses flags it cannot run with, naming the flag, before
// it connects anything (the server of --addr does not exist).
func TestBotsRefusesBadFlags(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "t.trace")
	if err := os.WriteFile(trace, []byte("0 0 1.6 0 0 0 0 1\n1 1 1.6 0 0 0 0 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		// Each of these would panic, run forever, or be taken silently.
		{[]string{"--progress", "0"}, "--progress"},
		{[]string{"--progress", "-1s"}, "--progress"},
		{[]string{"--duration", "-1s"}, "--duration"},
		{[]string{"--size", "-1"}, "--size"},
		{[]string{"--size", "300000000"}, "--size"},
		{[]string{"--trace", trace}, "--trace is played by --behaviour replay only"},
		{[]string{"--speed", "0"}, "--speed"},
		{[]string{"--speed", "0", "--behaviour", "boids"}, "--speed"},
		{[]string{"--parallel", "0"}, "--parallel"},
		{[]string{"--prefix", "a/b"}, "--prefix"},
		{[]string{"--prefix", "a+"}, "--prefix"},
		{[]string{"--realm", "x/y"}, "--realm"},
		{[]string{"--scene", "a b"}, "--scene"},
		{[]string{"--scene", "a/b"}, "--scene"},
		{[]string{"--namespace", "a+"}, "--namespace"},
		{[]string{"--behaviour", "foo"}, "--behaviour"},
		{[]string{"--users", "2", "--scenes", "3"}, "--scenes 3 is more than --users 2"},
		// Refused naming the flag, not left to each bot to fail to
		// connect, naming no flag (exit 1).
		{[]string{"--addr", "nonsense"}, `--addr "nonsense": want host:port`},
		{[]string{"--addr", "127.0.0.1:99999"}, `--addr "127.0.0.1:99999": port`},
		{[]string{"--addr", "https://127.0.0.1:8080"}, `--addr "https://127.0.0.1:8080": bots speak MQTT`},
		{[]string{"--addr", "ws://"}, `--addr "ws://": want ws://host:port/path`},
		{[]string{"--no-auth=false", "--token-url", "notaurl"}, `--token-url "notaurl": want http://host:port or https://host:port`},
		{[]string{"--no-auth=false", "--token-url", "ftp://h:21"}, `--token-url "ftp://h:21"`},
		// as before
		{[]string{"--users", "0"}, "--users"},
		{[]string{"--rate", "0"}, "--rate"},
		{[]string{"--area", "0,0,1,1"}, "--area"},
		{[]string{"--behaviour", "replay"}, "--trace"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"--addr", "127.0.0.1:1", "--no-auth"}, tc.args...)
			err := runBotsFleet(context.Background(), args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("runBotsFleet(%q): %v, want an error about %s", tc.args, err, tc.want)
			}
			if ue := (*usageError)(nil); !errors.As(err, &ue) {
				t.Errorf("runBotsFleet(%q): %v is not a usage error (exit code 2)", tc.args, err)
			}
			if strings.Contains(stderr.String(), "connecting") {
				t.Errorf("it started connecting:\n%s", stderr.String())
			}
		})
	}
	// --speed 0 is no error where speed does not matter.
	var stdout, stderr bytes.Buffer
	err := runBotsFleet(context.Background(), []string{"--addr", "127.0.0.1:1", "--no-auth", "--behaviour", "static", "--speed", "0"}, &stdout, &stderr)
	if err == nil || strings.Contains(err.Error(), "--speed") {
		t.Errorf("static bots with --speed 0: %v, want only the connection to fail", err)
	}
}

// The default --prefix is new each run: two runs side by side with one
// prefix take over each other's client ids (the server keeps the newest
// connection of a client id), and the first run's bots were all
// disconnected.
func TestRandomPrefix(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 20; i++ {
		p := randomPrefix()
		if err := topic.ValidLevel("prefix", p+"0"); err != nil || !strings.HasPrefix(p, "bot") {
			t.Fatalf("randomPrefix() = %q: %v", p, err)
		}
		seen[p] = true
	}
	if len(seen) < 2 {
		t.Errorf("20 calls of randomPrefix gave %d prefix(es)", len(seen))
	}
}

// Tokens the bots sign themselves (--data) outlast the run: the server
// closes a connection when its token expires. It fails if they are good
// for an hour whatever --duration says.
func TestBotsTokenTTL(t *testing.T) {
	for _, tc := range []struct {
		duration, atLeast time.Duration
	}{
		{0, 7 * 24 * time.Hour}, // until interrupted
		{time.Minute, time.Minute},
		{3 * time.Hour, 3 * time.Hour},
		{48 * time.Hour, 48 * time.Hour},
	} {
		if got := botsTokenTTL(tc.duration); got <= tc.atLeast {
			t.Errorf("botsTokenTTL(%s) = %s, want more than %s", tc.duration, got, tc.atLeast)
		}
	}
}

// A run of xrealm bots against a real server with tokens signed from its
// data directory, unpadded poses (--size 0, not padded to the default of
// 310 bytes), and a summary that counts every delivery.
func TestBotsRun(t *testing.T) {
	cfg, _ := startTestServer(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := runBotsFleet(ctx, []string{"--addr", cfg.MQTTAddr, "--data", cfg.DataDir, "--users", "3", "--scene", "run",
		"--size", "0", "--rate", "20", "--duration", "600ms", "--progress", "200ms"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	out := stdout.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "total ") || !strings.Contains(last, "users 3/3") {
		t.Fatalf("summary %q: want all 3 users\n%s", last, out)
	}
	checkEverySentPoseDelivered(t, last, 3)
	// --size 0 sends poses unpadded.
	pose := bots.AppendPose(nil, "camera_bot0_bot0", bots.Pose{Rot: bots.NoRotation}, time.Now().UnixNano(), botsPayloadSize(0))
	if size := len(pose); size > unpaddedPose+10 {
		t.Errorf("poses of %d bytes with --size 0, want them unpadded (about %d)", size, unpaddedPose)
	}
}

// A run whose poses all vanish (larger than the server takes: it drops
// them) says so under its summary, rather than only "received 0".
func TestBotsSaysWhenNothingCameBack(t *testing.T) {
	cfg, _ := startTestServer(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := runBotsFleet(ctx, []string{"--addr", cfg.MQTTAddr, "--no-auth", "--users", "1", "--scene", "big",
		"--size", strconv.Itoa(cfg.MaxPayload + 1), "--rate", "20", "--duration", "300ms", "--progress", "1h"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if out := stdout.String(); !strings.Contains(out, "received 0 ") || !strings.Contains(out, "no pose came back") {
		t.Errorf("want a summary with nothing received and a line saying no pose came back, got:\n%s", out)
	}
}
