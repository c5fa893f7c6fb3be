package hera

import (
	"fmt"
	"math/big"
	"testing"
	"time"
)

func TestVectors(t *testing.T) {
	vf, err := LoadVectors("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(vf.Cases) == 0 {
		t.Fatal("no vector cases")
	}
	for _, c := range vf.Cases {
		t.Run(c.Name, func(t *testing.T) {
			p, err := c.Params.ToParams()
			if err != nil {
				t.Fatal(err)
			}
			var path *Path
			if c.SharedPath {
				path = &Path{}
			}
			fs := make([]*Flow, c.Flows())
			for i := range fs {
				if fs[i], err = NewFlowOnPath(p, path); err != nil {
					t.Fatal(err)
				}
			}
			for i, e := range c.Events {
				var got uint32
				switch {
				case e.Loss:
					got = fs[e.Flow].OnLoss()
				case e.Undo:
					got = fs[e.Flow].OnUndo()
				default:
					got = fs[e.Flow].OnAck(e.TUs, e.RTTUs, e.Acked)
				}
				if got != e.Cwnd {
					t.Fatalf("event %d (%+v): cwnd = %d, want %d", i, e, got, e.Cwnd)
				}
			}
		})
	}
}

// TestFilterVectors replays the vector file's filter sequences on the
// windowed minimum and maximum: among them, times that step back, which
// must not read as an expired window (two late samples used to replace a
// 20 ms minimum by a 50 ms one).
func TestFilterVectors(t *testing.T) {
	vf, err := LoadVectors("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(vf.Filters) == 0 {
		t.Fatal("no filter vectors")
	}
	for _, c := range vf.Filters {
		t.Run(c.Name, func(t *testing.T) {
			var mn minFilter
			var mx maxFilter
			for i, s := range c.Steps {
				var got uint32
				switch c.Kind {
				case "min":
					mn.update(s.TUs, s.V, c.WindowUs)
					got = mn.min
				case "max":
					mx.update(s.TUs, s.V, c.WindowUs)
					got = mx.max
				default:
					t.Fatalf("filter kind %q unknown", c.Kind)
				}
				if got != s.Want {
					t.Fatalf("step %d (%+v): %s = %d, want %d", i, s, c.Kind, got, s.Want)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Params)
		ok     bool
	}{
		{"defaults", func(*Params) {}, true},
		{"zero bucket", func(p *Params) { p.BucketWidth = 0 }, false},
		{"backlog too long", func(p *Params) { p.Backlog = MaxBacklog + 1 }, false},
		{"one bucket", func(p *Params) { p.Buckets = 1 }, false},
		{"too many buckets", func(p *Params) { p.Buckets = MaxBuckets + 1 }, false},
		{"zero delta", func(p *Params) { p.DeltaMax = 0 }, false},
		{"bad bounds", func(p *Params) { p.MinCwnd, p.MaxCwnd = 10, 5 }, false},
		{"beta above one", func(p *Params) { p.LossBetaPermille = 1001 }, false},
		{"unknown variant", func(p *Params) { p.Variant = 7 }, false},
		{"bucket of the longest RTT", func(p *Params) { p.BucketWidth = MaxValidRTT }, true},
		// 5000 s is 5e9 µs, which the eBPF core's 32 bits held as 705 s.
		{"bucket above the longest RTT", func(p *Params) { p.BucketWidth = 5000 * time.Second }, false},
		{"largest delta", func(p *Params) { p.DeltaMax = MaxDeltaMax }, true},
		{"delta that overflows a step", func(p *Params) { p.DeltaMax = 1 << 31 }, false},
		{"largest histogram cap", func(p *Params) { p.HistCap = MaxHistCap }, true},
		{"histogram cap too large", func(p *Params) { p.HistCap = MaxHistCap + 1 }, false},
		{"largest decrease shift", func(p *Params) { p.DecreaseShift = MaxDecreaseShift }, true},
		{"decrease shift too large", func(p *Params) { p.DecreaseShift = 31 }, false},
		{"no minimum-RTT window", func(p *Params) { p.MinRTTWindow = 0 }, false},
		{"negative minimum-RTT window", func(p *Params) { p.MinRTTWindow = -time.Second }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultParams()
			tt.modify(&p)
			if err := p.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
	if err := PaperParams().Validate(); err != nil {
		t.Fatalf("paper params: %v", err)
	}
}

// TestStepsExactAtLimits runs decreases and increases with the largest
// step parameters Validate accepts and a window near 2^32, and checks
// every window against the rule computed without overflow (math/big).
// Before the bounds, Validate accepted Δmax 2^31 with shift 31, whose
// decrease product wrapped: a step that should cut the window to its
// minimum removed a few segments.
func TestStepsExactAtLimits(t *testing.T) {
	for _, shift := range []uint32{0, 1, MaxDecreaseShift} {
		t.Run(fmt.Sprint("shift ", shift), func(t *testing.T) {
			p := DefaultParams()
			p.DeltaMax, p.HistCap, p.DecreaseShift = MaxDeltaMax, MaxHistCap, shift
			p.Buckets, p.Backlog, p.FloorGainEighths, p.BucketPackets, p.GateRTTs = MaxBuckets, 1, 0, 0, 0
			p.MinCwnd, p.MaxCwnd, p.InitCwnd, p.LossBetaPermille = 1, ^uint32(0), ^uint32(0)-7, 0
			p.BucketWidth = time.Millisecond
			f, err := NewFlow(p)
			if err != nil {
				t.Fatal(err)
			}
			f.OnLoss() // leaves slow start without changing the window
			now := uint64(0)
			half := uint64(p.Buckets / 2)
			for i := range 200 {
				// Alternate: the first sample sets the minimum (bucket 0),
				// then delays of 40 ms (the last bucket) and 0 ms.
				rtt := int64(10_000)
				if i%3 != 0 {
					rtt += 40_000
				}
				before := f.Cwnd()
				hist := f.Histogram()
				now += 100_000
				got := f.OnAck(now, rtt, 1)
				b := uint64(f.LastBucket())
				hist[b]++
				var total, cum uint64
				for j, h := range hist {
					total += uint64(h)
					if uint64(j) <= b {
						cum += uint64(h)
					}
				}
				want := new(big.Int).SetUint64(uint64(before))
				if b < half {
					step := new(big.Int).SetUint64(cum * (half - b) * uint64(p.DeltaMax))
					step.Div(step, new(big.Int).SetUint64(total))
					want.Add(want, step)
				} else {
					unit := new(big.Int).Lsh(new(big.Int).SetUint64(uint64(p.DeltaMax)), uint(shift))
					if shift == 0 {
						unit.SetUint64(uint64(p.DeltaMax))
					} else {
						unit.Add(unit, new(big.Int).SetUint64(uint64(before)))
					}
					step := new(big.Int).Mul(new(big.Int).SetUint64(cum*(b-half+1)), unit)
					step.Div(step, new(big.Int).Lsh(new(big.Int).SetUint64(total), uint(shift)))
					want.Sub(want, step)
				}
				if want.Sign() < 0 {
					want.SetUint64(0)
				}
				if max := new(big.Int).SetUint64(uint64(p.MaxCwnd)); want.Cmp(max) > 0 {
					want = max
				}
				if want.Uint64() < uint64(p.MinCwnd) {
					want.SetUint64(uint64(p.MinCwnd))
				}
				if uint64(got) != want.Uint64() {
					t.Fatalf("update %d (bucket %d, cum %d of %d): window %d → %d, want %v", i, b, cum, total, before, got, want)
				}
			}
		})
	}
}

func TestForVariant(t *testing.T) {
	for _, name := range []string{"hera", "hera-paper"} {
		p, err := ForVariant(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Variant.String() != name {
			t.Errorf("ForVariant(%q).Variant = %v", name, p.Variant)
		}
	}
	if _, err := ForVariant("vegas"); err == nil {
		t.Error("ForVariant(vegas) succeeded")
	}
}

// simulate runs a flow against an idealised bottleneck: capacity pkts/ms,
// base RTT, a queue of unbounded size, one ACK per segment. It returns the
// mean queueing delay over the second half and the link utilisation.
func simulate(t *testing.T, p Params, ratePerMs float64, base time.Duration, flows int) (qdelay time.Duration, util float64, shares []float64) {
	return simulateStagger(t, p, ratePerMs, base, flows, 0)
}

// simulateStagger is simulate with flow i starting at i·stagger.
func simulateStagger(t *testing.T, p Params, ratePerMs float64, base time.Duration, flows int, stagger time.Duration) (qdelay time.Duration, util float64, shares []float64) {
	t.Helper()
	fs := make([]*Flow, flows)
	path := &Path{}
	for i := range fs {
		f, err := NewFlowOnPath(p, path)
		if err != nil {
			t.Fatal(err)
		}
		fs[i] = f
	}
	steps := 20000
	baseUs := uint64(base / time.Microsecond)
	queue := 0.0
	delivered := make([]float64, flows)
	credit := make([]float64, flows)
	var qsum, dsum float64
	var n int
	for ms := 0; ms < steps; ms++ {
		now := uint64(ms) * 1000
		qd := queue / ratePerMs * 1000 // µs
		rtt := int64(baseUs) + int64(qd)
		// Each flow sends cwnd per RTT; the queue drains at the link rate.
		active := func(i int) bool { return time.Duration(ms)*time.Millisecond >= time.Duration(i)*stagger }
		var arrive float64
		for i, f := range fs {
			if active(i) {
				arrive += float64(f.Cwnd()) * 1000 / float64(rtt)
			}
		}
		out := min(queue+arrive, ratePerMs)
		total := 0.0
		for i, f := range fs {
			if active(i) {
				total += float64(f.Cwnd())
			}
		}
		for i, f := range fs {
			if !active(i) {
				continue
			}
			share := out * float64(f.Cwnd()) / total
			if ms >= steps/2 {
				delivered[i] += share
			}
			credit[i] += share
			acked := uint32(credit[i])
			credit[i] -= float64(acked)
			f.OnAck(now, rtt, acked)
		}
		queue = queue + arrive - out
		if ms >= steps/2 {
			qsum += qd
			dsum += out
			n++
		}
	}
	sum := 0.0
	for _, d := range delivered {
		sum += d
	}
	for _, d := range delivered {
		shares = append(shares, d/sum)
	}
	return time.Duration(qsum/float64(n)) * time.Microsecond, dsum / float64(n) / ratePerMs, shares
}

func TestTunedTracksTargetDelay(t *testing.T) {
	tests := []struct {
		name string
		rate float64 // packets per ms
		base time.Duration
	}{
		{"50Mbit 40ms", 4.2, 40 * time.Millisecond},
		{"100Mbit 40ms", 8.3, 40 * time.Millisecond},
		{"100Mbit 200us", 8.3, 200 * time.Microsecond},
		{"20Mbit 100ms", 1.7, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultParams()
			// The bucket is at least BucketPackets packet times wide (at
			// most BucketPacketsMaxWidths·B): on the 20 Mbit/s path that is
			// 10 × 0.59 ms, so the target there is 17.6 ms, not 7.5 ms.
			w := p.BucketWidth
			if p.BucketPackets > 0 {
				pkt := time.Duration(float64(time.Millisecond) / tt.rate)
				w = max(w, min(time.Duration(p.BucketPackets)*pkt, BucketPacketsMaxWidths*p.BucketWidth))
			}
			target := w * time.Duration(p.Buckets/2)
			q, util, _ := simulate(t, p, tt.rate, tt.base, 1)
			if util < 0.9 {
				t.Errorf("utilisation %.2f, want >= 0.9", util)
			}
			// The window settles around bucket X/2, i.e. just above target.
			if q > 2*target {
				t.Errorf("mean queueing delay %v, want <= %v (twice the target)", q, 2*target)
			}
		})
	}
}

func TestPaperSubMillisecondGrows(t *testing.T) {
	// With RTTs under 1 ms every sample falls in bucket 0: the window grows.
	f, err := NewFlow(PaperParams())
	if err != nil {
		t.Fatal(err)
	}
	var now uint64
	for i := 0; i < 100; i++ {
		now += 300
		f.OnAck(now, 300, 1)
	}
	if f.Cwnd() < 500 {
		t.Fatalf("cwnd after 100 sub-ms RTTs = %d, want growth to >= 500", f.Cwnd())
	}
}

func TestHistogramCapHalves(t *testing.T) {
	p := PaperParams()
	p.HistCap = 8
	f, err := NewFlow(p)
	if err != nil {
		t.Fatal(err)
	}
	var now uint64
	for i := 0; i < 8; i++ {
		now += 20000
		f.OnAck(now, 20000, 1)
	}
	var total uint32
	for _, h := range f.Histogram() {
		total += h
	}
	if total != 4 {
		t.Fatalf("histogram total after reaching cap 8 = %d, want 4 (halved)", total)
	}
}

func TestTunedFairness(t *testing.T) {
	_, util, shares := simulate(t, DefaultParams(), 8.3, 40*time.Millisecond, 6)
	if j := jain(shares); j < 0.95 {
		t.Errorf("Jain's index over 6 flows = %.3f (shares %.3f), want >= 0.95", j, shares)
	}
	if util < 0.9 {
		t.Errorf("utilisation %.2f, want >= 0.9", util)
	}
}

func jain(x []float64) float64 {
	var s, s2 float64
	for _, v := range x {
		s += v
		s2 += v * v
	}
	return s * s / (float64(len(x)) * s2)
}

// TestTunedFairnessStaggered starts six flows one after another on a
// shared path: proportional decrease and the shared path minimum RTT must
// bring them to equal shares with the queueing delay near the target.
func TestTunedFairnessStaggered(t *testing.T) {
	tests := []struct {
		rate    float64
		base    time.Duration
		stagger time.Duration
		minJain float64
	}{
		{8.3, 20 * time.Millisecond, 50 * time.Millisecond, 0.95},
		{8.3, 60 * time.Millisecond, 50 * time.Millisecond, 0.95},
		{8.3, 20 * time.Millisecond, 2 * time.Second, 0.95},
		// At 1.3 packets/ms each of six flows has a packet time of 4.6 ms:
		// every flow's buckets sit at the 6·B cap of BucketPackets, so
		// only the proportional decrease equalises them, which takes
		// longer than this 10 s model runs after the last start (0.93).
		{1.3, 20 * time.Millisecond, 2 * time.Second, 0.9},
		{1.3, 60 * time.Millisecond, 50 * time.Millisecond, 0.95},
	}
	p := DefaultParams()
	target := p.BucketWidth * time.Duration(p.Buckets/2)
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%.1fpkt/ms base %v stagger %v", tt.rate, tt.base, tt.stagger), func(t *testing.T) {
			q, util, shares := simulateStagger(t, p, tt.rate, tt.base, 6, tt.stagger)
			// Each flow's buckets are at least BucketPackets packet times
			// at its share of the rate, up to 6·B.
			target := target
			if p.BucketPackets > 0 {
				pkt := time.Duration(float64(time.Millisecond) * 6 / tt.rate)
				bw := min(max(p.BucketWidth, time.Duration(p.BucketPackets)*pkt), BucketPacketsMaxWidths*p.BucketWidth)
				target = bw * time.Duration(p.Buckets/2)
			}
			t.Logf("queueing delay %v, utilisation %.2f, Jain %.3f, shares %.3f", q, util, jain(shares), shares)
			if j := jain(shares); j < tt.minJain {
				t.Errorf("Jain's index %.3f, want >= %.2f", j, tt.minJain)
			}
			// At 16 Mbit/s six flows each adding Δmax = 10 segments per
			// RTT overshoot a 26-segment path: allow three times the target.
			maxQ := 2 * target
			if tt.rate < 2 {
				maxQ = 3 * target
			}
			if q > maxQ || util < 0.85 {
				t.Errorf("queueing delay %v (want <= %v), utilisation %.2f (want >= 0.85)", q, maxQ, util)
			}
		})
	}
}
