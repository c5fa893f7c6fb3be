package ubiq

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/fanout"
)

// TestBucket drives one token bucket through sequences of takes at given
// times (no clock: the times are passed in).
func TestBucket(t *testing.T) {
	type step struct {
		at   time.Duration // since the bucket was made
		n    float64
		wait time.Duration
		full bool
	}
	ms := time.Millisecond
	for _, tc := range []struct {
		name        string
		rate, burst float64
		steps       []step
	}{
		{"a burst passes, the next waits for one token", 100, 3, []step{
			{0, 1, 0, true}, {0, 1, 0, false}, {0, 1, 0, false},
			{0, 1, 10 * ms, false}, // 1 token at 100/s
		}},
		{"waiting out the debt brings the level to zero", 100, 2, []step{
			{0, 2, 0, true}, {0, 1, 10 * ms, false},
			{10 * ms, 1, 10 * ms, false}, // level 0 at 10ms: the next waits again
			{40 * ms, 1, 0, true},        // 3 tokens came back, capped at the burst of 2
		}},
		{"refill stops at the burst: rest longer does not save more", 10, 5, []step{
			{0, 5, 0, true}, {10 * time.Second, 5, 0, true}, {10 * time.Second, 1, 100 * ms, false},
		}},
		{"the sender has rested once the bucket is full again", 1000, 10, []step{
			{0, 10, 0, true}, {5 * ms, 1, 0, false}, {9 * ms, 1, 0, false},
			{20 * ms, 1, 0, true},
		}},
		{"a take larger than the burst passes from a full bucket and leaves debt", 1 << 20, 4 << 20, []step{
			{0, 6 << 20, 2 * time.Second, true},
			{2 * time.Second, 100, 95368 * time.Nanosecond, false}, // 100 B at 1 MiB/s
		}},
		{"a steady sender within its rate never waits", 60, 60, []step{
			{0, 1, 0, true}, {17 * ms, 1, 0, true}, {34 * ms, 1, 0, true}, {1000 * ms, 1, 0, true},
		}},
		{"a steady sender over its rate waits, one token at a time", 100, 1, []step{
			{0, 1, 0, true}, {1 * ms, 1, 9 * ms, false}, {10 * ms, 1, 10 * ms, false}, {20 * ms, 1, 10 * ms, false},
		}},
		{"a time before the last take (a late caller) refills nothing", 100, 2, []step{
			{10 * ms, 2, 0, true}, {5 * ms, 1, 10 * ms, false},
		}},
		{"no rate: no limit", 0, 1, []step{
			{0, 1e9, 0, true}, {0, 1e9, 0, true},
		}},
		{"a burst below one is one", 10, 0, []step{
			{0, 1, 0, true}, {0, 1, 100 * ms, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Unix(1000, 0)
			b := newBucket(tc.rate, tc.burst, t0)
			for i, s := range tc.steps {
				wait, full := b.take(t0.Add(s.at), s.n)
				if !near(wait, s.wait) || full != s.full {
					t.Fatalf("step %d (take %g at %v): wait %v full %v, want %v %v", i, s.n, s.at, wait, full, s.wait, s.full)
				}
			}
		})
	}
}

// TestLimiter: a frame waits for whichever of the two buckets is further
// in debt, and both are charged.
func TestLimiter(t *testing.T) {
	ms := time.Millisecond
	type step struct {
		at     time.Duration
		size   int
		wait   time.Duration
		rested bool
	}
	for _, tc := range []struct {
		name   string
		budget Budget
		steps  []step
	}{
		{"frames run out first", Budget{FramesPerSecond: 100, FrameBurst: 2, BytesPerSecond: 1e6, ByteBurst: 1e6}, []step{
			{0, 100, 0, true}, {0, 100, 0, false}, {0, 100, 10 * ms, false},
		}},
		{"bytes run out first", Budget{FramesPerSecond: 100, FrameBurst: 100, BytesPerSecond: 1000, ByteBurst: 1000}, []step{
			{0, 600, 0, true}, {0, 600, 200 * ms, false},
			{200 * ms, 100, 100 * ms, false}, // bytes at zero; frames plenty
		}},
		{"a frame waits for the longer of the two", Budget{FramesPerSecond: 10, FrameBurst: 1, BytesPerSecond: 1000, ByteBurst: 100}, []step{
			{0, 100, 0, true}, {0, 150, 150 * ms, false}, // frames: 100ms, bytes: 150ms
		}},
		{"rested only when both are full", Budget{FramesPerSecond: 1000, FrameBurst: 10, BytesPerSecond: 100, ByteBurst: 100}, []step{
			{0, 100, 0, true}, {20 * ms, 1, 0, false}, // frames full again, bytes not
			{2 * time.Second, 1, 0, true},
		}},
		{"a byte limit alone", Budget{FramesPerSecond: -1, BytesPerSecond: 1000, ByteBurst: 1000}.withDefaults(), []step{
			{0, 1000, 0, true}, {0, 1, 1 * ms, false},
		}},
		{"the default lets a rooms bot through untouched", DefaultBudget, []step{
			// 60 poses of 512 bytes a second, with a Ping, a peer ping and
			// pongs in the same instant as one of them: never a wait.
			{0, 512, 0, true}, {0, 80, 0, false}, {0, 60, 0, false}, {0, 40, 0, false},
			{16 * ms, 512, 0, true}, {33 * ms, 512, 0, true}, {50 * ms, 512, 0, true},
		}},
		{"the default holds a flood to its burst, then its rate", DefaultBudget, []step{
			{0, 1 << 20, 0, true}, {0, 1 << 20, 0, false}, {0, 1 << 20, 0, false}, {0, 1 << 20, 0, false},
			{0, 1 << 20, 2 * time.Second, false}, // 5 MiB against a 4 MiB burst at 512 KiB/s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Unix(1000, 0)
			b := tc.budget.withDefaults()
			l := newLimiter(b, t0)
			for i, s := range tc.steps {
				wait, rested := l.take(t0.Add(s.at), s.size)
				if !near(wait, s.wait) || rested != s.rested {
					t.Fatalf("step %d (%d bytes at %v): wait %v rested %v, want %v %v", i, s.size, s.at, wait, rested, s.wait, s.rested)
				}
			}
		})
	}
}

// TestBudgetDefaults: zero fields take the defaults, negative rates stay
// (no limit), and a budget with neither limit limits nothing.
func TestBudgetDefaults(t *testing.T) {
	if got := (Budget{}).withDefaults(); got != DefaultBudget {
		t.Fatalf("zero budget: %+v, want %+v", got, DefaultBudget)
	}
	b := Budget{FramesPerSecond: -1, BytesPerSecond: 500}.withDefaults()
	if b.FramesPerSecond != -1 || b.BytesPerSecond != 500 || b.ByteBurst != DefaultBudget.ByteBurst || !b.limited() {
		t.Fatalf("partial budget: %+v", b)
	}
	if (Budget{FramesPerSecond: -1, BytesPerSecond: -1}).withDefaults().limited() {
		t.Fatal("a budget with both rates negative limits")
	}
	if s := b.String(); s != "no frames limit, 500 bytes/s (burst 4194304)" {
		t.Fatalf("String: %q", s)
	}
}

// near reports whether a wait is want, give or take a microsecond of
// floating-point rounding; a wait is never zero where one is due.
func near(got, want time.Duration) bool {
	if want == 0 || got == 0 {
		return got == want
	}
	return got > want-time.Microsecond && got < want+time.Microsecond
}

// TestFloodIsThrottled: a peer that sends as fast as it can write, in a
// room with a reader that keeps up and one that reads slowly (a small
// receive buffer, 4 KiB a millisecond at most) behind a queue bound of 256
// frames. The flood is held to the inbound budget, by reading the flooder
// no faster, which is counted and logged once. Both readers stay
// connected and get every frame, in order. Without the budget the server
// fans the flood out as fast as it comes (2,000 frames at once), and the
// slow reader falls more than twice its bound behind and is disconnected.
//
// The slow reader must not be disconnected while the flood is within the
// budget, even on a loaded machine where its goroutine is not run for a
// while: twice the bound, less the flooder's first burst of 100, lets it
// stall for 400 ms at 1,000 frames a second besides what the socket
// buffers hold (with 64 frames it was 28 frames, and a run at load
// average 5 failed once). And the flooder may pause too, long enough
// for its budget to refill: that ends a throttling episode, and the next
// is another, so at least one is counted (it was exactly one).
func TestFloodIsThrottled(t *testing.T) {
	for _, transport := range []string{"tcp", "ws"} {
		t.Run(transport, func(t *testing.T) { testFlood(t, transport) })
	}
}

func testFlood(t *testing.T, transport string) {
	const frames, size = 2000, 100
	logs := &logBuffer{}
	ts, id, raw, slow := startWithStalledPeer(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		c.Inbound = Budget{FramesPerSecond: 1000, FrameBurst: 100, BytesPerSecond: -1}
		c.Writer = fanout.Options{MaxFrames: 256}
	})
	addr := ts.tcp
	if transport == "ws" {
		addr = ts.ws
	}
	flooder, reader := dialPeer(t, addr), dialPeer(t, ts.tcp)
	flooder.join(JoinArgs{UUID: id})
	reader.join(JoinArgs{UUID: id})
	eventually(t, "all three members", func() bool { return countMembers(ts, id) == 3 })

	// The slow reader's frames, checked as they come: 0, 1, 2, ...
	slowDone := make(chan error, 1)
	go func() {
		r := bufio.NewReaderSize(pacedReader{raw}, 4096)
		next := 0
		for next < frames {
			f, err := ReadFrame(r, 1<<20)
			if err != nil {
				slowDone <- fmt.Errorf("after %d frames: %w", next, err)
				return
			}
			if IDOf(f) == slow.clientID {
				continue // a server message
			}
			if got, ok := payloadSeq(f); !ok || got != next {
				slowDone <- fmt.Errorf("frame %d is frame %d", next, got)
				return
			}
			next++
		}
		slowDone <- nil
	}()

	floodDone := make(chan error, 1)
	go func() {
		for n := range frames {
			if err := flooder.c.Send(NetworkId{A: 7, B: uint32(n % 100)}, seqPayload(n, size)); err != nil {
				floodDone <- err
				return
			}
		}
		floodDone <- nil
	}()

	eventually(t, "the flooder throttled", func() bool {
		n, _ := metricValue(collect(t, ts.s), "xrealm_ubiq_throttle_episodes_total")
		return n >= 1
	})
	// The others' read loops do not wait with the flooder's: the reader's
	// Ping is answered.
	next := 0
	check := func(m msg) {
		t.Helper()
		if m.to == reader.clientID {
			return
		}
		if got, ok := payloadSeq(m.frame); !ok || got != next {
			t.Fatalf("the reader's frame %d is frame %d", next, got)
		}
		next++
	}
	for _, m := range reader.barrier() {
		check(m)
	}
	for next < frames {
		check(reader.frame())
	}
	if err := <-floodDone; err != nil {
		t.Fatalf("the flooder's send failed: %v", err)
	}
	select {
	case err := <-slowDone:
		if err != nil {
			t.Fatalf("the slow reader: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the slow reader did not get every frame within 30s")
	}

	m := collect(t, ts.s)
	if !strings.Contains(m, "xrealm_ubiq_slow_disconnects_total 0\n") {
		t.Fatalf("a reader was disconnected:\n%s", grepLines(m, "xrealm_ubiq_slow"))
	}
	for _, p := range []*peer{flooder, reader, slow} {
		if connOf(ts, p.uuid) == nil {
			t.Fatalf("peer %s is not connected", p.uuid)
		}
	}
	if strings.Contains(m, "xrealm_ubiq_throttled_frames_total 0\n") || strings.Contains(m, "xrealm_ubiq_throttled_seconds_total 0\n") {
		t.Fatalf("the flood was not counted:\n%s", grepLines(m, "throttle"))
	}
	fc := connOf(ts, flooder.uuid)
	series := fmt.Sprintf(`xrealm_ubiq_connection_throttled_seconds_total{peer=%q,remote=%q,transport=%q}`, flooder.uuid, fc.nc.RemoteAddr().String(), transport)
	if !strings.Contains(m, series) || strings.Contains(m, series+" 0\n") {
		t.Fatalf("no throttled time for the flooder's connection (%s):\n%s", series, grepLines(m, "connection_throttled"))
	}
	lines := grepLines(logs.String(), "Ubiq peer throttled")
	if n := strings.Count(lines, "\n") + 1; lines == "" || n != 1 {
		t.Fatalf("%d log lines of the throttling, want 1:\n%s", n, lines)
	}
	for _, want := range []string{"level=INFO", "peer=" + flooder.uuid, "remote=" + fc.nc.RemoteAddr().String(), `budget="1000 frames/s (burst 100), no bytes limit"`} {
		if !strings.Contains(lines, want) {
			t.Errorf("log line %q lacks %q", lines, want)
		}
	}
	// The others were never held back.
	for _, p := range []*peer{reader, slow} {
		c := connOf(ts, p.uuid)
		series := fmt.Sprintf(`xrealm_ubiq_connection_throttled_seconds_total{peer=%q,remote=%q,transport="tcp"} 0`+"\n", p.uuid, c.nc.RemoteAddr().String())
		if !strings.Contains(m, series) {
			t.Errorf("peer %s was throttled, or has no series:\n%s", p.uuid, grepLines(m, "connection_throttled"))
		}
	}
}

// metricValue returns the value of the series named name (with its
// labels, if any) in m, the text form of a registry.
func metricValue(m, name string) (float64, bool) {
	for _, l := range strings.Split(m, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// pacedReader reads at most 4 KiB a millisecond: a reader on a slow link.
type pacedReader struct{ r io.Reader }

func (p pacedReader) Read(b []byte) (int, error) {
	time.Sleep(time.Millisecond)
	return p.r.Read(b[:min(len(b), 4096)])
}

// TestHeldBackPeerIsNotSilent: a peer that the inbound budget holds back
// for longer than PeerTimeout, with its Pings behind the frame it waits
// for, is not dropped as silent (the held time counted only once the wait
// was over, when the sweep had already closed it).
func TestHeldBackPeerIsNotSilent(t *testing.T) {
	ts := startServer(t, nil, func(c *Config) {
		c.PeerTimeout = time.Second
		c.MaxFrame = 2000
		c.Inbound = Budget{FramesPerSecond: -1, BytesPerSecond: 1000, ByteBurst: 1} // burst raised to one frame
	})
	id := newUUID()
	held, reader := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // both ping, as Ubiq clients do
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				held.c.Request("Ping", ClientArgs{ClientID: held.clientID})
				reader.c.Request("Ping", ClientArgs{ClientID: reader.clientID})
			}
		}
	}()
	held.join(JoinArgs{UUID: id})
	reader.join(JoinArgs{UUID: id})
	held.request("Ping", ClientArgs{ClientID: held.clientID})
	held.expect("Ping")
	// the first frame takes the burst, the second waits about 1.8 s
	for n := range 2 {
		if err := held.c.Send(NetworkId{A: 7, B: 1}, seqPayload(n, 1900)); err != nil {
			t.Fatal(err)
		}
	}
	for n := range 2 {
		f := reader.frame()
		if got, ok := payloadSeq(f.frame); !ok || got != n {
			t.Fatalf("frame %d is frame %d", n, got)
		}
	}
	held.expect("Ping") // answered after the wait: the connection is open
	if m := collect(t, ts.s); !strings.Contains(m, "xrealm_ubiq_timeouts_total 0\n") || !strings.Contains(m, "xrealm_ubiq_throttle_episodes_total 1\n") {
		t.Fatalf("want one throttling episode and no timeout:\n%s", grepLines(m, "xrealm_ubiq_t"))
	}
}

