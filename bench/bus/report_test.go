package benchbus

import (
	"math"
	"strings"
	"testing"
)

func TestEnforcementCost(t *testing.T) {
	row := func(system string, users int, perCPU float64, failed bool) Row {
		r := Row{System: system, Users: users, PerCPUSec: perCPU}
		if failed {
			r.Error = "broker died"
		}
		return r
	}
	for _, tc := range []struct {
		name       string
		rows       []Row
		users      int
		n          int
		mean       float64
		lo, hi     float64 // bounds of the interval, NaN: not checked
		wantPoints bool    // the interval is the mean alone
	}{
		{name: "no rows", users: 120},
		{name: "one repetition", users: 120, n: 1, mean: 0.1, wantPoints: true,
			rows: []Row{row("xrealm", 120, 90, false), row("xrealm-insecure", 120, 100, false)}},
		{name: "pairs in order, alternating first", users: 120, n: 2, mean: 0.05, lo: 0.05 - 12.706*0.05, hi: 0.05 + 12.706*0.05,
			rows: []Row{row("xrealm", 120, 100, false), row("xrealm-insecure", 120, 100, false),
				row("xrealm-insecure", 120, 100, false), row("xrealm", 120, 90, false)}},
		{name: "other users and failed steps left out", users: 60, n: 1, mean: -0.25, wantPoints: true,
			rows: []Row{row("xrealm", 60, 125, false), row("xrealm-insecure", 60, 100, false),
				row("xrealm", 120, 1, false), row("xrealm-insecure", 60, 1, true)}},
		{name: "unpaired secure row ignored", users: 120, n: 1, mean: 0, wantPoints: true,
			rows: []Row{row("xrealm", 120, 100, false), row("xrealm-insecure", 120, 100, false), row("xrealm", 120, 50, false)}},
		// A repetition whose secure step failed is left out whole: its
		// insecure step is not paired with the next repetition's secure one
		// (other fresh servers, other machine weather); the pairs were the
		// k-th secure and k-th insecure rows left after the failures.
		{name: "a failed step leaves its repetition out", users: 120, n: 2, mean: 0.1, wantPoints: true,
			rows: []Row{row("xrealm", 120, 1, true), row("xrealm-insecure", 120, 200, false),
				row("xrealm-insecure", 120, 100, false), row("xrealm", 120, 90, false),
				row("xrealm", 120, 180, false), row("xrealm-insecure", 120, 200, false)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := enforcementCost(tc.rows, tc.users)
			if c.N != tc.n {
				t.Fatalf("N = %d, want %d", c.N, tc.n)
			}
			if tc.n == 0 {
				return
			}
			if math.Abs(c.Mean-tc.mean) > 1e-9 {
				t.Errorf("mean = %v, want %v", c.Mean, tc.mean)
			}
			if tc.wantPoints && (c.Lo != c.Mean || c.Hi != c.Mean) {
				t.Errorf("interval %v..%v, want the mean alone", c.Lo, c.Hi)
			}
			if !tc.wantPoints && (math.Abs(c.Lo-tc.lo) > 1e-9 || math.Abs(c.Hi-tc.hi) > 1e-9) {
				t.Errorf("interval %v..%v, want %v..%v", c.Lo, c.Hi, tc.lo, tc.hi)
			}
		})
	}
}

