package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xrealm/xrealm/internal/testlog"
)

// The first SIGTERM or interrupt ends the command's context and says how
// to quit at once; the handler is then gone, so the next signal has its
// default effect (not sent here: it would end the test binary).
func TestInterruptibleStopsOnFirstSignal(t *testing.T) {
	var out testlog.Buffer
	ctx, stop := interruptible(context.Background(), &out)
	defer stop()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGTERM did not end the context")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "terminated: stopping (again to quit at once)") {
		if time.Now().After(deadline) {
			t.Fatalf("stderr %q, want the line saying how to quit at once", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A command that ends by itself leaves no signal handler behind.
func TestInterruptibleStopWithoutSignal(t *testing.T) {
	var out testlog.Buffer
	ctx, stop := interruptible(context.Background(), &out)
	stop()
	<-ctx.Done()
	if out.String() != "" {
		t.Fatalf("stderr %q without a signal", out.String())
	}
}

// Main exits 2 for a command line it cannot run as given (no or an unknown
// command, an unknown flag, a bad or missing value, arguments left over),
// as Go's flag package does, 1 for a failure and 0 for help, so that a
// script can tell a typo from a failed run.
func TestExitCodes(t *testing.T) {
	tmp := t.TempDir()
	tests := []struct {
		args []string
		want int
	}{
		{nil, 2},
		{[]string{"-h"}, 0},
		{[]string{"bogus"}, 2},
		{[]string{"version", "extra"}, 2},
		{[]string{"version", "--bogus"}, 2},
		{[]string{"serve", "--bogus"}, 2},
		{[]string{"serve", "--max-payload", "many"}, 2},
		{[]string{"serve", "--log-level", "loud"}, 2},
		{[]string{"serve", "--routes", "host2:6222"}, 2},
		{[]string{"serve", "--max-payload", "999999999"}, 2},
		{[]string{"serve", "--config", "/nonexistent/xrealm.json"}, 2},
		{[]string{"token", "--user"}, 2},
		{[]string{"token", "--user", "u", "--ttl", "-1s"}, 2},
		{[]string{"bench"}, 2},
		{[]string{"bench", "nope"}, 2},
		{[]string{"bench", "-h"}, 0},
		{[]string{"bench", "rooms", "--max", "0"}, 2},
		{[]string{"bench", "rooms", "serve", "--listen", "127.0.0.1:1", "extra"}, 2},
		{[]string{"bench", "rooms", "--addr", "127.0.0.1:1", "--linger", "5ms"}, 2},
		{[]string{"bench", "cc", "--flows", "0", "--out", tmp}, 2},
		{[]string{"bench", "cc", "--summary", filepath.Join(tmp, "none.jsonl")}, 1},
		{[]string{"bench", "sfu", "--phase", "late", "--out", filepath.Join(tmp, "r.jsonl")}, 2},
		{[]string{"bench", "bus", "--rate", "0", "--out", tmp}, 2},
		{[]string{"bench", "bus", "--xrealm-env", "GOMAXPROCS", "--out", tmp, "--mosquitto", "", "--python", ""}, 2},
		{[]string{"bench", "bus", "--xrealm-env", "=1", "--out", tmp, "--mosquitto", "", "--python", ""}, 2},
		{[]string{"bench", "bus", "--profile", filepath.Join(tmp, "cpu.prof"), "--profile-users", "0"}, 2},
		{[]string{"bench", "bus", "--profile", filepath.Join(tmp, "cpu.prof"), "--profile-duration", "0"}, 2},
		{[]string{"bots", "--users", "0"}, 2},
		{[]string{"bots", "extra"}, 2},
		{[]string{"bots", "record"}, 2},
		{[]string{"bots", "pointcloud"}, 2},
		{[]string{"cc"}, 2},
		{[]string{"cc", "bogus"}, 2},
		{[]string{"cluster"}, 2},
		{[]string{"cluster", "remove-peer", "--timeout", "0", "n"}, 2},
		{[]string{"netem"}, 2},
		{[]string{"sfu"}, 2},
		{[]string{"sfu", "--join", "nats://127.0.0.1:1", "--id", "1", "--udp-ports", "9-1"}, 2},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			if got := Main(tt.args, &out); got != tt.want {
				t.Errorf("exit code %d, want %d; output %q", got, tt.want, out.String())
			}
		})
	}
}
