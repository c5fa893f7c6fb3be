package cli

import (
	"context"
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
