package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/bots"
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
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- botsProgress(ctx, &out, fleet, 200*time.Millisecond) }()

	// Lines while the server runs (read only after botsProgress returns).
	time.Sleep(700 * time.Millisecond)
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if err == nil || !strings.Contains(err.Error(), "all 3 bots were disconnected") {
		t.Fatalf("botsProgress after the server stopped: %v, want all 3 bots disconnected", err)
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
	if err := botsProgress(rctx, &out, fleet, time.Hour); err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(out.String())
	if !strings.HasPrefix(line, "total ") || strings.Contains(line, "\n") {
		t.Fatalf("want only the summary, got:\n%s", out.String())
	}
	if strings.Contains(line, "sent 0 ") || strings.Contains(line, "received 0 ") || strings.Contains(line, "none received") {
		t.Errorf("summary %q: want what the run sent and received", line)
	}
}
