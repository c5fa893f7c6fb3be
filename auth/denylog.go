package auth

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// probeKey marks a context as a probe (Probe).
type probeKey struct{}

// Probe returns ctx marked as a probe: an access check whose refusal is no
// denial, such as a listing that asks about each scene to leave out those
// the caller may not read. Checks that count and log refusals (DenyLog,
// the xrealm_auth_denials_total counter) leave a probe's refusals out.
func Probe(ctx context.Context) context.Context {
	return context.WithValue(ctx, probeKey{}, true)
}

// IsProbe reports whether ctx was marked by Probe.
func IsProbe(ctx context.Context) bool {
	v, _ := ctx.Value(probeKey{}).(bool)
	return v
}

// DenyLog logs refused actions without letting a client that is refused
// over and over flood the log: at most Burst lines per Interval, after which
// the refusals are only counted, and the next line that is logged says how
// many went unlogged. One DenyLog serves a whole front end; its zero value
// is ready to use.
type DenyLog struct {
	Burst    int           // lines per interval; 0 means 20
	Interval time.Duration // 0 means 10 s

	mu      sync.Mutex
	start   time.Time
	logged  int
	skipped int
}

// Deny logs one refusal, as log.Warn(msg, args...) would, unless this
// interval's lines are spent.
func (d *DenyLog) Deny(log *slog.Logger, msg string, args ...any) {
	burst, every := d.Burst, d.Interval
	if burst <= 0 {
		burst = 20
	}
	if every <= 0 {
		every = 10 * time.Second
	}
	d.mu.Lock()
	now := time.Now()
	if now.Sub(d.start) >= every {
		d.start, d.logged = now, 0
	}
	if d.logged >= burst {
		d.skipped++
		d.mu.Unlock()
		return
	}
	d.logged++
	skipped := d.skipped
	d.skipped = 0
	d.mu.Unlock()
	if skipped > 0 {
		args = append(args, "unlogged_refusals_before", skipped)
	}
	log.Log(context.Background(), slog.LevelWarn, msg, args...)
}
