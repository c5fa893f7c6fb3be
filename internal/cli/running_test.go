package cli

import (
	"cmp"
	"context"
	"testing"
)

// running is a command (runSFU, runServe) that a test runs on a
// goroutine of its own.
type running struct {
	name  string        // what failures call it, e.g. "xrealm sfu [--id 9]"
	ended chan struct{} // closed when the command has returned err
	err   error
	// reported says that endedEarly failed the test with err already
	reported bool
}

// startRunning runs run until the test ends: its context is then
// cancelled, and an error it returns fails the test, unless endedEarly
// reported it.
func startRunning(t *testing.T, name string, run func(ctx context.Context) error) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{name: name, ended: make(chan struct{})}
	go func() {
		defer close(r.ended)
		r.err = run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.ended
		if r.err != nil && !r.reported {
			t.Errorf("%s: %v", r.name, r.err)
		}
	})
	return r
}

// endedEarly fails the test with the command's error, once r.ended is
// closed: it ended before what the test waited for (before).
func (r *running) endedEarly(t *testing.T, before string) {
	t.Helper()
	<-r.ended
	r.reported = true
	t.Fatalf("%s ended before %s: %v", r.name, before, cmp.Or[any](r.err, "no error"))
}