// TestThrottledSilentPeerTimesOut: a peer that sends only relayed frames,
// no Ping, times out even while the budget holds it back nearly all the
// time (each wait counted as not silent, it stayed connected for good).
func TestThrottledSilentPeerTimesOut(t *testing.T) {
	ts := startServer(t, nil, func(c *Config) {
		c.PeerTimeout = 500 * time.Millisecond
		c.Inbound = Budget{FramesPerSecond: 20, FrameBurst: 1, BytesPerSecond: -1}
	})
	id := newUUID()
	flooder := dialPeer(t, ts.tcp)
	flooder.join(JoinArgs{UUID: id})
	go func() {
		for n := 0; ; n++ {
			if flooder.c.Send(NetworkId{A: 7, B: 1}, seqPayload(n, 50)) != nil {
				return
			}
		}
	}()
	select {
	case <-flooder.c.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("a peer that never pings is still connected 20 s into a flood with a PeerTimeout of 0.5 s")
	}
	if m := collect(t, ts.s); !strings.Contains(m, "xrealm_ubiq_timeouts_total 1\n") {
		t.Fatalf("want the timeout counted:\n%s", grepLines(m, "xrealm_ubiq_t"))
	}
}

// TestBucketWaitIsBounded: a rate so small that the wait would overflow a
// Duration (it came out negative, letting the frame through at once)
// waits maxWait.
func TestBucketWaitIsBounded(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, rate := range []float64{1e-12, 1e-6, 1e-3} {
		b := newBucket(rate, 1, t0)
		b.take(t0, 1)
		if wait, _ := b.take(t0, 1); wait != maxWait {
			t.Errorf("rate %g: the second take waits %v, want %v", rate, wait, maxWait)
		}
	}
}