func TestEnforcementCostNormalised(t *testing.T) {
	// The second pair ran on a machine twice as slow for both processes:
	// normalised by the generator's CPU, both pairs show the same 10 %.
	rows := []Row{
		{System: "xrealm", Users: 120, PerCPUSec: 100 / 1.1, BrokerCPU: 1.1, GenCPU: 1},
		{System: "xrealm-insecure", Users: 120, PerCPUSec: 100, BrokerCPU: 1, GenCPU: 1},
		{System: "xrealm-insecure", Users: 120, PerCPUSec: 50, BrokerCPU: 2, GenCPU: 2},
		{System: "xrealm", Users: 120, PerCPUSec: 50 / 1.1, BrokerCPU: 2.2, GenCPU: 2},
	}
	_, n := enforcementCost(rows, 120)
	if n.N != 2 || math.Abs(n.Mean-0.1) > 1e-9 || math.Abs(n.Lo-0.1) > 1e-9 || math.Abs(n.Hi-0.1) > 1e-9 {
		t.Errorf("normalised = %+v, want 2 pairs of exactly +10 %%", n)
	}
	if got, want := n.interval(), "+10.0% to +10.0%"; got != want {
		t.Errorf("interval of 2 pairs = %q, want %q", got, want)
	}
	rows[1].GenCPU = 0 // no generator CPU: that pair has no normalised value
	n1 := cost{}
	if _, n1 = enforcementCost(rows, 120); n1.N != 1 {
		t.Errorf("normalised pairs = %d, want 1", n1.N)
	}
	// One pair has no interval: the report said "+50% to +50%".
	if got := n1.interval(); got != "–" {
		t.Errorf("interval of one pair = %q, want –", got)
	}
}

func TestStudentT95(t *testing.T) {
	for _, tc := range []struct {
		df   int
		want float64
	}{{1, 12.706}, {5, 2.571}, {20, 2.086}, {25, 2.05}, {100, 1.96}} {
		if got := studentT95(tc.df); got != tc.want {
			t.Errorf("studentT95(%d) = %v, want %v", tc.df, got, tc.want)
		}
	}
	if !math.IsInf(studentT95(0), 1) {
		t.Error("studentT95(0) is not +Inf")
	}
}

// TestTargetsNotMeasured checks the targets table of a short run: a target
// whose comparison was not measured shows – and "not measured", never a
// ratio of zeros or a verdict. A 1 s window gave Mosquitto a broker CPU of
// 0, and the efficiency target read "8000.00×, met"; the isolation row
// showed "0 (none held) vs ≥ 8 users: 0.00×" without 5 scenes; the ACL and
// interaction rows had an empty cell.
func TestTargetsNotMeasured(t *testing.T) {
	row := func(exp, system string, users, scenes int, perCPU float64) Row {
		return Row{Experiment: exp, System: system, Users: users, Scenes: scenes, Ratio: 1, P99ms: 5, PerSec: 100, Delivered: 100, PerCPUSec: perCPU, BrokerCPU: perCPU / 1e5}
	}
	r := &Results{
		Config:  ConfigSummary{MaxP99: "100ms", MinRatio: 0.99, Step: "1s"},
		Machine: Machine{Cores: 2},
		Rows: []Row{
			row("efficiency", "mosquitto", 4, 1, 0), row("efficiency", "xrealm", 4, 1, 8000),
			row("isolation", "xrealm", 4, 1, 8000), row("isolation", "xrealm", 4, 2, 8000),
		},
	}
	md := Markdown(r, nil)
	for _, want := range []string{
		"| Efficiency at 4 users | xrealm deliveries per broker CPU-s ≥ 1.5 × Mosquitto's | – | not measured |",
		"| Isolation | xrealm capacity (p99 ≤ 50 ms, as for the capacity target) with 5 scenes ≥ 2 × with 1 scene | – | not measured |",
		"| ACL | enforcement costs ≤ 5% throughput | – | not measured |",
		"| Interaction | median click-to-update ≤ 2 ms with 100 background users | – | not measured |",
		"runs on the same 2 cores",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("RESULTS.md lacks %q", want)
		}
	}
	// Both measured: the ratio and a verdict.
	r.Rows[0].PerCPUSec = 4000
	r.Rows = append(r.Rows, row("isolation", "xrealm", 8, 5, 8000))
	md = Markdown(r, nil)
	for _, want := range []string{"xrealm 8000 vs Mosquitto 4000: 2.00× | **met** |", "users: 2.00×"} {
		if !strings.Contains(md, want) {
			t.Errorf("RESULTS.md lacks %q", want)
		}
	}
}

