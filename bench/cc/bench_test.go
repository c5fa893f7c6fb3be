package benchcc

import (
	"bytes"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

func TestJain(t *testing.T) {
	tests := []struct {
		x    []float64
		want float64
	}{
		{[]float64{1, 1, 1, 1, 1, 1}, 1},
		{[]float64{1, 0, 0, 0, 0, 0}, 1.0 / 6},
		{[]float64{2, 1}, 0.9},
		{[]float64{0, 0}, 0},
	}
	for _, tt := range tests {
		if got := Jain(tt.x); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("Jain(%v) = %v, want %v", tt.x, got, tt.want)
		}
	}
}

func TestJainSeries(t *testing.T) {
	// Two flows, bins of 1; windows of 2 bins. The second window is an
	// outage: no index, and not in the mean.
	counts := [][]int64{
		{5, 5, 0, 0, 4, 4},
		{5, 5, 0, 0, 2, 2},
	}
	series, mean := jainSeries(counts, 0, 6, 2)
	if len(series) != 3 {
		t.Fatalf("%d windows, want 3", len(series))
	}
	if series[0] == nil || *series[0] != 1 {
		t.Errorf("window 0 = %v, want 1", series[0])
	}
	if series[1] != nil {
		t.Errorf("window 1 (nothing delivered) = %v, want nil", *series[1])
	}
	if series[2] == nil || math.Abs(*series[2]-0.9) > 1e-9 {
		t.Errorf("window 2 = %v, want 0.9", series[2])
	}
	if math.Abs(mean-0.95) > 1e-9 {
		t.Errorf("mean = %v, want 0.95 (the outage left out)", mean)
	}
	if _, mean := jainSeries([][]int64{{0, 0}, {0, 0}}, 0, 2, 2); mean != 0 {
		t.Errorf("mean of a run with no data = %v, want 0", mean)
	}
}

func TestMeanP95(t *testing.T) {
	v := make([]float64, 100)
	for i := range v {
		v[i] = float64(100 - i)
	}
	mean, p95 := meanP95(v)
	if mean != 50.5 || p95 != 95 {
		t.Fatalf("meanP95 = %v, %v; want 50.5, 95", mean, p95)
	}
}

