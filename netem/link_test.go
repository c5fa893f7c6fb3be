package netem

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseTrace(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		opps    int
		period  time.Duration
		rate    float64
		wantErr string
	}{
		{"constant", "1\n1\n", 2, time.Millisecond, 24e6, ""},
		{"blank lines", "\n5\n\n10\n", 2, 10 * time.Millisecond, 2.4e6, ""},
		{"empty", "", 0, 0, 0, "no delivery"},
		{"zero period", "0\n0\n", 0, 0, 0, "period"},
		{"not a number", "1\nx\n", 0, 0, 0, "line 2"},
		{"decreasing", "5\n3\n", 0, 0, 0, "before"},
		{"negative", "-1\n", 0, 0, 0, "line 1"},
		{"beyond the longest", "1\n18446744073709551615\n", 0, 0, 0, "beyond"},
		{"one past the longest", "4294967297\n", 0, 0, 0, "beyond"},
		{"the longest", "4294967296\n", 1, 4294967296 * time.Millisecond, 1500 * 8 / 4294967.296, ""},
		// A line beyond the scanner's 64 KB is reported with its line
		// number, not as bufio.Scanner's "token too long", which names
		// none; a long bad line is quoted only in part.
		{"line too long", "1\n2\n" + strings.Repeat("7", 70000) + "\n", 0, 0, 0, "line 3: longer than 65536 bytes"},
		{"long bad line", "1\n" + strings.Repeat("\x1f\x8b", 1000) + "\n", 0, 0, 0, `line 2: "\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b\x1f\x8b" (1960 bytes more) is not`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := ParseTrace(tt.name, strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tr.Opportunities() != tt.opps || tr.Period() != tt.period || tr.MeanRate() != tt.rate {
				t.Fatalf("got %d opps, period %v, rate %v", tr.Opportunities(), tr.Period(), tr.MeanRate())
			}
		})
	}
}

func TestFirstAtOrAfter(t *testing.T) {
	traces := []string{"1\n1\n", "0\n3\n3\n7\n", "2\n2\n5\n9\n9\n"}
	for _, s := range traces {
		tr, err := ParseTrace("t", strings.NewReader(s))
		if err != nil {
			t.Fatal(err)
		}
		for us := uint64(0); us < 40000; us += 250 {
			k := tr.firstAtOrAfter(us)
			if tr.at(k) < us || (k > 0 && tr.at(k-1) >= us) {
				t.Fatalf("trace %q: firstAtOrAfter(%d) = %d (at %d, previous at %d)", s, us, k, tr.at(k), tr.at(k-1))
			}
		}
	}
}

type delivery struct{ enq, deq, at uint64 }

func run(t *testing.T, cfg LinkConfig, arrivals []uint64, size int, until uint64) ([]delivery, *Link) {
	t.Helper()
	l, err := NewLink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got []delivery
	out := func(p *Packet, at uint64) { got = append(got, delivery{p.Enq, p.Deq, at}) }
	for _, a := range arrivals {
		l.Advance(a, out)
		l.Arrive(&Packet{Data: make([]byte, size), Enq: a})
	}
	l.Advance(until, out)
	return got, l
}

