package bots

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// FleetConfig describes N bots.
type FleetConfig struct {
	Transport Transport
	Users     int
	Realm     string   // "" = "realm"
	Scenes    []string // "namespace/scene"; bot i joins Scenes[i%len]; none = public/bench
	Rate      float64  // poses per second per bot; 0 = 10; otherwise see CheckRate
	Behaviour Spec
	Seed      uint64
	// Prefix starts user names and client ids: {prefix}{i}; "" = "bot".
	Prefix string
	// Parallel bounds how many bots connect at once; 0 = 16.
	Parallel int
	// Reconnect makes a bot whose connection ends join again, as a
	// browser client does, after a wait that doubles from ReconnectMin
	// to ReconnectMax, jittered, while it fails. Its poses due while it
	// is away count as missed. Without it, a bot whose connection ends
	// stops (a benchmark's bots: a lost connection is a result).
	Reconnect bool
	Log       *slog.Logger
}

// How a bot joins again (FleetConfig.Reconnect). It waits ReconnectMin,
// doubled after each try up to ReconnectMax, each wait drawn between half
// and all of it, so that the bots of a server that restarted do not all
// come back at once. A connection that lasted less than ReconnectStable
// does not reset the wait: bots that another run's bots keep taking over
// (the same client ids) back off as if their joins failed. A join again
// that does not finish in ReconnectJoinTimeout is given up and tried
// again.
const (
	ReconnectMin         = 500 * time.Millisecond
	ReconnectMax         = 10 * time.Second
	ReconnectStable      = 10 * time.Second
	ReconnectJoinTimeout = 30 * time.Second
)

// Fleet is a set of connected bots.
type Fleet struct {
	cfg    FleetConfig
	acc    *Accounts
	bots   []*bot
	scenes map[string]int // members per scene
	cancel context.CancelFunc
	wg     sync.WaitGroup
	lost   atomic.Int64 // connections lost
	rejoin atomic.Int64 // joins again after a lost connection (Reconnect)
	// rejoinFailed counts failed joins again, for logging the first few.
	rejoinFailed atomic.Int64
	// firstLost is why the first bot to lose its connection lost it.
	firstLost atomic.Pointer[error]
	// linkMu orders setting bots' links against Close: a join that
	// ends after Close closed the links closes its own.
	linkMu sync.Mutex
	closed bool
	// JoinTimes holds each bot's connect-and-subscribe time.
	JoinTimes []time.Duration
}

type bot struct {
	fleet *Fleet
	id    Identity
	beh   Behaviour
	link  atomic.Pointer[linkRef] // the current connection (nil before the first join)
	meter *Meter
	peers *peerTable // nil unless the behaviour watches peers

	// Its schedule: a pose due at first, first+period, ... until its
	// sender stopped (Unix ns; 0 while it runs). Collect counts the poses
	// due in a window from it, so that a sender blocked in a write through
	// the whole window still has them expected (its Meter counts what it
	// sent and skipped only once the write returns).
	first, period int64
	stopped       atomic.Int64

	// Deliveries of the fleet's own poses (not other clients' in the
	// scene): ownPend counted by the read goroutine, own once flushed.
	ownPend int64
	own     atomic.Int64
}

type linkRef struct{ Link }

// conn returns the bot's current connection.
func (b *bot) conn() Link { return b.link.Load().Link }

// setLink makes l the bot's connection, unless the fleet is closed: then
// it closes l and reports false.
func (f *Fleet) setLink(b *bot, l Link) bool {
	f.linkMu.Lock()
	defer f.linkMu.Unlock()
	if f.closed {
		l.Close()
		return false
	}
	b.link.Store(&linkRef{l})
	return true
}

// MaxRate is the highest rate CheckRate accepts: one pose per
// nanosecond, the resolution of the bots' clocks.
const MaxRate = 1e9

// CheckRate returns an error unless rate, poses per second per bot, is a
// finite number above 0 whose period (1/rate) is at least a nanosecond and
// fits a time.Duration.
func CheckRate(rate float64) error {
	if !(rate > 0 && rate <= MaxRate) || float64(time.Second)/rate >= math.MaxInt64 {
		return fmt.Errorf("rate %g poses/s: want a number above 0 and at most %g", rate, float64(MaxRate))
	}
	return nil
}