func TestSummariseTargetCheck(t *testing.T) {
	rs := []Result{
		{Trace: "A", Algo: "bbr", Flows: 1, ThroughputMbps: 100, P95QDelayMs: 40, Valid: true},
		{Trace: "A", Algo: "hera", Flows: 1, ThroughputMbps: 95, P95QDelayMs: 10, Valid: true},
		{Trace: "B", Algo: "bbr", Flows: 1, ThroughputMbps: 100, P95QDelayMs: 40, Valid: true},
		{Trace: "B", Algo: "hera", Flows: 1, ThroughputMbps: 50, P95QDelayMs: 10, Valid: true},
		{Trace: "B", Algo: "hera", Flows: 1, Valid: false},
	}
	var buf bytes.Buffer
	Summarise(&buf, rs)
	out := buf.String()
	for _, want := range []string{"hera against bbr", "1 of 2 traces", "| B | hera | 1 (+1 invalid) |"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

// A trace where bbr delivered nothing, or queued nothing, has no ratio to
// compare with: the check said "+Inf" or "NaN" and counted it (hera met a
// throughput ratio of +Inf; hera with no queue either failed on NaN).
func TestSummariseTargetCheckZeroBaseline(t *testing.T) {
	tests := []struct {
		name      string
		bbr, hera Result
		wantLine  string
		wantCount string
	}{
		{"bbr delivered nothing",
			Result{ThroughputMbps: 0, P95QDelayMs: 0}, Result{ThroughputMbps: 50, P95QDelayMs: 10},
			"| A | – | – | bbr delivered nothing: no comparison |", ""},
		{"neither queued",
			Result{ThroughputMbps: 100, P95QDelayMs: 0}, Result{ThroughputMbps: 95, P95QDelayMs: 0},
			"| A | – | 0.95 | true |", "1 of 1 traces"},
		{"hera queued where bbr did not",
			Result{ThroughputMbps: 100, P95QDelayMs: 0}, Result{ThroughputMbps: 95, P95QDelayMs: 3},
			"| A | – | 0.95 | false |", "0 of 1 traces"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, h := tt.bbr, tt.hera
			b.Trace, b.Algo, b.Flows, b.Valid = "A", "bbr", 1, true
			h.Trace, h.Algo, h.Flows, h.Valid = "A", "hera", 1, true
			var buf bytes.Buffer
			Summarise(&buf, []Result{b, h})
			out := buf.String()
			if strings.Contains(out, "Inf") || strings.Contains(out, "NaN") {
				t.Errorf("summary has a ratio of a zero:\n%s", out)
			}
			if !strings.Contains(out, tt.wantLine) {
				t.Errorf("summary lacks %q:\n%s", tt.wantLine, out)
			}
			if tt.wantCount != "" && !strings.Contains(out, tt.wantCount) {
				t.Errorf("summary lacks %q:\n%s", tt.wantCount, out)
			}
		})
	}
}

func TestQoEResult(t *testing.T) {
	start := time.Unix(1000, 0)
	q := &qoeStream{start: start, period: 100 * time.Millisecond, frame: 125000, target: 10e6, fps: 10,
		arrivals: map[uint32]time.Time{}, scheduled: 10}
	// Frames 0..9 are scheduled every 100 ms; frame i arrives 10·(i+1) ms
	// late, frame 7 never.
	for i := range 10 {
		if i != 7 {
			q.arrivals[uint32(i)] = start.Add(time.Duration(i)*100*time.Millisecond + time.Duration(10*(i+1))*time.Millisecond)
		}
	}
	r := q.result(200*time.Millisecond, time.Second) // frames 2..9
	if r.FramesScheduled != 8 || r.FramesDelivered != 7 {
		t.Fatalf("scheduled %d delivered %d, want 8 and 7", r.FramesScheduled, r.FramesDelivered)
	}
	// Latencies 30 40 50 60 70 90 100 ms: p50 60, p95 = p99 = 100, none
	// over 100 ms, plus the lost frame: 1 of 8.
	if r.LatP50Ms != 60 || r.LatP95Ms != 100 || r.LatP99Ms != 100 || math.Abs(r.Over100msPct-12.5) > 1e-9 {
		t.Errorf("p50 %v p95 %v p99 %v over100 %v%%, want 60 100 100 12.5%%", r.LatP50Ms, r.LatP95Ms, r.LatP99Ms, r.Over100msPct)
	}
	if want := 7 * 125000 * 8 / 0.8 / 1e6; math.Abs(r.RateMbps-want) > 1e-9 {
		t.Errorf("rate %v Mbit/s, want %v", r.RateMbps, want)
	}
	if len(r.LatQuantilesMs) != 100 || r.LatQuantilesMs[99] != 100 {
		t.Errorf("quantiles %v", r.LatQuantilesMs)
	}
	var buf bytes.Buffer
	QoETable(&buf, []Result{{Trace: "A", Algo: "hera", Flows: 1, QoE: r, Valid: true}})
	if !strings.Contains(buf.String(), "| A | hera | 1 | 10, 10 | 8.8 | 7 / 8 |") {
		t.Errorf("QoE table:\n%s", buf.String())
	}
}

func TestQoEResultCountsFramesNeverSent(t *testing.T) {
	start := time.Unix(1000, 0)
	// The sender reached only frames 0..4 of 10 before the end.
	q := &qoeStream{start: start, end: start.Add(time.Second), period: 100 * time.Millisecond, frame: 1000,
		target: 80e3, fps: 10, arrivals: map[uint32]time.Time{}, scheduled: 5}
	for i := range 5 {
		q.arrivals[uint32(i)] = start.Add(time.Duration(i)*100*time.Millisecond + 10*time.Millisecond)
	}
	r := q.result(0, time.Second)
	if r.FramesScheduled != 10 || r.FramesDelivered != 5 || r.Over100msPct != 50 {
		t.Errorf("scheduled %d delivered %d over100 %v%%, want 10, 5, 50%%", r.FramesScheduled, r.FramesDelivered, r.Over100msPct)
	}
}

// A result that cannot be written is an error: a full disk lost the runs
// without a word.
func TestAppendResultError(t *testing.T) {
	f, err := os.OpenFile("/dev/full", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	if err := appendResult(f, Result{Trace: "A", Algo: "hera"}); err == nil {
		t.Fatal("a write to a full device succeeded")
	}
	var b bytes.Buffer
	if err := appendResult(&b, Result{Trace: "A", Algo: "hera"}); err != nil || !strings.HasSuffix(b.String(), "}\n") || strings.Count(b.String(), "\n") != 1 {
		t.Fatalf("appendResult wrote %q, %v; want one line", b.String(), err)
	}
}

// Runs of hera with other parameters (bench cc --hera-args) are their own
// rows: they were averaged with default hera's runs in the same
// results.jsonl, as nothing in a result said which parameters it ran.
func TestSummariseKeepsHeraArgsApart(t *testing.T) {
	rs := []Result{
		{Trace: "A", Algo: "bbr", Flows: 1, ThroughputMbps: 100, P95QDelayMs: 40, Valid: true},
		{Trace: "A", Algo: "hera", Flows: 1, ThroughputMbps: 95, P95QDelayMs: 10, Valid: true},
		{Trace: "A", Algo: "hera", HeraArgs: "--bucket 4ms", Flows: 1, ThroughputMbps: 50, P95QDelayMs: 30, Valid: true},
	}
	var buf bytes.Buffer
	Summarise(&buf, rs)
	out := buf.String()
	for _, want := range []string{"| A | hera | 1 | 95.0 |", "| A | hera [--bucket 4ms] | 1 | 50.0 |", "Target check for hera [--bucket 4ms] against bbr"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}
