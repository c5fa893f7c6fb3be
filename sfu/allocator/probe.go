package allocator

import "time"

// Probing: a floor paused for lack of budget comes back only once the
// subscriber's estimate covers it, but an estimator learns only from what
// it is sent. pion's GCC, the default, caps an increase in its
// near-convergence state at 1.5 × the rate the subscriber received: with
// the video paused and only audio (about 45 kbit/s) flowing, its estimate
// can stay at its minimum for good, the video with it, after the link has
// recovered. So, as SFUs do, a subscriber whose floors are paused probes:
// now and then the cheapest paused floor is forwarded above the budget for
// a while (the probe), so that the estimator sees what the path carries.
// It stays if the estimate comes to cover it, and is paused again if the
// path shows congestion or the probe runs out of time; each failure
// doubles the wait before the next.

// ProbeConfig times a Prober; zero values take DefaultProbeConfig's.
type ProbeConfig struct {
	// Wait is how long a floor stays paused before the first probe, and
	// the wait after a probe that kept its floor; each failed probe
	// doubles the wait, up to MaxWait.
	Wait, MaxWait time.Duration
	// Quiet is how long the estimate must not have fallen before a probe.
	Quiet time.Duration
	// Window is the longest a probe lasts without the estimate coming to
	// cover its floor.
	Window time.Duration
	// Fall is the drop of the estimate between two steps that counts as a
	// fall (a fraction; GCC's decrease is to 0.85 × the rate received);
	// a fall during a probe ends it.
	Fall float64
	// Hold is how long after a kept probe a pause (of its floor, or of
	// any after nothing was paused) counts as a failure of that probe:
	// the wait doubles. Kept does not shorten the wait.
	Hold time.Duration
}

// DefaultProbeConfig: the first probe 2 s after a pause, then waits of up
// to 30 s; a probe on a path that does not congest lasts up to 30 s: GCC
// grows its estimate by at most 8 % a second, so from its 100 kbit/s
// minimum to a 1 Mbit/s video takes about 30 s. A pause within 10 s of a
// kept probe fails it.
var DefaultProbeConfig = ProbeConfig{Wait: 2 * time.Second, MaxWait: 30 * time.Second, Quiet: 2 * time.Second, Window: 30 * time.Second, Fall: 0.15, Hold: 10 * time.Second}

// ProbeEvent is what a Prober's step did.
type ProbeEvent int

const (
	// ProbeNone: no probe started or ended.
	ProbeNone ProbeEvent = iota
	// ProbeStarted: a probe starts; the next allocations force its floor.
	ProbeStarted
	// ProbeKept: the estimate covers the probed floor, which stays.
	ProbeKept
	// ProbeFailed: congestion, a falling estimate or the window's end
	// ended the probe; its floor is paused again. Also: a pause within
	// Hold of a kept probe (then counted both kept and failed).
	ProbeFailed
)

func (e ProbeEvent) String() string {
	switch e {
	case ProbeNone:
		return "none"
	case ProbeStarted:
		return "started"
	case ProbeKept:
		return "kept"
	case ProbeFailed:
		return "failed"
	}
	return "ProbeEvent(?)"
}

// ProbeInput is what one allocation tells a Prober.
type ProbeInput struct {
	// Estimate is the subscriber's estimate (bit/s).
	Estimate float64
	// Paused is the floor a probe would forward: the cheapest the
	// allocation paused (Allocator.CheapestPaused); "" when nothing is
	// paused. When the estimate is not what limits the subscriber (a
	// shared path's share is), say so with Congested, not with an empty
	// Paused: that would count as nothing paused.
	Paused string
	// Fits reports, during a probe, that the allocation forwarded the
	// probed floor within the budget (AllocateProbe's fits).
	Fits bool
	// Congested is the caller's sign of a queue on the path (its queueing
	// delay), or that the estimate is no longer what limits the
	// subscriber: it ends a probe and holds the next.
	Congested bool
}

// Prober is the probing state of one subscriber. It is pure: the caller
// passes the time. It is not safe for concurrent use.
type Prober struct {
	cfg      ProbeConfig
	probing  string    // the floor being probed; "" none
	started  time.Time // when the probe started
	next     time.Time // no probe before
	wait     time.Duration
	paused   bool      // something was paused at the last step
	clear    time.Time // since when nothing has been paused (!paused)
	last     float64
	lastFall time.Time
	kept     string    // the floor of the last kept probe, within Hold
	keptAt   time.Time // when it was kept
}

// NewProber returns a prober timed by cfg.
func NewProber(cfg ProbeConfig) *Prober {
	d := DefaultProbeConfig
	if cfg.Wait <= 0 {
		cfg.Wait = d.Wait
	}
	if cfg.MaxWait < cfg.Wait {
		cfg.MaxWait = max(d.MaxWait, cfg.Wait)
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = d.Quiet
	}
	if cfg.Window <= 0 {
		cfg.Window = d.Window
	}
	if cfg.Fall <= 0 {
		cfg.Fall = d.Fall
	}
	if cfg.Hold <= 0 {
		cfg.Hold = d.Hold
	}
	return &Prober{cfg: cfg, wait: cfg.Wait}
}