func TestLinkServesAtOpportunities(t *testing.T) {
	tr, _ := ParseTrace("t", strings.NewReader("2\n4\n"))
	// Three packets at 0.5 ms: served at 2, 4 and 6 ms, delivered 10 ms later.
	got, l := run(t, LinkConfig{Trace: tr, Delay: 10 * time.Millisecond}, []uint64{500, 500, 500}, 1500, 20000)
	want := []delivery{{500, 2000, 12000}, {500, 4000, 14000}, {500, 6000, 16000}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("packet %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if s := l.Stats(); s.Delivered != 3 || s.DeliveredBytes != 4500 {
		t.Errorf("stats %+v", s)
	}
}

func TestLinkSmallPacketsShareOpportunity(t *testing.T) {
	tr := constantTrace(t, 1)
	// Ten 100-byte packets fit in one 1500-byte opportunity at 1 ms.
	got, _ := run(t, LinkConfig{Trace: tr}, []uint64{100, 100, 100, 100, 100, 100, 100, 100, 100, 100}, 100, 5000)
	if len(got) != 10 {
		t.Fatalf("delivered %d, want 10", len(got))
	}
	for _, d := range got {
		if d.deq != 1000 {
			t.Fatalf("packet dequeued at %d, want 1000", d.deq)
		}
	}
}

func TestLinkUnusedOpportunitiesAreLost(t *testing.T) {
	tr := constantTrace(t, 1)
	got, _ := run(t, LinkConfig{Trace: tr}, []uint64{10500, 10600}, 1500, 20000)
	if len(got) != 2 || got[0].deq != 11000 || got[1].deq != 12000 {
		t.Fatalf("got %+v, want dequeues at 11000 and 12000", got)
	}
}

func TestLinkDropTail(t *testing.T) {
	tests := []struct {
		name      string
		cfg       LinkConfig
		delivered int
	}{
		{"packets", LinkConfig{QueuePackets: 3}, 3},
		{"bytes", LinkConfig{QueueBytes: 4000}, 2},
		{"unbounded", LinkConfig{}, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Trace = constantTrace(t, 1)
			arr := make([]uint64, 10)
			var log bytes.Buffer
			cfg.Log = &log
			got, l := run(t, cfg, arr, 1500, 100000)
			if len(got) != tt.delivered {
				t.Fatalf("delivered %d, want %d", len(got), tt.delivered)
			}
			if s := l.Stats(); int(s.TailDrops) != 10-tt.delivered {
				t.Fatalf("tail drops %d, want %d", s.TailDrops, 10-tt.delivered)
			}
			l.Flush()
			if n := strings.Count(log.String(), "tail"); n != 10-tt.delivered {
				t.Fatalf("log has %d tail drops:\n%s", n, log.String())
			}
		})
	}
}

func TestLinkRandomLoss(t *testing.T) {
	arr := make([]uint64, 20000)
	for i := range arr {
		arr[i] = uint64(i) * 1000
	}
	_, l := run(t, LinkConfig{Trace: constantTrace(t, 1), Loss: 0.1, Seed: 1}, arr, 1500, 30000000)
	s := l.Stats()
	if frac := float64(s.LossDrops) / float64(s.Arrived); frac < 0.09 || frac > 0.11 {
		t.Fatalf("loss fraction %.3f, want about 0.1", frac)
	}
}

func TestLinkRateMatchesTrace(t *testing.T) {
	tr, _ := ParseTrace("t", strings.NewReader("1\n1\n3\n4\n4\n4\n10\n"))
	// Saturate: one packet every 50 µs for 10 s.
	arr := make([]uint64, 200000)
	for i := range arr {
		arr[i] = uint64(i) * 50
	}
	_, l := run(t, LinkConfig{Trace: tr}, arr, 1500, 10000000)
	want := tr.MeanRate() * 10 / 8 // bytes in 10 s
	if got := float64(l.Stats().DeliveredBytes); got < want*0.999 || got > want*1.001 {
		t.Fatalf("delivered %v bytes in 10 s, want %v", got, want)
	}
}

func TestNewLinkRejects(t *testing.T) {
	tr := constantTrace(t, 1)
	for _, cfg := range []LinkConfig{
		{},
		{Trace: tr, QueuePackets: 1, QueueBytes: 1},
		{Trace: tr, Loss: 1},
		{Trace: tr, Loss: -0.1},
		{Trace: tr, Loss: math.NaN()},
		{Trace: tr, QueuePackets: -1},
		{Trace: tr, Delay: -1},
	} {
		if _, err := NewLink(cfg); err == nil {
			t.Errorf("NewLink(%+v) succeeded", cfg)
		}
	}
}

func TestLogRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	cfg := LinkConfig{Trace: constantTrace(t, 1), QueuePackets: 1, Log: &buf}
	_, l := run(t, cfg, []uint64{0, 0, 5000}, 1500, 20000)
	l.Flush()
	var recs []LogRecord
	if err := parseLog("test", &buf, func(r LogRecord) { recs = append(recs, r) }); err != nil {
		t.Fatal(err)
	}
	want := []LogRecord{{Enq: 0, Deq: 1000, Bytes: 1500}, {Enq: 0, Bytes: 1500, Dropped: true, Reason: "tail"}, {Enq: 5000, Deq: 5000, Bytes: 1500}}
	if len(recs) != len(want) {
		t.Fatalf("got %+v", recs)
	}
	// The log is written in event order: the drop comes first.
	got := map[LogRecord]bool{}
	for _, r := range recs {
		got[r] = true
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("missing %+v in %+v", w, recs)
		}
	}
}

func TestCapacity(t *testing.T) {
	tr := constantTrace(t, 2)
	if got := tr.Capacity(500*time.Millisecond, 1500*time.Millisecond); got != 2000*MTU {
		t.Fatalf("Capacity(0.5s, 1.5s) = %d, want %d", got, 2000*MTU)
	}
}

// TestConstantTrace: ConstantTrace(0), a negative count and counts too
// large to allocate are errors naming the count. It fails if
// ConstantTrace(0) returns a trace with no opportunities, whose first use
// divides by zero (a panic in the pump), or if a negative count panics in
// make.
func TestConstantTrace(t *testing.T) {
	for _, tt := range []struct {
		perMs   int
		rate    float64
		wantErr string
	}{
		{1, 12e6, ""},
		{2, 24e6, ""},
		{MaxConstantPerMs, float64(MaxConstantPerMs) * 12e6, ""},
		{0, 0, "0 delivery opportunities a millisecond"},
		{-1, 0, "-1 delivery opportunities a millisecond"},
		{MaxConstantPerMs + 1, 0, "65537 delivery opportunities a millisecond: want 1 to 65536"},
	} {
		tr, err := ConstantTrace(tt.perMs)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || tr != nil {
				t.Errorf("ConstantTrace(%d) = %v, %v; want an error containing %q", tt.perMs, tr, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ConstantTrace(%d): %v", tt.perMs, err)
			continue
		}
		if tr.MeanRate() != tt.rate || tr.Period() != time.Millisecond {
			t.Errorf("ConstantTrace(%d): rate %v, period %v; want %v, 1ms", tt.perMs, tr.MeanRate(), tr.Period(), tt.rate)
		}
	}
}

// TestNewLinkRejectsEmptyTrace: a Trace not made by ParseTrace or
// ConstantTrace (the zero value) has no opportunities, and NewLink refuses
// it, naming the trace: a link with it would panic with a division by zero
// on the first packet.
func TestNewLinkRejectsEmptyTrace(t *testing.T) {
	_, err := NewLink(LinkConfig{Trace: &Trace{Name: "zero"}})
	if err == nil || !strings.Contains(err.Error(), `trace "zero"`) {
		t.Fatalf("NewLink with an empty trace: err = %v, want one naming the trace", err)
	}
}

// constantTrace is ConstantTrace for tests, failing tb on an error.
func constantTrace(tb testing.TB, perMs int) *Trace {
	tb.Helper()
	tr, err := ConstantTrace(perMs)
	if err != nil {
		tb.Fatal(err)
	}
	return tr
}

// TestCapacityBeforeStart: times before the link's start have no
// opportunities. It fails if a negative time becomes a huge unsigned
// microsecond count whose opportunity index overflows: Capacity(-1s, 1s)
// is then twice Capacity(0, 1s).
func TestCapacityBeforeStart(t *testing.T) {
	tr := constantTrace(t, 2)
	for _, tt := range []struct{ from, to time.Duration }{
		{-time.Second, time.Second},
		{-2 * time.Second, -time.Second},
		{-time.Nanosecond, time.Millisecond},
	} {
		want := int64(0)
		if tt.to > 0 {
			want = tr.Capacity(max(tt.from, 0), tt.to)
		}
		if got := tr.Capacity(tt.from, tt.to); got != want {
			t.Errorf("Capacity(%v, %v) = %d, want %d", tt.from, tt.to, got, want)
		}
	}
}