// StartFleet connects every bot, then starts them sending. It fails, with
// every bot disconnected, if any bot cannot join.
func StartFleet(ctx context.Context, cfg FleetConfig) (*Fleet, error) {
	if cfg.Transport == nil {
		return nil, errors.New("fleet: no transport")
	}
	if cfg.Users < 0 {
		return nil, fmt.Errorf("fleet: negative number of users %d", cfg.Users)
	}
	if cfg.Realm == "" {
		cfg.Realm = "realm"
	}
	if len(cfg.Scenes) == 0 {
		cfg.Scenes = []string{"public/bench"}
	}
	if cfg.Rate == 0 {
		cfg.Rate = 10
	}
	if err := CheckRate(cfg.Rate); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "bot"
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 16
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	for _, s := range cfg.Scenes {
		ns, sc, ok := strings.Cut(s, "/")
		if !ok || ns == "" || sc == "" || strings.ContainsAny(sc, "/+#") || strings.ContainsAny(ns, "+#") {
			return nil, fmt.Errorf("fleet: scene %q is not namespace/scene", s)
		}
	}
	f := &Fleet{cfg: cfg, acc: NewAccounts(), scenes: map[string]int{}, JoinTimes: make([]time.Duration, cfg.Users)}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	for i := 0; i < cfg.Users; i++ {
		scene := cfg.Scenes[i%len(cfg.Scenes)]
		ns, sc, _ := strings.Cut(scene, "/")
		name := fmt.Sprintf("%s%d", cfg.Prefix, i)
		b := &bot{
			fleet: f,
			id:    Identity{Index: i, Realm: cfg.Realm, Namespace: ns, Scene: sc, User: name, UserClient: name, ObjectID: "camera_" + name + "_" + name},
			meter: f.acc.NewMeter(),
		}
		beh, err := cfg.Behaviour.New(i, rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())))
		if err != nil {
			return nil, err
		}
		b.beh = beh
		if pw, ok := beh.(PeerWatcher); ok && pw.WantsPeers() {
			b.peers = &peerTable{self: b.id.ObjectID, m: map[string]*peerState{}}
		}
		f.bots = append(f.bots, b)
		f.scenes[scene]++
	}

	sem := make(chan struct{}, cfg.Parallel)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	tried := 0
	for _, b := range f.bots {
		// A slot first, then a look at the joins that ended meanwhile:
		// after a failure no more are started.
		sem <- struct{}{}
		mu.Lock()
		failed := len(errs) > 0
		mu.Unlock()
		if failed {
			<-sem
			break
		}
		tried++
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			t0 := time.Now()
			link, err := cfg.Transport.Join(ctx, b.id, b, b.peers != nil)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			f.JoinTimes[b.id.Index] = time.Since(t0)
			b.link.Store(&linkRef{link})
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		f.closeLinks()
		untried := ""
		if tried < len(f.bots) {
			untried = fmt.Sprintf(" (%d not tried)", len(f.bots)-tried)
		}
		return nil, fmt.Errorf("fleet: %d of %d bots could not join%s; first: %w", len(errs), len(f.bots), untried, errs[0])
	}

	runCtx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	period := time.Duration(float64(time.Second) / cfg.Rate)
	start := time.Now()
	for _, b := range f.bots {
		first := start.Add(time.Duration(rng.Int64N(int64(period))))
		b.first, b.period = first.UnixNano(), int64(period)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.send(runCtx, b, period, first)
		}()
	}
	for _, b := range f.bots {
		jitter := rand.New(rand.NewPCG(rng.Uint64(), 0))
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.watch(runCtx, b, jitter)
		}()
	}
	return f, nil
}

// watch accounts for the ends of bot b's connections until ctx ends, and
// with Reconnect joins it again after each.
func (f *Fleet) watch(ctx context.Context, b *bot, rng *rand.Rand) {
	wait, since := ReconnectMin, time.Now()
	for {
		select {
		case <-b.conn().Done():
		case <-ctx.Done():
			return
		}
		if ctx.Err() != nil {
			return
		}
		f.disconnected(b)
		if !f.cfg.Reconnect {
			return
		}
		if time.Since(since) >= ReconnectStable {
			wait = ReconnectMin
		}
		if !f.rejoinBot(ctx, b, rng, &wait) {
			return
		}
		since = time.Now()
	}
}

