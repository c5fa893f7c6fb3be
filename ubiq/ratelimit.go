package ubiq

import (
	"math"
	"strconv"
	"sync/atomic"
	"time"
)

// Budget is the inbound budget of each connection: how many frames, and
// bytes of frames, a peer may send a second, relayed frames and messages to
// the server alike, with bursts. A peer that sends more is not cut off and
// loses nothing: the server stops reading from it until its budget has
// refilled, so TCP (or WebSocket) flow control holds the sender back, and
// no other connection waits. Without it one peer that writes as fast as it
// can would have the server fan its frames out at that speed, and every
// receiver that could not keep up would be disconnected for falling behind.
//
// Each limit is a token bucket: so many tokens a second, up to the burst
// held. A frame takes one frame token and its length (header included) in
// byte tokens, taking a bucket into debt if it holds fewer; the
// connection's read loop then waits until both are out of debt before it
// handles the frame, and reads nothing meanwhile. So a frame larger than
// the byte burst still passes, after its excess has refilled. A zero field
// is DefaultBudget's; a negative rate lifts that limit.
type Budget struct {
	FramesPerSecond float64
	FrameBurst      float64
	BytesPerSecond  float64
	ByteBurst       float64
}

// DefaultBudget is generous for real Ubiq use and far above what the
// rooms benchmark's bots send, which it must never hold back (docs/ubiq.md,
// "Inbound budget"). A bot sends about 63 frames and 31 KB a second: 60
// poses of 500 bytes, a Ping, a peer ping and its pong (5 more frames with
// kNN positions); the defaults are 30 and 17 times that. An avatar and a
// dozen transforms at 90 Hz are about 1,200 frames and, at 100 to 200
// bytes each, 120 to 240 KB a second. The bursts take a second of frames,
// and one frame of the largest size (4 MiB) from a peer that has rested.
var DefaultBudget = Budget{
	FramesPerSecond: 2000,
	FrameBurst:      2000,
	BytesPerSecond:  512 << 10,
	ByteBurst:       4 << 20,
}

// withDefaults fills b's zero fields from DefaultBudget.
func (b Budget) withDefaults() Budget {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&b.FramesPerSecond, DefaultBudget.FramesPerSecond)
	def(&b.FrameBurst, DefaultBudget.FrameBurst)
	def(&b.BytesPerSecond, DefaultBudget.BytesPerSecond)
	def(&b.ByteBurst, DefaultBudget.ByteBurst)
	return b
}

// limited reports whether b limits anything.
func (b Budget) limited() bool { return b.FramesPerSecond > 0 || b.BytesPerSecond > 0 }

// String is b for a log line.
func (b Budget) String() string {
	part := func(rate, burst float64, unit string) string {
		if rate <= 0 {
			return "no " + unit + " limit"
		}
		f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
		return f(rate) + " " + unit + "/s (burst " + f(burst) + ")"
	}
	return part(b.FramesPerSecond, b.FrameBurst, "frames") + ", " + part(b.BytesPerSecond, b.ByteBurst, "bytes")
}

// bucket is one token bucket. Its level may go below zero: a frame is
// taken whole, and the debt is what its sender waits out.
type bucket struct {
	rate  float64 // tokens a second; <= 0: no limit
	burst float64 // most tokens held (at least one)
	level float64
	at    time.Time // when level was last brought up to date
}

func newBucket(rate, burst float64, now time.Time) bucket {
	burst = max(burst, 1)
	return bucket{rate: rate, burst: burst, level: burst, at: now}
}

// take refills b up to now, then takes n tokens. It returns how long from
// now until the level is back at zero (0 if it did not go below), and
// whether b was full before the take: its sender had rested.
func (b *bucket) take(now time.Time, n float64) (wait time.Duration, full bool) {
	if b.rate <= 0 {
		return 0, true
	}
	if d := now.Sub(b.at); d > 0 {
		b.level = min(b.burst, b.level+d.Seconds()*b.rate)
		b.at = now
	}
	full = b.level >= b.burst
	b.level -= n
	if b.level >= 0 {
		return 0, full
	}
	// At least 1ns: a wait of zero would let the frame through in debt;
	// at most maxWait: a tiny rate would overflow a Duration.
	secs := -b.level / b.rate
	if secs >= maxWait.Seconds() {
		return maxWait, full
	}
	return time.Duration(math.Ceil(secs * float64(time.Second))), full
}

// maxWait is the longest one frame is held back. Only a budget far below
// any real use waits that long; the next frame waits again.
const maxWait = time.Minute

// limiter is a connection's inbound budget: a bucket of frames and one of
// bytes. It is used by the connection's read loop only.
type limiter struct {
	frames, bytes bucket
}

