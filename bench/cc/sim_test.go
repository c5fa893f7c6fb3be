package benchcc

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/hera"
	"github.com/xrealm/xrealm/netem"
)

// simResult is one simulated run.
type simResult struct {
	mbps, p95ms float64
	jain1s      float64 // mean Jain's index over 1 s windows (several flows)
}

// simulateHera runs window-based flows driven by hera.Flow over the
// emulator's queueing model (netem.Link) on trace tr in both directions,
// with the benchmark's settings (10 ms one-way delay, 1000-packet queues),
// in 100 µs steps: one ACK per data packet, a loss noticed one RTT after
// the drop and reported at most once per RTT. It is a fast stand-in for
// the kernel runs when tuning the rule, not a substitute for them.
func simulateHera(tb testing.TB, p hera.Params, tr *netem.Trace, dur time.Duration, flows int) (simResult, []float64) {
	return simulateHeraOpts(tb, p, tr, dur, flows, simOpts{})
}

// simOpts are the simulator's models of kernel behaviour beyond the rule.
type simOpts struct {
	// rto models the retransmission timeout: when a flow with packets in
	// flight has had no ACK for srtt + max(4·rttvar, 200 ms), it calls
	// OnLoss once per silence (the kernel calls ssthresh on the first RTO
	// of an episode, not on its backoffs). No retransmissions are sent.
	rto bool
	// series, if set, gets one line per 100 ms: time (s), flow 0's
	// window, delivered Mbit/s (all flows) and the downlink's queue.
	series func(t float64, cwnd uint32, mbps float64, queue int)
	// undo: the first ACK after such a timeout for a packet sent before it
	// shows the timeout was spurious (the kernel's timestamp check) and
	// calls OnUndo.
	undo bool
}