// rejoinBot joins bot b again, waiting *wait before each try (jittered),
// doubled after each failure up to ReconnectMax, until a join succeeds
// or ctx ends. It reports whether b has a connection again.
func (f *Fleet) rejoinBot(ctx context.Context, b *bot, rng *rand.Rand, wait *time.Duration) bool {
	for tries := 1; ; tries++ {
		t := time.NewTimer(*wait/2 + time.Duration(rng.Int64N(int64(*wait/2)+1)))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		*wait = min(2**wait, ReconnectMax)
		jctx, cancel := context.WithTimeout(ctx, ReconnectJoinTimeout)
		link, err := f.cfg.Transport.Join(jctx, b.id, b, b.peers != nil)
		cancel()
		if err == nil {
			if !f.setLink(b, link) {
				return false
			}
			if n := f.rejoin.Add(1); n <= logLost {
				f.cfg.Log.Info("bot joined again", "bot", b.id.User, "tries", tries)
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if n := f.rejoinFailed.Add(1); n <= logLost {
			f.cfg.Log.Warn("bot could not join again; retrying", "bot", b.id.User, "tries", tries, "err", err)
		} else if n == logLost+1 {
			f.cfg.Log.Warn("more joins again failed; the bots keep trying, at most 10 s apart")
		}
	}
}

// logLost is how many disconnections a fleet logs one by one; after them
// it says once that more followed (a server that stops takes every bot
// with it: a thousand lines would bury the reason).
const logLost = 3

// disconnected accounts for bot b's lost connection.
func (f *Fleet) disconnected(b *bot) {
	err := linkErr(b.conn())
	f.firstLost.CompareAndSwap(nil, &err)
	switch n := f.lost.Add(1); {
	case n <= logLost:
		f.cfg.Log.Warn("bot disconnected", "bot", b.id.User, "err", err)
	case n == logLost+1:
		f.cfg.Log.Warn("more bots disconnected; the progress lines count those connected")
	}
}

// linkErr returns why link's connection ended, if its transport says.
func linkErr(l Link) error {
	if e, ok := l.(interface{ Err() error }); ok && e.Err() != nil {
		return e.Err()
	}
	return errors.New("connection ended")
}

// LostReason returns why the first bot that lost its connection lost it,
// or nil if none has.
func (f *Fleet) LostReason() error {
	if p := f.firstLost.Load(); p != nil {
		return *p
	}
	return nil
}

// Receive and ReadDone make a bot its transport's Receiver: a read's
// messages are counted together.
// Only the fleet's own poses count in the measurement window (Collect):
// the others count in the totals and live latencies only.
func (b *bot) Receive(r *Received) {
	switch {
	case r.RoundTrip:
		b.meter.Record(r)
	case b.fleet.isOwn(r.From):
		b.meter.Record(r)
		b.ownPend++
	default:
		b.meter.StageUnwindowed(r.SentNanos, r.RecvNanos, r.Size)
	}
	if b.peers != nil && r.HasPos {
		b.peers.update(r.From, r.Pos, r.RecvNanos)
	}
}

func (b *bot) ReadDone() {
	b.meter.Flush()
	if b.ownPend > 0 {
		b.own.Add(b.ownPend)
		b.ownPend = 0
	}
}

// isOwn reports whether from, a sender's object id, is one of the fleet's
// bots' cameras: camera_{prefix}{i}_{prefix}{i} with i < Users.
func (f *Fleet) isOwn(from []byte) bool {
	p := f.cfg.Prefix
	rest, ok := bytes.CutPrefix(from, []byte("camera_"))
	if !ok {
		return false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(p)); !ok {
		return false
	}
	i, n := 0, 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' && n < 10 {
		i = i*10 + int(rest[n]-'0')
		n++
	}
	if n == 0 || n > 1 && rest[0] == '0' || i >= len(f.bots) {
		return false
	}
	digits := rest[:n]
	rest, ok = bytes.CutPrefix(rest[n:], []byte("_"))
	if !ok {
		return false
	}
	rest, ok = bytes.CutPrefix(rest, []byte(p))
	return ok && bytes.Equal(rest, digits)
}

// send paces one bot on its Schedule: a pose every period, stamped with
// the time it was due, skipping (and counting as missed) the ticks it is
// too late for rather than bursting.
func (f *Fleet) send(ctx context.Context, b *bot, period time.Duration, first time.Time) {
	defer func() { b.stopped.Store(time.Now().UnixNano()) }()
	t := time.NewTimer(time.Until(first))
	defer t.Stop()
	sched := Schedule{Next: first, Period: period}
	// The behaviour moves on the schedule's clock: a pose is where the bot
	// is at the time the pose is stamped with (its due time), so a late
	// sender's poses still trace the behaviour's speed (a recording of
	// them replays at that speed).
	last := first.Add(-period)
	var peers []Peer
	// Without Reconnect the sender ends with the connection; with it, a
	// tick while the bot is away is missed, and it sends again once back.
	var ended <-chan struct{}
	if !f.cfg.Reconnect {
		ended = b.conn().Done()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ended:
			return
		case <-t.C:
		}
		now := time.Now()
		if b.peers != nil {
			peers = b.peers.snapshot(peers[:0], now.UnixNano())
		}
		pose := b.beh.Step(sched.Next.Sub(last), peers)
		last = sched.Next
		if err := b.conn().SendPose(pose, sched.Due()); err != nil {
			if !f.cfg.Reconnect {
				return
			}
			sched.Skip(b.meter, time.Now())
		} else {
			sched.Sent(b.meter, time.Now())
		}
		t.Reset(max(time.Until(sched.Next), 0))
	}
}

