package ubiq

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xrealm/xrealm/internal/testlog"
)

// churnSample is the most goroutines and bucket consumers seen while a
// peer churned its observed rooms.
type churnSample struct {
	mu                    sync.Mutex
	goroutines, consumers int
}

// sampleChurn samples the process's goroutines and the consumers of ts's
// bucket until the returned function is called (or the test ends), which
// returns the highest counts.
func sampleChurn(t *testing.T, ts *testServer) func() (goroutines, consumers int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	st, err := ts.s.cfg.JS.Stream(ctx, "KV_"+ts.s.cfg.Bucket)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &churnSample{}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		for {
			g := runtime.NumGoroutine()
			n := 0
			if info, err := st.Info(ctx); err == nil {
				n = info.State.Consumers
			}
			s.mu.Lock()
			s.goroutines, s.consumers = max(s.goroutines, g), max(s.consumers, n)
			s.mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	end := func() (int, int) {
		once.Do(func() { close(stop) })
		<-done
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.goroutines, s.consumers
	}
	t.Cleanup(func() { end() })
	return end
}

// seenOrNext returns the first message of type typ that p skipped, or
// else the next one that comes.
func seenOrNext(p *peer, typ string) msg {
	p.t.Helper()
	for i, m := range p.seen {
		if m.typ == typ {
			p.seen = slices.Delete(p.seen, i, i+1)
			return m
		}
	}
	return p.expect(typ)
}

// cleanupGate holds a server's room cleanups back until it is opened,
// as a slow store would, and counts those it holds at once.
type cleanupGate struct {
	open             chan struct{}
	once             sync.Once
	mu               sync.Mutex
	held, most, runs int
}

func gateCleanups(t *testing.T, ts *testServer) *cleanupGate {
	g := &cleanupGate{open: make(chan struct{})}
	t.Cleanup(g.release) // before the server's shutdown, which waits for cleanups
	ts.s.cleanups.before = func(string) {
		g.mu.Lock()
		g.held++
		g.runs++
		g.most = max(g.most, g.held)
		g.mu.Unlock()
		<-g.open
		g.mu.Lock()
		g.held--
		g.mu.Unlock()
	}
	return g
}

func (g *cleanupGate) release() { g.once.Do(func() { close(g.open) }) }

// queued returns the number of rooms whose cleanup is queued or running.
func (q *cleanups) queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.rooms)
}