func simulateHeraOpts(tb testing.TB, p hera.Params, tr *netem.Trace, dur time.Duration, flows int, o simOpts) (simResult, []float64) {
	tb.Helper()
	const delay = 10 * time.Millisecond
	down, err := netem.NewLink(netem.LinkConfig{Trace: tr, Delay: delay, QueuePackets: 1000})
	if err != nil {
		tb.Fatal(err)
	}
	up, err := netem.NewLink(netem.LinkConfig{Trace: tr, Delay: delay, QueuePackets: 1000})
	if err != nil {
		tb.Fatal(err)
	}
	type meta struct {
		flow   int
		sentAt uint64
	}
	path := &hera.Path{}
	fs := make([]*hera.Flow, flows)
	inflight := make([]int, flows)
	lossUntil := make([]uint64, flows)
	srtt := make([]uint64, flows)
	rttvar := make([]uint64, flows)
	lastAck := make([]uint64, flows)
	rtoAt := make([]uint64, flows) // 0 = no timeout pending
	for i := range fs {
		if fs[i], err = hera.NewFlowOnPath(p, path); err != nil {
			tb.Fatal(err)
		}
		srtt[i] = 2 * uint64(delay/time.Microsecond)
	}
	info := map[*netem.Packet]meta{}
	type ev struct {
		at uint64
		p  *netem.Packet
	}
	var atRecv, atSender []ev // FIFO each (constant delay)
	type lossEv struct {
		at   uint64
		flow int
	}
	var losses []lossEv
	from, to := uint64(2*time.Second/time.Microsecond), uint64(dur/time.Microsecond)
	var delivered [16]float64
	perSec := map[uint64][]float64{} // 1 s window -> bytes per flow
	var qd []float64
	var stepBytes float64
	for now := uint64(0); now < to; now += 100 {
		if o.series != nil && now%100000 == 0 && now > 0 {
			o.series(float64(now)/1e6, fs[0].Cwnd(), stepBytes*8/0.1/1e6, down.QueueLen())
			stepBytes = 0
		}
		down.Advance(now, func(pk *netem.Packet, at uint64) {
			if pk.Deq >= from {
				qd = append(qd, float64(pk.Deq-pk.Enq)/1000)
			}
			atRecv = append(atRecv, ev{at, pk})
		})
		for len(atRecv) > 0 && atRecv[0].at <= now {
			pk := atRecv[0].p
			atRecv = atRecv[1:]
			m := info[pk]
			stepBytes += float64(pk.Size)
			if now >= from {
				delivered[m.flow] += float64(pk.Size)
				w := now / 1e6
				if perSec[w] == nil {
					perSec[w] = make([]float64, flows)
				}
				perSec[w][m.flow] += float64(pk.Size)
			}
			ack := &netem.Packet{Size: 52, Enq: now}
			info[ack] = m
			delete(info, pk)
			up.Advance(now, func(a *netem.Packet, at uint64) { atSender = append(atSender, ev{at, a}) })
			up.Arrive(ack)
		}
		up.Advance(now, func(a *netem.Packet, at uint64) { atSender = append(atSender, ev{at, a}) })
		for len(atSender) > 0 && atSender[0].at <= now {
			a := atSender[0].p
			atSender = atSender[1:]
			m := info[a]
			delete(info, a)
			rtt := now - m.sentAt
			d := rtt - min(rtt, srtt[m.flow]) + srtt[m.flow] - min(rtt, srtt[m.flow])
			rttvar[m.flow] = (3*rttvar[m.flow] + d) / 4
			srtt[m.flow] = (7*srtt[m.flow] + rtt) / 8
			inflight[m.flow]--
			lastAck[m.flow] = now
			if at := rtoAt[m.flow]; at != 0 {
				rtoAt[m.flow] = 0
				if o.undo && m.sentAt < at {
					fs[m.flow].OnUndo()
				}
			}
			fs[m.flow].OnAck(now, int64(rtt), 1)
		}
		for len(losses) > 0 && losses[0].at <= now {
			l := losses[0]
			losses = losses[1:]
			inflight[l.flow]--
			if now >= lossUntil[l.flow] {
				fs[l.flow].OnLoss()
				lossUntil[l.flow] = now + srtt[l.flow]
			}
		}
		for i, f := range fs {
			if o.rto && inflight[i] > 0 && rtoAt[i] == 0 && now-lastAck[i] > srtt[i]+max(4*rttvar[i], 200000) {
				rtoAt[i] = now
				f.OnLoss()
			}
			if inflight[i] == 0 {
				lastAck[i] = now
			}
			for inflight[i] < int(f.Cwnd()) {
				pk := &netem.Packet{Size: netem.MTU, Enq: now}
				inflight[i]++
				down.Advance(now, func(pk *netem.Packet, at uint64) {
					if pk.Deq >= from {
						qd = append(qd, float64(pk.Deq-pk.Enq)/1000)
					}
					atRecv = append(atRecv, ev{at, pk})
				})
				if down.Arrive(pk) {
					info[pk] = meta{i, now}
				} else {
					losses = append(losses, lossEv{now + srtt[i], i})
				}
			}
		}
	}
	win := float64(to-from) / 1e6
	var tot float64
	shares := make([]float64, flows)
	for i := range flows {
		tot += delivered[i]
		shares[i] = delivered[i] * 8 / win / 1e6
	}
	sort.Float64s(qd)
	r := simResult{mbps: tot * 8 / win / 1e6}
	if flows > 1 {
		// As the benchmark does (jainSeries): a window in which the link
		// delivered nothing has no index and is left out.
		n := 0
		for _, v := range perSec {
			var sum float64
			for _, x := range v {
				sum += x
			}
			if sum > 0 {
				r.jain1s += Jain(v)
				n++
			}
		}
		if n > 0 {
			r.jain1s /= float64(n)
		}
	}
	if len(qd) > 0 {
		r.p95ms = qd[int(0.95*float64(len(qd)))]
	}
	return r, shares
}