// Probing is the floor the next allocation forces (AllocateProbe); ""
// when no probe runs.
func (p *Prober) Probing() string { return p.probing }

// Step takes one allocation's outcome at now and returns what changed. A
// probe starts once a floor has been paused for the wait, the estimate
// has not fallen for Quiet and the path is not congested; it keeps its
// floor once the estimate covers it with headroom (Fits), and fails on
// congestion, on a fall of the estimate, at the end of its Window, or,
// kept, when its floor (or any, after nothing was paused) is paused
// within Hold.
func (p *Prober) Step(now time.Time, in ProbeInput) ProbeEvent {
	fell := p.last > 0 && in.Estimate < p.last*(1-p.cfg.Fall)
	if fell || p.lastFall.IsZero() {
		p.lastFall = now
	}
	p.last = in.Estimate
	if p.probing != "" {
		switch {
		case in.Fits:
			// the wait is kept: a pause within Hold doubles it (below)
			p.kept, p.keptAt = p.probing, now
			p.probing = ""
			p.next = now.Add(p.wait)
			return ProbeKept
		case in.Congested || fell || now.Sub(p.started) >= p.cfg.Window:
			p.probing = ""
			p.wait = min(2*p.wait, p.cfg.MaxWait)
			p.next = now.Add(p.wait)
			return ProbeFailed
		}
		return ProbeNone
	}
	if p.kept != "" && now.Sub(p.keptAt) >= p.cfg.Hold {
		p.kept = ""
	}
	if p.kept != "" && in.Paused != "" && (in.Paused == p.kept || !p.paused) {
		// paused again within Hold of the kept probe (a dip of the
		// estimate): the probe failed, and the wait doubles, so that
		// the floor does not go paused, probed, kept every Wait (2 s)
		p.kept = ""
		p.paused = true
		p.wait = min(2*p.wait, p.cfg.MaxWait)
		p.next = now.Add(p.wait)
		return ProbeFailed
	}
	if in.Paused == "" {
		// nothing paused: once nothing has been for MaxWait, the next
		// pause starts afresh (the wait back to Wait). Not at once: a
		// floor that flaps (or a step that reports the share as the
		// limit with nothing paused) keeps its backoff.
		if p.paused || p.clear.IsZero() {
			p.paused, p.clear = false, now
		}
		if now.Sub(p.clear) >= p.cfg.MaxWait {
			p.wait = p.cfg.Wait
		}
		return ProbeNone
	}
	if !p.paused {
		p.paused = true
		if t := now.Add(p.wait); t.After(p.next) {
			p.next = t
		}
	}
	if now.Before(p.next) || now.Sub(p.lastFall) < p.cfg.Quiet || in.Congested {
		return ProbeNone
	}
	p.probing, p.started = in.Paused, now
	return ProbeStarted
}

// CheapestPaused returns the demand a probe would forward: of the demands
// that dec does not forward, the one whose floor (cheapest choice) costs
// least, the first in Allocate's order among equal costs, audio before
// anything else (AllocateProbe forwards no video or point cloud while an
// audio is paused); "" when there is none.
func (a *Allocator) CheapestPaused(demands []Demand, dec Decision) (id string, rate float64) {
	for _, audio := range []bool{true, false} {
		for _, d := range a.order(demands) {
			if (d.Kind == Audio) != audio || dec[d.ID] != 0 {
				continue
			}
			_, r := a.cheapest(d)
			if r > 0 && (id == "" || r < rate) {
				id, rate = d.ID, r
			}
		}
		if id != "" {
			break
		}
	}
	return id, rate
}

// AllocateProbe is Allocate that also forwards the floor of the demand
// named probe, above the budget if it does not fit: a probe (Prober); not
// a video's or point cloud's while an audio does not fit.
// fits reports that it fitted with the headroom a paused floor needs to
// resume (the floors forwarded within the budget fit in budget ÷
// (1+ResumeMargin)); a floor forwarded above the budget counts as
// forwarded, so that the next Allocate keeps it with no headroom once the
// budget covers it. A probe named by no demand fits.
func (a *Allocator) AllocateProbe(budget float64, demands []Demand, probe string) (dec Decision, used float64, fits bool) {
	if probe == "" {
		dec, used = a.Allocate(budget, demands)
		return dec, used, true
	}
	dec, used = a.allocateForcing(budget, demands, true, probe)
	for _, d := range demands {
		if d.ID == probe {
			// kept only with the headroom a paused floor needs to come
			// back (ResumeMargin): without it, the next dip of the
			// estimate paused it again
			return dec, used, a.forced == "" && dec[probe] != 0 && a.floors*(1+ResumeMargin) <= budget
		}
	}
	return dec, used, true
}