// TestObservedChurnIsBounded: a peer that observes 64 new rooms, and so
// drops the 64 it observed, frame after frame, without waiting for the
// answers, while the store is slow (cleanups are held back). Each dropped
// room is let go (its room goroutine deletes its presence key) and
// cleaned up (a record read and key listings, each a JetStream consumer).
// A connection has at most maxConnCleanups under way, past which its
// requests wait, and a node runs at most maxCleanupWorkers cleanups at
// once: goroutines and consumers stay within a bound that does not grow
// with the frames. (With a goroutine of its own for each cleanup, as many
// at once as the peer dropped rooms, they would pile up with the frames.) An honest observer on the same node
// still sees the members of the room it observes meanwhile, and once the
// store is fast again every churned room is removed.
func TestObservedChurnIsBounded(t *testing.T) {
	const frames = 8
	var logs testlog.Buffer
	ts := startServer(t, nil, func(c *Config) {
		c.Inbound = Budget{FramesPerSecond: -1, BytesPerSecond: -1}
		c.Logger = logs.Logger()
		// The member and the honest peer send nothing once they are in
		// (a Ubiq client pings every second), and the hostile peer's
		// requests are not read while it waits at its bound: on a loaded
		// machine the test outlasted the default 10 s, the member was
		// dropped as silent and its room removed with the churned ones.
		c.PeerTimeout = time.Hour
	})
	gate := gateCleanups(t, ts)
	member, honest, hostile := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	room := newUUID()
	member.join(JoinArgs{UUID: room})
	fresh := func() []string {
		ids := make([]string, maxObserved)
		for i := range ids {
			ids[i] = newUUID()
		}
		return ids
	}
	// The hostile peer's first 64 rooms: the room goroutines and
	// consumers that 64 observed rooms hold for as long as they are
	// observed.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	consumers := func() int {
		t.Helper()
		info, err := ts.s.cfg.JS.Stream(ctx, "KV_"+ts.s.cfg.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		return info.CachedInfo().State.Consumers
	}
	g0, c0 := runtime.NumGoroutine(), consumers()
	hostile.request("SetObserved", SetObservedArgs{ClientID: hostile.clientID, Rooms: fresh()})
	hostile.expect("Observed")
	baseG, baseC := runtime.NumGoroutine(), consumers()

	sample := sampleChurn(t, ts)
	for range frames {
		hostile.request("SetObserved", SetObservedArgs{ClientID: hostile.clientID, Rooms: fresh()})
	}
	// The hostile connection stops at its bound of cleanups under way.
	eventually(t, "the hostile peer's cleanups at their bound", func() bool {
		return ts.s.cleanups.queued() >= maxConnCleanups
	})
	// Meanwhile an honest peer observes the member's room.
	honest.request("SetObserved", SetObservedArgs{ClientID: honest.clientID, Rooms: []string{room}})
	var obs ObservedArgs
	honest.expect("Observed").decode(t, &obs)
	if len(obs.Rooms) != 1 || obs.Rooms[0] != room {
		t.Fatalf("the honest peer observes %v, want [%s]", obs.Rooms, room)
	}
	var added struct{ Peer PeerInfo }
	seenOrNext(honest, "PeerAdded").decode(t, &added)
	if added.Peer.UUID != member.uuid {
		t.Fatalf("the honest observer was told of peer %s, want the member %s", added.Peer.UUID, member.uuid)
	}
	// The hostile peer's requests wait: its cleanups stay at the bound.
	honest.barrier()
	if n := ts.s.cleanups.queued(); n > maxConnCleanups {
		t.Errorf("%d room cleanups queued while the store is slow, want at most %d (one connection's)", n, maxConnCleanups)
	}
	gate.release()
	for i := range frames {
		if m := hostile.expect("Observed"); !strings.Contains(m.args, "rooms") {
			t.Fatalf("answer %d to the churn: %s", i, m.args)
		}
	}
	// Every churned room goes, the last frame's once no longer observed.
	hostile.request("SetObserved", SetObservedArgs{ClientID: hostile.clientID, Rooms: []string{}})
	hostile.expect("Observed")
	// 576 rooms go through 4 cleanup workers, each a few store round
	// trips: on a loaded machine (load 14 on two cores) that took more
	// than 10 s. So the wait lasts as long as the rooms keep going, and
	// fails once none has gone for 10 s (or after 2 minutes), saying how
	// many are left.
	start := time.Now()
	for left, progress := -1, start; ; time.Sleep(50 * time.Millisecond) {
		lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
		keys, err := ts.s.store.listKeys(lctx, "r.*.i")
		lcancel()
		queued := ts.s.cleanups.queued()
		if err == nil && len(keys) == 1 && queued == 0 {
			break
		}
		if n := len(keys) + queued; err == nil && (left < 0 || n < left) {
			left, progress = n, time.Now()
		}
		if time.Since(progress) > 10*time.Second || time.Since(start) > 2*time.Minute {
			t.Fatalf("the churned rooms were not all removed after %v (none for %v): %d room keys left, want the member's room's alone (listing: %v); %d cleanups queued or running; the server logged:\n%s",
				time.Since(start).Round(time.Millisecond), time.Since(progress).Round(time.Millisecond), len(keys), err, queued, logs.String())
		}
	}
	t.Logf("the churned rooms were removed in %v", time.Since(start).Round(time.Millisecond))
	gs, cs := sample()
	gate.mu.Lock()
	most, runs := gate.most, gate.runs
	gate.mu.Unlock()
	if most > maxCleanupWorkers {
		t.Errorf("%d room cleanups ran at once, want at most %d", most, maxCleanupWorkers)
	}
	if runs < (frames+1)*maxObserved {
		t.Errorf("%d room cleanups ran, want at least one for each of the %d rooms let go", runs, (frames+1)*maxObserved)
	}
	// A connection holds at most twice 64 observed rooms at once (the
	// new ones are attached before the old ones are let go), and what 64
	// rooms hold was measured before the churn; besides those, only the
	// goroutines that activate a request's new rooms, the cleanup workers
	// and their consumers, and a few goroutines of the runtime, the bus
	// client and the test, come and go. The limits fail if each room let
	// go holds a goroutine, and a consumer while it lists keys, until it
	// is cleaned up: 64 more with each frame while the store is slow.
	const slack = 16
	if limit := baseG + (baseG - g0) + maxObserved + maxCleanupWorkers + slack; gs > limit {
		t.Errorf("%d goroutines while a peer churned its observed rooms, want at most %d (%d before it observed 64 rooms, %d after)", gs, limit, g0, baseG)
	}
	if limit := baseC + (baseC - c0) + maxCleanupWorkers + slack; cs > limit {
		t.Errorf("%d consumers of the room bucket while a peer churned its observed rooms, want at most %d (%d before it observed 64 rooms, %d after)", cs, limit, c0, baseC)
	}
	t.Logf("goroutines %d (%d, then %d), consumers %d (%d, then %d), cleanups %d", gs, g0, baseG, cs, c0, baseC, runs)
}