// TestSimulatedTraces runs the tuned and published rules in simulation on
// the benchmark's traces (set XREALM_SIM=1; the traces are found as by
// `xrealm bench cc`: $XREALM_TRACES, or shared/traces beside the
// repository).
func TestSimulatedTraces(t *testing.T) {
	if os.Getenv("XREALM_SIM") == "" {
		t.Skip("skipping: set XREALM_SIM=1 to simulate Hera on the benchmark traces")
	}
	dir := simTraces(t)
	names := []string{"mmwave/UMa_a", "mmwave/UMa_b", "mmwave/UMa_c", "mmwave/UMa_d", "mmwave/RMa_a", "mmwave/RMa_d", "mmwave/humanmotion", "cellular/highwayGold"}
	var b strings.Builder
	for _, n := range names {
		tr, err := netem.LoadTrace(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%-12s", filepath.Base(n))
		for _, v := range []string{"hera", "hera-paper"} {
			p, _ := hera.ForVariant(v)
			r, _ := simulateHera(t, p, tr, 20*time.Second, 1)
			fmt.Fprintf(&b, "  %s %6.1f Mbit/s p95 %6.1f ms", v, r.mbps, r.p95ms)
		}
		b.WriteString("\n")
	}
	t.Logf("\n%s", b.String())
}

// TestSimulatedSweep prints the tuned rule's simulated throughput and p95
// queueing delay for parameter sets given in XREALM_SIM_SWEEP, e.g.
// "B=5ms,X=6,s=3,cap=64,N=2;B=8ms,X=6,s=3,cap=64,N=2".
func TestSimulatedSweep(t *testing.T) {
	spec := os.Getenv("XREALM_SIM_SWEEP")
	if spec == "" {
		t.Skip("skipping: set XREALM_SIM_SWEEP to sweep parameters in simulation")
	}
	type sweepSet struct {
		name string
		p    hera.Params
		o    simOpts
	}
	var sets []sweepSet
	for _, set := range strings.Split(spec, ";") {
		p, o, err := parseSweepSet(set)
		if err != nil {
			t.Fatalf("XREALM_SIM_SWEEP: %v", err)
		}
		sets = append(sets, sweepSet{set, p, o})
	}
	dir := simTraces(t)
	names := []string{"mmwave/UMa_a", "mmwave/UMa_b", "mmwave/UMa_c", "mmwave/UMa_e", "mmwave/RMa_a", "mmwave/RMa_d", "mmwave/humanmotion", "cellular/highwayGold"}
	if s := os.Getenv("XREALM_SIM_TRACES"); s != "" {
		names = strings.Split(s, ",")
	}
	var trs []*netem.Trace
	for _, n := range names {
		tr, err := netem.LoadTrace(filepath.Join(dir, n))
		if err != nil {
			t.Skip(err)
		}
		trs = append(trs, tr)
	}
	for _, set := range sets {
		p, o := set.p, set.o
		dur, flows := 20*time.Second, 1
		if n, err := strconv.Atoi(os.Getenv("XREALM_SIM_FLOWS")); err == nil {
			flows = n
		}
		if d, err := time.ParseDuration(os.Getenv("XREALM_SIM_DUR")); err == nil {
			dur = d
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%-40s", set.name)
		for i, tr := range trs {
			r, _ := simulateHeraOpts(t, p, tr, dur, flows, o)
			fmt.Fprintf(&b, " %s %.2f/%.1f", filepath.Base(names[i])[:5], r.mbps, r.p95ms)
			if flows > 1 {
				fmt.Fprintf(&b, "/J%.2f", r.jain1s)
			}
		}
		t.Log(b.String())
	}
}

// TestSimulatedSeries writes flow 0's window, the delivered rate and the
// downlink queue every 100 ms for the default rule on the trace named by
// XREALM_SIM_SERIES (e.g. mmwave/humanmotion) to XREALM_SIM_SERIES_OUT
// (default stdout of the test log), with the sweep's keys in
// XREALM_SIM_SWEEP applying if set (one set).
func TestSimulatedSeries(t *testing.T) {
	name := os.Getenv("XREALM_SIM_SERIES")
	if name == "" {
		t.Skip("skipping: set XREALM_SIM_SERIES to a trace to print a simulated time series")
	}
	spec := os.Getenv("XREALM_SIM_SWEEP")
	if strings.Contains(spec, ";") {
		t.Fatalf("XREALM_SIM_SWEEP %q: the series takes one parameter set", spec)
	}
	p, o, err := parseSweepSet(spec)
	if err != nil {
		t.Fatalf("XREALM_SIM_SWEEP: %v", err)
	}
	tr, err := netem.LoadTrace(filepath.Join(simTraces(t), name))
	if err != nil {
		t.Skip(err)
	}
	var b strings.Builder
	o.series = func(ts float64, cwnd uint32, mbps float64, q int) {
		fmt.Fprintf(&b, "%.1f %d %.1f %d\n", ts, cwnd, mbps, q)
	}
	dur := 60 * time.Second
	r, _ := simulateHeraOpts(t, p, tr, dur, 1, o)
	if out := os.Getenv("XREALM_SIM_SERIES_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Log("\n" + b.String())
	}
	t.Logf("%s: %.1f Mbit/s, p95 %.1f ms", name, r.mbps, r.p95ms)
}

// simTraces returns the traces directory for the simulations, or skips
// the test saying where it looked.
func simTraces(t *testing.T) string {
	t.Helper()
	dir, err := DefaultTraces()
	if err != nil {
		t.Skipf("skipping: %v (set %s=DIR to the traces)", err, TracesEnv)
	}
	return dir
}

// sweepKeys are the parameters XREALM_SIM_SWEEP can set, each with what
// it sets from its value.
var sweepKeys = map[string]func(p *hera.Params, o *simOpts, v string) error{
	"B":    durKey(func(p *hera.Params, d time.Duration) { p.BucketWidth = d }),
	"bw":   durKey(func(p *hera.Params, d time.Duration) { p.BDPWindow = d }),
	"X":    intKey(func(p *hera.Params, o *simOpts, n int) { p.Buckets = n }),
	"N":    intKey(func(p *hera.Params, o *simOpts, n int) { p.Backlog = n }),
	"s":    intKey(func(p *hera.Params, o *simOpts, n int) { p.DecreaseShift = uint32(n) }),
	"cap":  intKey(func(p *hera.Params, o *simOpts, n int) { p.HistCap = uint32(n) }),
	"dmax": intKey(func(p *hera.Params, o *simOpts, n int) { p.DeltaMax = uint32(n) }),
	"beta": intKey(func(p *hera.Params, o *simOpts, n int) { p.LossBetaPermille = uint32(n) }),
	"fg":   intKey(func(p *hera.Params, o *simOpts, n int) { p.FloorGainEighths = uint32(n) }),
	"bp":   intKey(func(p *hera.Params, o *simOpts, n int) { p.BucketPackets = uint32(n) }),
	"gate": intKey(func(p *hera.Params, o *simOpts, n int) { p.GateRTTs = uint32(n) }),
	"minc": intKey(func(p *hera.Params, o *simOpts, n int) { p.MinCwnd = uint32(n) }),
	"maxc": intKey(func(p *hera.Params, o *simOpts, n int) { p.MaxCwnd = uint32(n) }),
	"ob":   intKey(func(p *hera.Params, o *simOpts, n int) { p.OutageBoostPercent = uint32(n) }),
	"ok":   intKey(func(p *hera.Params, o *simOpts, n int) { p.OutageRTTs = uint32(n) }),
	"rto":  intKey(func(p *hera.Params, o *simOpts, n int) { o.rto = n != 0 }),
	"undo": intKey(func(p *hera.Params, o *simOpts, n int) { o.undo = n != 0 }),
}

func intKey(set func(*hera.Params, *simOpts, int)) func(*hera.Params, *simOpts, string) error {
	return func(p *hera.Params, o *simOpts, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a non-negative integer", v)
		}
		set(p, o, n)
		return nil
	}
}

func durKey(set func(*hera.Params, time.Duration)) func(*hera.Params, *simOpts, string) error {
	return func(p *hera.Params, _ *simOpts, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%q is not a positive duration", v)
		}
		set(p, d)
		return nil
	}
}

// parseSweepSet reads one parameter set of XREALM_SIM_SWEEP,
// "key=value,key=value", over the default parameters. Unknown keys and
// bad values are errors.
func parseSweepSet(set string) (hera.Params, simOpts, error) {
	p := hera.DefaultParams()
	var o simOpts
	for _, kv := range strings.Split(set, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		apply := sweepKeys[k]
		if apply == nil {
			return p, o, fmt.Errorf("%q: unknown key %q; valid keys: %s", set, k, strings.Join(sortedKeys(sweepKeys), ", "))
		}
		if !ok {
			return p, o, fmt.Errorf("%q: %s has no value (want %s=VALUE)", set, k, k)
		}
		if err := apply(&p, &o, v); err != nil {
			return p, o, fmt.Errorf("%q: %s: %v", set, k, err)
		}
	}
	return p, o, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