// TestTargetsCappedRamp checks the capacity and isolation verdicts when a
// ramp ended while the system still held (its capacity is a lower bound,
// "≥ n"): a ratio that misses with the lower bound as numerator, or meets
// with it as denominator, says nothing. The capacity target read "missed"
// for xrealm "≥ 120" against Mosquitto's 90 (the ramp had simply ended),
// and the isolation target read "met" against a one-scene capacity that
// was only a lower bound.
func TestTargetsCappedRamp(t *testing.T) {
	row := func(exp, system string, users, scenes int, p99 float64) Row {
		return Row{Experiment: exp, System: system, Users: users, Scenes: scenes, Ratio: 1, P99ms: p99, PerSec: 100, Delivered: 100, PerCPUSec: 1000, BrokerCPU: 0.1}
	}
	for _, tc := range []struct {
		name string
		rows []Row
		want string
	}{
		{"xrealm capped, ratio short", []Row{
			row("ramp", "mosquitto", 60, 1, 10), row("ramp", "mosquitto", 90, 1, 10), row("ramp", "mosquitto", 120, 1, 500),
			row("ramp", "xrealm", 60, 1, 10), row("ramp", "xrealm", 90, 1, 10), row("ramp", "xrealm", 120, 1, 10),
		}, "| xrealm ≥ 120 vs Mosquitto 90: 1.33× | not measured |"},
		{"xrealm capped, ratio met", []Row{
			row("ramp", "mosquitto", 60, 1, 10), row("ramp", "mosquitto", 90, 1, 500),
			row("ramp", "xrealm", 60, 1, 10), row("ramp", "xrealm", 90, 1, 10),
		}, "| xrealm ≥ 90 vs Mosquitto 60: 1.50× | **met** |"},
		{"xrealm exact, ratio short", []Row{
			row("ramp", "mosquitto", 60, 1, 10), row("ramp", "mosquitto", 90, 1, 10), row("ramp", "mosquitto", 120, 1, 500),
			row("ramp", "xrealm", 60, 1, 10), row("ramp", "xrealm", 90, 1, 10), row("ramp", "xrealm", 120, 1, 10), row("ramp", "xrealm", 150, 1, 80),
		}, "| xrealm 120 vs Mosquitto 90: 1.33× | **missed** |"},
		{"five scenes capped, ratio short", []Row{
			row("isolation", "xrealm", 100, 1, 10), row("isolation", "xrealm", 200, 1, 500),
			row("isolation", "xrealm", 100, 5, 10), row("isolation", "xrealm", 150, 5, 10),
		}, "| ≥ 150 vs 100 users: 1.50× (at p99 ≤ 100ms: ≥ 150 vs 100, 1.50×) | not measured |"},
		{"one scene capped, ratio met", []Row{
			row("isolation", "xrealm", 100, 1, 10), row("isolation", "xrealm", 200, 1, 10),
			row("isolation", "xrealm", 100, 5, 10), row("isolation", "xrealm", 400, 5, 10), row("isolation", "xrealm", 500, 5, 500),
		}, "| 400 vs ≥ 200 users: 2.00× (at p99 ≤ 100ms: 400 vs ≥ 200, 2.00×) | not measured |"},
		{"one scene capped, ratio short", []Row{
			row("isolation", "xrealm", 100, 1, 10), row("isolation", "xrealm", 200, 1, 10),
			row("isolation", "xrealm", 100, 5, 10), row("isolation", "xrealm", 300, 5, 10), row("isolation", "xrealm", 400, 5, 500),
		}, "| 300 vs ≥ 200 users: 1.50× (at p99 ≤ 100ms: 300 vs ≥ 200, 1.50×) | **missed** |"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Results{Config: ConfigSummary{MaxP99: "100ms", MinRatio: 0.99, Step: "10s"}, Machine: Machine{Cores: 2}, Rows: tc.rows}
			if md := Markdown(r, nil); !strings.Contains(md, tc.want) {
				t.Errorf("RESULTS.md lacks %q; its targets:\n%s", tc.want, md[strings.Index(md, "## Targets"):strings.Index(md, "| ACL")])
			}
		})
	}
}