// Accounts returns the fleet's accounts.
func (f *Fleet) Accounts() *Accounts { return f.acc }

// Users returns the number of bots.
func (f *Fleet) Users() int { return len(f.bots) }

// Connected returns the number of bots whose connection is up.
func (f *Fleet) Connected() int {
	n := 0
	for _, b := range f.bots {
		select {
		case <-b.conn().Done():
		default:
			n++
		}
	}
	return n
}

// Result is what a measurement window saw.
type Result struct {
	Users, Scenes int
	Duration      time.Duration
	Sent          int64 // poses sent in the window
	// Missed is the poses due in the window that their senders were too
	// late for and skipped (Meter.Missed): counted in Expected, never
	// delivered.
	Missed   int64
	Expected int64 // deliveries the poses due should make: each to every member of its scene
	// Delivered, Bytes and Latency are of the deliveries of the fleet's
	// own poses stamped in the window: other clients' in its scenes (a
	// browser's, another run's bots') are not counted (as in Delivery),
	// which Expected does not count either.
	Delivered    int64
	Bytes        int64 // payload bytes delivered
	Latency      *hdrhistogram.Histogram
	Disconnected int64 // connections the bots lost so far
}

// Ratio returns Delivered/Expected.
func (r Result) Ratio() float64 {
	if r.Expected == 0 {
		return 0
	}
	return float64(r.Delivered) / float64(r.Expected)
}

// PerSecond returns delivered messages per second.
func (r Result) PerSecond() float64 { return float64(r.Delivered) / r.Duration.Seconds() }

// Measure counts the messages sent in the next d and, after waiting drain
// more for those still in flight, their deliveries and latencies.
func (f *Fleet) Measure(ctx context.Context, d, drain time.Duration) (Result, error) {
	// Open the window a little in the future, so that every sender sees
	// it open before it stamps a message inside it.
	from := time.Now().Add(50 * time.Millisecond)
	f.acc.OpenWindow(from, from.Add(d))
	select {
	case <-time.After(time.Until(from) + d + drain):
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	return f.Collect(d), nil
}

// Collect sums the current window; d is its length.
func (f *Fleet) Collect(d time.Duration) Result {
	r := Result{Users: len(f.bots), Scenes: len(f.scenes), Duration: d, Latency: NewHistogram(), Disconnected: f.lost.Load()}
	w := f.acc.window.Load()
	for _, b := range f.bots {
		c := b.meter.Window()
		// The poses due are those of the schedule; those not sent were
		// missed, whether the sender skipped them or is still blocked.
		due := max(b.dueIn(w[0], w[1]), c.Sent+c.Missed)
		r.Sent += c.Sent
		r.Missed += due - c.Sent
		r.Expected += due * int64(f.scenes[b.id.Namespace+"/"+b.id.Scene])
		r.Delivered += c.Received
		r.Bytes += c.Bytes
	}
	f.acc.WindowLatencies(r.Latency)
	return r
}

// dueIn is the number of poses b's schedule has due in [from, to), up to
// when its sender stopped.
func (b *bot) dueIn(from, to int64) int64 {
	if b.period <= 0 {
		return 0
	}
	if s := b.stopped.Load(); s != 0 && s < to {
		to = s
	}
	// ticks first + k*period for k >= 0: those before t number
	// ceil((t-first)/period), at least 0
	before := func(t int64) int64 { return max(ceilDiv(t-b.first, b.period), 0) }
	return max(before(to)-before(from), 0)
}

// stopWait is how long Stop waits for the senders before it closes the
// connections of those still blocked in a write.
const stopWait = 2 * time.Second

// Stop stops the bots sending, and returns once every sender has
// stopped; they stay connected and receiving until Close. A sender still
// blocked in a write after stopWait (its server stopped reading, and the
// socket buffers are full) cannot stop otherwise: its bot's connection is
// closed, which ends the write.
func (f *Fleet) Stop() {
	if f.cancel != nil {
		f.cancel()
	}
	done := make(chan struct{})
	go func() {
		f.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(stopWait)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	var stuck []*bot
	for _, b := range f.bots {
		if b.stopped.Load() == 0 {
			stuck = append(stuck, b)
		}
	}
	if len(stuck) > 0 {
		f.cfg.Log.Warn("senders still blocked in a write: closing their connections (their server stopped reading)", "bots", len(stuck), "first", stuck[0].id.User, "waited", stopWait)
		closeLinksOf(stuck)
	}
	<-done
}

// Delivery returns the deliveries the bots' poses due so far should make,
// each to every member of its sender's scene, whether its sender sent it
// or skipped it (Meter.Missed), and the deliveries of them the bots
// received (not other clients' messages in their scenes, which the
// meters' totals count too): a run's delivery ratio.
func (f *Fleet) Delivery() (expected, delivered int64) {
	for _, b := range f.bots {
		sent, missed := b.meter.sent.Load(), b.meter.missed.Load()
		expected += (sent + missed) * int64(f.scenes[b.id.Namespace+"/"+b.id.Scene])
		delivered += b.own.Load()
	}
	return expected, delivered
}

// Close stops the bots and disconnects them.
func (f *Fleet) Close() error {
	if f.cancel != nil {
		f.cancel()
	}
	f.closeLinks()
	f.wg.Wait()
	return nil
}

func (f *Fleet) closeLinks() {
	f.linkMu.Lock()
	f.closed = true
	f.linkMu.Unlock()
	closeLinksOf(f.bots)
}

// closeLinksOf closes the connections of bots, many at once: a close may
// wait for a write in progress.
func closeLinksOf(bots []*bot) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, b := range bots {
		l := b.link.Load()
		if l == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			l.Close()
		}()
	}
	wg.Wait()
}