func newLimiter(b Budget, now time.Time) *limiter {
	return &limiter{frames: newBucket(b.FramesPerSecond, b.FrameBurst, now), bytes: newBucket(b.BytesPerSecond, b.ByteBurst, now)}
}

// take charges a frame of size bytes that arrived at now. It returns how
// long the reader must wait before it handles the frame (0: at once), and
// whether both buckets were full before it: the sender had been within
// its budget long enough to have its whole burst again, which ends a
// throttling episode.
func (l *limiter) take(now time.Time, size int) (wait time.Duration, rested bool) {
	return l.takeN(now, 1, size)
}

// takeN charges frames frames and size bytes, as take does one frame: a
// WebSocket connection is charged its bytes as they are read off the
// wire, and each message apart.
func (l *limiter) takeN(now time.Time, frames, size int) (wait time.Duration, rested bool) {
	wf, ff := l.frames.take(now, float64(frames))
	wb, fb := l.bytes.take(now, float64(size))
	return max(wf, wb), ff && fb
}

// throttleLogEvery bounds how often one connection logs the start of a
// throttling episode.
const throttleLogEvery = time.Minute

// throttle is a connection's inbound budget and its throttling state,
// used by its read loop only.
type throttle struct {
	lim      *limiter // nil: no budget
	timer    *time.Timer
	episode  bool         // waiting for the budget since it was last full
	episodes int          // episodes so far
	loggedAt time.Time    // when the last episode was logged
	unlogged int          // episodes since then that were not logged
	waited   atomic.Int64 // nanoseconds waited in all, for the connection's metric
}

// admit charges frames frames and size bytes to the connection's inbound
// budget. When the budget is spent it waits, on the read loop, until it
// has refilled, so that the connection is not read meanwhile: only its
// sender is held back. It reports false if the connection closed during
// the wait (what was charged is then not handled).
func (c *conn) admit(frames, size int) bool {
	t := &c.throttle
	if t.lim == nil {
		return true
	}
	now := time.Now()
	wait, rested := t.lim.takeN(now, frames, size)
	if rested {
		t.episode = false
	}
	if wait <= 0 {
		return true
	}
	m := c.s.m
	m.throttledFrames.Inc()
	if !t.episode {
		t.episode = true
		t.episodes++
		m.throttleEpisodes.Inc()
		if t.loggedAt.IsZero() || now.Sub(t.loggedAt) >= throttleLogEvery {
			c.log.Info("Ubiq peer throttled: it sends more than its inbound budget, and the server reads from it only as the budget allows",
				"peer", c.uuid(), "budget", c.s.cfg.Inbound.String(), "episodes", t.episodes, "unlogged_episodes", t.unlogged)
			t.loggedAt, t.unlogged = now, 0
		} else {
			t.unlogged++
		}
	}
	if t.timer == nil {
		t.timer = time.NewTimer(wait)
	} else {
		t.timer.Reset(wait)
	}
	c.heldSince.Store(now.UnixNano())
	closed := false
	select {
	case <-t.timer.C:
	case <-c.done:
		t.timer.Stop()
		closed = true
	}
	waited := time.Since(now)
	// The time held back is not silence: the peer's Pings wait behind
	// the frames the server does not read yet (Config.PeerTimeout). It is
	// credited before the wait is marked over, so that the sweep, which
	// reads both without a lock, never sees neither (it may see both, and
	// count the wait twice for a moment).
	if credit := min(int64(waited), c.creditCap()-c.heldCredit.Load()); credit > 0 {
		c.lastServer.Store(min(c.lastServer.Load()+credit, time.Now().UnixNano()))
		c.heldCredit.Add(credit)
	}
	c.heldSince.Store(0)
	m.throttledSeconds.Add(waited.Seconds())
	t.waited.Add(int64(waited))
	return !closed
}

// silentSince is when the connection's silence began, as Config.PeerTimeout
// counts it: its last message to the server, moved later by the time the
// server held it back for its budget, the wait under way included. Held
// time counts up to twice PeerTimeout in all since that message (a Ubiq
// client pings every second, and the longest wait of the default budget,
// for a 4 MiB frame, is 8 s), so a peer that the budget holds back is not
// taken for silent, and one that sends only relayed frames (no Ping)
// still times out, at most twice PeerTimeout later.
func (c *conn) silentSince(now time.Time) int64 {
	last := c.lastServer.Load()
	if h := c.heldSince.Load(); h != 0 {
		room := c.creditCap() - c.heldCredit.Load()
		last += max(0, min(now.UnixNano()-h, room))
	}
	return last
}

// creditCap is the most held time that counts as not silent between two
// messages to the server (silentSince).
func (c *conn) creditCap() int64 { return 2 * int64(c.s.cfg.PeerTimeout) }