// Lost returns how many connections the bots lost, and how many of them
// they joined again (FleetConfig.Reconnect).
func (f *Fleet) Lost() (lost, rejoined int64) { return f.lost.Load(), f.rejoin.Load() }

// peerTable holds the peers a bot has seen lately, at most maxPeers of
// them: the scene's other clients choose the ids they send from, and a
// flood of distinct ids would otherwise cost an entry each per bot until
// the next snapshot.
type peerTable struct {
	self  string
	mu    sync.Mutex
	m     map[string]*peerState
	swept int64 // ns, when update last dropped quiet peers to make room
}

// maxPeers bounds a bot's peer table. A peer that is new while the table
// is full (and no peer in it has gone quiet) is not recorded.
const maxPeers = 4096

type peerState struct {
	pos, vel Vec3
	at       int64 // ns
}

// peerTTL is how long a peer that sends nothing more stays visible.
const peerTTL = 2 * time.Second

// update records peer from at pos, seen at now. A position that is not
// finite is ignored, and a velocity that is not (a jump across the range
// of a float64) is taken as none: one such pose from another client in
// the scene made a boid's own position NaN for good.
func (t *peerTable) update(from []byte, pos Vec3, now int64) {
	if !pos.finite() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if string(from) == t.self {
		return
	}
	p := t.m[string(from)]
	if p == nil {
		if len(t.m) >= maxPeers {
			// Look for quiet peers at most a few times per peerTTL,
			// not at every new id of a flood.
			if now-t.swept >= int64(peerTTL)/4 {
				t.swept = now
				t.dropQuiet(now)
			}
			if len(t.m) >= maxPeers {
				return
			}
		}
		t.m[string(from)] = &peerState{pos: pos, at: now}
		return
	}
	if dt := float64(now-p.at) / 1e9; dt > 0.01 {
		p.vel = pos.Sub(p.pos).Scale(1 / dt)
		if !p.vel.finite() {
			p.vel = Vec3{}
		}
		p.pos, p.at = pos, now
	}
}

// dropQuiet drops the peers that sent nothing for peerTTL; t.mu is held.
func (t *peerTable) dropQuiet(now int64) {
	for id, p := range t.m {
		if now-p.at > int64(peerTTL) {
			delete(t.m, id)
		}
	}
}

func (t *peerTable) snapshot(out []Peer, now int64) []Peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, p := range t.m {
		if now-p.at > int64(peerTTL) {
			delete(t.m, id)
			continue
		}
		out = append(out, Peer{ID: id, Pos: p.pos, Vel: p.vel})
	}
	return out
}
